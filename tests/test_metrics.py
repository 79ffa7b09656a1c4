"""Metric definitions on hand-computed cases (docs/metrics.md)."""

import pytest

from tricut.sim.fast.metrics import RequestTimes, summarise


def test_single_request_by_hand():
    r = RequestTimes(arrival_s=1.0, token_times_s=(1.5, 1.6, 1.8, 2.1))
    assert r.ttft_s == pytest.approx(0.5)
    assert r.e2e_s == pytest.approx(1.1)
    assert r.tpot_s == pytest.approx((2.1 - 1.5) / 3)
    assert r.itls_s == pytest.approx([0.1, 0.2, 0.3])
    assert RequestTimes(0.0, (0.25,)).tpot_s is None


def test_summary_by_hand():
    a = RequestTimes(0.0, (1.0, 2.0, 3.0))      # ttft 1, tpot 1, itl 1 1, e2e 3
    b = RequestTimes(1.0, (1.5, 1.75))          # ttft .5, tpot .25, itl .25, e2e .75
    c = RequestTimes(2.0, (4.0,))               # ttft 2, one token, e2e 2
    s = summarise([a, b, c], ttft_slo_s=1.0, tpot_slo_s=0.5)
    assert s.requests == 3 and s.output_tokens == 6
    assert s.duration_s == 4.0
    assert s.tokens_per_s == 1.5 and s.requests_per_s == 0.75
    assert s.goodput_rps == 0.25                # only b meets ttft<=1 and tpot<=.5
    assert s.ttft_mean_s == pytest.approx(3.5 / 3)
    assert s.tpot_mean_s == pytest.approx(0.625)
    assert s.itl_mean_s == pytest.approx(2.25 / 3)
    d = s.as_dict()
    assert d["ttft_p50_s"] == 1.0
    assert d["ttft_p99_s"] == pytest.approx(1.0 + 0.98 * 1.0)   # linear interpolation, 3 points
    assert d["tpot_p50_s"] == pytest.approx(0.625)
    assert d["e2e_p90_s"] == pytest.approx(2.0 + 0.8 * 1.0)
    assert summarise([a, b, c]).goodput_rps == 0.75


def test_invalid_inputs():
    with pytest.raises(ValueError, match="at least one output token"):
        RequestTimes(0.0, ())
    with pytest.raises(ValueError, match="must not precede"):
        RequestTimes(1.0, (0.5,))
    with pytest.raises(ValueError, match="must not precede"):
        RequestTimes(0.0, (1.0, 0.9))
    with pytest.raises(ValueError, match="no finished requests"):
        summarise([])
