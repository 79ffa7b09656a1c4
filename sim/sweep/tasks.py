"""What one sweep point runs. A task turns a point's settings into its command's typed
options (each value as its flag's text, parsed by the flag's own parser), checks them with the
checks that command makes before it runs anything (the same code, below the command line:
the sweep imports no ``sim.cli``), resolves the full configuration (every default filled in,
the key of the point hashes it) and runs the point, returning its metrics as a flat dict.

* ``simulate``: one ``tricut simulate`` run (:func:`tricut.sim.fast.run.run` of the point's
  :class:`~tricut.sim.fast.run.RunOptions`, the command's own code path); the metrics are what
  ``simulate --json`` prints.
* ``tile-run``, ``tile-area``, ``tile-design``: the decode tile's RTL, co-simulated, its
  Yosys area, or both (:mod:`.tile_tasks`).
* ``cdu-replay``: one CDU policy replay (:func:`tricut.sim.fast.cdu_replay.replay`, what
  ``tricut cdu replay`` runs; ``engine = "fast"`` is the policy model's compiled twin); the
  metrics are its scalar counters.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from dataclasses import asdict
from pathlib import Path

from .task_base import GridError, Impossible, Task, _jsonable
from .tile_tasks import TileAreaTask, TileDesignTask, TileRunTask

__all__ = ["GridError", "Impossible", "TASKS", "code_version", "SimulateTask", "CduReplayTask"]


@functools.cache
def code_version() -> dict:
    """``{"tricut": package version, "commit": git describe of the source tree (with a hash of
    ``git diff HEAD`` after ``-dirty``) or "unknown"}``; part of every point's key, so results
    of other code are never reused (untracked files are not seen)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        ver = version("tricut")
    except PackageNotFoundError:
        ver = "unknown"
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=30)
        commit = out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
        if commit.endswith("-dirty"):      # uncommitted edits: which ones is part of the version
            diff = subprocess.run(["git", "-C", str(root), "diff", "HEAD"], capture_output=True,
                                  timeout=60)
            commit += "+" + hashlib.sha256(diff.stdout).hexdigest()[:12]
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"tricut": ver, "commit": commit}


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


class SimulateTask(Task):
    NAME = "simulate"
    #: settings whose value may be a list (joined with commas)
    LIST_SETTINGS = ("cuts",)
    PATH_SETTINGS = {"trace": "", "sessions": "", "model": ".toml", "gpu": ".toml", "tiers": ".toml"}
    #: the options a grid gives as ``NAME.FIELD`` settings (``assume.cdu_l2_share``), one
    #: ``FIELD=VALUE`` each
    KEYED = ("assume", "unit")

    @classmethod
    def names(cls) -> list[str]:
        from ..fast.run import OPTIONS, UNIT_FIELDS
        from ..fast.stacks import StackProfile
        from ..fast.timing import Assumptions
        return ([k for k in OPTIONS if k not in cls.KEYED] + [f"assume.{n}" for n in Assumptions.__dataclass_fields__]
                + [f"assume.{n}" for n in StackProfile.numeric_fields()] + [f"unit.{n}" for n in UNIT_FIELDS])

    @classmethod
    def texts(cls, settings: dict) -> list[tuple[str, str]]:
        """The point's settings as ``(option, text)`` pairs, in their order: each value as
        its flag's text (a list joined with commas, ``none`` when empty)."""
        out = []
        for k, v in settings.items():
            if isinstance(v, bool):
                raise ValueError(f"{k} = {v}: expected a value, not true/false")
            if k.startswith(tuple(f"{kind}." for kind in cls.KEYED)):
                kind, _, name = k.partition(".")
                out.append((kind, f"{name}={v}"))
            elif isinstance(v, list):
                out.append((k, ",".join(map(str, v)) if v else "none"))
            else:
                out.append((k, str(v)))
        return out

    @classmethod
    def argv(cls, settings: dict) -> list[str]:
        """The point as ``tricut simulate``'s flags."""
        from ..fast.run import OPTIONS
        return [a for k, text in cls.texts(settings) for a in (OPTIONS[k].flag, text)]

    @classmethod
    def options(cls, settings: dict):
        """The point's :class:`~tricut.sim.fast.run.RunOptions` (a refused value: a one-line
        :class:`~tricut.sim.options.InputError`, the command's message)."""
        from ..fast.run import RunOptions
        return RunOptions.from_texts(cls.texts(settings))

    @staticmethod
    @functools.lru_cache(maxsize=32)
    def _workload(key):
        from ..fast.run import workload_of
        return workload_of(key)

    @classmethod
    def check(cls, settings: dict) -> dict:
        """Every check ``tricut simulate`` makes before it runs; the resolved configuration.
        A refused value raises ``ValueError``; a refused combination :class:`Impossible`."""
        from tricut.models.config import ConfigError, load_gpu, load_model
        from ..fast.run import WORKLOAD_FIELDS, RunOptions, prepare, session_mode, setup_of
        from ..fast.workload import TraceError
        options = cls.options(settings)
        load_model(options.model)          # an unknown model or GPU is a refused value (ValueError),
        load_gpu(options.gpu)              # not an impossible combination
        if session_mode(options):          # agentic sessions: every check `tricut simulate` makes
            setup = prepare(options).setup
            # and the one its session loop makes when it starts (simulate_sessions)
            budget = setup.dsu_params().kv_capacity_tokens
            if budget - options.prefix_cache_tokens < 1:
                raise Impossible(f"--prefix-cache-tokens: the prefix cache ({options.prefix_cache_tokens:,} "
                                 f"tokens) leaves no KV budget (the DSU's is {budget:,} tokens)")
            return cls._resolved(options, setup)
        # the workload's options alone: the cache's key
        reqs = cls._workload(RunOptions(**{n: getattr(options, n) for n in WORKLOAD_FIELDS}))
        try:
            setup = setup_of(options)
            setup.check(reqs, options.cuts)
        except (ConfigError, TraceError, ValueError) as e:
            raise Impossible(str(e)) from None
        return cls._resolved(options, setup)

    @classmethod
    def _resolved(cls, options, setup) -> dict:
        """The full configuration: every option with its default, input files' content hashes,
        the assumptions, the stack's parameters and the unit sizes."""
        from ..fast.run import OPTIONS
        config = {k: _jsonable(getattr(options, k)) for k in OPTIONS if k not in cls.KEYED}
        for name in ("trace", "sessions"):
            if getattr(options, name) is not None:
                config[f"{name}_sha256"] = _file_digest(getattr(options, name))
        config.update(asdict(setup.assumptions))
        config.update({f"stack_{k}": v for k, v in asdict(setup.stack).items() if k != "name"})
        units = setup.step_model(options.cuts).units
        config.update(te_engines_per_sm=setup.gpu.te_engines_per_sm, te_lanes=units.te_lanes,
                      dsu_cores=setup.gpu.dsu_cores)
        return config

    @classmethod
    def run(cls, settings: dict) -> dict:
        from ..fast.run import run
        return run(cls.options(settings))


