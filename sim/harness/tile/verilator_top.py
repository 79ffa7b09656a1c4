"""The co-simulation top for Verilator (``tricut tile run --sim verilator``; ``docs/tile/cosim.md``,
"Co-simulation on Verilator"): :class:`CosimVerilatorTop` is :class:`~.tops.CosimTop` (the
shipped ``DecodeTile``, with or without the CDU, with the DSU cluster or not) with only the
ports the bench (:class:`~.bench.CosimBench`) needs on the top: the sequencer's ``round`` and
``descriptor`` streams, ``layer``/``config`` (with the CDU), ``go``/``done``, ``out_data``,
``tensor_scale``, ``err``, ``te_status``, ``misorder``, ``cdu_counters``, ``cdu_idle``, the
HBM model's beats served (``hbm_read_beats``, ``hbm_write_beats``), and a tap of the CDU's
decisions: ``txn_count`` (decisions taken so far) and ``txn_last`` (the payload of the last
one), both registered on the transfer, so the bench records a decision on a change of
``txn_count`` (one Python wake-up per decision, none per cycle).

The HBM model's image memory is :data:`HBM_RW_V` (``$readmemh`` at time 0, written by the HBM
``write`` port; :class:`HbmRwModel`), so the build depends on the configuration, not the data.
The host traffic between layers is played in HDL: two players
(:meth:`CosimVerilatorTop._player`) offer the new tokens' K/V (into the HBM model's ``write``
without the CDU, ``newkv_write`` with) and the q beats (``q_write``) from staging memories
(:data:`STAGE_V`, VPI-visible arrays the bench fills in zero simulated time), and a reader
(:meth:`CosimVerilatorTop._reader`) drives ``out_addr`` and captures the output words; the
bench starts each with ``<name>_base``/``<name>_target`` and awaits ``<name>_idle`` as an
edge (one Python wake-up per burst, none per cycle). With the DSU cluster
(:meth:`CosimVerilatorTop._dsu_ports`, inside the ``DecodeTile``) the cluster and the DSU link
drive the sequencer and the bench follows the run through taps on their transfers.
"""

from __future__ import annotations

from amaranth.hdl import (ClockDomain, ClockSignal, Const, Instance, Module, Mux, ResetInserter,
                          Signal)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from tricut.rtl.tile.behavioural.hbm import HbmModel, burst_responder
from tricut.rtl.tile.behavioural.layouts import count_bits

from .setup import FAULT_SLOTS
from .tops import decode_tile

__all__ = ["HBM_RW_V", "STAGE_V", "HbmRwModel", "CosimVerilatorTop", "CLOCK_NS"]

#: the bench's clock period
CLOCK_NS = 10

#: the HBM image memory: asynchronous read, synchronous write, filled by ``$readmemh`` from
#: ``+hbm_image=FILE`` at time 0
HBM_RW_V = """\
module tricut_hbm_rw #(parameter WIDTH = 8, parameter DEPTH = 1, parameter ABITS = 1) (
  input  wire             clk,
  input  wire [ABITS-1:0] raddr,
  output wire [WIDTH-1:0] rdata,
  input  wire             we,
  input  wire [ABITS-1:0] waddr,
  input  wire [WIDTH-1:0] wdata
);
  reg [WIDTH-1:0] mem [0:DEPTH-1];
  string path;
  initial begin
    if ($value$plusargs("hbm_image=%s", path)) $readmemh(path, mem);
    else $fatal(1, "tricut_hbm_rw: no +hbm_image=FILE");
  end
  always @(posedge clk) if (we) mem[waddr] <= wdata;
  assign rdata = mem[raddr];
endmodule
"""


#: a staging memory of the host traffic players: asynchronous read, synchronous write, the
#: array VPI-writable and -readable (the bench fills a player's words and reads the captured
#: output words in zero simulated time)
STAGE_V = """\
module tricut_stage #(parameter WIDTH = 8, parameter DEPTH = 2, parameter ABITS = 1) (
  input  wire             clk,
  input  wire [ABITS-1:0] raddr,
  output wire [WIDTH-1:0] rdata,
  input  wire             we,
  input  wire [ABITS-1:0] waddr,
  input  wire [WIDTH-1:0] wdata
);
  reg [WIDTH-1:0] mem [0:DEPTH-1] /*verilator public_flat_rw*/;
  always @(posedge clk) if (we) mem[waddr] <= wdata;
  assign rdata = mem[raddr];
endmodule
"""


