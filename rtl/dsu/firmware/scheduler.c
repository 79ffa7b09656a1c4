/* DSU scheduler firmware: the decisions of models/dsu.py (DsuModel), one round at a time.
 *
 * Hart 0 schedules; other harts mark themselves idle and spin in local memory (they take
 * no MMIO bandwidth from hart 0). The slot arbiter keeps the slot records, emits the
 * descriptors, applies completions/timeouts (rollback, bounded retry) and reports every
 * request that ends; the firmware decides admission, the batch and the too-large failures.
 *
 * One round (round r):
 *   1. intake: while the intake head has arrival <= r: too large -> REJECT; else admit into
 *      the lowest free slot if the KV budget allows (strict FIFO: stop at the first that
 *      does not fit);
 *   2. selection: up to cap active slots by the profile's key (smallest first; the keys are
 *      unique because arrival order is; a bounded max-heap), written to BATCH[], then ISSUE;
 *   3. wait until ROUND = r + 1, then read ENDED / ROLLED_BACK (one word per 32 slots) and
 *      update the firmware's mirror of the slots (seq_len, freed slots, KV budget).
 * The firmware ends (returns 0) when the source has pushed everything (STATUS.INTAKE_END),
 * the intake is empty and no slot is active: ROUND is then the number of rounds.
 *
 * Parked slots (sessions; models/dsu.py, docs/dsu.md "Parked slots"): a request admitted
 * with `continues` parks when its tokens run out (the arbiter sets the slot PARKED and
 * reports the turn completed); collect() applies `park_policy` (keep: the reservation shrinks
 * to seq_len; park/park-early: the KV goes to G2, a park MOVE; drop: a drop MOVE and FREE).
 * With `sessions` set, each round starts by waiting for HOST_ROUND > r while draining the
 * host command FIFO into two software FIFOs (restores, continues), which are served before
 * the intake exactly as DsuModel._serve_restores / _serve_continues. The run then ends when
 * the host has ended too (HOST_ROUND = END) and no slot is occupied (active or parked).
 *
 * The host patches `dsu_config` in the image before loading it (struct dsu_config, its magic
 * and defaults are generated into dsu_regs.h from rtl/dsu/regmap.py). Any unexpected
 * CMD_STATUS stops the firmware with `fw_error` = (step << 8) | status: the heartbeat stops
 * and the arbiter's DEGRADED bit hands scheduling to the host.
 */
#include <stdint.h>
#include "dsu_regs.h"

#ifndef MAX_SLOTS
#define MAX_SLOTS 64u   /* -DMAX_SLOTS=256 for the largest arbiter */
#endif

__attribute__((used)) volatile struct dsu_config dsu_config = DSU_CONFIG_DEFAULTS;
__attribute__((used)) volatile uint32_t fw_error = 0;
__attribute__((used)) volatile uint32_t fw_rounds = 0;
/* mcycle (cycles since the cores' release) just before HEARTBEAT_LIMIT is written: the boot
 * time the arbiter's reset value of HEARTBEAT_LIMIT must cover (docs/dsu.md) */
__attribute__((used)) volatile uint32_t fw_boot_cycles = 0;

static uint32_t n_slots, profile, cap, kv_capacity, kv_used, arrivals, round_no, n_active;
static uint32_t sessions, park_policy, n_occupied, host_end;
/* act[0..n_active) = the active (selectable) slots in slot order; sel[0..n_sel) = this
 * round's batch; active[] = the slot is occupied (active or parked) */
static uint8_t active[MAX_SLOTS], priority[MAX_SLOTS], act[MAX_SLOTS], sel[MAX_SLOTS];
static uint8_t parked[MAX_SLOTS], cont[MAX_SLOTS], in_g2[MAX_SLOTS];
/* not cleared by crt0 (.noinit: the boot stays well inside HEARTBEAT_LIMIT's reset value):
 * req_id[] is written at admission, the queues below their counts */
#define NOINIT __attribute__((section(".noinit")))
static NOINIT uint16_t req_id[MAX_SLOTS];
/* the host's commands, FIFO, by slot (at most one restore and one continue per parked slot:
 * the model refuses a second) */
