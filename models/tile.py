"""Golden model of the decode tile's step sequencer: one DSU round -> CDU step beats + TE jobs.

Plain and naive on purpose (``docs/tile/sequencer.md``, the RTL is ``rtl/tile/sequencer.py``). One DSU
round (its :class:`~tricut.models.dsu.Descriptor` list, in the arbiter's slot order) is one
decode step. The sequencer turns it into

* the CDU front end's step descriptor (``models/cdu.StepDesc`` as beats, the order of
  ``sim/harness/cdu.step_beats``): a ``header`` beat (the step number), one ``slot`` beat per
  descriptor (slot, request, seq_len, hint; hint from the residency bit by
  :data:`tricut.models.cdu.HINT_OF_RESIDENCY`: 0 -> ``stream``, 1 -> ``auto``), one ``layer``
  beat per layer ``0 .. num_layers-1`` (the TE order); ``last`` on the final beat, ``end``
  there too when no step follows;
* the attention jobs in the order the TE array consumes them, which is the order the CDU
  front end walks its (slot, layer) units (``FrontEnd.ops``: layer-major, the step's slots in
  order within a layer): for each layer, each descriptor, each KV head, each split part one
  :class:`Job`. The attention of a decode step covers the whole context including the token
  decoded in this step: ``seq_len`` tokens ``[0, seq_len)`` (``models/llama.py`` extends the
  cache by the new token, then attends over everything it holds). With Flash-Decoding split-K
  (``split_tokens`` > 0) a context longer than ``split_tokens`` is cut into
  ``ceil(seq_len / split_tokens)`` parts ``[p*split_tokens, min(seq_len, (p+1)*split_tokens))``;
  ``split_tokens = 0`` never splits.

A round may hold no descriptor (the DSU issued an empty batch): the step beats are then the
header and the layers, and there are no jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cdu import HINT_OF_RESIDENCY

__all__ = ["TILE_LANES", "TILE_ENGINES", "Job", "split_parts", "sequence"]

#: TE lanes the decode tile takes, those of the standalone TE (``models.te.LANES``): its HBM
#: K/V word carries every NVFP4 block scale its elements need
#: (``rtl/tile/attention_layouts.kv_word_bits``: one 8-bit code per 16 lanes)
TILE_LANES = (2, 4, 8, 16, 32)
#: TE engine designs the decode tile runs (``models.te.ENGINES``), the shipped one first; the
#: split engine (the pipelined one without its pipeline registers) is the TE's alone
TILE_ENGINES = ("pipelined", "serial")


@dataclass(frozen=True)
class Job:
    """One attention job of the TE array: (slot, request, layer, KV head), split part ``part``
    of ``parts``, over the tokens ``[start, end)``; ``last`` on the step's final job."""
    slot: int
    request: int
    layer: int
    kv_head: int
    part: int
    parts: int
    start: int
    end: int
    last: int = 0


def _int(name, v, lo):
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def split_parts(seq_len, split_tokens):
    """Split parts of a context of ``seq_len`` tokens: 1 if ``split_tokens`` is 0, else
    ``ceil(seq_len / split_tokens)``."""
    _int("seq_len", seq_len, 1)
    _int("split_tokens", split_tokens, 0)
    return 1 if split_tokens == 0 else -(-seq_len // split_tokens)


def sequence(descriptors, num_layers, num_kv_heads, split_tokens, *, step=None, end=False):
    """One round -> ``(step_beats, jobs)``.

    ``step_beats``: dicts with ``kind`` (``"header"``, ``"slot"``, ``"layer"``) and that
    kind's fields (``step``; ``slot``, ``req``, ``seq_len``, ``hint``; ``layer``), ``last`` and
    ``end`` on every beat (1 only on the final one). ``jobs``: :class:`Job` list.
    ``step``: the round number; needed when ``descriptors`` is empty, else it must equal
    every descriptor's ``step``. ``end``: no step follows this one."""
    _int("num_layers", num_layers, 1)
    _int("num_kv_heads", num_kv_heads, 1)
    _int("split_tokens", split_tokens, 0)
    descriptors = list(descriptors)
    if step is None:
        if not descriptors:
            raise ValueError("an empty round needs its step number (step=...)")
        step = descriptors[0].step
    _int("step", step, 0)
    for d in descriptors:
        if d.step != step:
            raise ValueError(f"descriptor of slot {d.slot} has step {d.step}, the round is "
                             f"step {step}")
        _int("seq_len", d.seq_len, 1)
        if d.residency not in (0, 1):
            raise ValueError(f"residency must be 0 or 1, got {d.residency!r}")
    if len({d.slot for d in descriptors}) != len(descriptors):
        raise ValueError(f"a slot appears twice in one round: {[d.slot for d in descriptors]}")

    beats = [dict(kind="header", step=step)]
    for d in descriptors:
        beats.append(dict(kind="slot", slot=d.slot, req=d.request, seq_len=d.seq_len,
                          hint=HINT_OF_RESIDENCY[d.residency]))
    for layer in range(num_layers):
        beats.append(dict(kind="layer", layer=layer))
    for b in beats:
        b["last"] = 0
        b["end"] = 0
    beats[-1]["last"] = 1
    beats[-1]["end"] = int(bool(end))

    jobs = []
    for layer in range(num_layers):
        for d in descriptors:
            parts = split_parts(d.seq_len, split_tokens)
            for head in range(num_kv_heads):
                for part in range(parts):
                    if split_tokens == 0:
                        start, stop = 0, d.seq_len
                    else:
                        start = part * split_tokens
                        stop = min(d.seq_len, start + split_tokens)
                    jobs.append(Job(d.slot, d.request, layer, head, part, parts, start, stop))
    if jobs:
        jobs[-1] = Job(**{**jobs[-1].__dict__, "last": 1})
    return beats, jobs
