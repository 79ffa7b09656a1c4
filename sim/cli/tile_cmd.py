"""`tricut tile run`: whole decode steps of a model whose attention runs on the decode tile's RTL
(attention path, Amaranth's simulator or Verilator), co-simulated with the golden decode step
(``sim/harness/tile/cosim.py``, ``docs/tile/cosim.md``).

Exit status: 0 when every attention output is bit-exact with the golden TE model and the tokens
are the golden decode step's, 1 on a difference (one ``tricut: error:`` line naming the first),
2 on bad input or a run estimated over an hour without ``--allow-long`` (one line, before the
run). While it runs, stderr shows the time elapsed against the estimate
(``sim/cli/progress.py``).
"""

from __future__ import annotations

import argparse
import json
import sys

from tricut.models.cdu import POLICIES
from tricut.models.config import KV_DTYPES
from tricut.models.dsu import PROFILES
from tricut.models.tile import TILE_ENGINES, TILE_LANES as LANES

from ..harness.tile.options import CDU_GEOMETRY, OPTIONS, TileRunOptions
from ..harness.tile.options import SETUP_FLAGS as _FLAGS
from .errors import InputError, argparse_type, one_line_argparse
from .progress import StatusLine, add_allow_long, duration_text, refuse_long_run

__all__ = ["add_commands", "cmd_tile_run", "tile_options", "tile_run_parser", "tile_setup"]


def _type(name: str):
    """The argparse ``type`` of option ``name``: its parser in :class:`TileRunOptions`
    (``sim/harness/tile/options.py``), the one a sweep's grid values go through too."""
    return argparse_type(OPTIONS[name].parse)


def tile_options(args) -> TileRunOptions:
    """The typed options of parsed flags; the flags given on the command line
    (``args.flags_given``, set by ``tricut``'s main) count as given whatever their values."""
    given = frozenset(getattr(args, "flags_given", frozenset()) & OPTIONS.keys())
    return TileRunOptions(**{name: getattr(args, name) for name in OPTIONS}, given=given)


def tile_setup(args):
    """The run's :class:`~tricut.sim.harness.tile.setup.Setup` from parsed flags, with every
    check the command makes before it runs (:class:`InputError`, one line naming the flag;
    :meth:`TileRunOptions.setup`)."""
    return tile_options(args).setup()


_SIM_NAMES = {"amaranth": "Amaranth simulator", "verilator": "Verilator"}


def _slice_prediction(rep):
    """``(timing model, fast model)`` cycles per (round, layer) of an SM-slice run: the tile's
    cycle-stepped timing model, and the expected-value model ``tricut simulate`` uses for the
    same units (``sim/harness/tile/slice_prediction.py``)."""
    from tricut.sim.harness.tile.setup import predict_layers
    from tricut.sim.harness.tile.slice_prediction import fast_layer_cycles
    return predict_layers(rep.setup), fast_layer_cycles(rep.setup)


def _slice_lines(rep, gpu):
    s, t = rep.setup, rep.tile
    stepped, fast = _slice_prediction(rep)
    num, den = s.hbm_rate
    out = [f"SM slice of {gpu}: HBM {num}/{den} words per cycle, latency {s.latency} cycles, "
           f"{s.max_outstanding} burst slots"]
    for k in sorted(t.layer_cycles):
        rtl = t.layer_cycles[k]
        out.append(f"  round {k[0]} layer {k[1]}: RTL {rtl}, timing model {stepped.get(k)}, "
                   f"fast model {fast[k]:.0f} ({(fast[k] - rtl) / rtl:+.3%})")
    if t.layer_cycles:
        rtl_sum = sum(t.layer_cycles.values())
        fast_sum = sum(fast[k] for k in t.layer_cycles)
        out.append(f"  summed over the run: RTL {rtl_sum}, fast model {fast_sum:.0f} "
                   f"({(fast_sum - rtl_sum) / rtl_sum:+.3%})")
    return out


