"""Event-driven decode simulation over requests, at real sizes.

arrival -> prefill (disaggregated pool, ``StepModel.prefill_time``) -> the first token ->
admission by the DSU golden model -> one decode step per remaining token -> done. Batching
decisions come from :class:`tricut.models.dsu.DsuModel`, the same model the DSU RTL is checked
against; step times from :class:`tricut.sim.fast.timing.StepModel`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from tricut.models.dsu import DsuModel, DsuParams, RequestSpec, TIMEOUT

from .metrics import RequestTimes, summarise
from .timing import StepModel
from .workload import Request

__all__ = ["SimResult", "simulate"]


@dataclass
class SimResult:
    summary: dict
    steps: int
    step_times_s: np.ndarray
    step_end_s: np.ndarray
    step_hbm_bytes: np.ndarray
    step_floor_s: np.ndarray
    batch_sizes: np.ndarray
    outcomes: dict
    request_times: list[RequestTimes] = field(repr=False, default_factory=list)


def simulate(requests: list[Request], step_model: StepModel, dsu: DsuParams, seed: int = 0,
             degraded_at_s: float | None = None, faults: dict[tuple[int, int], str] | None = None,
             progress=None, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None
             ) -> SimResult:
    """Run the workload to completion. ``degraded_at_s``: from that time on the DSU is degraded
    and the host schedules (same decisions, host overheads). ``faults[(round, slot)]``: a step
    result of ``error`` or ``timeout`` (rolled back and retried by the DSU model)."""
    rng = np.random.default_rng(seed)
    faults = faults or {}
    model = DsuModel(dsu)
    times: dict[int, list[float]] = {}
    ready: list[tuple[float, int]] = []
    by_id = {r.id: r for r in requests}
    for r in requests:
        first = r.arrival_s + step_model.prefill_time(r.prompt_tokens)
        times[r.id] = [first]
        if r.output_tokens > 1:
            heapq.heappush(ready, (first, r.id))
    t = 0.0
    rows = {k: [] for k in ("dt", "end", "hbm", "floor", "batch")}
    busy = {"sm": 0.0, "te": 0.0, "cdu": 0.0, "sched": 0.0, "l2": 0.0, "l2_reuse": 0.0, "kv": 0.0}
    retired = 0    # requests whose slots the previous round's completions freed
    while ready or not model.idle:
        while ready and ready[0][0] <= t:
            _, rid = heapq.heappop(ready)
            r = by_id[rid]
            model.submit(RequestSpec(rid, r.prompt_tokens + 1, r.output_tokens - 1))
        rnd = model.step()
        batch = rnd.batch
        if not batch:
            model.complete()
            retired = 0
            if not ready:
                break
            t = max(t, ready[0][0])
            continue
        degraded = degraded_at_s is not None and t >= degraded_at_s
        st = step_model.step_time([d.seq_len for d in batch], [d.residency for d in batch], rng, degraded,
                                  rnd.active, dsu.cap, dsu.profile, rnd.admitted, retired,
                                  rnd.blocked, dsu.n_slots)
        t += st.time_s
        results = {d.slot: faults[(rnd.number, d.slot)] for d in batch if (rnd.number, d.slot) in faults}
        if any(v == TIMEOUT for v in results.values()):
            t += step_model.assumptions.host_sched_s  # the watchdog fires after a step's worth
        retired = len(model.complete(results))
        for d in batch:
            if d.slot not in results:
                times[d.request].append(t)
        rows["dt"].append(st.time_s)
        rows["end"].append(t)
        rows["hbm"].append(st.hbm_read_bytes + st.hbm_write_bytes)
        rows["floor"].append(st.floor_s)
        rows["batch"].append(len(batch))
        busy["sm"] += st.sm_busy_s
        busy["te"] += st.te_busy_s
        busy["cdu"] += st.cdu_busy_s
        busy["sched"] += st.sched_s
        busy["l2"] += st.l2_kv_bytes
        busy["l2_reuse"] += st.l2_reuse_bytes
        busy["kv"] += st.kv_read_bytes
        if progress is not None:
            progress(len(model.outcomes), len(requests))
    done = [RequestTimes(by_id[rid].arrival_s, tuple(ts)) for rid, ts in times.items()
            if rid not in model.outcomes or model.outcomes[rid].status == "completed"]
    summary = summarise(done, ttft_slo_s, tpot_slo_s).as_dict()
    dt = np.array(rows["dt"])
    hbm = np.array(rows["hbm"])
    floor = np.array(rows["floor"])
    decode_time = float(dt.sum())
    summary.update(
        failed=sum(1 for o in model.outcomes.values() if o.status == "failed"),
        steps=len(dt),
        hbm_gbps_mean=float(hbm.sum() / decode_time / 1e9) if decode_time else 0.0,
        hbm_gbps_peak=float((hbm / dt).max() / 1e9) if len(dt) else 0.0,
        l2_hit_rate=busy["l2"] / busy["kv"] if busy["kv"] else 0.0,
        l2_reuse_rate=busy["l2_reuse"] / busy["kv"] if busy["kv"] else 0.0,
        min_step_over_floor=float((dt / floor).min()) if len(dt) else float("nan"),
        sm_utilisation=busy["sm"] / decode_time if decode_time else 0.0,
        te_utilisation=busy["te"] / decode_time if decode_time else 0.0,
        cdu_utilisation=busy["cdu"] / decode_time if decode_time else 0.0,
        dsu_utilisation=(busy["sched"] / decode_time if decode_time and "dsu" in step_model.cuts else 0.0),
        mean_batch=float(np.mean(rows["batch"])) if rows["batch"] else 0.0,
        rollbacks=model.rollbacks,
        kv_tokens_leaked=model.kv_used,
        slots_in_use_at_end=model.occupied_slots,
    )
    summary["requests"] = len(requests)
    return SimResult(summary, len(dt), dt, np.array(rows["end"]), hbm, floor,
                     np.array(rows["batch"]), dict(model.outcomes), done)