def _pow2(n):
    """The power of two >= ``n`` (at least 2)."""
    return max(2, 1 << (n - 1).bit_length())


class HbmRwModel(HbmModel):
    """:class:`HbmModel` (its fault table included) whose image memory is the Verilog module of
    :data:`HBM_RW_V` (Verilator only): combinational read, a ``write`` (always ready) seen by
    beats from the next cycle, an address beyond the image dropped, as :class:`HbmModel`.
    ``words``: the image's depth (an int). Two tables are loaded at run time, taken in the
    first cycle, so the build does not depend on them: the fault table, the ``FAULT_SLOTS``
    entries ``(addr, fails)`` of :attr:`fault_in` (``fails`` 0: unused), and the lost-request
    table, the entries ``(addr, count)`` of :attr:`lost_in`: the next ``count`` requests
    whose first-beat address is ``addr`` are taken and never answered (a request lost on the
    way: the tile waits for it forever). Both tables are reset-less: the tile's abort resets
    the responder (the requests in flight are dropped), not what the tables have counted."""

    def __init__(self, words, data_bits=256, latency=100, max_outstanding=8, max_beats=16,
                 id_bits=4, reorder=False, seed=1, faults=(), rate=(1, 1)):
        super().__init__(words, data_bits, latency, max_outstanding, max_beats, id_bits,
                         reorder, seed, faults, rate)
        self.fault_in = Signal(FAULT_SLOTS * (self.addr_bits + 8))
        self.lost_in = Signal(FAULT_SLOTS * (self.addr_bits + 8))

    def _run_time_table(self, m, table_in, name, take):
        """Entry ``k`` of ``table_in``: ``(addr, left)``; returns ``hit`` (combinational: the
        request on ``req`` matches an entry with ``left`` non-zero), ``left`` counting down on
        each ``take`` of a hit."""
        entry = self.addr_bits + 8
        loaded = Signal(name=f"{name}_loaded", reset_less=True)
        m.d.sync += loaded.eq(1)
        hit = Signal(name=f"{name}_hit")
        for k in range(FAULT_SLOTS):
            addr = table_in[k * entry:k * entry + self.addr_bits]
            left = Signal(8, name=f"{name}{k}_left", reset_less=True)
            cond = loaded & (self.req.payload.addr == addr) & (left != 0)
            with m.If(~loaded):
                m.d.sync += left.eq(table_in[k * entry + self.addr_bits:(k + 1) * entry])
            with m.Elif(take & cond):
                m.d.sync += left.eq(left - 1)
            with m.If(cond):
                m.d.comb += hit.eq(1)
        return hit

    def elaborate(self, platform):
        m = Module()
        D, nb = self.depth, count_bits(self.max_beats)
        raddr = Signal(self.addr_bits)
        rdata = Signal(self.data_bits)
        w = self.write.payload
        m.submodules.image = Instance(
            "tricut_hbm_rw", p_WIDTH=self.data_bits, p_DEPTH=D, p_ABITS=self.addr_bits,
            i_clk=ClockSignal(), i_raddr=raddr, o_rdata=rdata,
            i_we=self.write.valid & (w.addr < D), i_waddr=w.addr, i_wdata=w.data)
        req = self.req.payload
        room = Signal(nb + 1)
        m.d.comb += room.eq(Mux(req.addr >= D, 0,
                                Mux(D - req.addr > (1 << nb) - 1, (1 << nb) - 1,
                                    D - req.addr)))
        valid, ready = Signal(), Signal()       # the request into the responder
        lost = self._run_time_table(m, self.lost_in, "lost", self.req.valid & self.req.ready)
        fault = self._run_time_table(m, self.fault_in, "fault", valid & ready)
        m.d.comb += [valid.eq(self.req.valid & ~lost), self.req.ready.eq(lost | ready)]
        cur = burst_responder(
            m, valid, ready, self.resp.valid, self.resp.ready,
            slots=self.max_outstanding, latency=self.latency, reorder=self.reorder,
            seed=self.seed, n_bits=nb, base_bits=self.addr_bits, tag_bits=self.id_bits,
            accept={"tag": req.id, "base": req.addr, "n": Mux(req.beats == 0, 1, req.beats),
                    "good": Mux(req.beats == 0, 0, room), "err": fault}, rate=self.rate)
        m.d.comb += [raddr.eq(cur["addr"]),
                     self.resp.payload.id.eq(cur["tag"]),
                     self.resp.payload.data.eq(Mux(cur["oob"], 0, rdata)),
                     self.resp.payload.last.eq(cur["last"]),
                     self.resp.payload.err.eq(cur["err"]),
                     self.write.ready.eq(1)]
        return m


