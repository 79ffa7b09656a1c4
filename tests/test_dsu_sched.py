# amaranth: UnusedElaboratable=no
"""DSU scheduling: register map, slot arbiter (Amaranth sim, driven from Python against the
golden model), the cluster running the scheduler firmware (Amaranth sim and Verilator), fault
specs, bad MMIO accesses. Longer random runs are on Verilator (sim/harness/benches/dsu_sched.py)."""

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth.sim import Simulator

from tricut.models.dsu import (ERROR, OK, PROFILES, TIMEOUT, Descriptor, DsuModel, DsuParams,
                               RequestSpec)
from tricut.rtl.dsu import regmap
from tricut.rtl.dsu.arbiter import DSU_ID, SlotArbiter
from tricut.rtl.dsu.cluster import DsuCluster
from tricut.rtl.dsu.regmap import BY_NAME, SLOT_BASE, SLOT_FIELD, SLOT_STRIDE, Status
from tricut.sim.cli.testing import without_notes
from tricut.sim.harness.unit_matrices import MATRICES, random_requests
from tricut.sim.harness.dsu import (CONFIG_FIELDS, MEM_BYTES, Fault, build_dsu_firmware, compare,
                                execute, make_spec, parse_faults, run_dsu)

REPO = Path(__file__).resolve().parent.parent
OFF = {name: r.offset for name, r in BY_NAME.items()}


# -- register map ------------------------------------------------------------------------------
def test_regmap_is_consistent_and_generates_header(tmp_path):
    spans = sorted((r.offset, r.offset + 4 * r.count) for r in regmap.REGISTERS)
    assert all(a1 <= b0 for (_a0, a1), (b0, _b1) in zip(spans, spans[1:]))
    out = tmp_path / "inc" / "dsu_regs.h"
    subprocess.run([sys.executable, "-m", "tricut.rtl.dsu.regmap", "--header", str(out)],
                   check=True, cwd=REPO)
    text = out.read_text()
    assert "#define DSU_MMIO_BASE 0x80000000u" in text
    assert f"#define DSU_ADMIT DSU_REG(0x{OFF['ADMIT']:03x}u)" in text
    assert "#define DSU_ST_BAD_PROFILE 4u" in text
    assert "#define DSU_STATUS_INTAKE_END 0x00000008u" in text
    assert "#define DSU_PROFILE_FAIRNESS_OPT 2u" in text
    assert "#define DSU_CONFIG_MAGIC 0x44535543u" in text
    struct = re.search(r"struct dsu_config \{\n(.*?)\n\};", text, re.S)
    assert struct, "the header lacks struct dsu_config"
    assert re.findall(r"^    uint32_t (\w+);", struct.group(1), re.M) == list(CONFIG_FIELDS)
    assert "    .profile = DSU_PROFILE_THROUGHPUT_OPT, \\" in text
    with pytest.raises(ValueError, match="access"):
        regmap.Register("X", 0, "RX", "")
    with pytest.raises(ValueError, match="32-bit"):
        regmap.ConfigField("x", "uint64_t", 0, "")


def test_docs_register_table_is_up_to_date():
    doc = (REPO / "docs" / "dsu.md").read_text()
    for begin, end, table in regmap.DOC_TABLES:
        m = re.search(re.escape(begin) + "(.*?)" + re.escape(end), doc, re.S)
        assert m, f"docs/dsu.md lacks the generated table markers {begin.strip()} ... {end}"
        assert m.group(1) == table(), \
            f"docs/dsu.md {table.__name__} is stale: python -m tricut.rtl.dsu.regmap " \
            "--update-doc docs/dsu.md"


def test_profile_codes_and_config_block_are_pinned():
    """The codes derived from models/dsu.PROFILES and the config block the firmware and the
    loader share: today's values (the RTL, the firmware image and the docs depend on them)."""
    assert {p.name: int(p) for p in regmap.Profile} == \
        {"LATENCY_OPT": 0, "THROUGHPUT_OPT": 1, "FAIRNESS_OPT": 2}
    assert regmap.PROFILE_CODE == {"latency-opt": 0, "throughput-opt": 1, "fairness-opt": 2}
    assert tuple(regmap.PROFILE_CODE) == PROFILES
    assert regmap.CONFIG_MAGIC == 0x44535543
    assert [(f.name, f.ctype, int(f.default)) for f in regmap.CONFIG_STRUCT] == [
        ("magic", "uint32_t", 0x44535543), ("profile", "uint32_t", 1),
        ("max_batch", "uint32_t", 64), ("latency_batch", "uint32_t", 16),
        ("kv_capacity", "uint32_t", 1 << 20), ("long_ctx", "uint32_t", 4096),
        ("max_retries", "uint32_t", 2), ("watchdog_limit", "uint32_t", 100000),
        ("heartbeat_limit", "uint32_t", 200000), ("park_policy", "uint32_t", 0),
        ("sessions", "uint32_t", 0)]
    assert regmap.PARK_POLICY_CODE == {"keep": 0, "park": 1, "park-early": 2, "drop": 3}
    assert CONFIG_FIELDS == tuple(f.name for f in regmap.CONFIG_STRUCT)