#define QLEN MAX_SLOTS
static NOINIT uint8_t rq[QLEN], cq_slot[QLEN], cq_cont[QLEN];
static NOINIT uint16_t cq_max[QLEN];
static NOINIT uint32_t cq_new[QLEN];
static uint32_t rq_head, rq_n, cq_head, cq_n;
static uint32_t n_sel;
static uint32_t seq_len[MAX_SLOTS], arrival_seq[MAX_SLOTS], reserved[MAX_SLOTS];
static uint32_t wait_rounds[MAX_SLOTS];
static uint32_t cand[MAX_SLOTS];
static uint32_t done_mask[8], rb_mask[8];
/* selection keys: primary << 24 | arrival_seq (arrival_seq < 2^24, primary < 256: -priority
 * 0..3, |bucket - dominant| 0..31, 255 - wait where wait <= ceil(A/B) - 1 <= 255 under
 * fairness-opt for A <= 256 slots) -- unique, because arrival_seq is */
static uint32_t key[MAX_SLOTS];

enum { E_CONFIG = 1, E_PROFILE, E_MAX_RETRIES, E_WATCHDOG, E_LONG_CTX, E_HEARTBEAT,
       E_REJECT, E_ADMIT_SEQ, E_ADMIT, E_BATCH, E_ISSUE, E_ROUND, E_SLOTS, E_ARRIVALS,
       E_HCMD, E_HCMD_SLOT, E_MOVE, E_FREE, E_RESUME };

static int failed(uint32_t step, uint32_t status) {
    fw_error = (step << 8) | (status & 0xffu);
    DSU_CORE_IDLE = 1;
    return 1;
}

static inline uint32_t write_reg(volatile uint32_t *reg, uint32_t value) {
    *reg = value;
    return DSU_CMD_STATUS;
}

static inline void idle(uint32_t on) { DSU_CORE_IDLE = on; }

static void act_insert(uint32_t slot);

/* Wait until the intake has a head or the source has ended; returns STATUS. */
static uint32_t wait_intake(void) {
    uint32_t s = DSU_STATUS;
    if (!(s & (DSU_STATUS_INTAKE_VALID | DSU_STATUS_INTAKE_END))) {
        idle(1);
        do {
            DSU_HEARTBEAT = 0;
            s = DSU_STATUS;
        } while (!(s & (DSU_STATUS_INTAKE_VALID | DSU_STATUS_INTAKE_END)));
        idle(0);
    }
    return s;
}

/* floor(log2(v)) for v >= 1 (= bit_length(v) - 1), branch-light binary search */
static uint32_t log2_floor(uint32_t v) {
    uint32_t n = 0;
    if (v >> 16) { n += 16; v >>= 16; }
    if (v >> 8) { n += 8; v >>= 8; }
    if (v >> 4) { n += 4; v >>= 4; }
    if (v >> 2) { n += 2; v >>= 2; }
    if (v >> 1) { n += 1; }
    return n;
}

