"""The fast model's cycles for a tile run configured as one SM's slice of a GPU (``tricut tile
run --gpu``, ``benchmarks/tile_slice_calibration.py``): the expected-value tile model
``tricut simulate``'s grid of tiles uses (``models/sm_slice.py``) on the run's own units,
one per request of each round, in order. With a CDU policy each unit takes the curve of its
residency hint, and a cached unit is cheaper by the share of its blocks still resident from
the round before. ``tricut simulate`` takes that share from the CDU reduction at the GPU's
geometry (thousands of sets, ``sim/fast/cdu_reduction.py``, checked against the golden CDU
by ``tricut cdu replay``); the slice's CDU has a few sets, where that closed form does not
hold (it places a unit's kept blocks in distinct sets), so here the share is the CDU golden
model's for the run: its read hits on blocks not prefetched in the same round."""

from __future__ import annotations

from tricut.models.config import load_model
from tricut.models.sm_slice import SliceCdu, cdu_slice_timing, slice_timing

from .setup import Setup, cdu_run_decisions, schedule, tile_config

__all__ = ["fast_layer_cycles", "reuse_shares"]


def reuse_shares(s: Setup, rounds) -> list:
    """Per round: the share of its cached requests' block reads the CDU golden model serves
    from blocks resident before the round (read hits on blocks it did not prefetch in that
    round)."""
    cached = [{d.request for d in descs if d.residency} for descs in rounds]
    prefetched = [set() for _ in rounds]
    reads, reused = [0] * len(rounds), [0] * len(rounds)
    for d in cdu_run_decisions(s, rounds):
        block = (d.req, d.layer, d.block)
        if d.kind == "P" and d.result == "pf_issue":
            prefetched[d.step].add(block)
        elif d.kind == "R" and d.req in cached[d.step]:
            reads[d.step] += 1
            reused[d.step] += d.result == "hit" and block not in prefetched[d.step]
    return [u / r if r else 0.0 for u, r in zip(reused, reads)]


def fast_layer_cycles(s: Setup) -> dict:
    """``{(round, layer): cycles}`` of the fast model for the run of ``s`` (every layer of a
    round alike)."""
    rounds = schedule(s)
    layers = load_model(s.model).num_layers
    cfg = tile_config(s)
    out = {}
    if s.policy is None:
        timing = slice_timing(cfg)
        for ri, descs in enumerate(rounds):
            cycles = timing.sm_cycles([d.seq_len for d in descs])
            out.update({(ri, li): cycles for li in range(layers)})
        return out
    timing = cdu_slice_timing(cfg, SliceCdu(s.policy, s.cdu_sets, s.cdu_ways, s.distance))
    for ri, (descs, reuse) in enumerate(zip(rounds, reuse_shares(s, rounds))):
        cycles = timing.sm_cycles([d.seq_len for d in descs], [d.residency for d in descs],
                                  reuse)
        out.update({(ri, li): cycles for li in range(layers)})
    return out