def _text(rep, sim="amaranth", sm_slice=None):
    s, t = rep.setup, rep.tile
    eng = f"{s.engines} engine{'s' * (s.engines > 1)}"
    split = f"split-K at {s.split_tokens} tokens" if s.split_tokens else "no split"
    cdu = (f"CDU {s.policy} ({s.cdu_sets} sets x {s.cdu_ways} ways, distance {s.distance})"
           if s.policy else "no CDU (K/V from HBM)")
    lines = [f"tile run: {s.model}, {s.requests} requests (prompts "
             f"{', '.join(map(str, rep.prompt_lens))}), {s.steps} steps each, {s.kv_dtype} K/V, "
             f"{eng} ({s.te_engine()}), {s.lanes} lanes, {split}, {cdu}; {_SIM_NAMES[sim]}",
             f"DSU rounds ({s.profile}): " + "  ".join(
                 f"{i}:[{','.join(map(str, r))}]" for i, r in enumerate(rep.rounds))]
    for r, toks in t.tokens.items():
        lines.append(f"request {r} (prompt {rep.prompt_lens[r]}): tokens "
                     f"{' '.join(map(str, toks))}")
    span = "first descriptor to last completion" if s.dsu else "first go to last done"
    for ri, cyc in t.step_cycles.items():
        layers = [t.layer_cycles[k] for k in sorted(t.layer_cycles) if k[0] == ri]
        fail = [r for k, r in t.failed if k == ri]
        why = "timed out (aborted, rolled back)" if ri in t.aborted else "failed (rolled back)"
        lines.append(f"step {ri}: {cyc} cycles ({span}); layers "
                     f"{', '.join(map(str, layers))} (go to done)"
                     + (f"; {why}: request {', '.join(map(str, fail))}" if fail else ""))
    if s.dsu:
        ends = ", ".join(f"{r} {o.status} ({o.tokens} tokens{', ' + o.reason if o.reason else ''})"
                         for r, o in sorted(t.outcomes.items()))
        lines.append(f"DSU cluster ({s.dsu_cores} core{'s' * (s.dsu_cores > 1)}, scheduler "
                     f"firmware): {len(t.rounds)} rounds, {len(t.failed)} failed step(s); "
                     f"outcomes: {ends}")
    if s.policy:
        c = t.cdu_counters
        lines.append(f"CDU: {len(t.txns)} decisions; reads {c.get('accesses', 0)} (hits "
                     f"{c.get('hits', 0)}, misses {c.get('misses', 0)}: bypass "
                     f"{c.get('misses_bypass', 0)}), prefetches issued "
                     f"{c.get('prefetch_issued', 0)}, writes {c.get('writes', 0)} (hits "
                     f"{c.get('write_hits', 0)}, allocs {c.get('write_allocs', 0)}), fills "
                     f"{c.get('fills', 0)}, evictions {c.get('evictions', 0)}, HBM retries "
                     f"{c.get('hbm_retries', 0)}, failures {c.get('hbm_failures', 0)}")
    if sm_slice:
        lines.extend(_slice_lines(rep, sm_slice))
    if rep.ok:
        lines.append(f"golden decode step (TE golden attention): {len(rep.golden.attn)} "
                     f"attention outputs bit-exact, tokens equal"
                     + ("; CDU decisions equal to the CDU golden model" if s.policy else ""))
    return "\n".join(lines)


def _json(rep, sim="amaranth", sm_slice=None):
    s, t = rep.setup, rep.tile
    extra = {}
    if sm_slice:
        stepped, fast = _slice_prediction(rep)
        extra["sm_slice"] = {
            "gpu": sm_slice, "hbm_rate": list(s.hbm_rate), "latency": s.latency,
            "max_outstanding": s.max_outstanding,
            "timing_model_layer_cycles": [{"round": k[0], "layer": k[1], "cycles": v}
                                          for k, v in sorted(stepped.items())],
            "fast_model_layer_cycles": [{"round": k[0], "layer": k[1], "cycles": v}
                                        for k, v in sorted(fast.items())]}
    return json.dumps(extra | {
        "sim": sim,
        "setup": {k: getattr(s, k) for k in ("model", "requests", "steps", "kv_dtype", "engines",
                                             "lanes", "split_tokens", "max_ctx", "max_batch",
                                             "profile", "seed", "policy", "cdu_sets",
                                             "cdu_ways", "distance", "long_context", "dsu",
                                             "dsu_cores", "max_retries", "faults", "hang",
                                             "watchdog")} | {"engine": s.te_engine()},
        "failed_steps": [list(x) for x in t.failed], "aborted_rounds": t.aborted,
        "outcomes": {str(r): {"status": o.status, "tokens": o.tokens, "reason": o.reason}
                     for r, o in t.outcomes.items()},
        "cdu_counters": t.cdu_counters, "cdu_decisions": len(t.txns),
        "prompt_lens": rep.prompt_lens, "rounds": rep.rounds,
        "tokens": {str(r): v for r, v in t.tokens.items()},
        "golden_tokens": {str(r): v for r, v in rep.golden.tokens.items()},
        "step_cycles": [t.step_cycles[k] for k in sorted(t.step_cycles)],
        "layer_cycles": [{"round": k[0], "layer": k[1], "cycles": v}
                         for k, v in sorted(t.layer_cycles.items())],
        "attention_outputs": len(t.attn), "ok": rep.ok, "differences": rep.differences,
    }, indent=2)