/* 1. intake: strict FIFO under the KV budget. Returns 0, or an error step. */
static int admit(void) {
    for (;;) {
        uint32_t s = wait_intake();
        if (!(s & DSU_STATUS_INTAKE_VALID)) return 0;
        if (DSU_INTAKE_ARRIVAL > round_no) return 0;
        uint32_t prompt = DSU_INTAKE_PROMPT, max_new = DSU_INTAKE_MAX_NEW;
        uint32_t need = prompt + max_new;
        if (need > kv_capacity) {
            uint32_t st;
            while ((st = write_reg(&DSU_REJECT, DSU_REASON_TOO_LARGE)) == DSU_ST_OUTCOME_FULL)
                DSU_HEARTBEAT = 0;
            if (st != DSU_ST_OK) return failed(E_REJECT, st);
            continue;
        }
        uint32_t slot = 0;
        while (slot < n_slots && active[slot]) slot++;
        if (slot == n_slots || kv_used + need > kv_capacity) return 0;
        if (arrivals >= (1u << 24)) return failed(E_ARRIVALS, 0);
        uint32_t st = write_reg(&DSU_ADMIT_SEQ, arrivals);
        if (st != DSU_ST_OK) return failed(E_ADMIT_SEQ, st);
        uint32_t prio = DSU_INTAKE_PRIORITY, rid = DSU_INTAKE_REQUEST;
        st = write_reg(&DSU_ADMIT, slot);
        if (st != DSU_ST_OK) return failed(E_ADMIT, st);
        active[slot] = 1;
        act_insert(slot);
        seq_len[slot] = prompt;
        priority[slot] = prio;
        req_id[slot] = (uint16_t)rid;
        parked[slot] = 0;
        in_g2[slot] = 0;
        n_occupied++;
        arrival_seq[slot] = arrivals++;
        wait_rounds[slot] = 0;
        reserved[slot] = need;
        kv_used += need;
        cont[slot] = sessions ? (uint8_t)DSU_SLOT(slot, DSU_SLOT_CONTINUES) : 0u;
    }
}

/* -- parked slots ------------------------------------------------------------------------ */
static void act_insert(uint32_t slot) {      /* into act[], kept in slot order */
    uint32_t j = n_active;
    while (j > 0 && act[j - 1] > slot) { act[j] = act[j - 1]; j--; }
    act[j] = (uint8_t)slot;
    n_active++;
}

static int move(uint32_t slot, uint32_t kind, uint32_t last) {
    uint32_t st;
    while ((st = write_reg(&DSU_MOVE, (last << 12) | (kind << 8) | slot)) == DSU_ST_FIFO_FULL)
        DSU_HEARTBEAT = 0;
    return st == DSU_ST_OK ? 0 : failed(E_MOVE, st);
}

static int free_slot(uint32_t slot, uint32_t reason) {
    uint32_t st;
    while ((st = write_reg(&DSU_FREE, (reason << 8) | slot)) == DSU_ST_OUTCOME_FULL)
        DSU_HEARTBEAT = 0;
    if (st != DSU_ST_OK) return failed(E_FREE, st);
    active[slot] = 0;
    parked[slot] = 0;
    kv_used -= reserved[slot];
    n_occupied--;
    return 0;
}

/* the parked slot holding request rid, or n_slots */
static uint32_t slot_of(uint32_t rid) {
    for (uint32_t i = 0; i < n_slots; i++)
        if (active[i] && parked[i] && req_id[i] == rid) return i;
    return n_slots;
}

/* Wait until the host has pushed everything for this round (HOST_ROUND > round_no), moving
 * the host command FIFO into the software FIFOs meanwhile, then once more. */
static int host_commands(void) {
    uint32_t hr = DSU_HOST_ROUND, waited = 0;
    for (;;) {
        while (DSU_STATUS & DSU_STATUS_HCMD_VALID) {
            uint32_t h0 = DSU_HCMD_HEAD0, h1 = DSU_HCMD_HEAD1, h2 = DSU_HCMD_HEAD2;
            uint32_t st = write_reg(&DSU_HCMD_POP, 1);
            if (st != DSU_ST_OK) return failed(E_HCMD, st);
            /* the command's slot: the session is parked from the command on until its
             * continue is served */
            uint32_t slot = slot_of(h0 & 0xffffu);
            if (slot == n_slots) return failed(E_HCMD_SLOT, h0 >> 16);
            if ((h0 >> 16) & 1u) {                       /* continue */
                if (cq_n == QLEN) return failed(E_HCMD, 0xff);
                uint32_t k = (cq_head + cq_n++) % QLEN;
                cq_slot[k] = (uint8_t)slot;
                cq_new[k] = h1;
                cq_max[k] = (uint16_t)h2;
                cq_cont[k] = (uint8_t)((h0 >> 17) & 1u);
            } else {                                     /* restore */
                if (rq_n == QLEN || !in_g2[slot]) return failed(E_HCMD, 0xfe);
                rq[(rq_head + rq_n++) % QLEN] = (uint8_t)slot;
            }
        }
        if (hr > round_no) break;        /* read before the drain: the drain got it all */
        if (!waited) { idle(1); waited = 1; }
        DSU_HEARTBEAT = 0;
        hr = DSU_HOST_ROUND;
    }
    if (waited) idle(0);
    host_end = hr == DSU_HOST_ROUND_END;
    return 0;
}

