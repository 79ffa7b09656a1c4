"""benchmarks/te_rows.py: the TE rows of docs/results.md, serial@16 against split@32."""

from conftest import load_benchmark


def test_split_engine_stops_binding_where_the_serial_one_did():
    te_rows = load_benchmark("te_rows")
    row = ("llama-3-8b", 1, "nvfp4", 20, 65536)
    serial = te_rows.measure(*row, "serial", 16)
    split = te_rows.measure(*row, "split", 32)
    assert serial["bound"] == "TE" and split["bound"] == "HBM"
    assert split["step_ms"] < serial["step_ms"]
    # per token and KV head: 3*G*Dk = 3*4*8 = 96 cycles against (G+1)*Dk = 5*4 = 20
    assert abs(serial["te_ms"] / split["te_ms"] - 96 / 20) < 0.05
    # a row the TE never bound: same step, same HBM and GEMV terms
    row = ("llama-3-8b", 1, "bf16", 1, 4096)
    a, b = te_rows.measure(*row, "serial", 16), te_rows.measure(*row, "split", 32)
    assert (a["step_ms"], a["hbm_ms"], a["gemv_ms"]) == (b["step_ms"], b["hbm_ms"], b["gemv_ms"])
    assert a["bound"] == b["bound"] == "GEMV"
