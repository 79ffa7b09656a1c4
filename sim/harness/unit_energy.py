"""The decode units' energy per busy cycle from their RTL: Yosys cells x an energy per cell
(``benchmarks/unit_energy.py --write`` writes the figures into ``sim/fast/energy.json`` and
docs/energy.md).

First order, in three steps, each from ``../shared/calibration/energy-h100.md`` (table B):

1. **Energy per generic cell at 45 nm.** Horowitz's per-operation energies (ISSCC 2014, 45 nm,
   0.9 V) for operators that the same Yosys flow as ``tricut verilog --area``
   (:mod:`tricut.sim.harness.area`) synthesizes here: an 8x8 integer multiplier (0.2 pJ), the
   TE's fp32 multiplier reading 11-bit significands (an fp16 multiplier's array, 1.1 pJ), the
   full fp32 multiplier (3.7 pJ) and the fp32 adder (0.9 pJ). Each gives pJ per cell per
   operation with random operands; their median is taken. This folds the switching activity
   of a datapath with random operands into the figure.
2. **To the GPU's node.** Times the only 45 nm -> 7 nm pair in the file, an 8 KB SRAM's 64-bit
   access (10 pJ, Horowitz; 7.5 pJ, Jouppi et al. ISCA 2021), taken for TSMC 4N. Logic scales
   better than SRAM, so this overstates the units' logic energy.
3. **Per busy cycle of a unit** (``switching``, the unit's activity relative to the reference
   operators, 1 by default: every cell switches each busy cycle as a datapath does per
   operation, an upper bound) = cells x the energy per cell + each of the unit's memory
   macros accessed once (a 64-bit access at Jouppi's 7 nm figure for its size: 8 KB or 32 KB).
   The units as they ship: the TE engine (pipelined, ``DEFAULT_TE_LANES`` lanes, head_dim 128,
   G 4, bf16), the CDU (``tricut verilog cdu`` defaults), and of the DSU cluster one core with
   the slot arbiter and the interconnect (a round runs on one core) and its local memory.

The fast model counts the busy cycles (``sim/fast/timing.py``): TE engine cycles of every
(request, layer, KV head) job (``UnitTiming.te_job_cycles``, the pipelined engine's cycles,
bit-exact with the RTL), the CDU pipeline's cycles per step and the DSU's cycles per round (both
fitted on RTL runs); and the TE's K/V bytes, each written to and read from its FIFOs at
``sram_pj_per_byte`` (Jouppi's 8 KB figure per byte). :func:`tile_te_activity` checks the TE's
count against a tile run: the engines' cycles from descriptor to output (stalls on the K/V
stream included) bound it from above, their cycles issuing multiply-accumulates from below.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

__all__ = ["HOROWITZ_PJ", "SWITCHING", "MEMORY_PJ", "TE_SHAPE", "UNIT_LABELS", "reference_component",
           "synthesize", "unit_cells", "derive", "tile_te_activity"]

#: Horowitz, ISSCC 2014, 45 nm (the calibration file's table B): pJ per operation
HOROWITZ_PJ = {"int8 mul": 0.2, "fp16 mul": 1.1, "fp32 mul": 3.7, "fp32 add": 0.9}
#: an 8 KB SRAM's 64-bit access at 45 nm (Horowitz) and at 7 nm (Jouppi et al., ISCA 2021)
SRAM_8K_45NM_PJ, SRAM_8K_7NM_PJ, SRAM_32K_7NM_PJ = 10.0, 7.5, 8.5
#: the units' switching activity relative to the reference operators (1: an upper bound)
SWITCHING = 1.0
#: one 64-bit access of a unit's memory macro, by unit (its memories' size: 8 KB; the DSU's 32 KB)
MEMORY_PJ = {"te": SRAM_8K_7NM_PJ, "cdu": SRAM_8K_7NM_PJ, "dsu": SRAM_32K_7NM_PJ}
#: the TE engine synthesized (besides the pipelined design and ``DEFAULT_TE_LANES`` lanes)
TE_SHAPE = {"head_dim": 128, "G": 4}
#: what each unit's row stands for (the CDU and the DSU cluster at ``tricut verilog``'s defaults)
UNIT_LABELS = {"te": f"TE engine (pipelined, head_dim {TE_SHAPE['head_dim']}, G {TE_SHAPE['G']})",
               "cdu": "CDU (16 sets x 4 ways)", "dsu": "DSU: one core, slot arbiter, interconnect"}


def reference_component(name: str):
    """The synthesizable operator that stands for Horowitz's operation ``name``."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from tricut.rtl.te.fadd import FP32Add
    from tricut.rtl.te.fmul import FP32Mul

    class IntMul(wiring.Component):
        def __init__(self, bits):
            super().__init__({"a": In(bits), "b": In(bits), "y": Out(2 * bits)})

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.y.eq(self.a * self.b)
            return m

    return {"int8 mul": lambda: IntMul(8), "fp16 mul": lambda: FP32Mul(a_bits=11, b_bits=11),
            "fp32 mul": lambda: FP32Mul(), "fp32 add": lambda: FP32Add()}[name]()


