"""The checks of one CDU policy replay's values and sizes, before anything runs, shared by
``tricut cdu replay`` (``sim/cli/cdu_cmd.py``) and the sweep's ``cdu-replay`` points
(``sim/sweep/tasks.py``), so that a value is refused with the same one-line message, naming the
command's flag, wherever it comes from (``--seed 12345678901234567890: seed must be an integer
in 0..2**63-1``).

:func:`check_values` is the command's check of its flags' values; the sizes are checked by
:func:`tricut.sim.fast.cdu_replay.replay` itself (``check_only=True`` checks without running).
"""

from __future__ import annotations

import math

from tricut.models.cdu import MODEL_WAYS

from ..options import InputError
from .cdu_replay import MAX_SEED

__all__ = ["REPLAY_FLAGS", "check_values"]

#: replay()'s argument names -> ``tricut cdu replay``'s flags (for messages); replay()'s
#: ``engine`` is the replay's implementation, ``--implementation``
REPLAY_FLAGS = {"l2_mb": "--l2-mb", "steps": "--steps", "batch": "--batch", "context": "--context",
                "seed": "--seed", "reserve": "--reserve", "engine": "--implementation"}


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_values(*, l2_mb=None, steps=None, batch=None, context=None, seed=0, reserve=None,
                 rtl: bool = False, names=REPLAY_FLAGS) -> None:
    """The values of one replay's options (None: not given), each refused with an
    :class:`InputError` ``FLAG VALUE: why`` (``names``: argument -> flag). ``reserve`` is
    below the ways of a set: the policy model's 16, or the ``rtl`` instance's 2."""
    if l2_mb is not None:
        shown = f"{l2_mb:g}" if isinstance(l2_mb, float) else repr(l2_mb)
        if isinstance(l2_mb, bool) or not isinstance(l2_mb, (int, float)) or not math.isfinite(l2_mb) \
                or l2_mb <= 0:
            raise InputError(f"{names['l2_mb']} {shown}: l2_mb must be a positive number of MiB")
    for k, v in (("steps", steps), ("batch", batch), ("context", context)):
        if v is not None and (not _integer(v) or v < 1):
            raise InputError(f"{names[k]} {v}: {k} must be a positive integer")
    if not _integer(seed) or not 0 <= seed <= MAX_SEED:
        raise InputError(f"{names['seed']} {seed}: seed must be an integer in 0..2**63-1")
    if reserve is not None:
        ways = 2 if rtl else MODEL_WAYS
        if not _integer(reserve) or not 0 <= reserve < ways:
            raise InputError(f"{names['reserve']} {reserve}: reserve must be an integer in [0, ways) = "
                             f"0..{ways - 1} ({ways} ways per set{' in the --rtl instance' if rtl else ''})")