/* DsuModel._serve_restores: strict FIFO under the KV budget */
static int serve_restores(void) {
    while (rq_n) {
        uint32_t slot = rq[rq_head];
        if (kv_used + seq_len[slot] > kv_capacity) return 0;
        rq_head = (rq_head + 1) % QLEN;
        rq_n--;
        kv_used += seq_len[slot];
        reserved[slot] = seq_len[slot];
        in_g2[slot] = 0;
        if (move(slot, DSU_MOVE_RESTORE, 0)) return 1;
    }
    return 0;
}

/* DsuModel._serve_continues: strict FIFO; waits for its restore; too large -> failed */
static int serve_continues(void) {
    while (cq_n) {
        uint32_t k = cq_head, slot = cq_slot[k];
        if (in_g2[slot]) return 0;                       /* waits for its restore */
        uint32_t extra = cq_new[k] + cq_max[k];
        if (seq_len[slot] + extra > kv_capacity) {       /* can never fit */
            cq_head = (cq_head + 1) % QLEN;
            cq_n--;
            if (move(slot, DSU_MOVE_DROP, 0)) return 1;
            if (free_slot(slot, DSU_REASON_TOO_LARGE)) return 1;
            continue;
        }
        if (kv_used + extra > kv_capacity) return 0;
        if (arrivals >= (1u << 24)) return failed(E_ARRIVALS, 0);
        uint32_t st;
        if ((st = write_reg(&DSU_RESUME_NEW, cq_new[k])) != DSU_ST_OK) return failed(E_RESUME, st);
        if ((st = write_reg(&DSU_RESUME_MAX_NEW, cq_max[k])) != DSU_ST_OK)
            return failed(E_RESUME, st);
        if ((st = write_reg(&DSU_RESUME_CONT, cq_cont[k])) != DSU_ST_OK)
            return failed(E_RESUME, st);
        if ((st = write_reg(&DSU_ADMIT_SEQ, arrivals)) != DSU_ST_OK) return failed(E_ADMIT_SEQ, st);
        if ((st = write_reg(&DSU_RESUME, slot)) != DSU_ST_OK) return failed(E_RESUME, st);
        cq_head = (cq_head + 1) % QLEN;
        cq_n--;
        kv_used += extra;
        seq_len[slot] += cq_new[k];
        reserved[slot] += extra;
        cont[slot] = (uint8_t)cq_cont[k];
        parked[slot] = 0;
        wait_rounds[slot] = 0;
        arrival_seq[slot] = arrivals++;
        act_insert(slot);
    }
    return 0;
}

/* max-heap on key[0..n) (with cand[] alongside): move entry i down to its place */
static void sift_down(uint32_t n, uint32_t i) {
    for (;;) {
        uint32_t l = 2u * i + 1u, r = l + 1u, m = i;
        if (l < n && key[l] > key[m]) m = l;
        if (r < n && key[r] > key[m]) m = r;
        if (m == i) return;
        uint32_t tk = key[i], tc = cand[i];
        key[i] = key[m]; cand[i] = cand[m];
        key[m] = tk; cand[m] = tc;
        i = m;
    }
}

/* 2. selection: sel[] = up to cap active slots, smallest key first (the batch is a set:
 * the arbiter emits it in slot order). */