# -- fault specs -------------------------------------------------------------------------------
def test_parse_faults():
    assert parse_faults("error:slot=3:step=5,timeout:slot=7:step=2,hang:cycle=20000") == [
        Fault("error", slot=3, step=5), Fault("timeout", slot=7, step=2),
        Fault("hang", cycle=20000)]
    assert parse_faults("") == []
    got = parse_faults("badcomp:step=4:slot=1,mmio:cycle=7000,mmio:cycle=9000")
    assert got == [Fault("badcomp", slot=1, step=4), Fault("mmio", cycle=7000),
                   Fault("mmio", cycle=9000)]
    assert [str(f) for f in got] == ["badcomp:slot=1:step=4", "mmio:cycle=7000",
                                     "mmio:cycle=9000"]


@pytest.mark.parametrize("text, part", [
    ("eror:slot=1:step=2", "eror:slot=1:step=2"),
    ("error:slot=1", "missing step"),
    ("error:slot=1:step=x", "'step=x'"),
    ("hang:slot=3", "hang takes cycle"),
    ("error:slot=1:step=2,error:step=2:slot=1", "already given"),
    ("error:slot=1:slot=2:step=1", "slot given twice"),
    ("error:slot=1:step=2,,hang:cycle=3", "empty item"),
])
def test_parse_faults_rejects_bad_parts(text, part):
    with pytest.raises(ValueError, match=re.escape(part)):
        parse_faults(text)


def test_run_dsu_rejects_bad_arguments():
    reqs = [RequestSpec(0, 4, 2)]
    with pytest.raises(ValueError, match="profile"):
        run_dsu(reqs, "fast-opt", sim="amaranth")
    with pytest.raises(ValueError, match="sim"):
        run_dsu(reqs, sim="iverilog")
    with pytest.raises(ValueError, match="request 9"):
        run_dsu([RequestSpec(9, 4, 2, priority=4)], sim="amaranth")
    with pytest.raises(ValueError, match="fault error:slot=9:step=0: slot 9 >= n_slots 4"):
        run_dsu(reqs, faults="error:slot=9:step=0", sim="amaranth", n_slots=4)
    with pytest.raises(ValueError, match="n_slots"):
        SlotArbiter(n_slots=0)
    with pytest.raises(ValueError, match="n_cores"):
        DsuCluster(n_cores=5)


# -- the arbiter alone, programmed from Python by the golden model -------------------------------
class ArbiterBench:
    """Drives a SlotArbiter's MMIO port like the firmware would, with decisions taken from
    :class:`DsuModel`; a background process plays the CDU/TE (random backpressure, completions
    after 1..5 cycles, errors, and silence for timeouts)."""

    def __init__(self, dut, ctx, rng):
        self.dut, self.ctx, self.rng = dut, ctx, rng

    async def access(self, off, wdata=None):
        ctx, bus = self.ctx, self.dut.bus
        ctx.set(bus.addr, 0x8000_0000 + off)
        ctx.set(bus.we, wdata is not None)
        ctx.set(bus.wdata, wdata or 0)
        ctx.set(bus.valid, 1)
        assert ctx.get(bus.ready)
        value = ctx.get(bus.rdata)
        await ctx.tick()
        ctx.set(bus.valid, 0)
        return value

    async def write(self, name, value, expect=Status.OK, index=0):
        await self.access(OFF[name] + 4 * index, value)
        status = await self.access(OFF["CMD_STATUS"])
        assert status == expect, f"{name} <- {value}: status {Status(status).name}"

    async def slot(self, s, field):
        return await self.access(SLOT_BASE + s * SLOT_STRIDE + 4 * SLOT_FIELD[field])


