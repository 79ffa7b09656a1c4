"""The parameter dict of a tile run: the tile's parameters (:data:`TILE_KEYS`), the step
sequencer's ``max_slots`` and the behavioural HBM model's, with defaults (:data:`DEFAULTS`). A co-simulation's dict is
:meth:`tricut.sim.harness.tile.golden.RunInputs.params` (adding ``engine``, ``cdu`` and
``dsu``)."""

__all__ = ["DEFAULTS", "TILE_KEYS", "with_defaults"]

#: parameters of a run: the tile's, the sequencer's ``max_slots`` and the HBM model's
DEFAULTS = dict(engines=1, head_dim=64, G=2, lanes=16, kv_dtype="bf16", num_layers=2,
                num_kv_heads=2, split_tokens=0, slot_bits=2, max_ctx=32, num_requests=4,
                max_beats=16, max_outstanding=4, max_slots=4, latency=8, reorder=False,
                hbm_seed=1, hbm_outstanding=4, hbm_rate=(1, 1))

#: the keys of a run's parameters that are the tile's (``AttentionPath`` and ``DecodeTile``
#: take them as they are)
TILE_KEYS = ("engines", "head_dim", "G", "lanes", "kv_dtype", "num_layers", "num_kv_heads",
             "split_tokens", "slot_bits", "max_ctx", "num_requests", "max_beats",
             "max_outstanding")


def with_defaults(p):
    """``p`` (a dict or None) over :data:`DEFAULTS`."""
    out = dict(DEFAULTS)
    out.update(p or {})
    return out
