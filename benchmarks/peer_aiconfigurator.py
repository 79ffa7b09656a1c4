"""Run NVIDIA's AIConfigurator (the peer of docs/fidelity.md) on a list of static-batch rows.

Runs in AIConfigurator's own environment (``make peer-aic``: ``.build/peer-aic``, the PyPI
package pinned in the Makefile), not in tricut's: ``benchmarks/fidelity.py`` starts it as

    .build/peer-aic/bin/python benchmarks/peer_aiconfigurator.py < rows.json > results.json

Input: a JSON list of rows, each ``{"label", "config" (a Hugging Face config.json as a dict),
"backend" (vllm | trtllm), "isl", "osl", "batch", "tp", "gemm", "kv"}``. Output: a JSON list,
per row ``{"label", "request_latency_ms", "ttft_ms", "tpot_ms", "version"}`` from
AIConfigurator's static estimate (``aiconfigurator cli estimate --estimate-mode static``: one
batch prefilled, then decoded, on its measured H100 SXM kernel tables), or ``{"label",
"error"}``. Nothing here imports tricut.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import tempfile
import warnings
from pathlib import Path


def estimate(row: dict, folder: Path) -> dict:
    from aiconfigurator.cli.api import cli_estimate
    model = folder / row["label"].replace("/", "_").replace(" ", "_")
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(row["config"]))
    result = cli_estimate(str(model), "h100_sxm", mode="static", backend_name=row["backend"],
                          isl=row["isl"], osl=row["osl"], batch_size=row["batch"], tp_size=row["tp"],
                          gemm_quant_mode=row["gemm"], kvcache_quant_mode=row["kv"],
                          fmha_quant_mode="bfloat16")
    raw = result.raw
    return {"label": row["label"], "request_latency_ms": float(result.request_latency),
            "ttft_ms": float(raw.get("ttft", 0.0)), "tpot_ms": float(raw.get("tpot", 0.0)),
            "version": str(raw.get("backend_version") or raw.get("version") or "")}


def main() -> int:
    rows = json.load(sys.stdin)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    out.append(estimate(row, Path(tmp)))
            except Exception as e:          # one row the peer cannot run: say why, go on
                out.append({"label": row["label"], "error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