def _image_depth(p):
    from tricut.rtl.tile.attention_layouts import kv_image_words
    return kv_image_words(p["num_requests"], p["num_layers"], p["num_kv_heads"], p["max_ctx"],
                          p["head_dim"], p["lanes"])


class CosimVerilatorTop(wiring.Component):
    """The co-simulation top for Verilator (see the module docs): :class:`~.tops.CosimTop`
    (with ``p["dsu"]``, the DecodeTile's DSU cluster and link too) with the HBM image in
    :class:`HbmRwModel`. ``p``: :meth:`~.golden.RunInputs.params`."""

    def __init__(self, p):
        self.p = p
        self.dsu = p.get("dsu")
        #: the design under test: the shipped DecodeTile (DSU cluster and link with ``dsu``),
        #: the host's ports all on it
        self.dut = dt = decode_tile(p)
        self.tile, self.seq = t, s = dt.tile, dt.seq
        self.cached = t.cdu is not None
        if self.dsu:
            self.cluster, self.link = dt.cluster, dt.link
        st = t.streamer
        if self.cached:
            from tricut.rtl.tile.behavioural.l2 import L2Data
            self.l2 = L2Data(st.frames, st.block_beats, data_bits=t.data_bits, latency=2,
                             max_outstanding=2, tag_bits=1)
        id_bits, data_bits = t.id_bits, t.data_bits
        self.hbm = HbmRwModel(_image_depth(p), data_bits=data_bits, latency=p["latency"],
                              max_outstanding=p["hbm_outstanding"], max_beats=p["max_beats"],
                              id_bits=id_bits, reorder=p["reorder"], seed=p["hbm_seed"],
                              rate=tuple(p.get("hbm_rate", (1, 1))))
        ports = {"clk": In(1)}
        if self.dsu:
            ports.update(self._dsu_ports(p, s))
        else:
            ports.update({"round": In(s.round.signature.flip()),
                          "descriptor": In(s.descriptor.signature.flip())})
        H, dk = p["num_kv_heads"], p["head_dim"] // p["lanes"]
        #: staging depths of the host traffic: the new tokens' K/V (``2*Dk`` words per KV
        #: head and slot), the q beats and the output reads (``qbeats`` per KV head and slot);
        #: a longer burst is played in pieces (cycle-identical: see :meth:`_player`)
        self.stage_depth = {"kv": _pow2(p["max_slots"] * H * 2 * dk),
                            "q": _pow2(p["max_slots"] * H * t.qbeats),
                            "rd": _pow2(p["max_slots"] * H * t.qbeats)}
        for k in self.stage_depth:
            ports.update({f"{k}_base": In(32), f"{k}_target": In(32), f"{k}_idle": Out(1)})
        ports.update({
            "go": In(1), "done": Out(1), "out_data": Out(len(t.out_data)),
            "tensor_scale": In(32), "err": Out(1), "te_status": Out(5),
            "hbm_read_beats": Out(32), "hbm_write_beats": Out(32),
        })
        if self.cached:
            self.txn_payload = t.cdu.txn.payload.shape()
            ports.update({
                "layer": In(len(t.layer)),
                "config": In(t.config.shape()),
                "misorder": Out(1), "cdu_idle": Out(1),
                "cdu_counters": Out(t.cdu_counters.shape()),
                "txn_count": Out(32), "txn_last": Out(self.txn_payload),
            })
        super().__init__(ports)

    def _dsu_ports(self, p, seq):
        """DSU mode: the DSU cluster (firmware in its memories) and the :class:`DsuLink` drive
        the sequencer; the bench pushes the requests into ``intake`` and follows the run
        through taps registered on the transfers (a count and the last payload, with the
        cycle of a free-running counter), one Python wake-up per event."""
        from tricut.rtl.dsu.layouts import INTAKE_LAYOUT, OUTCOME_LAYOUT
        d = self.dsu
        entry = self.hbm.addr_bits + 8
        return {"intake": In(stream.Signature(INTAKE_LAYOUT)), "intake_end": In(1),
                "hbm_faults": In(FAULT_SLOTS * entry), "hbm_lost": In(FAULT_SLOTS * entry),
                "cycle": Out(32), "trap": Out(d["cores"]), "degraded": Out(1),
                "round_count": Out(16), "round_last": Out(seq.round.payload.shape()),
                "desc_count": Out(16), "desc_last": Out(seq.descriptor.payload.shape()),
                "desc_cycle": Out(32),
                "comp_rounds": Out(16), "comp_cycle": Out(32),
                "failed": Out(1 << p["slot_bits"]),
                "outcome_count": Out(16), "outcome_last": Out(OUTCOME_LAYOUT),
                "aborts": Out(16), "abort_cycle": Out(32)}

    def _elaborate_dsu(self, m):
        ln, seq = self.link, self.seq
        host = self.dut                 # the cluster is inside the DecodeTile
        wiring.connect(m, wiring.flipped(self.intake), host.intake)
        d = seq.descriptor
        m.d.comb += [host.intake_end.eq(self.intake_end), host.run.eq(1), host.stall.eq(0),
                     host.host.valid.eq(0), host.outcomes.ready.eq(1), host.moves.ready.eq(1),
                     self.trap.eq(host.trap), self.degraded.eq(host.degraded),
                     self.comp_rounds.eq(ln.rounds), self.failed.eq(ln.failed),
                     self.aborts.eq(ln.aborts)]
        m.d.sync += self.cycle.eq(self.cycle + 1)
        m.d.comb += [self.hbm.fault_in.eq(self.hbm_faults), self.hbm.lost_in.eq(self.hbm_lost)]
        with m.If(ln.round_abort):
            m.d.sync += self.abort_cycle.eq(self.cycle)
        r, c, o = seq.round, ln.completions, host.outcomes
        with m.If(r.valid & r.ready):
            m.d.sync += [self.round_count.eq(self.round_count + 1), self.round_last.eq(r.payload)]
        with m.If(d.valid & d.ready):
            m.d.sync += [self.desc_count.eq(self.desc_count + 1), self.desc_last.eq(d.payload),
                         self.desc_cycle.eq(self.cycle)]
        with m.If(c.valid & c.ready):
            m.d.sync += self.comp_cycle.eq(self.cycle)
        with m.If(o.valid):
            m.d.sync += [self.outcome_count.eq(self.outcome_count + 1),
                         self.outcome_last.eq(o.payload)]

    def elaborate(self, platform):
        m = Module()
        # no reset: the bench never resets (every register starts at its init value), and a
        # reset input makes all next-state logic depend on a top-level input, which Verilator
        # then evaluates in its input-combinational region at every eval (both clock edges)
        m.domains.sync = ClockDomain("sync", reset_less=True)
        m.d.comb += ClockSignal("sync").eq(self.clk)
        seq, t, dut, hbm = self.seq, self.tile, self.dut, self.hbm
        # a round the DSU timed out: the link aborts it, and the sequencer, the tile and the
        # memory models' responders drop theirs (the next round starts from reset state)
        abort = ResetInserter(self.link.round_abort) if self.dsu else (lambda x: x)
        m.submodules.dut = dut
        m.submodules.hbm = abort(hbm)
        if self.dsu:
            self._elaborate_dsu(m)
        else:
            wiring.connect(m, wiring.flipped(self.round), dut.round)
            wiring.connect(m, wiring.flipped(self.descriptor), dut.descriptor)
        self._player(m, "q", dut.q_write)
        self._player(m, "kv", dut.newkv_write if self.cached else hbm.write)
        self._reader(m)
        wiring.connect(m, dut.hbm_req, hbm.req)
        wiring.connect(m, hbm.resp, dut.hbm_resp)
        for beats, st in ((self.hbm_read_beats, hbm.resp), (self.hbm_write_beats, hbm.write)):
            with m.If(st.valid & st.ready):     # what the HBM model served
                m.d.sync += beats.eq(beats + 1)
        m.d.comb += [dut.go.eq(self.go), self.done.eq(dut.done), self.out_data.eq(dut.out_data),
                     dut.tensor_scale.eq(self.tensor_scale), self.err.eq(dut.err),
                     self.te_status.eq(dut.te_status)]
        if self.cached:
            l2 = self.l2
            m.submodules.l2 = abort(l2)
            wiring.connect(m, dut.hbm_write, hbm.write)
            wiring.connect(m, dut.l2_read, l2.read)
            wiring.connect(m, l2.data, dut.l2_data)
            wiring.connect(m, dut.l2_write, l2.write)
            m.d.comb += [dut.layer.eq(self.layer), dut.config.eq(self.config),
                         self.misorder.eq(dut.misorder), self.cdu_idle.eq(dut.cdu_idle),
                         self.cdu_counters.eq(dut.cdu_counters)]
            m.d.comb += dut.reg_addr.eq(0)
            x = t.cdu.txn
            with m.If(x.valid & x.ready):
                m.d.sync += [self.txn_count.eq(self.txn_count + 1),
                             self.txn_last.eq(x.payload)]
        return m

    def _stage(self, m, name, width, raddr, rdata, we=0, waddr=0, wdata=0):
        depth = self.stage_depth[name.split("_")[0]]
        ab = exact_log2(depth)
        m.submodules[name] = Instance(
            "tricut_stage", p_WIDTH=width, p_DEPTH=depth, p_ABITS=ab, i_clk=ClockSignal(),
            i_raddr=raddr[:ab], o_rdata=rdata, i_we=Const(we, 1) if isinstance(we, int) else we,
            i_waddr=waddr[:ab] if not isinstance(waddr, int) else Const(waddr, ab),
            i_wdata=wdata if not isinstance(wdata, int) else Const(wdata, width))

    def _player(self, m, name, s):
        """The host's beats on stream ``s`` (the bench's ``send``, in HDL): the bench writes
        the words into ``<name>_stage`` (VPI), then sets ``<name>_base`` to the player's
        count of transfers and ``<name>_target`` to it plus the number of words, between
        clock edges; from then on the player offers word ``sent - base`` (``valid`` while
        ``sent != target``, the first word in that same cycle), one per cycle while
        ``ready``, and ``<name>_idle`` rises at the edge of the last transfer. Beats split
        into several plays are cycle-identical to one: the next play's first word is
        offered in the cycle after the previous play's last transfer, as ``send`` offers the
        next word."""
        width = len(s.payload.as_value())
        sent = Signal(32, name=f"{name}_sent")
        index = Signal(32, name=f"{name}_index")
        rdata = Signal(width, name=f"{name}_rdata")
        base, target = getattr(self, f"{name}_base"), getattr(self, f"{name}_target")
        self._stage(m, f"{name}_stage", width, index, rdata)
        m.d.comb += [index.eq(sent - base), s.valid.eq(sent != target), s.payload.eq(rdata),
                     getattr(self, f"{name}_idle").eq(sent == target)]
        with m.If(s.valid & s.ready):
            m.d.sync += sent.eq(sent + 1)

    def _reader(self, m):
        """The output reads (the bench's ``out_addr`` per word, in HDL): the bench writes the
        addresses into ``rd_stage`` and sets ``rd_base``/``rd_target`` as for a player; the
        reader drives ``out_addr`` with one address per cycle from that same cycle (and holds
        the last one afterwards), ``rd_idle`` rising at the edge that takes the last one.
        The output buffer answers in the next cycle: word ``i`` is written into
        ``rd_capture[i]`` at the edge after, so the bench, back between edges when
        ``rd_idle`` rose, reads every word but the last from ``rd_capture`` and the last
        from ``out_data`` (what the bench's reads saw, at the same cycles)."""
        t = self.dut
        aw, dw = len(t.out_addr), len(t.out_data)
        issued, index = Signal(32, name="rd_issued"), Signal(32, name="rd_index")
        addr, last = Signal(aw, name="rd_addr"), Signal(aw, name="rd_last")
        cap_we, cap_index = Signal(name="rd_cap_we"), Signal(32, name="rd_cap_index")
        active = Signal(name="rd_active")
        self._stage(m, "rd_stage", aw, index, addr)
        self._stage(m, "rd_capture", dw, Const(0, 32), Signal(dw, name="rd_capture_rdata"),
                    we=cap_we, waddr=cap_index, wdata=t.out_data)
        m.d.comb += [index.eq(issued - self.rd_base), active.eq(issued != self.rd_target),
                     t.out_addr.eq(Mux(active, addr, last)), self.rd_idle.eq(~active)]
        m.d.sync += [cap_we.eq(active), cap_index.eq(index)]
        with m.If(active):
            m.d.sync += [issued.eq(issued + 1), last.eq(addr)]
