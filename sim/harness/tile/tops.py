"""The simulation tops of the decode tile in Amaranth's simulator, and the tile they hold built
from a run's parameters (:mod:`.params`) in one place: :func:`decode_tile` (the shipped
``DecodeTile``; the Verilator top, :mod:`.verilator_top`, builds on it too).

* :class:`CosimTop`: the shipped ``DecodeTile`` without the DSU <-> the behavioural HBM
  and (with the CDU) L2 data array;
* :class:`BlockReaderTop`: the block-read interface alone (``HbmBlockReader`` <-> HbmModel).

Behavioural and synthesizable stay apart: only the tops put them together.
"""

from __future__ import annotations

from amaranth.hdl import Elaboratable

from .params import TILE_KEYS

__all__ = ["decode_tile", "CosimTop", "BlockReaderTop"]


def decode_tile(p):
    """The shipped :class:`~tricut.rtl.tile.decode_tile.DecodeTile` of a run's parameters
    (:meth:`~.golden.RunInputs.params`): the attention path with the CDU ``p["cdu"]`` (None:
    without), with ``p["dsu"]`` the DSU cluster (its firmware in the cores' memories) and the
    DSU link in front."""
    from tricut.rtl.tile.decode_tile import DecodeTile
    d = p.get("dsu")
    dsu = dict(dsu_cores=d["cores"], dsu_mem_bytes=d["mem_bytes"],
               dsu_intake_depth=d["intake_depth"], dsu_firmware=d["firmware"]) if d else \
        dict(dsu_cores=0)
    return DecodeTile(**{k: p[k] for k in TILE_KEYS}, cdu=p["cdu"], max_slots=p["max_slots"],
                      engine=p["engine"], **dsu)


class CosimTop(Elaboratable):
    """Simulation top of a co-simulation: the shipped
    :class:`~tricut.rtl.tile.decode_tile.DecodeTile` without the DSU (``dut``: step sequencer
    -> [CDU, L2 fill engine, new-token writer] -> unit streamer -> TE array) <-> the
    behavioural HBM and, with the CDU (``p["cdu"]``), the L2 data array; the testbench drives
    the DecodeTile's ports and, without the CDU, the HBM model's ``write`` port (the new
    tokens' K/V)."""

    def __init__(self, image, p, l2_latency=2):
        from tricut.rtl.tile.behavioural.hbm import HbmModel
        from tricut.rtl.tile.behavioural.l2 import L2Data
        self.p = p
        self.dut = decode_tile(dict(p, dsu=None))
        self.tile = t = self.dut.tile
        self.seq = self.dut.seq
        self.hbm = HbmModel(image, data_bits=t.data_bits, latency=p["latency"],
                            max_outstanding=p["hbm_outstanding"], max_beats=p["max_beats"],
                            id_bits=t.id_bits, reorder=p["reorder"], seed=p["hbm_seed"],
                            rate=tuple(p.get("hbm_rate", (1, 1))))
        st = t.streamer
        self.l2 = None if t.cdu is None else \
            L2Data(st.frames, st.block_beats, data_bits=t.data_bits, latency=l2_latency,
                   max_outstanding=2, tag_bits=1)

    def elaborate(self, platform):
        from amaranth.hdl import Module
        from amaranth.lib import wiring
        m = Module()
        dut = self.dut
        m.submodules.dut, m.submodules.hbm = dut, self.hbm
        wiring.connect(m, dut.hbm_req, self.hbm.req)
        wiring.connect(m, self.hbm.resp, dut.hbm_resp)
        if self.l2 is not None:
            m.submodules.l2 = self.l2
            wiring.connect(m, dut.hbm_write, self.hbm.write)
            wiring.connect(m, dut.l2_read, self.l2.read)
            wiring.connect(m, self.l2.data, dut.l2_data)
            wiring.connect(m, dut.l2_write, self.l2.write)
            m.d.comb += dut.reg_addr.eq(0)
        return m


class BlockReaderTop(Elaboratable):
    """Simulation top of the block-read interface alone: ``HbmBlockReader`` <-> HbmModel
    holding ``image`` (its ``write`` port tied off); ``p``: a run's parameters."""

    def __init__(self, image, p):
        from tricut.rtl.cdu.layouts import Widths
        from tricut.rtl.tile.behavioural.hbm import HbmModel
        from tricut.rtl.tile.block_reader import HbmBlockReader
        self.reader = HbmBlockReader(Widths(), p["num_layers"], p["num_kv_heads"], p["max_ctx"],
                                     p["num_requests"], p["head_dim"], p["lanes"], p["kv_dtype"],
                                     p["max_beats"], p["max_outstanding"])
        r = self.reader
        self.hbm = HbmModel(image, data_bits=r.data_bits, latency=p["latency"],
                            max_outstanding=p["hbm_outstanding"], max_beats=p["max_beats"],
                            id_bits=r.id_bits, reorder=p["reorder"], seed=p["hbm_seed"],
                            rate=tuple(p.get("hbm_rate", (1, 1))))

    def elaborate(self, platform):
        from amaranth.hdl import Module
        from amaranth.lib import wiring
        m = Module()
        m.submodules.reader, m.submodules.hbm = self.reader, self.hbm
        wiring.connect(m, self.reader.hbm_req, self.hbm.req)
        wiring.connect(m, self.hbm.resp, self.reader.hbm_resp)
        m.d.comb += self.hbm.write.valid.eq(0)
        return m