static void select(void) {
    uint32_t n = n_active;
    if (n <= cap) {
        for (uint32_t k = 0; k < n; k++) sel[k] = act[k];
        n_sel = n;
        return;
    }
    uint32_t dominant = 0;
    if (profile == DSU_PROFILE_THROUGHPUT_OPT) {
        uint32_t counts[32], lo = 31, hi = 0;
        for (uint32_t k = 0; k < n; k++) {
            uint32_t b = log2_floor(seq_len[act[k]]);
            key[k] = b;                                   /* the bucket, for now */
            if (b < lo) lo = b;
            if (b > hi) hi = b;
        }
        for (uint32_t b = lo; b <= hi; b++) counts[b] = 0;
        for (uint32_t k = 0; k < n; k++) counts[key[k]]++;
        dominant = lo;
        for (uint32_t b = lo + 1; b <= hi; b++)
            if (counts[b] > counts[dominant]) dominant = b;   /* ties: the smaller bucket */
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = act[k], primary;
        cand[k] = i;
        if (profile == DSU_PROFILE_LATENCY_OPT) {
            primary = 3u - priority[i];                       /* -priority */
        } else if (profile == DSU_PROFILE_FAIRNESS_OPT) {
            primary = 255u - wait_rounds[i];                  /* -wait */
        } else {
            uint32_t b = key[k];
            primary = b > dominant ? b - dominant : dominant - b;
        }
        key[k] = (primary << 24) | arrival_seq[i];
    }
    /* the cap smallest keys: a max-heap of the first cap entries, then every further key
     * smaller than the heap's maximum replaces it -- O(n log cap); keys are unique */
    for (uint32_t i = cap / 2; i-- > 0;) sift_down(cap, i);
    for (uint32_t k = cap; k < n; k++) {
        if (key[k] < key[0]) {
            key[0] = key[k];
            cand[0] = cand[k];
            sift_down(cap, 0);
        }
    }
    for (uint32_t k = 0; k < cap; k++) sel[k] = (uint8_t)cand[k];
    n_sel = cap;
}

static int issue(void) {
    uint32_t words = (n_slots + 31u) / 32u, mask[8];
    for (uint32_t w = 0; w < words; w++) mask[w] = 0;
    for (uint32_t k = 0; k < n_sel; k++) mask[sel[k] >> 5] |= 1u << (sel[k] & 31u);
    for (uint32_t w = 0; w < words; w++) {
        uint32_t st = write_reg(&DSU_BATCH(w), mask[w]);
        if (st != DSU_ST_OK) return failed(E_BATCH, st);
    }
    uint32_t st = write_reg(&DSU_ISSUE, 1);
    if (st != DSU_ST_OK) return failed(E_ISSUE, st);
    if (profile == DSU_PROFILE_FAIRNESS_OPT) {       /* only fairness-opt's key uses wait */
        for (uint32_t k = 0; k < n_active; k++) {    /* +1 for all, 0 for the batch */
            uint32_t i = act[k];
            wait_rounds[i] += wait_rounds[i] < 255u;
        }
        for (uint32_t k = 0; k < n_sel; k++) wait_rounds[sel[k]] = 0;
    }
    return 0;
}

/* 3. wait for the round to end; ENDED / ROLLED_BACK say what happened to the batch:
 * ok -> seq_len + 1 (the arbiter did the same), rolled back -> unchanged, ended -> freed */