def _arbiter_sim(n_slots, body, consumer_faults, seed):
    dut = SlotArbiter(n_slots=n_slots, intake_depth=4, n_harts=1)
    rng = random.Random(seed)
    seen = {"descriptors": [], "outcomes": []}

    async def consumer(ctx):
        pending = []
        cycle = 0
        while True:
            ctx.set(dut.descriptors.ready, rng.random() < 0.7)
            due = [p for p in pending if p[0] <= cycle]
            cur = min(due) if due and rng.random() < 0.8 else None
            ctx.set(dut.completions.valid, cur is not None)
            if cur:
                ctx.set(dut.completions.payload.slot, cur[1])
                ctx.set(dut.completions.payload.result, cur[2])
            ctx.set(dut.outcomes.ready, rng.random() < 0.8)
            if ctx.get(dut.descriptors.valid) and ctx.get(dut.descriptors.ready):
                p = ctx.get(dut.descriptors.payload)
                d = Descriptor(p.step, p.slot, p.request, p.seq_len, p.priority, p.residency)
                seen["descriptors"].append(d)
                result = consumer_faults.get((d.step, d.slot), OK)
                if result != TIMEOUT:
                    pending.append((cycle + rng.randint(1, 5), d.slot, 0 if result == OK else 1))
            if cur and ctx.get(dut.completions.ready):
                pending.remove(cur)
            if ctx.get(dut.outcomes.valid) and ctx.get(dut.outcomes.ready):
                o = ctx.get(dut.outcomes.payload)
                seen["outcomes"].append((o.request, o.status, o.tokens, o.reason, o.step))
            await ctx.tick()
            cycle += 1

    async def bench(ctx):
        ctx.set(dut.count_en, 1)
        await body(ArbiterBench(dut, ctx, rng), ctx, dut, seen)

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(consumer, background=True)
    sim.add_testbench(bench)
    sim.run()
    return seen


@pytest.mark.parametrize("profile, seed", [("latency-opt", 1), ("throughput-opt", 2),
                                           ("fairness-opt", 3)])
def test_arbiter_follows_golden_model(profile, seed):
    """Admission and batch taken from the model; the arbiter's descriptors, records, rollbacks,
    watchdog timeouts and outcomes must match it round by round."""
    rng = random.Random(seed)
    n_slots = 4
    params = DsuParams(profile=profile, n_slots=n_slots, max_batch=3, latency_batch=2,
                       kv_capacity_tokens=200, long_context_tokens=32, max_retries=1)
    reqs = [RequestSpec(i, rng.choice([3, 9, 30, 60, 250]), rng.randint(1, 4),
                        arrival_step=rng.randint(0, 4), priority=rng.randint(0, 3))
            for i in range(10)]
    faults = {}
    for _ in range(8):
        faults[(rng.randint(0, 12), rng.randrange(n_slots))] = rng.choice([ERROR, TIMEOUT])
    todo = sorted(reqs, key=lambda r: (r.arrival_step, r.id))
    rounds = {"n": 0}

    async def body(b, ctx, dut, seen):
        await b.write("MAX_RETRIES", params.max_retries)
        await b.write("LONG_CTX", params.long_context_tokens)
        await b.write("WATCHDOG_LIMIT", 30)
        model = DsuModel(params)
        pushed = 0
        known = set()
        k = 0
        while k < len(todo) or not model.idle:
            while k < len(todo) and todo[k].arrival_step <= model.round:
                model.submit(todo[k])
                k += 1
            before = dict(model.outcomes)
            batch = model.step().batch
            # the intake FIFO: push what the model has taken in this round, in FIFO order
            new = [(i, s) for i, s in enumerate(model.slots) if s and s.request not in known]
            rejected = [r for r in model.outcomes if r not in before]
            for rid in sorted([s.request for _i, s in new] + rejected,
                              key=lambda r: [t.id for t in todo].index(r)):
                r = next(t for t in todo if t.id == rid)
                ctx.set(dut.intake.payload.request, r.id)
                ctx.set(dut.intake.payload.prompt, r.prompt_tokens)
                ctx.set(dut.intake.payload.max_new, r.max_new_tokens)
                ctx.set(dut.intake.payload.priority, r.priority)
                ctx.set(dut.intake.payload.arrival, r.arrival_step)
                ctx.set(dut.intake.valid, 1)
                while not ctx.get(dut.intake.ready):
                    await ctx.tick()
                await ctx.tick()
                ctx.set(dut.intake.valid, 0)
                pushed += 1
                while not await b.access(OFF["STATUS"]) & 4:      # INTAKE_VALID
                    pass
                if rid in rejected:
                    await b.write("REJECT", regmap.Reason.TOO_LARGE)
                else:
                    slot, s = next((i, s) for i, s in new if s.request == rid)
                    await b.write("ADMIT_SEQ", s.arrival_seq)
                    await b.write("ADMIT", slot)
                    known.add(rid)
            mask = sum(1 << d.slot for d in batch)
            await b.write("BATCH", mask)
            n_desc = len(seen["descriptors"])
            await b.write("ISSUE", 1)
            while ctx.get(dut.round) == model.round:
                await ctx.tick()
            got = seen["descriptors"][n_desc:]
            assert got == batch, f"round {model.round}: {got} != {batch}"
            model.complete({d.slot: faults[(model.round, d.slot)] for d in batch
                            if (model.round, d.slot) in faults})
            for i, s in enumerate(model.slots):
                state = await b.slot(i, "STATE")
                if s is None:
                    assert state == regmap.SlotState.FREE, (model.round, i)
                    continue
                assert state == regmap.SlotState.ACTIVE
                for field, want in (("SEQ_LEN", s.seq_len), ("TOKENS_LEFT", s.tokens_left),
                                    ("WAIT", s.wait), ("RETRIES", s.retries),
                                    ("CHECKPOINT", s.checkpoint), ("GENERATED", s.generated),
                                    ("REQUEST", s.request), ("ARRIVAL_SEQ", s.arrival_seq)):
                    assert await b.slot(i, field) == want, (model.round, i, field)
        for _ in range(20):
            await ctx.tick()
        reason = {"": 0, "too large": 1, "error: retries exhausted": 2,
                  "timeout: retries exhausted": 3}
        want = sorted((o.request, int(o.status == "failed"), o.tokens, reason[o.reason], o.step)
                      for o in model.outcomes.values())
        assert sorted(seen["outcomes"]) == want
        assert await b.access(OFF["ROLLBACKS"]) == model.rollbacks
        assert await b.access(OFF["TIMEOUTS"]) == model.timeouts
        assert await b.access(OFF["DESCRIPTORS"]) == len(seen["descriptors"])
        assert await b.access(OFF["BAD_ACCESSES"]) == 0
        rounds["n"] = model.round

    seen = _arbiter_sim(n_slots, body, faults, seed)
    assert rounds["n"] > 5 and len(seen["outcomes"]) == len(reqs)
    assert any(o[1] for o in seen["outcomes"])          # some failures were exercised


