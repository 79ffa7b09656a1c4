"""Bench of the L2 fill engine and the new-token writer (``rtl/tile/l2_fill.py``) in Amaranth's
simulator, driven as the CDU would drive them, and checked against a Python reference built
from the KV image alone.

:class:`FillTop` wires the behavioural HBM (latency, reordering, faults) and L2 data array to
an :class:`~tricut.rtl.tile.l2_fill.L2Filler`, a :class:`~tricut.rtl.tile.l2_fill.NewTokenWriter`
and their :class:`~tricut.rtl.tile.l2_fill.L2WriteArbiter`. :func:`random_ops` makes a random
CDU decision sequence (fills into random frames with ``alloc`` 1/0, retries, orphaned
retries, W txns of all three results, other txns) and its :class:`Reference`: HBM = the image
plus every W's words; every allocated frame = its block as HBM holds it, over the tokens valid
in it (all 16 after a fill, from the written token on after a ``w_alloc``); each ``hbm_resp``
= ``(id, err)`` with ``err`` iff the fill had an HBM burst on a faulty address.

:func:`simulate` applies the ops as the CDU would: ``txn`` in decision order; an ``hbm_req``
only once every txn decided before it was taken (the CDU's txn register stalls its next
decision); a ``w_alloc`` only once every earlier ``alloc = 1`` fill into its frame was taken by
the filler (the CDU sends it, or clears ``alloc``, before reusing the frame for another block;
a ``w_hit`` is not held back: a fill of the same block sent after it reads the new token from
HBM); the
tile's side loads the W's new K/V into the buffer and raises ``layer_open`` (after a random
delay) only when the W is the next txn. Random idle on the sources and backpressure on
``hbm_resp`` (:mod:`.streams` schedules). Per cycle it checks: responses in order with the
right ``(id, err)``; no HBM write of a W before its layer is open; a W is taken exactly in
the cycle its last word is written, with all its words written. At the end of each phase
(everything drained and idle) it reads every allocated L2 frame and the whole HBM image from
the models' memories and compares them bit for bit (:class:`Mismatch` on a difference).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from tricut.models.cdu import KV_BLOCK_TOKENS
from tricut.rtl.cdu.layouts import KIND, RESULT
from tricut.rtl.tile.attention_layouts import kv_addr, kv_data_bits, kv_image_words
from tricut.rtl.tile.behavioural.hbm import ALWAYS, HbmModel
from tricut.rtl.tile.behavioural.l2 import L2Data
from tricut.rtl.tile.l2_fill import L2Filler, L2WriteArbiter, NewTokenWriter, frame_of
from tricut.sim.harness.streams import Schedule, Sink, Source, stream_rng

__all__ = ["DEFAULTS", "HBM_DEFAULTS", "FillTop", "Reference", "Op", "random_ops", "simulate",
           "Mismatch", "RunResult", "kv_image", "fill_ops"]

#: the unit parameters of the bench (``L2Filler``'s; the writer takes all but the last three)
DEFAULTS = dict(head_dim=64, lanes=16, kv_dtype="bf16", num_layers=2, num_kv_heads=2,
                max_ctx=64, num_requests=4, sets=4, ways=2, max_beats=16, max_outstanding=4,
                depth=4)
#: the behavioural HBM's parameters
HBM_DEFAULTS = dict(latency=20, max_outstanding=8, reorder=False, seed=1, faults=())
_WRITER_KEYS = ("head_dim", "lanes", "kv_dtype", "num_layers", "num_kv_heads", "max_ctx",
                "num_requests", "sets", "ways", "widths")


class Mismatch(AssertionError):
    """The design differed from the reference; the message names the first difference."""


def _params(params):
    p = dict(DEFAULTS)
    p.update(params or {})
    return p


def kv_image(params, seed=0):
    """A random KV image for the unit parameters (words of ``kv_data_bits`` random bits)."""
    p = _params(params)
    depth = kv_image_words(p["num_requests"], p["num_layers"], p["num_kv_heads"], p["max_ctx"],
                           p["head_dim"], p["lanes"])
    rng = random.Random(seed)
    return [rng.getrandbits(kv_data_bits(p["lanes"], p["kv_dtype"])) for _ in range(depth)]


class FillTop(wiring.Component):
    """HBM model + L2 data array + filler + writer + arbiter. Ports: ``fill_req`` (the CDU's
    ``hbm_req``), ``fill_resp`` (``hbm_resp``), ``txn``, ``newkv_write``, ``layer_open``,
    ``open_layer``. ``wait_idle = False`` ties the writer's ``fills_idle`` to 1 (a broken
    design, to show the checks fail). After elaboration ``hbm_mem``/``l2_mem`` are the models'
    memories (read by the bench)."""

    def __init__(self, image, params=None, hbm=None, wait_idle=True):
        p = _params(params)
        self.params = p
        self.filler = L2Filler(**p)
        self.writer = NewTokenWriter(**{k: p[k] for k in _WRITER_KEYS if k in p})
        f = self.filler
        h = dict(HBM_DEFAULTS)
        h.update(hbm or {})
        self.hbm_params = h
        self.hbm = HbmModel(image, data_bits=f.data_bits, latency=h["latency"],
                            max_outstanding=h["max_outstanding"], max_beats=f.max_beats,
                            id_bits=f.id_bits, reorder=h["reorder"], seed=h["seed"],
                            faults=h["faults"])
        self.l2 = L2Data(f.frames, f.block_beats, f.data_bits)
        self.arb = L2WriteArbiter(f.frames, f.block_beats, f.data_bits)
        self.wait_idle = wait_idle
        self.hbm_mem = self.l2_mem = None
        super().__init__({
            "fill_req": In(stream.Signature(f.hbm_req.payload.shape())),
            "fill_resp": Out(stream.Signature(f.hbm_resp.payload.shape())),
            "txn": In(stream.Signature(self.writer.txn.payload.shape())),
            "newkv_write": In(stream.Signature(self.writer.newkv_write.payload.shape())),
            "layer_open": In(1),
            "open_layer": In(len(self.writer.open_layer)),
        })

    def elaborate(self, platform):
        m = Module()
        f, wr, arb = self.filler, self.writer, self.arb
        # the models elaborated here, so that the bench can read their memories
        hm, lm = self.hbm.elaborate(platform), self.l2.elaborate(platform)
        for unit in (self.hbm, self.l2):        # elaborated above, not by Fragment.get
            unit._MustUse__used = True
        m.submodules.hbm, m.submodules.l2 = hm, lm
        self.hbm_mem, self.l2_mem = hm.submodules.mem, lm.submodules.mem
        m.submodules.filler, m.submodules.writer, m.submodules.arb = f, wr, arb
        wiring.connect(m, wiring.flipped(self.fill_req), f.hbm_req)
        wiring.connect(m, f.hbm_resp, wiring.flipped(self.fill_resp))
        wiring.connect(m, wiring.flipped(self.txn), wr.txn)
        wiring.connect(m, wiring.flipped(self.newkv_write), wr.newkv_write)
        wiring.connect(m, f.rd_hbm_req, self.hbm.req)
        wiring.connect(m, self.hbm.resp, f.rd_hbm_resp)
        wiring.connect(m, wr.hbm_write, self.hbm.write)
        wiring.connect(m, wr.l2_write, arb.hi)
        wiring.connect(m, f.l2_write, arb.lo)
        wiring.connect(m, arb.out, self.l2.write)
        m.d.comb += [wr.layer_open.eq(self.layer_open), wr.open_layer.eq(self.open_layer),
                     wr.fills_idle.eq(f.idle if self.wait_idle else 1),
                     self.l2.read.valid.eq(0), self.l2.data.ready.eq(0)]
        return m


# ------------------------------------------------------------------------------ reference
@dataclass
class Op:
    """One CDU decision: ``kind`` ``"fill"`` (an ``hbm_req`` with its R/P txn), ``"retry"``
    (an ``hbm_req`` only), ``"txn"`` (a txn only), ``"W"`` (a W txn with its new words)."""
    kind: str
    req: int = 0
    layer: int = 0
    block: int = 0
    way: int = 0
    alloc: int = 0
    id: int = 0
    retry: int = 0
    txn_kind: str = "R"
    result: str = "hit"
    pos: int = 0
    words: list = field(default_factory=list)


class Reference:
    """The expected state after a decision sequence (see the module docstring)."""

    def __init__(self, image, params, faults=()):
        p = _params(params)
        self.p = p
        self.H, self.L, self.max_ctx = p["num_kv_heads"], p["num_layers"], p["max_ctx"]
        self.dk = p["head_dim"] // p["lanes"]
        self.sets, self.ways = p["sets"], p["ways"]
        self.hbm = list(image)
        self.tags = {}                  # frame -> (req, layer, block)
        self.valid = {}                 # frame -> set of tokens valid in the frame
        self.faulty = {a for a, n in faults if n == ALWAYS}
        self.resps = []                 # (id, err) per hbm_req, in order
        self.next_id = 0

    def addr(self, req, layer, h, t):
        p = self.p
        return kv_addr(req, layer, h, t, num_layers=self.L, num_kv_heads=self.H,
                       max_ctx=self.max_ctx, head_dim=p["head_dim"], lanes=p["lanes"])

    def frame(self, req, layer, block, way):
        return frame_of(req, layer, block, way, self.sets, self.ways)

    def resident(self, tag):
        for f, t in self.tags.items():
            if t == tag:
                return f
        return None

    def fill_err(self, req, layer, block):
        n = KV_BLOCK_TOKENS * 2 * self.dk
        mb = self.p["max_beats"]
        for h in range(self.H):
            base = self.addr(req, layer, h, block * KV_BLOCK_TOKENS)
            if any(base + i in self.faulty for i in range(0, n, mb)):
                return 1
        return 0

    def apply(self, op):
        if op.kind in ("fill", "retry"):
            if op.alloc:
                f = self.frame(op.req, op.layer, op.block, op.way)
                self.tags[f] = (op.req, op.layer, op.block)
                self.valid[f] = set(range(KV_BLOCK_TOKENS))
            err = self.fill_err(op.req, op.layer, op.block) if op.alloc else 0
            self.resps.append((op.id, err))
        elif op.kind == "W":
            blk = op.pos // KV_BLOCK_TOKENS
            for h in range(self.H):
                for w in range(2 * self.dk):
                    self.hbm[self.addr(op.req, op.layer, h, op.pos) + w] = \
                        op.words[h * 2 * self.dk + w]
            if op.result in ("w_hit", "w_alloc"):
                f = self.frame(op.req, op.layer, blk, op.way)
                if op.result == "w_alloc":
                    self.tags[f] = (op.req, op.layer, blk)
                    self.valid[f] = set()
                self.valid[f].add(op.pos % KV_BLOCK_TOKENS)

    def expected_frames(self):
        """``{frame: {beat: word}}`` over the valid tokens of every allocated frame."""
        out = {}
        for f, (r, l, b) in self.tags.items():
            words = {}
            for t in sorted(self.valid[f]):
                for h in range(self.H):
                    base = self.addr(r, l, h, b * KV_BLOCK_TOKENS + t)
                    for w in range(2 * self.dk):
                        words[(t * self.H + h) * 2 * self.dk + w] = self.hbm[base + w]
            out[f] = words
        return out

    def snapshot(self):
        return {"hbm": list(self.hbm), "frames": self.expected_frames(),
                "resps": list(self.resps)}


def _new_id(ref, id_bits):
    i = ref.next_id
    ref.next_id = (i + 1) % (1 << id_bits)
    return i


def random_ops(ref, rng, n, id_bits=2, weights=(35, 35, 10, 20), p_alloc=0.8, p_hit=0.5,
               data_bits=264):
    """``n`` random CDU decisions (fill, W, retry, other txn by ``weights``), applied to
    ``ref`` as they are made; returns the :class:`Op` list."""
    p = ref.p
    R, L, blocks = p["num_requests"], p["num_layers"], p["max_ctx"] // KV_BLOCK_TOKENS
    fills, ops = [], []
    nw = ref.H * 2 * ref.dk
    for _ in range(n):
        k = rng.choices(("fill", "W", "retry", "txn"), weights)[0]
        if k == "retry" and not fills:
            k = "fill"
        if k == "fill":
            for _ in range(8):
                tag = (rng.randrange(R), rng.randrange(L), rng.randrange(blocks))
                if ref.resident(tag) is None:
                    break
            else:
                k = "txn"
        if k == "fill":
            alloc = int(rng.random() < p_alloc)
            op = Op("fill", *tag, way=rng.randrange(ref.ways), alloc=alloc,
                    id=_new_id(ref, id_bits), txn_kind=rng.choice("RP") if alloc else "R")
            op.result = ("miss_alloc" if op.txn_kind == "R" else "pf_issue") if alloc \
                else "miss_bypass"
            fills.append(op)
        elif k == "retry":
            f0 = rng.choice(fills)
            f = ref.frame(f0.req, f0.layer, f0.block, f0.way)
            alloc = int(f0.alloc and ref.tags.get(f) == (f0.req, f0.layer, f0.block))
            op = Op("retry", f0.req, f0.layer, f0.block, way=f0.way, alloc=alloc, id=f0.id,
                    retry=1)
        elif k == "txn":
            kind, result = rng.choice([("R", "hit"), ("P", "pf_redundant"), ("P", "pf_drop"),
                                       ("S", "restore")])
            op = Op("txn", rng.randrange(R), rng.randrange(L), rng.randrange(blocks),
                    txn_kind=kind, result=result)
        else:
            if ref.tags and rng.random() < p_hit:
                f = rng.choice(sorted(ref.tags))
                r, l, b = ref.tags[f]
                pos = b * KV_BLOCK_TOKENS + rng.randrange(KV_BLOCK_TOKENS)
            else:
                r, l = rng.randrange(R), rng.randrange(L)
                pos = rng.randrange(p["max_ctx"])
                if rng.random() < 0.4:
                    pos -= pos % KV_BLOCK_TOKENS
            b = pos // KV_BLOCK_TOKENS
            f = ref.resident((r, l, b))
            if f is not None:
                result, way = "w_hit", f % ref.ways
            elif pos % KV_BLOCK_TOKENS == 0 and rng.random() < 0.7:
                result, way = "w_alloc", rng.randrange(ref.ways)
            else:
                result, way = "w_bypass", rng.randrange(ref.ways)
            op = Op("W", r, l, b, way=way, txn_kind="W", result=result, pos=pos,
                    words=[rng.getrandbits(data_bits) for _ in range(nw)])
        ref.apply(op)
        ops.append(op)
    return ops


def fill_ops(ref, tags, way=0, alloc=1, id_bits=2):
    """A fill (with its R miss_alloc txn) per ``(req, layer, block)`` of ``tags``."""
    ops = []
    for t in tags:
        op = Op("fill", *t, way=way, alloc=alloc, id=_new_id(ref, id_bits),
                txn_kind="R", result="miss_alloc" if alloc else "miss_bypass")
        ref.apply(op)
        ops.append(op)
    return ops


# ------------------------------------------------------------------------------ bench
class _Gated(Source):
    """A :class:`Source` whose next beat is offered only while ``allowed(i)``."""

    def __init__(self, name, beats, allowed, idle=None, seed=0):
        super().__init__(name, beats, idle, seed)
        self.allowed = allowed

    def drive(self):
        go = self.gate()
        if not self.presenting and self.i < len(self.beats) and go and self.allowed(self.i):
            self.presenting = True
        self.valid = int(self.presenting)
        if self.presenting:
            self._last = self.beats[self.i]
        return self.valid, self._last


@dataclass
class RunResult:
    cycles: int
    resps: list                 # (cycle, id, err) per hbm_resp beat
    req_cycles: list            # cycle each hbm_req beat was taken
    txn_cycles: list            # cycle each txn beat was taken
    checkpoints: int
    open_cycles: list = field(default_factory=list)     # first cycle each W's layer is open


def _split(ops, ref_cls=None):
    """The hbm_req and txn beats of one phase's ops, with their gates."""
    reqs, txns = [], []
    last_fill = {}              # frame -> index (this phase) of the last alloc=1 hbm_req
    for op in ops:
        if op.kind in ("fill", "retry"):
            reqs.append({"op": op, "gate": len(txns)})
            if op.alloc:
                last_fill[op.frame] = len(reqs)
        if op.kind in ("fill", "txn", "W"):
            after = 0
            if op.kind == "W" and op.result == "w_alloc":
                after = last_fill.get(op.frame, 0)
            txns.append({"op": op, "after": after})
    return reqs, txns