def cmd_tile_run(args) -> int:
    from tricut.sim.harness.cocotb_run import CocotbFailure
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.setup import CosimError, SetupError
    from tricut.sim.harness.toolchain import ToolchainError
    from tricut.sim.harness.waves import one_line

    s = tile_setup(args)
    status = _long_run_status(s, args.sim, args.allow_long)
    try:
        with status.ticking():
            rep = simulate(s, sim=args.sim)
    except SetupError as e:         # found by the golden run (a fault the CDU cannot retry)
        raise InputError(f"{_FLAGS.get(e.param, e.param)}: {e.detail}") from None
    except MemoryError:
        raise InputError("out of memory: the run is too large for this machine (fewer "
                         "requests: --synthetic or --prompt-lens; shorter contexts: "
                         "--max-prompt, --steps, --max-ctx; a smaller --model)") from None
    except (CosimError, TimeoutError,              # golden TE status, a DSU mismatch, a hang
            CocotbFailure, ToolchainError) as e:   # --sim verilator: the bench or toolchain
        print(f"tricut: error: {one_line(e, 240)}", file=sys.stderr)
        return 1
    print(_json(rep, args.sim, args.gpu) if args.json else _text(rep, args.sim, args.gpu))
    if not rep.ok:
        print(f"tricut: error: tile differs from the golden decode step "
              f"({len(rep.differences)} difference(s)); first: {one_line(rep.differences[0], 240)}",
              file=sys.stderr)
        return 1
    return 0


def _on(sim):
    return ("the " if sim == "amaranth" else "") + _SIM_NAMES[sim]


def _long_run_status(s, sim, allow_long) -> StatusLine:
    """The run's estimate (``sim/harness/tile/setup.py``, :func:`estimate_run`): a run over
    an hour is refused unless ``allow_long``; else the status line that shows it while the
    run goes (``sim/cli/progress.py``)."""
    from tricut.sim.harness.tile.setup import estimate_run, tile_sim_rate
    cycles, seconds = estimate_run(s, sim)
    faster = ""
    if sim == "amaranth":
        faster = f"--sim verilator: ~{duration_text(estimate_run(s, 'verilator')[1])}"
    refuse_long_run(seconds, f"tile run: about {cycles:,} cycles at ~{tile_sim_rate(s, sim):,.0f} "
                    f"cycles/s on {_on(sim)}", allow_long, faster)
    build = " (and a first Verilator build of this tile shape, up to ~3 min)" \
        if sim == "verilator" else ""

    def text():
        return (f"tile run on {_on(sim)}: {duration_text(line.elapsed())} of "
                f"~{duration_text(seconds)} estimated for about {cycles:,} cycles{build}")
    line = StatusLine(status=text, elapsed_in_text=True)
    return line


def add_commands(sub) -> None:
    tile = one_line_argparse(sub.add_parser(
        "tile", help="run decode steps through the decode tile's RTL attention path",
        description="Decode tile (docs/tile/index.md)."), with_command=True)
    tile_sub = tile.add_subparsers(dest="tile_command", metavar="SUBCOMMAND", required=True)
    p = one_line_argparse(tile_sub.add_parser(
        "run", help="decode steps with the tile's RTL as the attention, checked against the "
                    "golden decode step",
        description="Prefills requests with the golden model (float32 reference prefill), then "
                    "decodes them in rounds chosen by the golden DSU model (or, with --dsu, by "
                    "the DSU cluster's RTL); per round and layer "
                    "the tile's attention path (--sim) computes the attention of "
                    "the round's requests from the q the golden decode step gives it and the "
                    "K/V in its HBM model, and its outputs feed the rest of the step. Prints "
                    "the tokens per request and the cycles per step and layer. Exit status 0: "
                    "every attention output bit-exact with the TE golden and the same tokens; "
                    "1: a difference (one error line naming the first); 2: bad input. "
                    "docs/tile/cosim.md, 'Co-simulation with the golden decode step'."),
        with_command=True)
    _run_arguments(p)
    add_allow_long(p, "a run")
    p.set_defaults(func=cmd_tile_run)