def test_arbiter_rejects_bad_accesses_and_counts():
    async def body(b, ctx, dut, seen):
        assert await b.access(OFF["ID"]) == DSU_ID
        assert await b.access(OFF["N_SLOTS"]) == 4
        for name in ("PROFILE", "MAX_RETRIES", "WATCHDOG_LIMIT", "LONG_CTX", "HEARTBEAT_LIMIT",
                     "ADMIT_SEQ"):       # reset values: regmap's (HEARTBEAT_LIMIT: armed)
            assert await b.access(OFF[name]) == BY_NAME[name].reset, name
        await b.write("PROFILE", 3, Status.BAD_PROFILE)
        assert await b.access(OFF["PROFILE"]) == 0            # unchanged
        await b.write("PROFILE", 2)
        await b.access(0x1F0, 5)                               # unknown (write)
        assert await b.access(OFF["CMD_STATUS"]) == Status.BAD_ADDR
        assert await b.access(0x1F4) == 0                      # unknown (read)
        assert await b.access(OFF["CMD_STATUS"]) == Status.BAD_ADDR
        await b.write("ADMIT", 4, Status.BAD_SLOT)
        await b.write("ADMIT", 0, Status.INTAKE_EMPTY)
        assert await b.slot(4, "STATE") == 0
        assert await b.access(OFF["CMD_STATUS"]) == Status.BAD_SLOT
        await b.access(SLOT_BASE + 4 * 12, 1)                   # field 12 does not exist
        assert await b.access(OFF["CMD_STATUS"]) == Status.READ_ONLY
        assert await b.access(SLOT_BASE + 4 * 13) == 0
        assert await b.access(OFF["CMD_STATUS"]) == Status.BAD_ADDR
        await b.write("ROUND", 1, Status.READ_ONLY)
        await b.write("BATCH", 1 << 4, Status.BAD_VALUE)
        await b.write("BATCH", 1, Status.OK)
        await b.write("ISSUE", 1, Status.BAD_BATCH)            # slot 0 is FREE
        await b.write("BATCH", 0)
        await b.write("BATCH", 1, Status.BAD_VALUE, index=1)
        await b.write("MAX_RETRIES", 16, Status.BAD_VALUE)
        await b.write("WATCHDOG_LIMIT", 0, Status.BAD_VALUE)
        await b.write("REJECT", 4, Status.BAD_VALUE)
        await b.write("REJECT", 1, Status.INTAKE_EMPTY)
        assert await b.access(OFF["BAD_ACCESSES"]) == 16
        # an empty round still completes and counts
        await b.write("ISSUE", 1)
        await b.write("ISSUE", 1, Status.BUSY)
        for _ in range(8):
            await ctx.tick()
        assert await b.access(OFF["ROUND"]) == 1
        # heartbeat watchdog: degraded after HEARTBEAT_LIMIT idle cycles, slots kept
        await b.write("HEARTBEAT", 0)
        await b.write("HEARTBEAT_LIMIT", 40)
        for _ in range(26):
            await ctx.tick()
        assert not ctx.get(dut.degraded)
        for _ in range(20):
            await ctx.tick()
        assert ctx.get(dut.degraded)
        assert await b.access(OFF["STATUS"]) & 2

    _arbiter_sim(4, body, {}, 0)


