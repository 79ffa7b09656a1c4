"""Payload layouts and codes of the CDU's streams, shared by RTL, model glue and tests.

Streams (``amaranth.lib.stream``; payloads LSB first):

* ``desc`` in: a run of block operations ``block, block+1, ..., block+count-1`` of one
  ``kind`` (3 bits: R demand read, W new-token write, P prefetch, S restore G2 -> HBM) for
  (``req``, ``layer``), with the residency class ``cls`` (0 stream, 1 normal, 2 keep, 3 pin)
  and ``fresh`` (W starts a new block). ``count`` = 0 or ``kind`` >= 4 is a bad descriptor:
  consumed, nothing done, sticky ``bad_desc`` set.
* ``op`` (intake -> core): one block operation, the fields of ``desc`` without ``count``.
* ``txn`` out: one beat per operation, in operation order: the decision (``result`` code;
  ``restore`` for every S op, which never touches the tag store), the victim
  (``victim_valid`` and its tag), ``hbm`` (an HBM read was issued) and ``way`` (the L2 frame
  way of the block for R hit / miss_alloc, P pf_issue, W w_hit / w_alloc; 0 otherwise).
* ``hbm_req`` out: ``id`` (MSHR index), the block's tag, ``retry`` (0 on the first attempt),
  ``way`` (the frame way the read fills; 0 for a bypass read; the same on every attempt) and
  ``alloc`` (1: the read fills frame (set(tag), ``way``) and that frame still belongs to this
  MSHR when the beat transfers; 0: a bypass read, or a read whose frame has since been
  re-allocated to another block -- an *orphaned* fill, its data must be written nowhere).
* ``hbm_resp`` in: ``id`` and ``err``. Responses may come in any order.
* ``ready`` out (to the TE): one beat per demand read, in order, once its data is in L2 (or
  has been read from HBM for a bypass): tag, ``hit``, ``err`` (the HBM read failed after
  all retries), ``way`` (the frame way holding the block: the hit way or the allocated way;
  0 for a bypass) and ``bypass`` (1: miss_bypass, the data is in no frame). The frame
  (set(tag), ``way``) of an entry is not re-allocated until the entry has been popped
  (the eviction hold, ``rtl/cdu/core.py``).

The L2 data frame of (set, way) is ``set * ways + way``; the set is computed from the tag
(``models/cdu.set_index``), so only the way is carried. ``way`` fields are ``WAY_BITS`` wide
(ways <= 16) whatever the instance, so the layouts do not depend on the geometry.
* ``status`` out: one beat per HBM read that failed ``max_retries + 1`` times: ``id`` and tag.
"""

from amaranth.hdl import unsigned
from amaranth.lib import data

from tricut.models.cdu import HINTS, KINDS, PATTERNS, POLICIES, RESULTS

__all__ = ["KIND", "KIND_BITS", "WAY_BITS", "RESULT", "RESULT_NAME", "HINT", "POLICY", "PATTERN", "Widths",
           "desc_layout", "op_layout", "txn_layout", "hbm_req_layout", "hbm_resp_layout",
           "ready_layout", "status_layout"]

# Every code below is the name's position in its tuple in models/cdu.py (the one declaration
# of the names); tests/test_cdu_model.py pins the codes, which the RTL depends on.

#: op kind codes (``models/cdu.KINDS``): R 0, W 1, P 2, S 3; 4..7 are bad descriptors
KIND = {k: i for i, k in enumerate(KINDS)}
#: width of the ``kind`` field of ``desc``, ``op`` and ``txn``
KIND_BITS = 3
#: ``txn.result`` codes (``models/cdu.RESULTS``)
RESULT = {r: i for i, r in enumerate(RESULTS)}
RESULT_NAME = {v: k for k, v in RESULT.items()}
assert len(KIND) < 2 ** KIND_BITS and len(RESULT) <= 16   # kind with spare codes, 4-bit result
#: width of every ``way`` field (``txn``, ``hbm_req``, ``ready``): ways <= 16
WAY_BITS = 4


class Widths:
    """Tag field widths of one CDU instance."""

    def __init__(self, req_bits=4, layer_bits=3, block_bits=10, count_bits=6, id_bits=2):
        for name, v in (("req_bits", req_bits), ("layer_bits", layer_bits),
                        ("block_bits", block_bits), ("count_bits", count_bits),
                        ("id_bits", id_bits)):
            if not isinstance(v, int) or not 1 <= v <= 32:
                raise ValueError(f"CDU widths: {name} must be an integer in 1..32, got {v!r}")
        self.req, self.layer, self.block = req_bits, layer_bits, block_bits
        self.count, self.id = count_bits, id_bits

    def tag(self):
        return {"req": unsigned(self.req), "layer": unsigned(self.layer),
                "block": unsigned(self.block)}


def desc_layout(w: Widths):
    return data.StructLayout({"kind": unsigned(KIND_BITS), **w.tag(), "count": unsigned(w.count),
                              "cls": unsigned(2), "fresh": unsigned(1)})


