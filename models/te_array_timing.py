"""The TE array's cycle formulas that need no stepping: its unstalled schedules
(docs/tile/timing.md, docs/tile/te-array.md).

**TE array** (``rtl/tile/te_array.py``), unstalled: :func:`te_array_schedule` and
:func:`te_array_cycles` for serial engines fed from one serial job stream,
:func:`te_array_routed_schedule` and :func:`te_array_routed_cycles` for a routed-K/V array
whose engines never wait for K/V; one job's phases are
:func:`tricut.models.te.te_serial_phases`.

**The tile** (``AttentionPath``, with or without the CDU): :mod:`.tile_timing` (its units
meet on shared resources, so that model steps them cycle by cycle).
"""

from __future__ import annotations

from tricut.models.te import te_serial_phases

__all__ = ["te_array_schedule", "te_array_cycles", "te_array_routed_schedule",
           "te_array_routed_cycles", "STATUS_TAIL"]

#: cycles from a job's last ``out`` beat until the TE array's status register is taken (the
#: array is busy until then; ``rtl/tile/te_array.py``)
STATUS_TAIL = 2


def te_array_schedule(jobs, head_dim, G, lanes, engines):
    """Exact cycles of a job list on an unstalled array (every input beat offered as soon as
    it can be taken, ``out`` and ``status`` always ready); ``jobs`` is a list of
    ``(n, partial)`` with exactly ``n`` tokens of K/V each (no early end, no too-long stream).

    Returns ``[(s_k, f_k)]``: the cycle job ``k``'s ``job`` beat transfers and the cycle its
    last ``out`` beat transfers, counted from the first job beat's cycle (0). With
    ``I_k, O_k`` from the single engine (input phase ``1 + G*Dk + 3*n*G*Dk``, output
    ``G*Dk (+G)``)::

        s_0 = 0
        s_k = max(s_{k-1} + I_{k-1}, f_{k-E} + 1)    (input is serial; engine k mod E free)
        f_k = max(s_k + I_k, f_{k-1} + 1) + O_k - 1  (output in job order)
    """
    out = []
    for k, (n, partial) in enumerate(jobs):
        i_k, o_k = te_serial_phases(n, head_dim, G, lanes, partial)
        if k == 0:
            s = 0
        else:
            prev_n, prev_partial = jobs[k - 1]
            s = out[-1][0] + te_serial_phases(prev_n, head_dim, G, lanes, prev_partial)[0]
            if k >= engines:
                s = max(s, out[k - engines][1] + 1)
        first = s + i_k if k == 0 else max(s + i_k, out[-1][1] + 1)
        out.append((s, first + o_k - 1))
    return out


def te_array_cycles(J, n, head_dim, G, lanes, engines, partial=False):
    """Cycles, first ``job`` beat to last ``out`` beat inclusive, of ``J`` equal jobs of
    ``n >= 1`` tokens on an unstalled array: ``J*(I + O)`` for one engine (a single TE,
    ``J * te_cycles``), ``J*I + O`` for two or more (input phases back to back; each output
    hidden under the next job's input), ``I = 1 + G*Dk + 3*n*G*Dk``, ``O = G*Dk (+G)``."""
    if n < 1 or J < 1:
        raise ValueError(f"te_array_cycles needs J >= 1 and n >= 1, got J={J}, n={n}")
    i, o = te_serial_phases(n, head_dim, G, lanes, partial)
    return J * (i + o) if engines == 1 else J * i + o


def te_array_routed_schedule(jobs, head_dim, G, lanes, engines):
    """Cycles of a job list on a routed-K/V array (``routed_kv=True``) whose engines never
    wait for K/V: every ``kv`` beat is in its engine's FIFO by the cycle the engine wants it
    (and ``job``, ``q`` offered as soon as they can be taken, ``out`` and ``status`` always
    ready). ``jobs``: ``(n, partial)`` with exactly ``n`` tokens each. Same return value as
    :func:`te_array_schedule`; the dispatcher now spends ``1 + G*Dk`` cycles per job (the
    ``job`` beat and the ``q`` beats) instead of the whole input phase::

        s_0 = 0
        s_k = max(s_{k-1} + 1 + G*Dk, f_{k-E} + 1)   (job + q serial; engine k mod E free)
        f_k = max(s_k + I_k, f_{k-1} + 1) + O_k - 1  (output in job order)

    Exact when no engine waits for K/V; a lower bound otherwise. A ``kv`` producer sending
    one token (``2*Dk`` beats) at a time round-robin over the jobs in flight keeps up when
    ``engines * 2*Dk <= 3*G*Dk`` (``engines <= 1.5*G``: the engines then need at most one
    ``kv`` beat per cycle) and the FIFOs hold two tokens (the default depth); with more
    engines the ``kv`` stream (one beat per cycle) is the bottleneck."""
    q = G * (head_dim // lanes)
    out = []
    for k, (n, partial) in enumerate(jobs):
        i_k, o_k = te_serial_phases(n, head_dim, G, lanes, partial)
        s = 0 if k == 0 else out[-1][0] + 1 + q
        if k >= engines:
            s = max(s, out[k - engines][1] + 1)
        first = s + i_k if k == 0 else max(s + i_k, out[-1][1] + 1)
        out.append((s, first + o_k - 1))
    return out


def te_array_routed_cycles(J, n, head_dim, G, lanes, engines, partial=False):
    """Cycles, first ``job`` beat to last ``out`` beat inclusive, of ``J`` equal jobs of ``n``
    tokens on a routed-K/V array whose engines never wait for K/V
    (:func:`te_array_routed_schedule`). With ``P = 1 + G*Dk`` (dispatch interval),
    ``I = 1 + G*Dk + 3*n*G*Dk``, ``O = G*Dk (+G)`` and ``d = max(P, O)``, when
    ``E*d <= I`` (each job's input phase covers a whole round of dispatches)::

        ((J-1) // E) * (I + O) + ((J-1) % E) * d + I + O

    (waves of ``E`` jobs, one every ``I + O`` cycles, staggered by ``d``; ``E = 1`` gives
    ``J * (I + O)``, a single TE's ``J * te_cycles``); otherwise the recurrence's value."""
    if n < 0 or J < 1:
        raise ValueError(f"te_array_routed_cycles needs J >= 1 and n >= 0, got J={J}, n={n}")
    i, o = te_serial_phases(n, head_dim, G, lanes, partial)
    d = max(1 + G * (head_dim // lanes), o)
    if engines * d <= i:
        return (J - 1) // engines * (i + o) + (J - 1) % engines * d + i + o
    return te_array_routed_schedule([(n, partial)] * J, head_dim, G, lanes, engines)[-1][1] + 1
