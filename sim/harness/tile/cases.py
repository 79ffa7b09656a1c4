"""The decode tile's named setups that tests and benchmarks share, so a benchmark measures the
setup a test checks (and the Verilator builds of one serve the other):

* one per CDU policy, on the tiny model: :data:`STATIC` (bf16, 1 engine), :data:`ADAPTIVE`
  (fp8, 4 engines, split-K 12) and :data:`DISABLED` (NVFP4, 2 engines at 32 lanes);
* :data:`EQUIV`: the HBM-only tile (no CDU; bf16, 2 engines, split-K 5);
* :data:`DSU_BASE`: the DSU cluster in the loop (4 requests, batches of up to 3);
  :data:`DSU_RUNS_BASE` and :data:`DSU_RUNS`: the runs of ``benchmarks/tile_dsu.py``;
* :func:`speed_setups`: the co-simulation speed runs;
* :data:`QUICK_OPT`: the C++ optimisation of the tests' Verilator builds.
"""

from __future__ import annotations

from .setup import Setup

__all__ = ["STATIC", "ADAPTIVE", "DISABLED", "EQUIV", "QUICK_OPT", "DSU_BASE", "DSU_RUNS_BASE",
           "DSU_RUNS", "speed_setups"]

STATIC = Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(3, 17), steps=2, engines=1,
               max_ctx=32, policy="static")
ADAPTIVE = Setup(lanes=16, model="tiny-te", requests=3, prompt_lens=(3, 17, 9), steps=2, engines=4,
                 max_ctx=32, policy="adaptive", split_tokens=12, kv_dtype="fp8")
#: 32 lanes: a K/V word carries two NVFP4 block scales
DISABLED = Setup(model="tiny-te", requests=2, prompt_lens=(5, 16), steps=2, engines=2,
                 lanes=32, max_ctx=32, policy="disabled", kv_dtype="nvfp4")

#: the HBM-only equivalence setup (no CDU): split on one context, not on the others
EQUIV = Setup(lanes=16, requests=3, prompt_lens=(1, 2, 3), steps=3, kv_dtype="bf16", engines=2,
              split_tokens=5, max_ctx=16, max_prompt=3, seed=1)

#: the C++ optimisation of the tests' Verilator builds (they compile fastest; the runs are short)
QUICK_OPT = "-O0"

#: the DSU cluster in the loop, as ``Setup(**DSU_BASE, ...)``
DSU_BASE = dict(requests=4, prompt_lens=(3, 1, 13, 2), steps=3, engines=1, dsu=True,
                max_batch=3, max_ctx=32, lanes=16)

#: the DSU runs of ``benchmarks/tile_dsu.py`` (and ``tile_dsu_timing.py``): ``Setup(
#: **DSU_RUNS_BASE, **changes)`` for each of :data:`DSU_RUNS`
DSU_RUNS_BASE = dict(requests=4, prompt_lens=(3, 1, 13, 2), steps=8, max_batch=3, max_ctx=32,
                     dsu=True, lanes=16)
#: (label, setup changes, whether the run must be bit-exact with equal tokens)
DSU_RUNS = [
    ("no CDU", dict(engines=1), True),
    ("no CDU, 2 DSU cores", dict(engines=1, dsu_cores=2), True),
    ("no CDU, faults: one step of request 0, two of request 2",
     dict(engines=1, faults=((0, 1, 1, 0, 1), (2, 0, 1, 0, 2))), True),
    ("no CDU, fault past the retries (request 1, 3 failing reads, 2 retries)",
     dict(engines=1, faults=((1, 0, 0, 0, 3),)), False),
    ("no CDU, a lost read: request 2's first round hangs (slot watchdog, abort)",
     dict(engines=1, hang=(2, 1, 0, 0, 1)), True),
    ("no CDU, a lost read twice: request 0's first two rounds hang",
     dict(engines=2, hang=(0, 0, 1, 0, 2)), True),
    ("CDU static, transient HBM errors on 3 fills (CDU retries)",
     dict(engines=1, policy="static",
          faults=((2, 0, 1, 0, 2), (0, 1, 0, 0, 1), (3, 1, 1, 0, 2))), True),
    ("CDU static", dict(engines=1, policy="static"), True),
    ("CDU adaptive, split-K 12", dict(engines=4, policy="adaptive", kv_dtype="fp8",
                                      split_tokens=12), True),
    ("CDU disabled", dict(engines=2, policy="disabled", kv_dtype="nvfp4"), True),
]


def speed_setups(steps):
    """The co-simulation speed runs by name (``benchmarks/tile_cosim_speed.py``,
    ``tile_native_speed.py``), ``steps`` decode steps each: the HBM-only tile and the
    cached one (``static``, ``adaptive``) with 1 and 4 engines, and at 4 lanes."""
    base = dict(model="tiny-te", max_ctx=32, steps=steps)
    return {
        "hbm-e1": Setup(**base, lanes=16, requests=2, prompt_lens=(3, 17), engines=1),
        "hbm-e4": Setup(**base, lanes=16, requests=3, prompt_lens=(3, 17, 9), engines=4, split_tokens=12,
                        kv_dtype="fp8"),
        "static-e1": Setup(**base, lanes=16, requests=2, prompt_lens=(3, 17), engines=1, policy="static"),
        "adaptive-e4": Setup(**base, lanes=16, requests=3, prompt_lens=(3, 17, 9), engines=4,
                             split_tokens=12, kv_dtype="fp8", policy="adaptive"),
        "hbm-e4-l4": Setup(**base, requests=3, prompt_lens=(3, 17, 9), engines=4,
                           split_tokens=12, kv_dtype="fp8", lanes=4),
        "adaptive-e4-l4": Setup(**base, requests=3, prompt_lens=(3, 17, 9), engines=4,
                                split_tokens=12, kv_dtype="fp8", policy="adaptive", lanes=4),
    }