# -- the cluster running the firmware, Amaranth simulator ---------------------------------------
def test_cluster_firmware_matches_golden_amaranth():
    rng = random.Random(5)
    reqs = random_requests(rng, 5) + [RequestSpec(99, 500, 4, arrival_step=1)]   # too large
    res = run_dsu(reqs, "throughput-opt", cores=1, sim="amaranth", n_slots=4, max_batch=2,
                  kv_capacity_tokens=300, long_context_tokens=32,
                  faults="error:slot=1:step=2,timeout:slot=0:step=3", watchdog_limit=100)
    assert res.differences == []
    assert res.outcomes[99].reason == "too large"
    assert res.counters["rollbacks"] == 2 and res.counters["timeouts"] == 1
    assert len(res.batches) == len(res.golden_batches) > 3
    assert res.latencies and all(x["cycles"] > 0 for x in res.latencies)


def test_bad_profile_in_config_stops_firmware_and_degrades_amaranth():
    res = run_dsu([RequestSpec(0, 4, 2)], "latency-opt", sim="amaranth", n_slots=4,
                  config_overrides={"profile": 3}, heartbeat_limit=1500, max_cycles=20_000)
    assert res.fw_error == (2 << 8) | Status.BAD_PROFILE          # E_PROFILE, BAD_PROFILE
    assert res.degraded_cycle is not None
    assert any("degraded without an injected hang" in d for d in res.differences)
    assert res.counters["bad_accesses"] == 1


def test_comparison_reports_differences():
    g = [[Descriptor(0, 0, 1, 5, 0, 0)], [Descriptor(1, 0, 1, 6, 0, 0)]]
    from tricut.models.dsu import Outcome
    go = {1: Outcome(1, "completed", 2, "", 1)}
    assert compare(g, go, g, go) == []
    bad = [g[0], [Descriptor(1, 1, 1, 6, 0, 0)]]
    assert "round 1" in compare(bad, go, g, go)[0]
    assert "request 1" in compare(g, {1: Outcome(1, "failed", 1, "error", 1)}, g, go)[0]
    assert "round 2" in compare(g + [[]], go, g, go)[0]


def test_bad_mmio_writes_rejected_by_firmware_amaranth():
    """Firmware on hart 0 makes bad accesses and records CMD_STATUS after each."""
    fw = build_dsu_firmware("mmio_test")
    spec = make_spec(fw, cores=2, n_slots=4, dump={"results": 19}, backpressure=False,
                     max_cycles=20_000)
    state = execute(spec, DsuCluster(n_cores=2, n_slots=4, mem_bytes=MEM_BYTES), "amaranth")
    S = Status
    expect = [S.BAD_ADDR, S.BAD_ADDR, S.OK, S.BAD_PROFILE, 2, S.BAD_SLOT, S.BAD_SLOT,
              S.READ_ONLY, S.READ_ONLY, S.BAD_VALUE, S.BAD_VALUE, S.INTAKE_EMPTY, S.BAD_VALUE,
              S.BAD_VALUE, S.OK, S.BAD_BATCH, S.OK, 13, 0]
    assert state["errors"] == []
    assert state["exit_code"] == len(expect)
    assert state["dump"]["results"] == [int(x) for x in expect]
    assert state["counters"]["bad_accesses"] == 13
    busy = state["counters"]["busy_cycles"]
    assert 0 < busy[1] < 500 < busy[0]     # hart 1: crt0 only, then it marks itself idle


# -- Verilator: random streams per profile, 1 and 4 cores, faults, hung firmware ---------------
#: the firmware's matrix on Verilator (sim/harness/unit_matrices.py): the suite runs two cases
#: (4 cores and 1), benchmarks/unit_matrices.py every profile x cores
FIRMWARE = MATRICES["dsu_firmware"]


@pytest.mark.parametrize("profile,cores,seed", FIRMWARE.in_tests, ids=FIRMWARE.ids())
def test_cluster_firmware_matches_golden_verilator(profile, cores, seed):
    FIRMWARE.check(profile, cores, seed)


def test_wrong_firmware_profile_is_caught_verilator():
    rng = random.Random(11)
    reqs = random_requests(rng, 10, arrival_span=3)
    res = run_dsu(reqs, "latency-opt", cores=1, sim="verilator", n_slots=8, max_batch=5,
                  latency_batch=3, kv_capacity_tokens=400, config_overrides={"profile": 2})
    assert res.differences and res.differences[0].startswith("round ")


def test_hung_firmware_degrades_and_host_finishes_verilator():
    rng = random.Random(21)
    reqs = random_requests(rng, 10, arrival_span=6)
    res = run_dsu(reqs, "fairness-opt", cores=4, sim="verilator", n_slots=8, max_batch=3,
                  kv_capacity_tokens=400, faults="hang:cycle=9000,error:slot=2:step=6",
                  heartbeat_limit=6000, seed=21)
    assert res.degraded_cycle is not None
    assert 0 < res.rounds_rtl < len(res.golden_batches)       # both firmware and host ran
    assert res.differences == [], res.differences[:5]
    assert all(o.status == "completed" for o in res.outcomes.values())