def simulate(image, phases, params=None, hbm=None, idle=None, backpressure=None, seed=0,
             open_delay=(0, 6), wait_idle=True, max_cycles=100_000):
    """Run ``phases`` (a list of ``(ops, snapshot)``: the ops of a phase and the reference's
    :meth:`Reference.snapshot` after them) on a :class:`FillTop`; returns a
    :class:`RunResult`, raises :class:`Mismatch`."""
    from amaranth.sim import Simulator

    top = FillTop(image, params, hbm, wait_idle)
    p, f, wr = top.params, top.filler, top.writer
    H, two_dk = p["num_kv_heads"], 2 * (p["head_dim"] // p["lanes"])
    nw = H * two_dk
    for ops, _ in phases:
        for op in ops:
            op.frame = frame_of(op.req, op.layer, op.block, op.way, p["sets"], p["ways"])
    res = RunResult(0, [], [], [], 0)
    rng = stream_rng(seed, "tile")
    FP, TP = f.hbm_req.payload.shape(), wr.txn.payload.shape()

    def pack(layout, **kv):
        """The payload int; fields not given (the CDU's txn fields the writer ignores:
        victim, hbm) are 0."""
        word = 0
        for name, fl in layout:
            word |= int(kv.get(name, 0)) << fl.offset
        return word

    def req_word(op):
        return pack(FP, id=op.id, req=op.req, layer=op.layer, block=op.block, retry=op.retry,
                    way=op.way, alloc=op.alloc)

    def txn_word(op):
        return pack(TP, kind=KIND[op.txn_kind], req=op.req, layer=op.layer, block=op.block,
                    result=RESULT[op.result], way=op.way)

    NP = wr.newkv_write.payload.shape()

    async def bench(ctx):
        cycle = 0
        for ph, (ops, snap) in enumerate(phases):
            reqs, txns = _split(ops)
            rsrc = _Gated(f"req{ph}", [req_word(r["op"]) for r in reqs],
                          lambda i: tsrc.i >= reqs[i]["gate"], idle, seed)
            tsrc = _Gated(f"txn{ph}", [txn_word(t["op"]) for t in txns],
                          lambda i: rsrc.i >= txns[i]["after"], idle, seed)
            sink = Sink(f"resp{ph}", backpressure, seed=seed)
            load = None                 # [txn index, words left to write, delay, open]
            loaded = -1
            wwords = 0                  # writer words since the last W was taken
            exp_resps = snap["resps"][len(res.resps):]
            got = 0
            while True:
                if cycle > max_cycles:
                    raise TimeoutError(f"l2 fill bench hung at cycle {cycle}: phase {ph}, "
                                       f"{rsrc.i}/{len(reqs)} hbm_req, {tsrc.i}/{len(txns)} "
                                       f"txn, {got}/{len(exp_resps)} hbm_resp")
                # ---- the tile's new-K/V side: load the next W's words, then open its layer
                nkv_valid, nkv_word = 0, 0
                if tsrc.i < len(txns) and txns[tsrc.i]["op"].kind == "W" and \
                        loaded != tsrc.i and load is None:
                    load = [tsrc.i, 0, rng.randint(*open_delay)]
                opened = 0
                if load is not None:
                    op = txns[load[0]]["op"]
                    if load[1] < nw:
                        if rng.random() < Schedule.of(idle).duty:
                            hh, ww = divmod(load[1], two_dk)
                            nkv_valid = 1
                            nkv_word = pack(NP, request=op.req, kv_head=hh, beat=ww,
                                            data=op.words[load[1]], pos=op.pos)
                            load[1] += 1
                    elif load[2] > 0:
                        load[2] -= 1
                    else:
                        opened = 1
                        if len(load) == 3:
                            load.append(cycle)
                            res.open_cycles.append(cycle)
                ctx.set(top.newkv_write.valid, nkv_valid)
                ctx.set(top.newkv_write.payload.as_value(), nkv_word)
                ctx.set(top.layer_open, opened)
                ctx.set(top.open_layer, txns[load[0]]["op"].layer if load else 0)
                rv, rp = rsrc.drive()
                tv, tp = tsrc.drive()
                ctx.set(top.fill_req.valid, rv)
                if rp is not None:
                    ctx.set(top.fill_req.payload.as_value(), rp)
                ctx.set(top.txn.valid, tv)
                if tp is not None:
                    ctx.set(top.txn.payload.as_value(), tp)
                ctx.set(top.fill_resp.ready, sink.drive())
                (_, _, rr, tr, ov, op_, hwv, hwr, lwv, lwr) = await ctx.tick().sample(
                    top.fill_req.ready, top.txn.ready, top.fill_resp.valid,
                    top.fill_resp.payload.as_value(), wr.hbm_write.valid, wr.hbm_write.ready,
                    wr.l2_write.valid, wr.l2_write.ready)
                hw_x, lw_x = hwv and hwr, lwv and lwr
                if hw_x and not opened:
                    raise Mismatch(f"cycle {cycle}: W HBM write while its layer is not open")
                wwords += int(bool(hw_x)) + int(bool(lw_x))
                if rsrc.sample(rr):
                    res.req_cycles.append(cycle)
                if tv and tr:
                    op = txns[tsrc.i]["op"]
                    if op.kind == "W":
                        want = nw * (2 if op.result in ("w_hit", "w_alloc") else 1)
                        if not (hw_x or lw_x) or wwords != want:
                            raise Mismatch(f"cycle {cycle}: W txn {tsrc.i} taken after "
                                           f"{wwords} of {want} words (last word this "
                                           f"cycle: {bool(hw_x or lw_x)})")
                        wwords, loaded, load = 0, tsrc.i, None
                    elif wwords:
                        raise Mismatch(f"cycle {cycle}: writer words outside a W")
                    res.txn_cycles.append(cycle)
                tsrc.sample(tr)
                if ov and sink.ready:
                    rid = op_ & ((1 << len(f.hbm_resp.payload.id)) - 1)
                    rerr = (op_ >> f.hbm_resp.payload.shape()["err"].offset) & 1
                    if got >= len(exp_resps):
                        raise Mismatch(f"cycle {cycle}: extra hbm_resp (id {rid}, err {rerr})")
                    if (rid, rerr) != exp_resps[got]:
                        raise Mismatch(f"cycle {cycle}: hbm_resp {len(res.resps)} is (id "
                                       f"{rid}, err {rerr}), expected {exp_resps[got]}")
                    got += 1
                    res.resps.append((cycle, rid, rerr))
                sink.sample(ov, op_)
                cycle += 1
                if rsrc.done and tsrc.done and got == len(exp_resps):
                    idle_now = ctx.get(f.idle) and not ctx.get(wr.busy)
                    if idle_now:
                        break
            res.checkpoints += 1
            # ---- checkpoint: L2 frames and the HBM image
            bb = f.block_beats
            for fr, words in sorted(snap["frames"].items()):
                for beat, want in sorted(words.items()):
                    got_w = ctx.get(top.l2_mem.data[fr * bb + beat])
                    if got_w != want:
                        raise Mismatch(f"phase {ph}: L2 frame {fr} beat {beat} is {got_w:#x}, "
                                       f"expected {want:#x}")
            for a, want in enumerate(snap["hbm"]):
                got_w = ctx.get(top.hbm_mem.data[a])
                if got_w != want:
                    raise Mismatch(f"phase {ph}: HBM word {a} is {got_w:#x}, expected "
                                   f"{want:#x}")
        res.cycles = cycle

    sim = Simulator(top)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return res
