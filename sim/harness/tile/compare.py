"""The comparisons of a tile co-simulation: the tile's :class:`~.golden.RunResult` against the
golden's (:func:`compare`; with the DSU cluster :func:`compare_dsu`: its rounds, failed steps
and outcomes too), the CDU's decisions and counters against the CDU golden model
(:func:`compare_cdu`), and the decoding of the RTL payloads they read (:func:`payload_fields`,
:func:`txn_fields`)."""

from __future__ import annotations

import numpy as np

from tricut.sim.harness.cdu import describe, txn_tuple

from .golden import RunInputs, RunResult
from .setup import Setup

__all__ = ["payload_fields", "txn_fields", "compare", "compare_dsu", "compare_cdu"]


def payload_fields(layout, word):
    """A payload int -> ``{field: int or nested dict}`` of a (nested) ``StructLayout``."""
    from amaranth.lib import data
    out = {}
    for name, f in layout:
        v = (int(word) >> f.offset) & ((1 << f.width) - 1)
        out[name] = payload_fields(f.shape, v) if isinstance(f.shape, data.StructLayout) else v
    return out


def txn_fields(layout, word):
    """A CDU ``txn`` payload int -> the tuple :func:`~tricut.sim.harness.cdu.txn_tuple`
    gives a model decision (kind, req, layer, block, result, victim valid, victim req,
    layer, block, hbm)."""
    f = payload_fields(layout, word)
    vic = f["victim"]
    return (f["kind"], f["req"], f["layer"], f["block"], f["result"], f["victim_valid"],
            vic["req"], vic["layer"], vic["block"], f["hbm"])


def compare(golden: RunResult, tile: RunResult, skip=frozenset()) -> list:
    """The differences, first first: tile problems (HBM ``err``, TE status), attention outputs
    (bit for bit, in run order; not those of the ``(round, request)`` steps in ``skip``),
    tokens."""
    out = list(tile.problems)
    for key in golden.attn:
        want, got = golden.attn[key], tile.attn.get(key)
        if (got is None and tile.stopped) or (key[0], key[2]) in skip:
            continue
        if got is None:
            out.append(f"round {key[0]} layer {key[1]} request {key[2]}: no tile output")
        elif not np.array_equal(want, got):
            hd, i = map(int, np.argwhere(want != got)[0])
            out.append(f"round {key[0]} layer {key[1]} request {key[2]}: attention[{hd}][{i}] = "
                       f"{int(got[hd, i]):#010x}, golden {int(want[hd, i]):#010x}")
    for r, toks in golden.tokens.items():
        if not tile.stopped and tile.tokens.get(r) != toks:
            out.append(f"request {r}: tokens {tile.tokens.get(r)}, golden {toks}")
    return out


def compare_dsu(s: Setup, golden: RunResult, tile: RunResult, fault_free=None) -> list:
    """With the DSU cluster: the rounds it issued, the steps that failed and the outcomes
    against the DSU model's run with the same faults (``golden``, which replays those rounds,
    rollbacks included); every attention output of a step that completed bit for bit against
    the golden's, none missing; the tokens exactly, and against the ``fault_free`` run's (a
    :class:`RunResult` of the same requests without faults) too."""
    out = []
    for ri, (a, b) in enumerate(zip(tile.rounds, golden.rounds)):
        if a != b:
            out.append(f"DSU round {ri}: the cluster issued {a}, the DSU model {b}")
            break
    else:
        if len(tile.rounds) != len(golden.rounds):
            out.append(f"DSU: the cluster issued {len(tile.rounds)} rounds, the DSU model "
                       f"{len(golden.rounds)}")
    if sorted(tile.failed) != golden.failed:
        out.append(f"failed steps (round, request): the tile {sorted(tile.failed)}, the faults "
                   f"{golden.failed}")
    if tile.outcomes != golden.outcomes:
        out.append(f"DSU outcomes: cluster {sorted(tile.outcomes.items())}, model "
                   f"{sorted(golden.outcomes.items())}")
    out += compare(golden, tile, skip=set(golden.failed))
    for r, toks in golden.tokens.items():
        if tile.tokens.get(r) != toks:
            continue                                # named by compare
        if fault_free is not None and toks != fault_free.tokens[r]:
            out.append(f"request {r}: tokens {toks}, the fault-free run's {fault_free.tokens[r]}")
    return out


def compare_cdu(s: Setup, tile: RunResult, golden: RunResult | None = None) -> list:
    """With a CDU policy: the tile's CDU decisions against the CDU golden model on the same
    step descriptors, transaction by transaction, and its counters (every counter the model
    defines the same way; a run that stopped early is compared on its prefix); with faults,
    ``hbm_retries`` against ``golden.cdu_retries`` and no ``hbm_failures``."""
    if s.policy is None:
        return []
    from tricut.rtl.cdu.core import COUNTERS
    core = RunInputs(s).cdu_reference()
    want = [txn_tuple(t) for t in core.txns]
    got = tile.txns
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return [f"CDU txn {i}: tile {describe(a)}, model {describe(b)}"]
    if tile.stopped:
        return []
    if len(got) != len(want):
        return [f"CDU: the tile decided {len(got)} operations, the model {len(want)}"]
    c = core.counters()
    skip = ("prefetch_late", "hbm_reads", "hbm_retries", "hbm_failures")
    out = [f"CDU counter {k}: tile {tile.cdu_counters[k]}, model {c[k]}" for k in COUNTERS
           if k not in skip and tile.cdu_counters.get(k) != c[k]]
    if golden is not None and golden.cdu_retries is not None:
        want = {"hbm_retries": golden.cdu_retries, "hbm_failures": 0}
        out += [f"CDU counter {k}: tile {tile.cdu_counters.get(k)}, the faults {v}"
                for k, v in want.items() if tile.cdu_counters.get(k) != v]
    return out