# -- the MMIO interconnect -----------------------------------------------------------------------
def test_mmio_interconnect_round_robin_and_routing():
    """Three initiators with random requests (held until ready) and a target with random wait
    states: every request reaches the target once, unchanged, with its hart tag; read data
    goes back to its initiator only; a waiting initiator is served before any other initiator
    is served twice."""
    from tricut.rtl.dsu.mmio import MmioInterconnect
    harts = [0, 1, 4]
    dut = MmioInterconnect(harts)
    rng = random.Random(7)
    served, done, waiting_at = [], {i: [] for i in range(3)}, []

    async def initiator(ctx, i):
        port = dut.initiators[i]
        for k in range(25):
            for _ in range(rng.randint(0, 3)):
                await ctx.tick()
            addr, we = 0x8000_0000 + 4 * rng.randrange(64), rng.random() < 0.5
            ctx.set(port.addr, addr)
            ctx.set(port.we, we)
            ctx.set(port.wdata, (i << 16) | k)
            ctx.set(port.valid, 1)
            while True:
                ready, rdata = ctx.get(port.ready), ctx.get(port.rdata)
                await ctx.tick()
                if ready:
                    break
            ctx.set(port.valid, 0)
            done[i].append((addr, we, (i << 16) | k, rdata))

    async def target(ctx):
        t = dut.target
        waits = 0
        while True:
            ctx.set(t.ready, 0)
            if ctx.get(t.valid):
                if waits == 0:
                    waits = rng.choice([1, 1, 2, 4])
                waits -= 1
                if waits == 0:
                    ctx.set(t.ready, 1)
                    hart, addr = ctx.get(t.hart), ctx.get(t.addr)
                    ctx.set(t.rdata, (hart << 24) | (addr & 0xFFFF))
                    waiting = {j for j in range(3) if ctx.get(dut.initiators[j].valid)}
                    served.append((harts.index(hart), addr, ctx.get(t.we), ctx.get(t.wdata)))
                    waiting_at.append(waiting - {harts.index(hart)})
            await ctx.tick()

    def make(i):
        async def run(ctx):
            await initiator(ctx, i)
        return run

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(target, background=True)
    for i in range(3):
        sim.add_testbench(make(i))
    sim.run()
    for i in range(3):
        assert len(done[i]) == 25
        mine = [s for s in served if s[0] == i]
        assert [(a, w, d) for _i, a, w, d in mine] == [(a, w, d) for a, w, d, _r in done[i]]
        assert all(r == (harts[i] << 24) | (a & 0xFFFF) for a, _w, _d, r in done[i])
    # round robin: an initiator waiting while another is served is served before that other
    # initiator is served again
    order = [s[0] for s in served]
    for k, (i, waiting) in enumerate(zip(order, waiting_at)):
        nxt = next((m for m in range(k + 1, len(order)) if order[m] == i), len(order))
        for j in waiting:
            assert j in order[k + 1:nxt + 1] or nxt == len(order), \
                f"initiator {j} waited while {i} was served twice (services {k}, {nxt})"


# -- the heartbeat watchdog is armed from reset ---------------------------------------------------
def test_heartbeat_limit_reset_covers_the_boot_of_both_firmware_builds():
    """HEARTBEAT_LIMIT's reset value (regmap: the RTL's init, the header, docs) is at least
    three times the boot of both firmware builds (13.5x and 3.59x; the session queues are in
    .noinit, not cleared). Boot = the cores' release
    to the firmware's first HEARTBEAT_LIMIT write: crt0 clears .bss at 9 cycles a word, then
    main needs 78 cycles (measured on the RTL: ``fw_boot_cycles``, asserted in the Verilator
    test below)."""
    from tricut.rtl.dsu.regmap import HEARTBEAT_LIMIT_RESET
    from tricut.sim.harness.dsu import BOOT_CYCLES
    assert BY_NAME["HEARTBEAT_LIMIT"].reset == HEARTBEAT_LIMIT_RESET == 1 << 16
    assert f"#define DSU_HEARTBEAT_LIMIT_RESET {HEARTBEAT_LIMIT_RESET}u" in regmap.c_header()
    assert "Reset: 65,536." in regmap.markdown_table()
    for slots in (64, 256):
        fw = build_dsu_firmware("scheduler", max_slots=slots)
        words = (fw.symbols["__bss_end"] - fw.symbols["__bss_start"]) // 4
        assert 9 * words + 78 == BOOT_CYCLES[slots], (slots, words)
        assert 3 * BOOT_CYCLES[slots] <= HEARTBEAT_LIMIT_RESET