def synthesize(component, top: str) -> dict:
    """Yosys's generic-cell area of ``component`` (:func:`tricut.sim.harness.verilog_out.area`)."""
    from tricut.sim.harness.verilog_out import area, write_verilog
    with tempfile.TemporaryDirectory(prefix="unit_energy_") as d:
        return area(write_verilog(component, top, Path(d)), top)


def unit_cells(name: str) -> tuple[int, int, dict]:
    """``(cells, memory macros, area)`` of what a busy cycle of unit ``name`` exercises."""
    from tricut.sim.fast.timing import DEFAULT_TE_LANES
    from tricut.sim.harness.verilog_out import build_unit
    if name == "te":
        comp, _ = build_unit("te", [f"lanes={DEFAULT_TE_LANES}"] + [f"{k}={v}" for k, v in TE_SHAPE.items()],
                             "pipelined")
    elif name == "cdu":
        comp, _ = build_unit("cdu", [])
    else:
        comp, _ = build_unit("dsu", [])
    a = synthesize(comp, name)
    if name != "dsu":
        return a["total"]["cells"], a["total"]["memories"], a
    # one core (a round runs on one), the slot arbiter and the interconnect; the local memory
    rows = a["rows"]
    cores = [k for k in rows if k.startswith("core")]
    if not cores:
        raise ValueError(f"the DSU cluster's area has no core rows: {sorted(rows)}")
    keep = [k for k in rows if k not in cores] + [cores[0]]
    return sum(rows[k]["cells"] for k in keep), 1, a


def derive(switching: float = SWITCHING) -> dict:
    """The per-cell energy from the reference operators and each unit's energy per busy cycle
    (the module docs); synthesizes the four operators and the three units (minutes)."""
    refs = {}
    for name, pj in HOROWITZ_PJ.items():
        cells = synthesize(reference_component(name), name.replace(" ", "_"))["total"]["cells"]
        refs[name] = {"pj": pj, "cells": cells, "fj_per_cell": 1e3 * pj / cells}
    fj_45 = statistics.median(r["fj_per_cell"] for r in refs.values())
    node = SRAM_8K_7NM_PJ / SRAM_8K_45NM_PJ
    pj_per_cell = fj_45 * 1e-3 * node * switching
    units = {}
    for name, mem_pj in MEMORY_PJ.items():
        t0 = time.perf_counter()
        cells, memories, a = unit_cells(name)
        units[name] = {"cells": cells, "memories": memories, "logic_pj": cells * pj_per_cell,
                       "memory_pj": memories * mem_pj, "seconds": time.perf_counter() - t0,
                       "total_cells": a["total"]["cells"]}
        units[name]["pj_per_cycle"] = units[name]["logic_pj"] + units[name]["memory_pj"]
    return {"refs": refs, "fj_45": fj_45, "node": node, "switching": switching,
            "pj_per_cell": pj_per_cell, "units": units, "sram_pj_per_byte": SRAM_8K_7NM_PJ / 8}


def tile_te_activity(setup) -> dict:
    """A tile run's TE activity in Amaranth's simulator (``setup``: a
    :class:`~tricut.sim.harness.tile.setup.Setup`) beside the fast model's count for the same
    jobs: ``busy`` and ``mac_busy`` (engine cycles, summed over the engines), ``cycles`` (the
    run's), ``model`` (``models.te.te_cycles`` of every (round, request, layer, KV head) job
    at its context, what ``UnitTiming.te_job_cycles`` sums)."""
    from tricut.models.te import te_cycles
    from tricut.sim.harness.tile.amaranth_run import cosim_run
    from tricut.sim.harness.tile.golden import RunInputs
    if setup.split_tokens:
        raise ValueError("tile_te_activity counts whole-context jobs: give a setup with split_tokens 0")
    activity: dict = {}
    cosim_run(setup, activity=activity)
    run = RunInputs(setup)
    cfg, p = run.cfg, run.params()
    jobs = cfg.num_layers * cfg.num_kv_heads
    activity["model"] = sum(jobs * te_cycles(d.seq_len, cfg.head_dim, cfg.group_size, p["lanes"],
                                             engine=p["engine"], kv_dtype=p["kv_dtype"])
                            for descs in run.rounds for d in descs)
    return activity