def tile_run_parser() -> argparse.ArgumentParser:
    """A parser of ``tricut tile run``'s flags that raises :class:`InputError` on a bad one
    (instead of printing and exiting): how ``tricut sweep``'s tile tasks check and run their
    points."""
    p = argparse.ArgumentParser(prog="tricut tile run", add_help=False)
    _run_arguments(p)

    def error(message):
        raise InputError(message)
    p.error = error
    return p


def _run_arguments(p) -> None:
    p.add_argument("--model", default="tiny-te",
                   help="model id or .toml; its head_dim must be one the TE takes (64, 128, "
                        "256) and its GQA group 1..16 (default: %(default)s)")
    req = p.add_mutually_exclusive_group()
    req.add_argument("--synthetic", type=_type("synthetic"), metavar="N",
                     help="N synthetic requests (1..16), random prompts of distinct lengths "
                          "1..--max-prompt drawn from --seed (default: 2)")
    req.add_argument("--prompt-lens", type=_type("prompt_lens"), metavar="L1,L2,...",
                     help="instead of --synthetic: one request per length given")
    p.add_argument("--max-prompt", type=_type("max_prompt"), default=3, metavar="P",
                   help="longest synthetic prompt, 1..16368 (default: %(default)s; Amaranth's simulator runs "
                        "tens to ~100 cycles/s, the TE ~(G+1)*head_dim/lanes cycles per "
                        "token; --sim verilator is thousands of times faster)")
    p.add_argument("--steps", type=_type("steps"), default=2, metavar="S",
                   help="decode steps (tokens) per request, >= 1 (default: %(default)s)")
    p.add_argument("--kv-dtype", default="bf16",
                   help=f"K/V format in the tile's HBM: {', '.join(KV_DTYPES)} "
                        f"(default: %(default)s)")
    p.add_argument("--engines", type=_type("engines"), default=None, metavar="E",
                   help="TE engines of the tile's array, 1..16 (default: 1, or the GPU's "
                        "engines per SM with --gpu; given with --gpu, a design with other "
                        "engines on the SM's share, its split-K chosen for them)")
    p.add_argument("--gpu", default=None, metavar="GPU",
                   help="run the tile as one SM's slice of this GPU (a shipped name or a "
                        "config file; docs/system-model.md, 'The TE term: a grid of tiles'): "
                        "its TE engines per SM (unless --engines), its SM's share of HBM bandwidth (x the TE's "
                        "bandwidth efficiency) as the HBM model's rate, its HBM latency in TE "
                        "cycles and the burst slots that cover it, and with --policy the CDU "
                        "at the SM's share of the L2; prints the fast model's cycles per "
                        "layer beside the RTL's (the expected-value tile model tricut "
                        "simulate uses)")
    p.add_argument("--engine", choices=TILE_ENGINES, default=None,
                   help="the TE engine design of the tile's array (docs/te.md; default: the "
                        "shipped pipelined engine)")
    p.add_argument("--lanes", type=_type("lanes"), default=32, metavar="L",
                   help=f"TE multiplier lanes: {', '.join(map(str, LANES))} "
                        f"(default: %(default)s, the shipped tile's)")
    p.add_argument("--split-tokens", type=_type("split_tokens"), default=None, metavar="T",
                   help="Flash-Decoding split-K: contexts longer than T tokens run in parts "
                        "through the combine unit; 0 never splits; T > 0 must split at least "
                        "one context (default: 0, or with --gpu the SM slice's split when a "
                        "context is longer)")
    p.add_argument("--max-ctx", type=_type("max_ctx"), default=64, metavar="C",
                   help="the tile's max_ctx: KV tokens per (request, layer, KV head) region of "
                        "the HBM image, a multiple of 16 (whole KV blocks); the longest prompt "
                        "+ --steps must fit (default: %(default)s)")
    p.add_argument("--max-batch", type=_type("max_batch"), metavar="B",
                   help="the DSU's batch cap (default: every request, every round)")
    p.add_argument("--profile", default="throughput-opt",
                   help=f"DSU scheduling profile: {', '.join(PROFILES)} (default: %(default)s)")
    p.add_argument("--policy", default="none",
                   choices=("none", *POLICIES),
                   help="the CDU in the K/V path with this policy (its decisions checked "
                        "against the CDU golden model, transaction by transaction): blocks "
                        "come from the L2 data array on a hit or an allocated miss, from HBM "
                        "on a bypass; 'none': the tile without the CDU, the same unit "
                        "streamer reading every block from HBM "
                        "(default: %(default)s)")
    p.add_argument("--cdu-sets", type=_type("cdu_sets"), default=None, metavar="S",
                   help=f"CDU tag-store sets, a power of 2 (default: {CDU_GEOMETRY['cdu_sets']}, "
                        "or with --gpu the SM's share of the L2)")
    p.add_argument("--cdu-ways", type=_type("cdu_ways"), default=None, metavar="W",
                   help=f"CDU ways per set, 1..16 (default: {CDU_GEOMETRY['cdu_ways']}, or "
                        "with --gpu the SM slice's)")
    p.add_argument("--distance", type=_type("distance"), default=None, metavar="D",
                   help=f"CDU prefetch distance in blocks, 0..255 (default: "
                        f"{CDU_GEOMETRY['distance']}, or with --gpu the SM slice's)")
    p.add_argument("--long-context", type=_type("long_context"), default=1, metavar="T",
                   help="with a CDU policy: the DSU marks contexts of at least T tokens "
                        "resident (CDU hint 'auto', may be kept in L2), shorter ones 'stream' "
                        "(default: %(default)s: every context)")
    p.add_argument("--dsu", action="store_true",
                   help="the DSU cluster in RTL (RV32IM cores running the scheduler firmware, "
                        "slot arbiter) in front of the step sequencer: it admits the requests, "
                        "chooses each round's batch and takes the tile's completions (failed "
                        "steps are rolled back and run again); needs --sim verilator. Default: "
                        "the golden DSU model's schedule, computed up front")
    p.add_argument("--dsu-cores", type=_type("dsu_cores"), default=1, metavar="N",
                   help="with --dsu: cores of the DSU cluster, 1..4 (default: %(default)s)")
    p.add_argument("--max-retries", type=_type("max_retries"), default=2, metavar="R",
                   help="with --dsu: times the DSU runs a failed step again before the request "
                        "fails (default: %(default)s)")
    p.add_argument("--faults", type=_type("faults"), default=(), metavar="R:L:H:B:N[,...]",
                   help="with --dsu: HBM read errors; the first burst of KV block B (16 tokens) "
                        "of request R, layer L, KV head H answers err to its first N reads. "
                        "No --policy: the step fails, the DSU rolls it back and runs it again. "
                        "With a --policy: the CDU retries the block's fill (N at most 2, its "
                        "retries; the block must be first read by a fill): no step fails. At "
                        "most 4 blocks")
    p.add_argument("--hang", type=_type("hang"), default=(), metavar="R:L:H:B:N",
                   help="with --dsu, no --policy, no --faults: a lost HBM read; the next N "
                        "reads of that block's first burst are never answered, so a TE job "
                        "never finishes: the DSU's slot watchdog times the round out, the "
                        "tile aborts it and the DSU runs it again")
    p.add_argument("--watchdog", type=_type("watchdog"), default=None, metavar="CYCLES",
                   help="with --dsu: the DSU's slot watchdog limit, 1..16777215 (default: "
                        "16777215, with --hang twice the fast model's longest round + 1024)")
    p.add_argument("--seed", type=_type("seed"), default=0, metavar="X",
                   help="seed of the weights, prompts and synthetic lengths (default: %(default)s)")
    p.add_argument("--sim", choices=("amaranth", "verilator"), default="amaranth",
                   help="the tile's simulator: amaranth (~80-130 cycles/s) or verilator (the "
                        "same run cycle for cycle, one Verilator build per tile shape, cached "
                        "under .build/cocotb; docs/tile/cosim.md) "
                        "(default: %(default)s)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: setup, prompt lengths, DSU rounds, tokens (tile and "
                        "golden), cycles per step and layer, differences")