@pytest.mark.parametrize("where", ["before_start", "after_boot"])
def test_firmware_hang_before_it_arms_its_limit_degrades_verilator(where):
    """``hang:cycle=0``: the firmware never runs an instruction; ``after_boot``: it has run crt0
    and recorded its boot time but hangs before it writes HEARTBEAT_LIMIT. Either way the
    watchdog, armed from reset, degrades the unit after the reset limit, the host takes over
    from round 0 and the schedule is the golden one (before: the run ended after 2 M cycles,
    ~400 s, as a difference with no outcomes)."""
    from tricut.rtl.dsu.regmap import HEARTBEAT_LIMIT_RESET
    from tricut.sim.harness.dsu import BOOT_CYCLES
    rng = random.Random(21)
    reqs = random_requests(rng, 10, arrival_span=6)
    hang = 0 if where == "before_start" else BOOT_CYCLES[64] + 9
    res = run_dsu(reqs, "fairness-opt", cores=1, sim="verilator", n_slots=8, max_batch=3,
                  kv_capacity_tokens=400, faults=f"hang:cycle={hang}", seed=21)
    assert res.differences == [], res.differences[:5]
    assert res.faults_fired == [f"hang:cycle={hang}"] and res.faults_not_fired == []
    assert res.hang_cycle == hang
    assert res.boot_cycles == (0 if hang == 0 else BOOT_CYCLES[64])
    assert res.counters["heartbeat_limit"] == HEARTBEAT_LIMIT_RESET     # never written
    assert HEARTBEAT_LIMIT_RESET < res.degraded_cycle < HEARTBEAT_LIMIT_RESET + hang + 2_000
    assert res.rounds_rtl == 0 and len(res.batches) == len(res.golden_batches)
    assert set(res.outcomes) == {r.id for r in reqs}
    assert all(o.status == "completed" and o.tokens == r.max_new_tokens
               for r in reqs for o in [res.outcomes[r.id]])


# -- plans: golden schedule, faults that cannot fire, budgets --------------------------------------
def test_plan_golden_equals_the_model_and_reports_faults_that_cannot_fire():
    from tricut.models.dsu import run_schedule
    from tricut.sim.harness.dsu import plan_dsu
    rng = random.Random(3)
    reqs = random_requests(rng, 12, arrival_span=5)
    spec = "error:slot=0:step=0,error:slot=3:step=0,timeout:slot=1:step=400,hang:cycle=9"
    plan = plan_dsu(reqs, "latency-opt", n_slots=4, faults=spec)
    assert (plan.golden_batches, plan.golden_outcomes) == run_schedule(
        reqs, plan.params, plan.step_faults)
    assert [d.slot for d in plan.golden_batches[0]] == [0]        # latency-opt, cap 1
    assert [(str(f), why) for f, why in plan.faults_not_fired] == [
        ("error:slot=3:step=0", "round 0 has no descriptor for slot 3"),
        ("timeout:slot=1:step=400", f"the schedule has {plan.rounds} rounds")]
    with pytest.raises(ValueError, match=r"^fault error:slot=3:step=0 cannot fire: round 0 "
                                         r"has no descriptor for slot 3 \(\+1 more: "
                                         r"timeout:slot=1:step=400\) \[--faults-strict\]$"):
        plan_dsu(reqs, "latency-opt", n_slots=4, faults=spec, faults_strict=True)
    assert 0.5 < plan.estimate_cycles / (BOOT_CYCLES_64 + 400 * plan.rounds) < 4
    assert plan.max_cycles == 2 * plan.estimate_cycles + 200_000


BOOT_CYCLES_64 = 4_866


def _cli_run(argv, capsys):
    import tricut.sim.cli as cli
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr()


