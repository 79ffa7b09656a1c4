"""A tile run's options, below the command line: :class:`TileRunOptions`, what ``tricut tile
run`` takes, typed (each field declared with its flag and the parser of its text), and
:meth:`TileRunOptions.setup`, the run's :class:`~tricut.sim.harness.tile.setup.Setup` with
every check the command makes before it runs (with ``gpu``, the SM slice's fields). The
command (``sim/cli/tile_cmd.py``) and the sweep's tile tasks (``sim/sweep/tile_tasks.py``)
both build one, so a point is refused with the command's one-line :class:`InputError`,
naming the flag."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tricut.models.cdu import POLICIES
from tricut.models.config import KV_DTYPES
from tricut.models.tile import TILE_ENGINES, TILE_LANES

from ...options import (InputError, Needs, checked_fields, given_fields, option, options_of, positive_ints,
                        refuse_inapplicable, values_of)

if TYPE_CHECKING:
    from .setup import Setup

# .setup (the RTL's widths, Amaranth) is imported where a setup is made: the command line
# imports this module for its flags' parsers

__all__ = ["TileRunOptions", "OPTIONS", "EXCLUSIVE", "APPLIES", "SETUP_FLAGS", "CDU_GEOMETRY", "parse_int",
           "parse_prompt_lens", "parse_faults", "parse_hang"]

#: the CDU geometry of a run without ``gpu``, when its options are not given (Setup's defaults)
CDU_GEOMETRY = {"cdu_sets": 4, "cdu_ways": 2, "distance": 4}

#: :class:`Setup` parameter -> the flag that sets it (for messages)
SETUP_FLAGS = {"model": "--model", "requests": "--synthetic", "prompt_lens": "--prompt-lens",
               "max_prompt": "--max-prompt", "steps": "--steps", "kv_dtype": "--kv-dtype",
               "engines": "--engines", "engine": "--engine", "lanes": "--lanes", "split_tokens": "--split-tokens",
               "max_ctx": "--max-ctx", "max_batch": "--max-batch", "profile": "--profile",
               "policy": "--policy", "cdu_sets": "--cdu-sets", "cdu_ways": "--cdu-ways",
               "distance": "--distance", "long_context": "--long-context", "dsu": "--dsu",
               "dsu_cores": "--dsu-cores", "max_retries": "--max-retries", "faults": "--faults",
               "hang": "--hang", "watchdog": "--watchdog"}


# ---- the parsers of the options' text (the command line's argparse types)

def parse_int(lo=None, hi=None, why=""):
    """A parser of an integer (``_`` allowed as a digit separator), at least ``lo`` and at
    most ``hi`` (a function giving it: the bound is read when a value is parsed); ``why``
    explains the upper bound."""
    def parse(text):
        top = hi() if callable(hi) else hi
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            if top is None:
                raise InputError(f"{text!r} is not an integer") from None
            raise InputError(f"must be an integer in {lo}..{top}{why}, got {text!r}") from None
        if top is not None and not lo <= value <= top:
            raise InputError(f"must be in {lo}..{top}{why}, got {value}")
        if lo is not None and value < lo:
            raise InputError(f"{value} is below {lo}")
        return value
    return parse


def _longest_context():
    from .setup import MAX_CTX
    return MAX_CTX


def parse_prompt_lens(text):
    """``L1,L2,...``: one request per length, at most the tile's requests, each no longer
    than the longest context the tile takes."""
    from .setup import MAX_CTX, MAX_REQUESTS
    lens = tuple(positive_ints(text))
    if len(lens) > MAX_REQUESTS:
        raise InputError(f"{len(lens)} lengths, one request each: the tile takes at most "
                         f"{MAX_REQUESTS} requests")
    longer = [n for n in lens if n > MAX_CTX]
    if longer:
        raise InputError(f"{longer[0]} is longer than the longest context the tile takes "
                         f"({MAX_CTX})")
    return lens


def _block_entry(item, last="FAILS"):
    """``R:L:H:B:N`` -> ``(R, L, H, B, N)``."""
    try:
        f = tuple(int(x) for x in item.split(":"))
    except ValueError:
        f = ()
    if len(f) != 5:
        raise InputError(f"{item!r} is not REQUEST:LAYER:KV_HEAD:BLOCK:{last} (five integers)")
    return f


def parse_faults(text):
    """``R:L:H:B:N[,...]`` -> ``((R, L, H, B, N), ...)``."""
    return tuple(_block_entry(item) for item in text.split(","))


def parse_hang(text):
    return _block_entry(text, "COUNT")


def _ints_text(values) -> str:
    return ",".join(map(str, values))


def _entry_text(entry) -> str:
    return ":".join(map(str, entry))


def _faults_text(faults) -> str:
    return ",".join(map(_entry_text, faults))


# ---- the options

#: options of which at most one is given: the requests' prompts
EXCLUSIVE = (("synthetic", "prompt_lens"),)


@dataclass(frozen=True)
class TileRunOptions:
    """The options of one ``tricut tile run``, typed: a field is the flag's value (its name
    the flag's without ``--``, hyphens as underscores); ``policy`` ``"none"`` is the tile
    without the CDU. Constructing one checks each field that is not None or its default as
    its flag's parser does (:func:`~tricut.sim.options.checked_fields`); :meth:`from_texts`
    parses the flags' texts in a given order (a sweep's grid); :meth:`setup` makes every
    other check."""
    model: str = option("--model", "tiny-te")
    synthetic: int | None = option("--synthetic", None, parse_int())
    prompt_lens: tuple | None = option("--prompt-lens", None, parse_prompt_lens, text=_ints_text)
    max_prompt: int = option("--max-prompt", 3, parse_int(
        1, _longest_context, " (the longest context the tile takes, in tokens)"))
    steps: int = option("--steps", 2, parse_int())
    kv_dtype: str = option("--kv-dtype", "bf16")
    engines: int | None = option("--engines", None, parse_int())
    gpu: str | None = option("--gpu")
    engine: str | None = option("--engine", None, choices=TILE_ENGINES)
    lanes: int = option("--lanes", 32, parse_int())
    split_tokens: int | None = option("--split-tokens", None, parse_int())
    max_ctx: int = option("--max-ctx", 64, parse_int())
    max_batch: int | None = option("--max-batch", None, parse_int())
    profile: str = option("--profile", "throughput-opt")
    policy: str = option("--policy", "none", choices=("none", *POLICIES))
    cdu_sets: int | None = option("--cdu-sets", None, parse_int())
    cdu_ways: int | None = option("--cdu-ways", None, parse_int())
    distance: int | None = option("--distance", None, parse_int(0))
    long_context: int = option("--long-context", 1, parse_int())
    dsu: bool = option("--dsu", False, switch=True)
    dsu_cores: int = option("--dsu-cores", 1, parse_int())
    max_retries: int = option("--max-retries", 2, parse_int(0))
    faults: tuple = option("--faults", (), parse_faults, text=_faults_text)
    hang: tuple = option("--hang", (), parse_hang, text=_entry_text)
    watchdog: int | None = option("--watchdog", None, parse_int(1))
    seed: int = option("--seed", 0, parse_int(0))
    sim: str = option("--sim", "amaranth", choices=("amaranth", "verilator"))
    #: the options given (on the command line, in a grid point), whatever their values; those
    #: not at their default count as given too
    given: frozenset = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self):
        checked_fields(self, EXCLUSIVE)
        refuse_inapplicable(self, APPLIES, self.given | given_fields(self))

    @classmethod
    def from_texts(cls, items) -> TileRunOptions:
        """The options of ``(field name, text)`` pairs (a switch's text ignored), parsed in
        their order as the command line parses ``FLAG TEXT ...``; each one named counts as
        given."""
        items = list(items)
        return cls(**values_of(cls, items, EXCLUSIVE), given=frozenset(name for name, _ in items))

    def setup(self) -> Setup:
        """The run's :class:`Setup`, with every check the command makes before it runs
        (:class:`InputError`, one line naming the flag)."""
        from .setup import Setup, SetupError, check_setup
        lens = self.prompt_lens
        n = len(lens) if lens else 2 if self.synthetic is None else self.synthetic
        slice_fields = self._slice()
        for name in ("split_tokens", "cdu_sets", "cdu_ways", "distance"):
            if getattr(self, name) is not None:          # given: it overrides the slice's
                slice_fields.pop(name, None)
        geometry = {k: slice_fields.pop(k, CDU_GEOMETRY[k] if getattr(self, k) is None
                                        else getattr(self, k)) for k in CDU_GEOMETRY}
        s = Setup(model=self.model, requests=n, prompt_lens=lens,
                  max_prompt=self.max_prompt, steps=self.steps, kv_dtype=self.kv_dtype,
                  engines=slice_fields.pop("engines", 1 if self.engines is None else self.engines),
                  engine=self.engine, lanes=self.lanes,
                  split_tokens=slice_fields.pop(
                      "split_tokens", 0 if self.split_tokens is None else self.split_tokens),
                  max_ctx=self.max_ctx, max_batch=self.max_batch, profile=self.profile,
                  seed=self.seed, policy=None if self.policy == "none" else self.policy,
                  **geometry, long_context=self.long_context, dsu=self.dsu, dsu_cores=self.dsu_cores,
                  max_retries=self.max_retries, faults=self.faults, hang=self.hang,
                  watchdog=self.watchdog, **slice_fields)
        if self.split_tokens is None and s.split_tokens:
            # the slice's split where a context is longer than a part (else none: nothing splits)
            longest = max(s.lens()) + s.steps if _lens_ok(s) else 0
            if longest <= s.split_tokens:
                s = dataclasses.replace(s, split_tokens=0)
        try:
            check_setup(s)
        except SetupError as e:
            raise InputError(f"{SETUP_FLAGS.get(e.param, e.param)}: {e.detail}") from None
        return s

    def _slice(self) -> dict:
        """The ``Setup`` fields of ``gpu``'s SM slice (empty without it)."""
        if self.gpu is None:
            return {}
        from tricut.models.config import ConfigError, load_gpu, load_model
        from tricut.models.sm_slice import slice_cdu, slice_config
        from tricut.sim.fast.timing import Assumptions
        try:
            gpu, model = load_gpu(self.gpu), load_model(self.model)
        except ConfigError as e:
            raise InputError(f"--gpu: {e}") from None
        engines = gpu.te_engines_per_sm if self.engines is None else self.engines
        if self.kv_dtype not in KV_DTYPES or self.lanes not in TILE_LANES:
            return {"engines": engines}           # check_setup names the flag
        a = Assumptions()
        cfg = slice_config(gpu, model, self.kv_dtype, a.te_bw_efficiency, self.lanes,
                           self.engine or "pipelined", engines=engines)
        fields = {"engines": cfg.engines, "latency": cfg.latency, "hbm_rate": cfg.hbm_rate,
                  "max_outstanding": cfg.max_outstanding, "split_tokens": cfg.split_tokens}
        if self.policy in POLICIES:
            # the CDU at the SM's share of the L2 (a geometry option given overrides its part)
            try:
                cdu = slice_cdu(gpu, dataclasses.replace(cfg, l2=True), self.policy,
                                a.cdu_l2_share)
            except ValueError as e:
                raise InputError(f"--gpu: {e}") from None
            fields.update(cdu_sets=cdu.sets, cdu_ways=cdu.ways, distance=cdu.distance)
        return fields


#: ``{field name: Option}`` of :class:`TileRunOptions`, in the command line's order
OPTIONS = options_of(TileRunOptions)

_CDU = Needs("needs --policy (the tile has no CDU without one)", lambda o: o.policy in POLICIES)
_DSU = Needs(": needs the DSU cluster (--dsu); without it the golden DSU model's schedule runs",
             lambda o: o.dsu)

#: Where each option acts (the rest act in every run): ``{field name: (Needs, ...)}``; a given
#: option whose needs do not hold is refused, naming the first
#: (:func:`~tricut.sim.options.refuse_inapplicable`). ``tests/test_flag_applicability.py``
#: walks it.
APPLIES = {
    "max_prompt": (Needs("needs synthetic prompts (not --prompt-lens, which gives every length)",
                         lambda o: o.prompt_lens is None),),
    **dict.fromkeys(("cdu_sets", "cdu_ways", "distance", "long_context"), (_CDU,)),
    "dsu": (Needs(": the DSU cluster runs on Verilator only (add --sim verilator)",
                  lambda o: o.sim == "verilator"),),
    **dict.fromkeys(("dsu_cores", "max_retries", "watchdog"), (_DSU,)),
    "faults": (Needs(": need the DSU cluster (--dsu): a failed step is rolled back and run again by the DSU",
                     lambda o: o.dsu),),
    "hang": (Needs(": needs the DSU cluster (--dsu): its slot watchdog ends the hung round", lambda o: o.dsu),),
}


def _lens_ok(s):
    """The setup's prompt lengths can be read (else ``check_setup`` names the flag)."""
    from .setup import MAX_CTX
    if s.prompt_lens is None and not (isinstance(s.max_prompt, int) and 1 <= s.max_prompt <= MAX_CTX):
        return False
    try:
        lens = s.lens()
    except (ValueError, TypeError):
        return False
    return bool(lens) and all(isinstance(x, int) for x in lens)