class CduReplayTask(Task):
    NAME = "cdu-replay"
    PATH_SETTINGS = {"model": (".toml", ".jsonl"), "gpu": (".toml", ".jsonl"),
                     "pattern": (".toml", ".jsonl")}
    #: replay()'s arguments a grid may set, with their defaults (those of ``tricut cdu replay``)
    DEFAULTS = {"model": "llama-3-8b", "pattern": "full", "policy": "adaptive", "l2_mb": 50.0,
                "steps": 8, "batch": 1, "context": 4096, "kv_dtype": "bf16", "seed": 0,
                "engine": "fast", "hints": "auto", "reserve": None, "gpu": "h100-sxm5"}

    @classmethod
    def names(cls):
        return list(cls.DEFAULTS)

    @classmethod
    def check(cls, settings: dict) -> dict:
        """The checks of ``tricut cdu replay`` (:mod:`tricut.sim.fast.cdu_replay_checks`: its
        flags' values, then replay()'s own checks of the sizes, ``check_only``; messages name
        the command's flags); ``context + steps`` beyond the model's context is
        :class:`Impossible`."""
        from tricut.models.cdu import PATTERNS, POLICIES
        from tricut.models.config import KV_DTYPES, load_gpu, load_model
        from ..fast.cdu_replay import replay
        from ..fast.cdu_replay_checks import REPLAY_FLAGS, check_values
        c = {**cls.DEFAULTS, **settings}
        check_values(l2_mb=c["l2_mb"], steps=c["steps"], batch=c["batch"], context=c["context"],
                     seed=c["seed"], reserve=c["reserve"])
        for k, allowed in (("policy", POLICIES), ("kv_dtype", KV_DTYPES), ("engine", ("fast", "golden")),
                           ("hints", ("auto", "dsu"))):
            if c[k] not in allowed:
                raise ValueError(f"{k} {c[k]!r} is not one of {', '.join(allowed)}")
        if not (c["pattern"] in PATTERNS or (isinstance(c["pattern"], str) and c["pattern"].endswith(".jsonl")
                                             and Path(c["pattern"]).is_file())):
            raise ValueError(f"pattern {c['pattern']!r} is not one of {', '.join(PATTERNS)} or an "
                             "existing .jsonl access trace")
        model = load_model(c["model"])
        if c["pattern"] in PATTERNS and c["context"] + c["steps"] > model.max_context:
            raise Impossible(f"context {c['context']:,} + steps {c['steps']} exceeds {model.name}'s "
                             f"max_context {model.max_context:,}")
        # the sizes (and an access trace's rows) exactly as the run's replay() checks them
        replay(model, c["pattern"], c["policy"], c["l2_mb"], c["steps"], c["batch"], c["kv_dtype"],
               c["seed"], context=c["context"], hints=c["hints"], engine=c["engine"],
               reserve=c["reserve"], gpu=load_gpu(c["gpu"]), names=REPLAY_FLAGS, check_only=True)
        return {k: _jsonable(v) for k, v in c.items()}

    @classmethod
    def run(cls, settings: dict) -> dict:
        from ..fast.cdu_replay import replay
        c = {**cls.DEFAULTS, **settings}
        counters = replay(c["model"], c["pattern"], c["policy"], c["l2_mb"], c["steps"], c["batch"],
                          c["kv_dtype"], c["seed"], context=c["context"], hints=c["hints"],
                          engine=c["engine"], reserve=c["reserve"], gpu=c["gpu"])
        return {k: v for k, v in counters.items()
                if isinstance(v, (int, float, str, bool)) or v is None}



TASKS = {t.NAME: t for t in (SimulateTask, CduReplayTask, TileRunTask, TileAreaTask,
                             TileDesignTask)}
