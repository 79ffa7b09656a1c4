"""Behavioural HBM: a paged KV image answering bursts after a fixed latency, in order or not.

Not for synthesis (see :mod:`tricut.rtl.tile.behavioural`). :func:`burst_responder` is the
request/response engine shared with the L2 data array (:mod:`.l2`).
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal, unsigned
from amaranth.lib import stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.rtl.cdu.checked import CheckedComponent

from .layouts import count_bits, hbm_req_layout, hbm_resp_layout, hbm_write_layout, index_bits

__all__ = ["HbmModel", "ALWAYS", "check_rate", "MAX_RATE_DEN", "LFSR_TAPS", "lfsr_next", "burst_responder",
           "MAX_DEPTH", "MAX_LATENCY", "MAX_OUTSTANDING", "MAX_BEATS", "MAX_FAULTS"]

#: ``faults`` entry count meaning "every attempt fails" (a persistent fault)
ALWAYS = "always"
#: 16-bit Galois LFSR taps (x^16 + x^14 + x^13 + x^11 + 1), the reorder pick's random source
LFSR_TAPS = 0xB400
MAX_DEPTH = 1 << 22
MAX_LATENCY = 4096
MAX_OUTSTANDING = 64
MAX_BEATS = 256
MAX_FAULTS = 16
MAX_FAILS = 255


def lfsr_next(x):
    """One step of the 16-bit Galois LFSR (:data:`LFSR_TAPS`)."""
    return (x >> 1) ^ (LFSR_TAPS if x & 1 else 0)


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _int_in(name, v, lo, hi):
    if not _is_int(v) or not lo <= v <= hi:
        raise ValueError(f"{name} must be an int in {lo}..{hi}, got {v!r}")


MAX_RATE_DEN = 4096


def check_rate(rate):
    """``rate``: a pair ``(num, den)`` of ints, ``1 <= num <= den <= MAX_RATE_DEN``."""
    ok = isinstance(rate, (tuple, list)) and len(rate) == 2 and all(_is_int(x) for x in rate) \
        and 1 <= rate[0] <= rate[1] <= MAX_RATE_DEN
    if not ok:
        raise ValueError(f"rate must be (beats, cycles), ints with 1 <= beats <= cycles <= "
                         f"{MAX_RATE_DEN}, got {rate!r}")


def burst_responder(m, req_valid, req_ready, resp_valid, resp_ready, *, slots, latency,
                    reorder, seed, n_bits, base_bits, tag_bits, accept, rate=(1, 1)):
    """Build the request slots and the response sequencer into module ``m``.

    ``accept`` holds, on the cycle a request transfers, ``tag``, ``base`` (word address of
    beat 0), ``n`` (beats, >= 1), ``good`` (beats ``< good`` are in range, the rest answer
    ``err``) and ``err`` (every beat answers ``err``), as Amaranth values.

    Timing (cycle = clock period; "on cycle c" = the values the edge ending cycle c samples):

    * ``req_ready`` on cycle c: a slot is free at the start of cycle c (a slot freed by a
      last beat on cycle c is free from c+1);
    * a request accepted on cycle t is *due* from cycle ``t + latency``;
    * ``resp_valid`` on cycle c: a burst is being answered, or a slot is due (the sequencer
      then picks one on cycle c and keeps it until its last beat transfers): in order, the
      oldest request; with ``reorder``, the first due slot at or after index ``lfsr mod
      2**k`` (``k`` = index bits of ``slots``; none there: the lowest due slot), the LFSR
      stepping once per pick. Beats follow one per cycle while ``resp_ready``.
    * ``rate = (num, den)`` (``num <= den``): at most ``num`` beats per ``den`` cycles. A
      credit counter starts at ``den``; a beat is offered only while it holds at least
      ``den``; a beat takes ``den`` and adds ``num``; a cycle without a beat adds ``num``
      unless the counter already holds ``den`` (a beat's worth: no bursts above the rate).
      ``(1, 1)`` builds no counter.

    Returns a dict of the current beat's signals: ``tag``, ``addr`` (word address), ``oob``,
    ``err``, ``last``, and ``xfer``.
    """
    S = slots
    sb = index_bits(S)
    tb = max(1, (latency - 1).bit_length())
    v = Array(Signal(name=f"slot{i}_v") for i in range(S))
    tag = Array(Signal(tag_bits, name=f"slot{i}_tag") for i in range(S))
    base = Array(Signal(base_bits, name=f"slot{i}_base") for i in range(S))
    n = Array(Signal(n_bits, name=f"slot{i}_n") for i in range(S))
    good = Array(Signal(n_bits + 1, name=f"slot{i}_good") for i in range(S))
    err = Array(Signal(name=f"slot{i}_err") for i in range(S))
    t = Array(Signal(tb, name=f"slot{i}_t") for i in range(S))
    due = Signal(S)
    for i in range(S):
        m.d.comb += due[i].eq(v[i] & (t[i] == 0))
        with m.If(v[i] & (t[i] != 0)):
            m.d.sync += t[i].eq(t[i] - 1)

    busy = Signal()                 # a burst is being answered (picked on an earlier cycle)
    cur = Signal(range(S))          # its slot
    beat = Signal(n_bits)           # beats of the current burst already transferred
    pick = Signal(range(S))
    any_due = Signal()
    alloc = Signal(range(S))
    free = Signal()
    lfsr = Signal(16, init=seed)

    if reorder:
        m.d.comb += any_due.eq(due.any())
        vv = Signal(S)
        for i in range(S):
            m.d.comb += vv[i].eq(v[i])
        m.d.comb += free.eq(~vv.all())
        for i in reversed(range(S)):            # lowest free slot
            with m.If(~vv[i]):
                m.d.comb += alloc.eq(i)
        start = lfsr[:sb] if S > 1 else 0
        for i in reversed(range(S)):            # lowest due slot
            with m.If(due[i]):
                m.d.comb += pick.eq(i)
        for i in reversed(range(S)):            # lowest due slot at or after start: wins
            # (start <= i always holds for i = 2**sb - 1: left out, lint-clean)
            at_or_after = (start <= i) if i < (1 << sb) - 1 else 1
            with m.If(due[i] & at_or_after):
                m.d.comb += pick.eq(i)
    else:
        wp = Signal(range(S))
        rp = Signal(range(S))
        count = Signal(range(S + 1))
        m.d.comb += [free.eq(count < S), alloc.eq(wp), pick.eq(rp),
                     any_due.eq(due.bit_select(rp, 1))]

    sel = Signal(range(S))
    m.d.comb += sel.eq(Mux(busy, cur, pick))
    present = Signal()
    offer = Signal()                # present and within the rate
    m.d.comb += [present.eq(busy | any_due), resp_valid.eq(offer), req_ready.eq(free)]
    num, den = rate
    if num == den:
        m.d.comb += offer.eq(present)
    else:
        credit = Signal(range(den + num), init=den)
        ok = Signal()
        m.d.comb += [ok.eq(credit >= den), offer.eq(present & ok)]
        with m.If(offer & resp_ready):
            m.d.sync += credit.eq(credit - den + num)
        with m.Elif(~ok):
            m.d.sync += credit.eq(credit + num)
    xfer = Signal()
    last = Signal()
    oob = Signal()
    m.d.comb += [xfer.eq(offer & resp_ready), last.eq(beat == n[sel] - 1),
                 oob.eq(beat >= good[sel])]

    take = Signal()
    m.d.comb += take.eq(req_valid & free)
    with m.If(take):
        m.d.sync += [v[alloc].eq(1), tag[alloc].eq(accept["tag"]), base[alloc].eq(accept["base"]),
                     n[alloc].eq(accept["n"]), good[alloc].eq(accept["good"]),
                     err[alloc].eq(accept["err"]), t[alloc].eq(latency - 1)]
    with m.If(present & ~busy):
        m.d.sync += [busy.eq(1), cur.eq(pick)]
        if reorder:
            m.d.sync += lfsr.eq(Mux(lfsr[0], (lfsr >> 1) ^ LFSR_TAPS, lfsr >> 1))
    done = Signal()
    m.d.comb += done.eq(xfer & last)
    with m.If(xfer):
        m.d.sync += beat.eq(beat + 1)
        with m.If(last):
            m.d.sync += [beat.eq(0), busy.eq(0), v[sel].eq(0)]
    if not reorder:
        with m.If(take):
            m.d.sync += wp.eq(Mux(wp == S - 1, 0, wp + 1))
        with m.If(done):
            m.d.sync += rp.eq(Mux(rp == S - 1, 0, rp + 1))
        m.d.sync += count.eq(count + take - done)

    addr = Signal(base_bits + 1)
    m.d.comb += addr.eq(base[sel] + beat)
    return {"tag": tag[sel], "addr": addr, "oob": oob, "err": err[sel] | oob, "last": last,
            "xfer": xfer, "busy": busy}


class HbmModel(CheckedComponent):
    """Behavioural HBM holding the paged KV image (not for synthesis).

    Parameters
    ----------
    words : sequence of int, or int
        The initial image, one ``data_bits``-bit word per beat address (an int ``n``: ``n``
        zero words). Depth 1..2**22.
    data_bits : int
        Bits per beat = bytes per cycle x 8 (the bandwidth): a multiple of 8 in 8..1024.
    latency : int, 1..4096
        A request accepted on cycle ``t`` has its first beat valid on cycle ``t + latency``
        at the earliest.
    max_outstanding : int, 1..64
        Requests accepted and not fully answered; ``req`` is not ready while all are taken.
    max_beats : int, 1..256
        Sets the width of ``beats`` (``max_beats.bit_length()`` bits); any length the field
        holds is answered.
    id_bits : int, 1..16
    reorder : bool
        False: answers in acceptance order. True: a due request is picked by a 16-bit LFSR
        (see :func:`burst_responder`), so answers complete out of order.
    seed : int, 1..65535
        The LFSR's initial state (deterministic order for a seed).
    rate : (num, den), ints with 1 <= num <= den <= 4096
        Bandwidth: at most ``num`` beats per ``den`` cycles (see :func:`burst_responder`);
        ``(1, 1)``, the default, one beat per cycle.
    faults : sequence of ``(addr, fails)``
        At most 16 distinct in-range addresses. ``fails`` an int 1..255: the first ``fails``
        requests accepted whose ``addr`` equals ``addr`` answer ``err = 1`` on every beat
        (transient; later ones succeed); :data:`ALWAYS`: every such request does (persistent).
        Counted at acceptance, on the request's first-beat address only.

    Streams (payloads in :mod:`.layouts`):

    * ``req`` (in): ``id``, ``addr``, ``beats``; ready while a slot is free (registered: a
      slot freed on cycle c takes a request from c+1).
    * ``resp`` (out): ``id``, ``data``, ``last``, ``err``: each request's ``beats`` beats,
      one per cycle while ``resp.ready``, bursts never interleaved; valid never waits for
      ready and the payload holds until it transfers. Beat ``i`` of request ``(addr, n)``
      carries the word at ``addr + i`` (``err`` = the request's fault); a beat beyond the
      image answers ``data = 0, err = 1``; ``beats = 0`` is answered as one beat
      ``data = 0, err = 1``.
    * ``write`` (in, always ready): ``addr``, ``data``; a write on cycle c is seen by beats
      presented from cycle c+1; an address beyond the image is dropped.

    Timing: a request accepted on cycle ``t`` is due from ``t + latency``; with no other
    request ahead of it and ``resp`` ready, beat ``i`` is valid and transfers on cycle
    ``t + latency + i`` (one beat per cycle, back to back also across bursts).
    """

    @staticmethod
    def _check(words, data_bits, latency, max_outstanding, max_beats, id_bits, reorder, seed,
               faults, rate=(1, 1)):
        if not _is_int(data_bits) or data_bits % 8 or not 8 <= data_bits <= 1024:
            raise ValueError(f"data_bits must be a multiple of 8 in 8..1024, got {data_bits!r}")
        if _is_int(words):
            _int_in("words (a depth)", words, 1, MAX_DEPTH)
            image = [0] * words
        else:
            try:
                image = list(words)
            except TypeError:
                raise ValueError(f"words must be a sequence of ints or a depth, "
                                 f"got {words!r}") from None
            if not 1 <= len(image) <= MAX_DEPTH:
                raise ValueError(f"words must hold 1..{MAX_DEPTH} words, got {len(image)}")
            for i, w in enumerate(image):
                if not _is_int(w) or not 0 <= w < (1 << data_bits):
                    raise ValueError(f"words[{i}] must be an int in 0..2**{data_bits}-1, "
                                     f"got {w!r}")
        _int_in("latency", latency, 1, MAX_LATENCY)
        _int_in("max_outstanding", max_outstanding, 1, MAX_OUTSTANDING)
        _int_in("max_beats", max_beats, 1, MAX_BEATS)
        _int_in("id_bits", id_bits, 1, 16)
        if not isinstance(reorder, bool):
            raise ValueError(f"reorder must be a bool, got {reorder!r}")
        _int_in("seed", seed, 1, 0xFFFF)
        check_rate(rate)
        try:
            table = [tuple(f) for f in faults]
        except TypeError:
            raise ValueError(f"faults must be a sequence of (addr, fails), got {faults!r}") \
                from None
        if len(table) > MAX_FAULTS:
            raise ValueError(f"faults must have at most {MAX_FAULTS} entries, got {len(table)}")
        seen = set()
        for f in table:
            if len(f) != 2 or not _is_int(f[0]) or not 0 <= f[0] < len(image) or f[0] in seen \
                    or not (f[1] == ALWAYS or (_is_int(f[1]) and 1 <= f[1] <= MAX_FAILS)):
                raise ValueError(f"faults entry must be (distinct addr in 0..{len(image) - 1}, "
                                 f"fails in 1..{MAX_FAILS} or {ALWAYS!r}), got {f!r}")
            seen.add(f[0])
        return image, table

    def __init__(self, words, data_bits=256, latency=100, max_outstanding=8, max_beats=16,
                 id_bits=4, reorder=False, seed=1, faults=(), rate=(1, 1)):
        self.image, self.faults = self._check(words, data_bits, latency, max_outstanding,
                                              max_beats, id_bits, reorder, seed, faults, rate)
        self.rate = tuple(rate)
        self.depth = len(self.image)
        self.data_bits, self.latency = data_bits, latency
        self.max_outstanding, self.max_beats, self.id_bits = max_outstanding, max_beats, id_bits
        self.reorder, self.seed = reorder, seed
        self.addr_bits = index_bits(self.depth)
        super().__init__({
            "req": In(stream.Signature(hbm_req_layout(id_bits, self.addr_bits, max_beats))),
            "resp": Out(stream.Signature(hbm_resp_layout(id_bits, data_bits))),
            "write": In(stream.Signature(hbm_write_layout(self.addr_bits, data_bits))),
        })

    def fault_table(self, m):
        """The fault table: entry k matches a request whose first-beat address is addr_k;
        returns ``fault`` (combinational: the request on ``req`` answers ``err``)."""
        req = self.req.payload
        fault = Signal()
        take = self.req.valid & self.req.ready
        for k, (a, fails) in enumerate(self.faults):
            hit = req.addr == a
            if fails == ALWAYS:
                cond = hit
            else:
                left = Signal(range(MAX_FAILS + 1), init=fails, name=f"fault{k}_left")
                cond = hit & (left != 0)
                with m.If(take & cond):
                    m.d.sync += left.eq(left - 1)
            with m.If(cond):
                m.d.comb += fault.eq(1)
        return fault

    def elaborate(self, platform):
        m = Module()
        D, nb = self.depth, count_bits(self.max_beats)
        m.submodules.mem = mem = Memory(shape=unsigned(self.data_bits), depth=D,
                                        init=self.image)
        rd = mem.read_port(domain="comb")
        wr = mem.write_port()

        req = self.req.payload
        fault = self.fault_table(m)
        room = Signal(nb + 1)                   # beats of the burst inside the image
        m.d.comb += room.eq(Mux(req.addr >= D, 0,
                                Mux(D - req.addr > (1 << nb) - 1, (1 << nb) - 1,
                                    D - req.addr)))
        cur = burst_responder(
            m, self.req.valid, self.req.ready, self.resp.valid, self.resp.ready,
            slots=self.max_outstanding, latency=self.latency, reorder=self.reorder,
            seed=self.seed, n_bits=nb, base_bits=self.addr_bits, tag_bits=self.id_bits,
            accept={"tag": req.id, "base": req.addr, "n": Mux(req.beats == 0, 1, req.beats),
                    "good": Mux(req.beats == 0, 0, room), "err": fault}, rate=self.rate)
        m.d.comb += [rd.addr.eq(cur["addr"]),
                     self.resp.payload.id.eq(cur["tag"]),
                     self.resp.payload.data.eq(Mux(cur["oob"], 0, rd.data)),
                     self.resp.payload.last.eq(cur["last"]),
                     self.resp.payload.err.eq(cur["err"])]
        m.d.comb += [self.write.ready.eq(1), wr.addr.eq(self.write.payload.addr),
                     wr.data.eq(self.write.payload.data),
                     wr.en.eq(self.write.valid & (self.write.payload.addr < D))]
        return m
