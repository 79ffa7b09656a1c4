"""Co-simulation of the decode tile's attention path with the golden decode step: whole decode
steps of a model whose attention runs on the tile's RTL, against the same steps with the
bit-exact TE golden as the attention (``docs/tile/cosim.md``, "Co-simulation with the golden
decode step").

:func:`simulate` runs the golden side (:func:`~.golden.golden_run`) and the tile side (in
Amaranth's simulator, :func:`~.amaranth_run.cosim_run`, or on Verilator,
:func:`~.verilator.cosim_run_verilator`) and compares every attention output bit for bit and
the tokens exactly (:mod:`.compare`); :class:`Report` holds the tokens, the per-layer and
per-step cycles and the differences.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .amaranth_run import cosim_run
from .compare import compare, compare_cdu, compare_dsu
from .golden import RunResult, golden_run
from .setup import CosimError, Setup, SetupError, schedule
from .verilator import cosim_run_verilator

__all__ = ["Report", "simulate"]


@dataclass
class Report:
    """:func:`simulate`'s result: the setup, the prompt lengths, the DSU rounds (request ids
    per round), both runs and the differences (empty: bit-exact and the same tokens)."""
    setup: Setup
    prompt_lens: list
    rounds: list
    golden: RunResult
    tile: RunResult
    differences: list

    @property
    def ok(self):
        return not self.differences


def simulate(s: Setup, corrupt=None, strict=False, stop_early=True, sim="amaranth") -> Report:
    """Golden run, tile run, comparison (with a CDU policy, also of the CDU's decisions with
    its golden model). ``stop_early``: the tile run ends at the first layer that differs.
    ``strict``: raise :class:`CosimError` naming the first difference instead of returning it
    in the report. ``sim``: the tile's simulator, ``amaranth`` (:func:`cosim_run`) or
    ``verilator`` (:func:`~.verilator.cosim_run_verilator`: the same run, cycle for
    cycle)."""
    if s.dsu and sim != "verilator":
        raise SetupError("dsu", "the DSU cluster runs on Verilator only (sim='verilator')")
    if sim == "verilator":
        tile_run = cosim_run_verilator
    elif sim == "amaranth":
        tile_run = cosim_run
    else:
        raise SetupError("sim", f"must be amaranth or verilator, got {sim!r}")
    golden = golden_run(s)
    tile = tile_run(s, corrupt=corrupt, golden=golden if stop_early else None)
    fault_free = golden_run(dataclasses.replace(s, faults=(), hang=())) \
        if s.faults or s.hang else None
    diffs = (compare_dsu(s, golden, tile, fault_free) if s.dsu else compare(golden, tile)) + \
        compare_cdu(s, tile, golden)
    if strict and diffs:
        raise CosimError(f"{len(diffs)} difference(s); first: {diffs[0]}")
    rounds = [[d["request"] for d in descs] for descs in tile.rounds] if s.dsu else \
        [[d.request for d in descs] for descs in schedule(s)]
    return Report(s, s.lens(), rounds, golden, tile, diffs)