static int collect(void) {
    if (DSU_ROUND == round_no) {
        idle(1);
        do { DSU_HEARTBEAT = 0; } while (DSU_ROUND == round_no);
        idle(0);
    }
    if (DSU_ROUND != round_no + 1) return failed(E_ROUND, 0);
    uint32_t words = (n_slots + 31u) / 32u, freed = 0;
    /* throughput-opt's key and the sessions' reservations use seq_len */
    uint32_t track_seq = profile == DSU_PROFILE_THROUGHPUT_OPT || sessions;
    for (uint32_t w = 0; w < words; w++) {
        done_mask[w] = DSU_ENDED(w);
        rb_mask[w] = DSU_ROLLED_BACK(w);
    }
    for (uint32_t k = 0; k < n_sel; k++) {
        uint32_t i = sel[k], bit = 1u << (i & 31u);
        if (track_seq && !(rb_mask[i >> 5] & bit)) seq_len[i]++;
        if (done_mask[i >> 5] & bit) freed++;
    }
    if (!freed) return 0;
    /* the ended slots in slot order (the model's move order): completed with `continues`
     * -> parked by the policy, otherwise FREE */
    uint32_t j = 0;
    for (uint32_t k = 0; k < n_active; k++) {
        uint32_t i = act[k], bit = 1u << (i & 31u);
        if (!(done_mask[i >> 5] & bit)) { act[j++] = (uint8_t)i; continue; }
        if (cont[i] && !(rb_mask[i >> 5] & bit)) {       /* a turn ended: PARKED */
            parked[i] = 1;
            if (park_policy == DSU_PARK_KEEP) {
                kv_used -= reserved[i] - seq_len[i];
                reserved[i] = seq_len[i];
            } else if (park_policy == DSU_PARK_DROP) {
                if (move(i, DSU_MOVE_DROP, 1)) return 1;
                if (free_slot(i, 0)) return 1;
            } else {                                     /* park, park-early: to G2 */
                kv_used -= reserved[i];
                reserved[i] = 0;
                in_g2[i] = 1;
                if (move(i, DSU_MOVE_PARK, 1)) return 1;
            }
            continue;
        }
        active[i] = 0;                                   /* completed or failed: FREE */
        kv_used -= reserved[i];
        n_occupied--;
    }
    n_active = j;
    return 0;
}

static int schedule(void) {
    volatile struct dsu_config *c = &dsu_config;
    if (c->magic != DSU_CONFIG_MAGIC) return failed(E_CONFIG, 0);
    n_slots = DSU_N_SLOTS;
    if (n_slots == 0 || n_slots > MAX_SLOTS) return failed(E_SLOTS, 0);
    uint32_t st, now;
    __asm__ volatile("csrr %0, mcycle" : "=r"(now));
    fw_boot_cycles = now;
    /* the heartbeat limit first: any later failure then degrades the unit within it (until
     * this write the watchdog runs with the arbiter's reset limit, which covers the boot) */
    if ((st = write_reg(&DSU_HEARTBEAT_LIMIT, c->heartbeat_limit)) != DSU_ST_OK)
        return failed(E_HEARTBEAT, st);
    if ((st = write_reg(&DSU_PROFILE, c->profile)) != DSU_ST_OK) return failed(E_PROFILE, st);
    if ((st = write_reg(&DSU_MAX_RETRIES, c->max_retries)) != DSU_ST_OK)
        return failed(E_MAX_RETRIES, st);
    if ((st = write_reg(&DSU_WATCHDOG_LIMIT, c->watchdog_limit)) != DSU_ST_OK)
        return failed(E_WATCHDOG, st);
    if ((st = write_reg(&DSU_LONG_CTX, c->long_ctx)) != DSU_ST_OK) return failed(E_LONG_CTX, st);
    profile = c->profile;
    cap = profile == DSU_PROFILE_LATENCY_OPT ? c->latency_batch : c->max_batch;
    if (cap == 0) return failed(E_CONFIG, 0);
    kv_capacity = c->kv_capacity;
    sessions = c->sessions;
    park_policy = c->park_policy;
    if (sessions > 1 || park_policy > DSU_PARK_DROP) return failed(E_CONFIG, 1);
    for (;;) {
        DSU_HEARTBEAT = 0;
        if (sessions && host_commands()) return 1;
        uint32_t s = wait_intake();
        if (!(s & DSU_STATUS_INTAKE_VALID) && n_occupied == 0
            && (!sessions || (host_end && rq_n == 0 && cq_n == 0)))
            return 0;                                                  /* all done */
        if (sessions && (serve_restores() || serve_continues())) return 1;
        if (admit()) return 1;
        select();
        if (issue()) return 1;
        if (collect()) return 1;
        round_no++;
        fw_rounds = round_no;
    }
}

int main(void) {
    uint32_t hart;
    __asm__ volatile("csrr %0, mhartid" : "=r"(hart));
    if (hart != 0) {            /* helpers: idle, off the MMIO bus */
        DSU_CORE_IDLE = 1;
        for (;;) __asm__ volatile("wfi");
    }
    return schedule();
}