def test_cli_reports_faults_that_did_not_fire_verilator(capsys):
    """A step fault on a (step, slot) that is never scheduled and a hang after the run's end
    are reported (text and --json); with --faults-strict the unfired hang fails the run (exit
    1, one line) -- a step fault that cannot fire is refused before the run (bad input)."""
    import json as _json
    faults = ("error:slot=0:step=1,error:slot=7:step=3,timeout:slot=1:step=2,hang:cycle=900000,"
              "badcomp:slot=2:step=3,mmio:cycle=8000")
    code, cap = _cli_run(["dsu", "run", "--faults", faults, "--json"], capsys)
    assert code == 0, cap.err
    data = _json.loads(cap.out)
    assert data["differences"] == []
    assert data["faults_requested"] == faults.split(",")
    assert data["faults_fired"] == ["error:slot=0:step=1", "timeout:slot=1:step=2",
                                    "badcomp:slot=2:step=3", "mmio:cycle=8000"]
    assert [x["fault"] for x in data["faults_not_fired"]] == ["error:slot=7:step=3",
                                                              "hang:cycle=900000"]
    assert data["faults_not_fired"][0]["why"] == "round 3 has no descriptor for slot 7"
    assert data["faults_not_fired"][1]["why"].startswith("the run ended at cycle ")
    assert data["counters"]["rollbacks"] == 2 and data["counters"]["timeouts"] == 1
    # the duplicate completion was counted and ignored; the host's 10 bad accesses were each
    # rejected with its own CMD_STATUS while the firmware kept scheduling (one CMD_STATUS
    # per initiator: with a shared one the firmware read the host's rejection and stopped)
    assert data["counters"]["bad_completions"] == 1 and data["counters"]["bad_accesses"] == 10
    assert data["degraded_cycle"] is None and data["fw_error"] == 0
    code, cap = _cli_run(["dsu", "run", "--faults", "error:slot=0:step=1,hang:cycle=900000",
                          "--faults-strict"], capsys)
    assert code == 1
    assert "faults: 2 requested, 1 fired (error:slot=0:step=1)" in cap.out
    assert "faults not fired (1): hang:cycle=900000: the run ended at cycle" in cap.out
    lines = without_notes(cap.err)       # a build over 10 s adds status notes
    assert len(lines) == 1 and lines[0].startswith(
        "tricut: error: fault hang:cycle=900000 did not fire: the run ended at cycle"), cap.err


def test_cli_cycle_budget_stops_the_run_with_one_line_verilator(capsys):
    code, cap = _cli_run(["dsu", "run", "--max-cycles", "10000"], capsys)
    assert code == 1
    lines = without_notes(cap.err)
    assert len(lines) == 1 and lines[0].startswith(
        "tricut: error: stopped at the cycle budget (10,000 cycles, --max-cycles)"), cap.err
    assert "raise --max-cycles" in lines[0]


def test_cli_waves_window_and_progress_amaranth(tmp_path, capsys, monkeypatch):
    """--wave FILE.vcd --wave-window START:END on the Amaranth simulator: the file has the
    cluster's signals and only the window's times (the state at START first); on a terminal
    the progress line is drawn on stderr."""
    reqs = tmp_path / "r.jsonl"
    reqs.write_text('{"prompt_tokens": 10, "max_new_tokens": 2}\n'
                    '{"prompt_tokens": 20, "max_new_tokens": 1, "arrival_step": 1}\n')
    vcd = tmp_path / "run.vcd"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, cap = _cli_run(["dsu", "run", "--sim", "amaranth", "--requests", str(reqs),
                          "--wave", str(vcd), "--wave-window", "4000:4600"], capsys)
    assert code == 0, cap.err
    assert f"waves: {vcd}" in cap.out
    assert "[dsu amaranth]" in cap.err and "cycle " in cap.err and "\r" in cap.err
    text = vcd.read_text()
    head, body = text.split("$enddefinitions", 1)
    names = re.findall(r"\$var\s+\S+\s+\d+\s+\S+\s+(\S+)", head)
    assert len(names) > 200 and {"run", "degraded", "round"} <= set(names)
    scale = re.search(r"\$timescale\s+1\s*(\w+)", head).group(1)
    unit = {"ps": 1000, "ns": 1, "fs": 10 ** 6}[scale]            # per ns; clock 1 ns
    times = [int(t) for t in re.findall(r"^#(\d+)", body, re.M)]
    assert times and times == sorted(times)
    assert times[0] == round((4000 - 0.5) * unit) and times[-1] <= round((4600 - 0.5) * unit)
    assert len(times) > 500                                        # both clock edges per cycle
    assert not list(tmp_path.glob(".run.vcd*"))                    # no temporary left behind


def test_cli_waves_fst_window_verilator(tmp_path, capsys):
    """--wave FILE.fst --wave-window on Verilator (a --trace build, converted by pylibfst):
    the file spans exactly the window's cycles (the cocotb clock is 1 ns) and has the
    cluster's ports."""
    import pylibfst      # a dependency (pyproject.toml): missing, the test errors
    from pylibfst import lib
    wave = tmp_path / "run.fst"
    code, cap = _cli_run(["dsu", "run", "--wave", str(wave), "--wave-window", "5000:5400"], capsys)
    assert code == 0, cap.err
    fst = lib.fstReaderOpen(str(wave).encode())
    try:
        scale = 10.0 ** lib.fstReaderGetTimescale(fst)
        t_first, t_last = lib.fstReaderGetStartTime(fst), lib.fstReaderGetEndTime(fst)
        _, signals = pylibfst.get_scopes_signals2(fst)
        names = {n.rsplit(".", 1)[-1].split(" ")[0] for n in signals.by_name}
    finally:
        lib.fstReaderClose(fst)
    assert {"clk", "run", "degraded", "round", "intake__valid"} <= names
    assert t_last - t_first == 400 * round(1e-9 / scale)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["run.fst"]