def op_layout(w: Widths):
    return data.StructLayout({"kind": unsigned(KIND_BITS), **w.tag(), "cls": unsigned(2),
                              "fresh": unsigned(1)})


def txn_layout(w: Widths):
    return data.StructLayout({"kind": unsigned(KIND_BITS), **w.tag(), "result": unsigned(4),
                              "victim_valid": unsigned(1),
                              "victim": data.StructLayout(w.tag()), "hbm": unsigned(1),
                              "way": unsigned(WAY_BITS)})


def hbm_req_layout(w: Widths):
    return data.StructLayout({"id": unsigned(w.id), **w.tag(), "retry": unsigned(1),
                              "way": unsigned(WAY_BITS), "alloc": unsigned(1)})


def hbm_resp_layout(w: Widths):
    return data.StructLayout({"id": unsigned(w.id), "err": unsigned(1)})


def ready_layout(w: Widths):
    return data.StructLayout({**w.tag(), "hit": unsigned(1), "err": unsigned(1),
                              "way": unsigned(WAY_BITS), "bypass": unsigned(1)})


def status_layout(w: Widths):
    return data.StructLayout({"id": unsigned(w.id), **w.tag()})


# --------------------------------------------------------------------------- front end

#: ``step`` beat kinds: a step descriptor is a ``HEADER`` beat (step number), then its
#: ``SLOT`` beats (slot, request, seq_len, hint), ``LAYER`` beats (TE layer order) and
#: ``RESTORE`` beats (req, layer, seq_len: a restore move of the DSU; the front end emits the
#: S ops of blocks ``0 .. ceil(seq_len/16) - 1`` when it takes the beat) in any
#: interleaving; its final beat has ``last``; ``end`` on that beat says no step follows.
STEP_KIND = {"header": 0, "slot": 1, "layer": 2, "restore": 3}
#: DSU hint codes (``models/cdu.HINTS``): auto 0, stream 1, priority 2, pin 3
HINT = {h: i for i, h in enumerate(HINTS)}
#: front-end policy codes (``config`` port; ``models/cdu.POLICIES``): disabled 0, static 1,
#: adaptive 2
POLICY = {p: i for i, p in enumerate(POLICIES)}
#: front-end pattern codes (``models/cdu.PATTERNS``): full 0, window 1, list 2, reread 3.
#: ``list`` takes the model's ``topk`` code: the demand blocks of each (slot, layer) come in
#: on the ``demand`` stream (topk from the TE scores, or a trace).
PATTERN = {("list" if p == "topk" else p): i for i, p in enumerate(PATTERNS)}
assert len(HINT) <= 4 and len(POLICY) <= 4 and len(PATTERN) <= 4     # 2-bit fields
#: unit class modes (how a unit's blocks are classed)
MODE_STREAM, MODE_FIXED, MODE_STATIC, MODE_ADAPTIVE = 0, 1, 2, 3


def step_bits():
    return 16


def seq_bits(w: Widths):
    return w.block + 4


def step_layout(w: Widths, slot_bits):
    return data.StructLayout({
        "kind": unsigned(2), "step": unsigned(step_bits()), "slot": unsigned(slot_bits),
        "req": unsigned(w.req), "seq_len": unsigned(seq_bits(w)), "hint": unsigned(2),
        "layer": unsigned(w.layer), "last": unsigned(1), "end": unsigned(1)})


def demand_layout(w: Widths):
    """One demand block of the current (slot, layer) unit; ``last`` on its final block.
    Blocks strictly increasing and < ceil(seq_len / 16) (else sticky ``bad_demand``)."""
    return data.StructLayout({"block": unsigned(w.block), "last": unsigned(1)})


def fe_config_layout(w: Widths):
    """Front-end configuration, held stable during a run. Pattern sizes in blocks:
    ``sink_blocks = ceil(sinks/16)``, ``window_blocks = ceil(window/16)``,
    ``reread_blocks = ceil(reread_tokens/16)``; reread bursts on steps
    ``burst_start <= step < burst_start + burst_len``."""
    return data.StructLayout({
        "policy": unsigned(2), "pattern": unsigned(2), "distance": unsigned(8),
        "sink_blocks": unsigned(w.block + 1), "window_blocks": unsigned(w.block + 1),
        "reread_blocks": unsigned(w.block + 1), "burst_start": unsigned(step_bits()),
        "burst_len": unsigned(step_bits())})


def entry_layout(w: Widths):
    """Adaptive predictor scatter entry: block index + 2-bit saturating confidence (0 = free)."""
    return data.StructLayout({"block": unsigned(w.block), "conf": unsigned(2)})


def pred_row_layout(w: Widths, entries):
    """Adaptive predictor state of one (slot, layer): seen, prefix run ``a``, suffix run
    ``w``, ``entries`` scatter entries."""
    return data.StructLayout({"seen": unsigned(1), "a": unsigned(w.block + 1),
                              "w": unsigned(w.block + 1),
                              "e": data.ArrayLayout(entry_layout(w), entries)})
