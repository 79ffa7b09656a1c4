"""One SM's tile timing kept on disk (sim/fast/slice_memo.py): what it loads is what it would
build, it loads without probing the cycle-stepped model again, a file it cannot read is built
again, and another version of the model code is another file."""

from __future__ import annotations

import numpy as np
import pytest

from tricut.models import sm_slice
from tricut.models.config import load_gpu, load_model
from tricut.models.sm_slice import SliceTiming, slice_config
from tricut.sim.fast import slice_memo

CFG = slice_config(load_gpu("h100-sxm5"), load_model("tiny-te"), "bf16", 0.9)


@pytest.fixture
def memo_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(slice_memo, "SLICE_MEMO", tmp_path / "slice-timing")
    slice_memo.memo_slice_timing.cache_clear()
    yield tmp_path / "slice-timing"
    slice_memo.memo_slice_timing.cache_clear()


def _same(a: SliceTiming, b: SliceTiming) -> bool:
    if vars(a).keys() != vars(b).keys():
        return False
    for k, v in vars(a).items():
        w = vars(b)[k]
        if isinstance(v, np.ndarray):
            if not (isinstance(w, np.ndarray) and v.dtype == w.dtype and np.array_equal(v, w)):
                return False
        elif v != w:
            return False
    return True


def _files(d):
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_kept_timing_is_the_built_one_and_loads_without_probing(memo_dir, monkeypatch):
    built = SliceTiming(CFG)
    first = slice_memo.memo_slice_timing(CFG)
    assert _same(first, built) and len(_files(memo_dir)) == 1
    assert first.sm_cycles([700, 33]) == built.sm_cycles([700, 33])

    def no_probe(*a, **k):
        raise AssertionError("probed the cycle-stepped model although the timing was kept")
    monkeypatch.setattr(sm_slice, "_unit_stepped", no_probe)
    slice_memo.memo_slice_timing.cache_clear()
    again = slice_memo.memo_slice_timing(CFG)
    assert again is not first and _same(again, built)
    with pytest.raises(AssertionError, match="probed"):       # the check above can fail
        SliceTiming(CFG)


def test_an_unreadable_file_is_built_again(memo_dir):
    slice_memo.memo_slice_timing(CFG)
    (path,) = memo_dir.iterdir()
    for junk in (b"", b"not a pickle", path.read_bytes()[:40]):
        path.write_bytes(junk)
        slice_memo.memo_slice_timing.cache_clear()
        assert _same(slice_memo.memo_slice_timing(CFG), SliceTiming(CFG))
        assert _files(memo_dir) == [path.name] and len(path.read_bytes()) > 40


def test_another_model_version_or_configuration_is_another_file(memo_dir, monkeypatch):
    slice_memo.memo_slice_timing(CFG)
    monkeypatch.setattr(slice_memo, "_code_digest", lambda: "another version of models/")
    slice_memo.memo_slice_timing.cache_clear()
    slice_memo.memo_slice_timing(CFG)
    assert len(_files(memo_dir)) == 2


def test_a_read_only_place_only_costs_the_keeping(memo_dir, monkeypatch):
    memo_dir.parent.joinpath("slice-timing").write_text("a file where the folder would be")
    assert _same(slice_memo.memo_slice_timing(CFG), SliceTiming(CFG))
    assert not any(p.name.startswith(".") for p in memo_dir.parent.iterdir())
