"""The decode units' energy per busy cycle from their RTL: Yosys cells x an energy per cell.

    .venv/bin/python benchmarks/unit_energy.py            # synthesize, print the derivation
    .venv/bin/python benchmarks/unit_energy.py --write    # ... into sim/fast/energy.json and docs/energy.md

The method is :mod:`tricut.sim.harness.unit_energy`'s: Horowitz's 45 nm operators synthesized
by the same Yosys flow give an energy per generic cell, scaled to 7 nm by the file's SRAM pair;
a unit's energy per busy cycle is its cells times that plus one access of each memory macro.
The report goes between ``<!-- unit-energy:begin -->`` and ``<!-- unit-energy:end -->`` in
docs/energy.md; the four derived coefficients into both GPUs of sim/fast/energy.json.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs
from energy import UNIT_BEGIN, UNIT_END     # the section of docs/energy.md this script owns

from tricut.sim.fast.energy import ENERGY_FILE, load_energy
from tricut.sim.harness.tile.cases import STATIC
from tricut.models.te import te_token_cycles
from tricut.sim.fast.timing import DEFAULT_TE_LANES
from tricut.sim.harness.unit_energy import MEMORY_PJ, SWITCHING, TE_SHAPE, UNIT_LABELS, derive, tile_te_activity

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "energy.md"
COMMAND = ".venv/bin/python benchmarks/unit_energy.py --write"


def sources(d: dict) -> dict:
    how = (f"{d['pj_per_cell'] * 1e3:.3f} fJ per generic cell (Horowitz 45 nm operators synthesized "
           f"here, median {d['fj_45']:.3f} fJ, x {d['node']:.2f} for 7 nm, switching {d['switching']:g})")
    u = d["units"]
    return {
        "te_pj_per_cycle": f"derived: {COMMAND}: the pipelined TE engine's {u['te']['cells']:,} cells x {how} "
                           f"+ its {u['te']['memories']} memories at {MEMORY_PJ['te']:g} pJ each",
        "cdu_pj_per_cycle": f"derived: {COMMAND}: the CDU's {u['cdu']['cells']:,} cells x {how} "
                            f"+ its {u['cdu']['memories']} memories at {MEMORY_PJ['cdu']:g} pJ each",
        "dsu_pj_per_cycle": f"derived: {COMMAND}: one DSU core, the slot arbiter and the interconnect, "
                            f"{u['dsu']['cells']:,} cells x {how} + one 32 KB local-memory access "
                            f"({MEMORY_PJ['dsu']:g} pJ)",
        "sram_pj_per_byte": f"derived: {COMMAND}: an 8 KB SRAM's 64-bit access at 7 nm, "
                            f"{d['sram_pj_per_byte'] * 8:g} pJ (Jouppi et al., ISCA 2021), per byte",
    }


def report(d: dict, act: dict) -> str:
    u = d["units"]
    lines = [f"Written by `{COMMAND}`; the method: `sim/harness/unit_energy.py`. Per-operation energies "
             "of four operators (Horowitz, 45 nm) over their cells in the same Yosys flow as "
             "`tricut verilog --area` give an energy per generic cell; × the 8 KB SRAM's 45 → 7 nm ratio "
             "(the file's only pair across nodes; logic scales better, so an upper bound); a unit's "
             "energy per busy cycle is its cells × that + one 64-bit access of each of its memories.", "",
             "| reference operator (Horowitz, 45 nm) | pJ | cells here | fJ per cell |", "|---|---|---|---|"]
    for name, r in d["refs"].items():
        lines.append(f"| {name} | {r['pj']:g} | {r['cells']:,} | {r['fj_per_cell']:.3f} |")
    lines += ["", f"Median {d['fj_45']:.3f} fJ per cell at 45 nm; × {d['node']:.2f} (the 8 KB SRAM's "
              f"45 → 7 nm ratio) × switching {d['switching']:g} = **{d['pj_per_cell'] * 1e3:.3f} fJ per cell "
              "per busy cycle**. The references spread by "
              f"{max(r['fj_per_cell'] for r in d['refs'].values()) / min(r['fj_per_cell'] for r in d['refs'].values()):.1f}× "
              "around it.", "",
              "| unit, per busy cycle | cells | memories | logic pJ | memory pJ | pJ per cycle |",
              "|---|---|---|---|---|---|"]
    for name, v in u.items():
        lines.append(f"| {UNIT_LABELS[name]} | {v['cells']:,} | {v['memories']} | {v['logic_pj']:.1f} | "
                     f"{v['memory_pj']:.1f} | {v['pj_per_cycle']:.1f} |")
    te, group, head_dim = u["te"]["pj_per_cycle"], 8, TE_SHAPE["head_dim"]    # Llama-3-70B's G and head_dim
    cycles = te_token_cycles(head_dim, group, DEFAULT_TE_LANES, "pipelined")
    sm = load_energy().gpus["h100-sxm5"].sm_pj_per_flop
    lines += ["", f"A K/V byte through the TE's FIFOs costs 2 × {d['sram_pj_per_byte']:.3f} pJ. For scale: "
              f"a pipelined engine at Llama-3-70B's shape (G {group}, head_dim {head_dim}, {DEFAULT_TE_LANES} "
              f"lanes) spends {cycles} cycles per token per KV head, {cycles * te / (4 * group * head_dim):.2f} pJ "
              f"per attention FLOP, against the fitted {sm:.2f} pJ per FLOP of the SMs' tensor cores "
              "(instruction overhead included): the TE's fp32 lanes cost more per FLOP than the tensor cores; "
              "what the te cut saves is the step's time (static energy), not arithmetic energy.", "",
              "**The TE's activity in a tile run.** The tile's `STATIC` case (`sim/harness/tile/cases.py`: "
              "tiny-te, 2 requests, 1 engine, bf16, the CDU's static policy) in Amaranth's simulator, each "
              f"engine's flags counted every cycle, over {act['cycles']:,} cycles: the engine was busy (descriptor "
              f"to output, stalls on the K/V stream included) {act['busy']:,} cycles and issued multiply-accumulates "
              f"in {act['mac_busy']:,}; the fast model counts {act['model']:,} for the same jobs "
              f"({100 * (act['model'] / act['busy'] - 1):+.0f} % against busy, "
              f"{100 * (act['model'] / act['mac_busy'] - 1):+.0f} % against MAC cycles): the model's cycles lie "
              "between the two, as `tests/test_unit_energy.py` checks on a smaller run.", "",
              "What is first-order: the per-cell energy comes from four operators; every cell of a unit "
              "switches each busy cycle (the switching factor), idle engines are clock-gated (no energy); "
              "the split-K combine's merges and the L2 fill engine are not counted; the CDU's tag store is "
              "flip-flops here, an SRAM in a GPU-sized CDU."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--switching", type=float, default=SWITCHING,
                    help="the units' switching activity relative to the reference operators, in (0, 1] "
                         f"(default {SWITCHING:g}: an upper bound)")
    ap.add_argument("--write", action="store_true",
                    help=f"write the derived values into sim/fast/{ENERGY_FILE} and the section into docs/energy.md")
    args = ap.parse_args(argv)
    if not 0 < args.switching <= 1:
        ap.error(f"--switching {args.switching!r}: must be in (0, 1]")
    d = derive(args.switching)
    text = report(d, tile_te_activity(STATIC))
    print(text)
    if args.write:
        table = load_energy()
        src = sources(d)
        values = {"te_pj_per_cycle": d["units"]["te"]["pj_per_cycle"],
                  "cdu_pj_per_cycle": d["units"]["cdu"]["pj_per_cycle"],
                  "dsu_pj_per_cycle": d["units"]["dsu"]["pj_per_cycle"], "sram_pj_per_byte": d["sram_pj_per_byte"]}
        gpus = {g: replace(co, **values) for g, co in table.gpus.items()}
        srcs = {g: {**s, **src} for g, s in table.sources.items()}
        (ROOT / "sim" / "fast" / ENERGY_FILE).write_text(type(table)(gpus, srcs, table.about).to_json(),
                                                          encoding="utf-8")
        write_section(DOC, UNIT_BEGIN, UNIT_END, text, "unit_energy")
        print(f"wrote sim/fast/{ENERGY_FILE} and docs/energy.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
