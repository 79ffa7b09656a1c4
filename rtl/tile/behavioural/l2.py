"""Behavioural L2 data array: frames of KV-block beats, written by beat, read by burst.

Not for synthesis (see :mod:`tricut.rtl.tile.behavioural`). The read side is the HBM model's
in-order :func:`~.hbm.burst_responder` with a fixed latency.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.rtl.cdu.checked import CheckedComponent

from .hbm import MAX_DEPTH, MAX_LATENCY, MAX_OUTSTANDING, _int_in, _is_int, burst_responder
from .layouts import count_bits, index_bits, l2_data_layout, l2_read_layout, l2_write_layout

__all__ = ["L2Data", "MAX_BLOCK_BEATS"]

#: the longest frame: a KV block of Llama-3-8B's attention shape at 8 lanes (16 tokens x 8 KV
#: heads x 2*Dk words, Dk = 128 / 8)
MAX_BLOCK_BEATS = 4096


class L2Data(CheckedComponent):
    """Behavioural L2 data array (not for synthesis): ``frames`` x ``block_beats`` words of
    ``data_bits`` bits, word ``frame * block_beats + beat``, initially zero.

    Parameters
    ----------
    frames : int, 1..65536
    block_beats : int, 1..MAX_BLOCK_BEATS (4096: 16 tokens x 8 KV heads x 32 words)
        Beats per frame (a KV block); sets the width of ``beats``.
    data_bits : int
        A multiple of 8 in 8..1024. ``frames * block_beats`` at most 2**20.
    latency : int, 1..4096
        Fixed read latency: a read accepted on cycle ``t`` has its first beat valid on cycle
        ``t + latency`` at the earliest.
    max_outstanding : int, 1..64
        Reads accepted and not fully answered (``ceil(latency / beats) + 1`` keeps ``data``
        busy every cycle for back-to-back reads of ``beats`` beats).
    tag_bits : int, 1..16

    Streams (payloads in :mod:`.layouts`):

    * ``write`` (in, always ready): ``frame``, ``beat``, ``data``; written at the edge ending
      the cycle it transfers (seen by ``data`` beats from the next cycle); a frame or beat
      out of range is dropped.
    * ``read`` (in): ``frame``, ``beats``, ``tag``; ready while a slot is free (a slot freed
      on cycle c takes a read from c+1).
    * ``data`` (out): ``tag``, ``data``, ``last``, ``err``: beats 0..``beats``-1 of the frame
      in acceptance order, one per cycle while ``data.ready``, reads never interleaved; valid
      never waits for ready and the payload holds until it transfers. A beat past the frame's
      end or of a frame out of range answers ``data = 0, err = 1``; ``beats = 0`` is answered
      as one such beat.

    Timing: a read accepted on cycle ``t`` with no read ahead of it and ``data`` ready has its
    beat ``i`` valid and transferred on cycle ``t + latency + i``; reads follow back to back.
    """

    @staticmethod
    def _check(frames, block_beats, data_bits, latency, max_outstanding, tag_bits):
        _int_in("frames", frames, 1, 1 << 16)
        _int_in("block_beats", block_beats, 1, MAX_BLOCK_BEATS)
        if not _is_int(data_bits) or data_bits % 8 or not 8 <= data_bits <= 1024:
            raise ValueError(f"data_bits must be a multiple of 8 in 8..1024, got {data_bits!r}")
        if frames * block_beats > MAX_DEPTH:
            raise ValueError(f"frames * block_beats must be at most {MAX_DEPTH}, "
                             f"got {frames * block_beats}")
        _int_in("latency", latency, 1, MAX_LATENCY)
        _int_in("max_outstanding", max_outstanding, 1, MAX_OUTSTANDING)
        _int_in("tag_bits", tag_bits, 1, 16)

    def __init__(self, frames, block_beats, data_bits=256, latency=2, max_outstanding=4,
                 tag_bits=4):
        self.frames, self.block_beats, self.data_bits = frames, block_beats, data_bits
        self.latency, self.max_outstanding, self.tag_bits = latency, max_outstanding, tag_bits
        self.depth = frames * block_beats
        super().__init__({
            "write": In(stream.Signature(l2_write_layout(frames, block_beats, data_bits))),
            "read": In(stream.Signature(l2_read_layout(frames, block_beats, tag_bits))),
            "data": Out(stream.Signature(l2_data_layout(tag_bits, data_bits))),
        })

    def elaborate(self, platform):
        m = Module()
        F, B = self.frames, self.block_beats
        nb = count_bits(B)
        ab = index_bits(self.depth)
        m.submodules.mem = mem = Memory(shape=unsigned(self.data_bits), depth=self.depth,
                                        init=[])
        rd = mem.read_port(domain="comb")
        wr = mem.write_port()

        req = self.read.payload
        in_range = req.frame < F
        cur = burst_responder(
            m, self.read.valid, self.read.ready, self.data.valid, self.data.ready,
            slots=self.max_outstanding, latency=self.latency, reorder=False, seed=1,
            n_bits=nb, base_bits=ab, tag_bits=self.tag_bits,
            accept={"tag": req.tag, "base": Mux(in_range, req.frame * B, 0),
                    "n": Mux(req.beats == 0, 1, req.beats),
                    "good": Mux(in_range & (req.beats != 0), B, 0), "err": 0})
        m.d.comb += [rd.addr.eq(cur["addr"]),
                     self.data.payload.tag.eq(cur["tag"]),
                     self.data.payload.data.eq(Mux(cur["oob"], 0, rd.data)),
                     self.data.payload.last.eq(cur["last"]),
                     self.data.payload.err.eq(cur["err"])]
        w = self.write.payload
        m.d.comb += [self.write.ready.eq(1), wr.addr.eq(w.frame * B + w.beat),
                     wr.data.eq(w.data),
                     wr.en.eq(self.write.valid & (w.frame < F) & (w.beat < B))]
        return m
