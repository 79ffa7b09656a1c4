"""The TE rows of docs/results.md (benchmarks/te_rows.py; ``sim/fast/step_terms.py``), serial@16
against pipelined@32, each as the grid of decode tiles (docs/system-model.md, "The TE term: a
grid of tiles")."""

from tricut.sim.fast.step_terms import first_step_terms


def test_pipelined_engine_binds_less_than_the_serial_one():
    row = ("llama-3-8b", 1, "nvfp4", 20, 65536)
    serial = first_step_terms(*row, "serial", 16)
    pipelined = first_step_terms(*row, "pipelined", 32)
    # NVFP4 at 20 x 64K: the TE grid binds both (the serial engine's cycles; the pipelined
    # one's 64 reads in flight), the pipelined one far less
    assert serial["bound"] == pipelined["bound"] == "TE"
    assert pipelined["te_ms"] < 0.7 * serial["te_ms"]
    assert pipelined["step_ms"] < serial["step_ms"]
    # a row the TE never bound: same step, same HBM and GEMV terms
    row = ("llama-3-8b", 1, "bf16", 1, 4096)
    a, b = first_step_terms(*row, "serial", 16), first_step_terms(*row, "pipelined", 32)
    assert (a["step_ms"], a["hbm_ms"], a["gemv_ms"]) == (b["step_ms"], b["hbm_ms"], b["gemv_ms"])
    assert a["bound"] == b["bound"] == "GEMV"
