"""Payload layouts and codes of the CDU's streams, shared by RTL, model glue and tests.

Streams (``amaranth.lib.stream``; payloads LSB first):

* ``desc`` in: a run of block operations ``block, block+1, ..., block+count-1`` of one
  ``kind`` (R demand read, W new-token write, P prefetch) for (``req``, ``layer``), with
  the residency class ``cls`` (0 stream, 1 normal, 2 keep, 3 pin) and ``fresh`` (W starts a
  new block). ``count`` = 0 or ``kind`` = 3 is a bad descriptor: consumed, nothing done,
  sticky ``status_bad_desc`` set.
* ``op`` (intake -> core): one block operation, the fields of ``desc`` without ``count``.
* ``txn`` out: one beat per operation, in operation order: the decision (``result`` code),
  the victim (``victim_valid`` and its tag) and ``hbm`` (an HBM read was issued).
* ``hbm_req`` out: ``id`` (MSHR index), the block's tag, ``retry`` (0 on the first attempt).
* ``hbm_resp`` in: ``id`` and ``err``. Responses may come in any order.
* ``ready`` out (to the TE): one beat per demand read, in order, once its data is in L2 (or
  has been read from HBM for a bypass): tag, ``hit``, ``err`` (the HBM read failed after
  all retries).
* ``status`` out: one beat per HBM read that failed ``max_retries + 1`` times: ``id`` and tag.
"""

from amaranth.hdl import unsigned
from amaranth.lib import data

__all__ = ["KIND", "RESULT", "RESULT_NAME", "Widths", "desc_layout", "op_layout", "txn_layout",
           "hbm_req_layout", "hbm_resp_layout", "ready_layout", "status_layout"]

KIND = {"R": 0, "W": 1, "P": 2}
RESULT = {"hit": 0, "miss_alloc": 1, "miss_bypass": 2, "pf_issue": 3, "pf_redundant": 4,
          "pf_drop": 5, "w_hit": 6, "w_alloc": 7, "w_bypass": 8}
RESULT_NAME = {v: k for k, v in RESULT.items()}


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
    return data.StructLayout({"kind": unsigned(2), **w.tag(), "count": unsigned(w.count),
                              "cls": unsigned(2), "fresh": unsigned(1)})


def op_layout(w: Widths):
    return data.StructLayout({"kind": unsigned(2), **w.tag(), "cls": unsigned(2),
                              "fresh": unsigned(1)})


def txn_layout(w: Widths):
    return data.StructLayout({"kind": unsigned(2), **w.tag(), "result": unsigned(4),
                              "victim_valid": unsigned(1),
                              "victim": data.StructLayout(w.tag()), "hbm": unsigned(1)})


def hbm_req_layout(w: Widths):
    return data.StructLayout({"id": unsigned(w.id), **w.tag(), "retry": unsigned(1)})


def hbm_resp_layout(w: Widths):
    return data.StructLayout({"id": unsigned(w.id), "err": unsigned(1)})


def ready_layout(w: Widths):
    return data.StructLayout({**w.tag(), "hit": unsigned(1), "err": unsigned(1)})


def status_layout(w: Widths):
    return data.StructLayout({"id": unsigned(w.id), **w.tag()})
