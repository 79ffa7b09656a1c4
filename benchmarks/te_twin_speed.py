"""Speed of the TE golden's compiled twin: the naive ``models.te.te_decode``, the numba twin
``sim.fast.te_twin.te_decode_fast`` and a float64 numpy attention on the same inputs.

    .venv/bin/python benchmarks/te_twin_speed.py            # measure, print the table
    .venv/bin/python benchmarks/te_twin_speed.py --write    # ... and into docs/te.md
    .venv/bin/python benchmarks/te_twin_speed.py --repeats 1 --tokens 512

One layer of one request: 4,096 tokens x 8 KV heads (head_dim 128, G 4, 32 lanes, engine
``pipelined``), bf16 and fp8 K/V quantised from seeded normal values by
``sim.harness.te.make_vector``. Times are medians over ``--repeats`` runs of all heads. The
twin is timed warm; its compile is reported apart (a fresh process with an empty numba cache
dir, and the first call of this process, which loads the cache). The float64 attention is
``models.te.reference_f64`` on the dequantised q, K, V (dequantisation not timed; BLAS on one
thread, like the twin). Every run
checks the twin's results against the golden's, bit for bit. ``--write`` replaces the text
between ``<!-- te:twin-speed:begin -->`` and ``<!-- te:twin-speed:end -->`` in docs/te.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# one thread for everything timed (the twin is single-threaded; a multi-threaded BLAS only
# adds noise to the float64 attention on a shared machine): set before numpy loads
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "te.md"
BEGIN, END = "<!-- te:twin-speed:begin -->", "<!-- te:twin-speed:end -->"
SCRIPT = "benchmarks/te_twin_speed.py"
CMD = f".venv/bin/python {SCRIPT}"

HEADS, G, HEAD_DIM, LANES, ENGINE = 8, 4, 128, 32, "pipelined"

#: the cold compile, in a fresh interpreter whose numba cache dir is empty
_COLD = """
import time
import numpy as np
from tricut.sim.fast.te_twin import te_decode_fast
q = np.full((4, 128), 0x3F80, np.int64)
t = time.perf_counter()
te_decode_fast(q, q[:2], q[:2], "bf16", 0x3E000000, lanes=32, engine="pipelined")
print(time.perf_counter() - t)
"""


def _inputs(kv_dtype, tokens, seed):
    from tricut.sim.harness.te import make_vector
    rng = np.random.default_rng(seed)
    vecs = []
    for _ in range(HEADS):
        q = rng.standard_normal((G, HEAD_DIM)).astype(np.float32)
        k = rng.standard_normal((tokens, HEAD_DIM)).astype(np.float32)
        v = rng.standard_normal((tokens, HEAD_DIM)).astype(np.float32)
        vecs.append(make_vector(q, k, v, kv_dtype, lanes=LANES, engine=ENGINE))
    return vecs


def _call(fn, vec):
    return fn(vec.q_codes, vec.k_codes, vec.v_codes, vec.kv_dtype, vec.scale_bits,
              lanes=vec.lanes, n=vec.n, k_scales=vec.k_scales, v_scales=vec.v_scales,
              tensor_scale_bits=vec.ts_bits, partial=vec.partial, engine=vec.engine)


def _median_time(run, repeats):
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def _same(a, b):
    return (np.array_equal(a.out, b.out) and np.array_equal(a.m, b.m)
            and np.array_equal(a.l, b.l) and a.status == b.status and a.cycles == b.cycles)


def compile_times():
    """(cold compile in a fresh process, first call here: the numba cache loaded), s."""
    with tempfile.TemporaryDirectory(prefix="te_twin_numba_") as d:
        env = dict(os.environ, NUMBA_CACHE_DIR=d)
        cold = float(subprocess.run([sys.executable, "-c", _COLD], env=env, check=True,
                                    capture_output=True, text=True).stdout.split()[-1])
    from tricut.sim.fast.te_twin import te_decode_fast
    q = np.full((G, HEAD_DIM), 0x3F80, np.int64)
    t = time.perf_counter()
    te_decode_fast(q, q[:2], q[:2], "bf16", 0x3E000000, lanes=LANES, engine=ENGINE)
    return cold, time.perf_counter() - t


def measure(kv_dtype, tokens, repeats, seed=0):
    from tricut.models.te import b2f, reference_f64, te_decode
    from tricut.sim.fast.te_twin import te_decode_fast
    vecs = _inputs(kv_dtype, tokens, seed)
    used = [v.used() for v in vecs]
    scale = float(b2f(vecs[0].scale_bits))
    naive, gold = _median_time(lambda: [_call(te_decode, v) for v in vecs], repeats)
    print(f"{kv_dtype}: golden {naive:.2f} s", flush=True)
    twin, fast = _median_time(lambda: [_call(te_decode_fast, v) for v in vecs], repeats)
    print(f"{kv_dtype}: twin {twin:.3f} s", flush=True)
    f64, _ = _median_time(lambda: [reference_f64(q, k, v, scale) for q, k, v in used],
                          repeats)
    print(f"{kv_dtype}: float64 numpy {f64:.3f} s", flush=True)
    return dict(kv_dtype=kv_dtype, naive=naive, twin=twin, f64=f64,
                same=all(_same(a, b) for a, b in zip(fast, gold)))


def _cpu():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def report(rows, cold, warm_load, tokens, repeats, load):
    lines = [f"Measured {dt.date.today().isoformat()} by `{CMD}` ({_cpu()}, one thread, "
             f"load average {load:.1f} at the start; {tokens:,} tokens x {HEADS} KV heads, head_dim {HEAD_DIM}, G {G}, {LANES} "
             f"lanes, engine `{ENGINE}`; seconds for all heads, medians of {repeats} "
             f"runs):", "",
             "| K/V | golden `te_decode` | twin `te_decode_fast` | golden / twin | float64 "
             "numpy (`reference_f64`) | twin == golden (out, m, l, status, cycles) |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['kv_dtype']} | {r['naive']:.2f} | {r['twin']:.3f} "
                     f"| {r['naive'] / r['twin']:,.0f} | {r['f64']:.3f} "
                     f"| {'yes' if r['same'] else '**no**'} |")
    lines += ["", f"The twin's compile, not in the times above: {cold:.1f} s in a fresh "
              f"process with an empty numba cache, {warm_load:.2f} s for the first call "
              f"when the cache (`sim/fast/__pycache__`) is warm."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="write the table into docs/te.md")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    cold, warm_load = compile_times()
    print(f"compile: cold {cold:.2f} s, cached {warm_load:.2f} s", flush=True)
    rows = [measure(kv, args.tokens, args.repeats) for kv in ("bf16", "fp8")]
    body = report(rows, cold, warm_load, args.tokens, args.repeats, load)
    print(body)
    if not all(r["same"] for r in rows):
        raise SystemExit(f"{SCRIPT}: the twin differs from the golden")
    if args.write:
        write_section(DOC, BEGIN, END, body, SCRIPT)


if __name__ == "__main__":
    main()
