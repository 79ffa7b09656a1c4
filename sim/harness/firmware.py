"""Build DSU firmware: C (and assembly) -> RV32IM ELF + flat binary, with zig's clang.

Compiler: ``python -m ziglang cc -target riscv32-freestanding-none -mcpu=generic_rv32+m``
(RV32IM, no compressed instructions), freestanding, ``-O2``. Linker: ``python -m ziglang
ld.lld`` with ``rtl/dsu/firmware/link.ld.in`` (one RAM, ``_start`` from ``crt0.S`` at its
origin = the core's reset vector), once to an ELF (for symbols) and once with
``--oformat=binary`` for the flat image loaded at the origin.

Outputs go to the directory the caller gives (a tmp dir in tests, ``.build/firmware/`` by
default); nothing is written into the source tree.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FirmwareBuildError", "Firmware", "FIRMWARE_DIR", "CFLAGS", "build_firmware",
           "elf_symbols"]

REPO_ROOT = Path(__file__).resolve().parents[2]
FIRMWARE_DIR = REPO_ROOT / "rtl" / "dsu" / "firmware"
DEFAULT_BUILD_DIR = REPO_ROOT / ".build" / "firmware"

CFLAGS = [
    "-target", "riscv32-freestanding-none", "-mcpu=generic_rv32+m", "-mno-relax",
    "-ffreestanding", "-nostdlib", "-fno-builtin", "-fno-sanitize=all",
    "-fno-unwind-tables", "-fno-asynchronous-unwind-tables", "-O2",
]


class FirmwareBuildError(RuntimeError):
    """Compiling or linking failed, or the image does not fit; carries the tool output."""


@dataclass(frozen=True)
class Firmware:
    image: bytes          #: flat image, to be loaded at ``origin``
    origin: int           #: load address = address of ``_start`` = reset vector
    length: int           #: RAM size the image was linked for (stack top = origin + length)
    symbols: dict         #: name -> address, from the ELF symbol table
    elf: Path
    bin: Path

    def words(self):
        """The image as little-endian 32-bit words (padded with zeros)."""
        data = self.image + bytes(-len(self.image) % 4)
        return list(struct.unpack(f"<{len(data) // 4}I", data))


def _run(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise FirmwareBuildError(f"{what} failed (exit {proc.returncode}):\n"
                                 f"$ {' '.join(map(str, cmd))}\n{proc.stdout}{proc.stderr}")


def elf_symbols(path):
    """Defined symbols of an ELF32 little-endian file: ``{name: value}``."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 1 or data[5] != 1:
        raise FirmwareBuildError(f"{path} is not a 32-bit little-endian ELF")
    shoff, = struct.unpack_from("<I", data, 0x20)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x2E)
    sections = [struct.unpack_from("<10I", data, shoff + i * shentsize) for i in range(shnum)]
    symbols = {}
    for sh in sections:
        if sh[1] != 2:   # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], 16):
            name_off, value, _size, _info, _other, shndx = struct.unpack_from("<IIIBBH", data, off)
            if not name_off or shndx == 0:
                continue
            start = strtab[4] + name_off
            name = data[start:data.index(b"\0", start)].decode()
            symbols[name] = value
    return symbols


def build_firmware(sources, out_dir=None, *, origin=0, length=0x10000, stack_size=0x1000,
                   name="firmware", extra_cflags=()):
    """Compile and link ``sources`` (C or assembly files) with ``crt0.S`` and ``runtime.c``.

    Parameters
    ----------
    sources : list of path
        Firmware sources; one of them defines ``int main(void)``.
    out_dir : path or None
        Where objects, ``<name>.elf`` and ``<name>.bin`` go (default ``.build/firmware``).
    origin, length : int
        The RAM the firmware runs in: ``_start`` at ``origin`` (the core's reset vector),
        stack top at ``origin + length``.
    stack_size : int
        Bytes that must remain between the end of the image (incl. ``.bss``) and the
        stack top, else :class:`FirmwareBuildError`.
    """
    for label, value in (("origin", origin), ("length", length)):
        if not isinstance(value, int) or value < 0 or value % 4096 or value >= 2**32:
            raise ValueError(f"firmware {label} must be a multiple of 4096 in 0 .. 2**32-1, "
                             f"not {value!r}")
    if length == 0 or origin + length > 2**32:
        raise ValueError(f"firmware RAM {origin:#x} + {length:#x} is empty or past 4 GiB")
    sources = [Path(s) for s in sources]
    for s in sources:
        if not s.is_file():
            raise FirmwareBuildError(f"firmware source {s} does not exist")
    out = Path(out_dir) if out_dir is not None else DEFAULT_BUILD_DIR
    out.mkdir(parents=True, exist_ok=True)
    zig = [sys.executable, "-m", "ziglang"]

    objects = []
    for i, src in enumerate([FIRMWARE_DIR / "crt0.S", FIRMWARE_DIR / "runtime.c", *sources]):
        obj = out / f"{i:02d}_{src.stem}.o"
        _run([*zig, "cc", *CFLAGS, *extra_cflags, "-c", str(src), "-o", str(obj)],
             f"compiling {src}")
        objects.append(str(obj))

    script = out / f"{name}.ld"
    script.write_text((FIRMWARE_DIR / "link.ld.in").read_text()
                      .replace("@ORIGIN@", f"{origin:#x}").replace("@LENGTH@", f"{length:#x}"))
    elf = out / f"{name}.elf"
    binary = out / f"{name}.bin"
    ld = [*zig, "ld.lld", "-T", str(script), "--no-relax", "-nostdlib", "--gc-sections",
          "-e", "_start"]
    _run([*ld, *objects, "-o", str(elf)], "linking (ELF)")
    _run([*ld, *objects, "--oformat=binary", "-o", str(binary)], "linking (binary)")

    symbols = elf_symbols(elf)
    if symbols.get("_start") != origin:
        raise FirmwareBuildError(f"_start is at {symbols.get('_start')!r}, not the origin "
                                 f"{origin:#x}")
    image = binary.read_bytes()
    end = max(origin + len(image), symbols.get("__bss_end", 0))
    if end + stack_size > origin + length:
        raise FirmwareBuildError(f"firmware {name} ends at {end:#x}; with a {stack_size:#x}-byte "
                                 f"stack it does not fit RAM {origin:#x} + {length:#x}")
    return Firmware(image=image, origin=origin, length=length, symbols=symbols, elf=elf,
                    bin=binary)


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description="Build DSU firmware (RV32IM) with zig's clang")
    p.add_argument("sources", nargs="+")
    p.add_argument("-o", "--out-dir", default=str(DEFAULT_BUILD_DIR))
    p.add_argument("--origin", type=lambda s: int(s, 0), default=0)
    p.add_argument("--length", type=lambda s: int(s, 0), default=0x10000)
    p.add_argument("--name", default="firmware")
    a = p.parse_args(argv)
    try:
        fw = build_firmware(a.sources, a.out_dir, origin=a.origin, length=a.length, name=a.name)
    except (FirmwareBuildError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{fw.bin}: {len(fw.image)} bytes at {fw.origin:#x}; _halt at "
          f"{fw.symbols['_halt']:#x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
