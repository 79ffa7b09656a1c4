"""One SM's tile timing kept on disk (sim/fast/slice_memo.py): what it loads is what it would
build, it loads without probing the cycle-stepped model again, a file it cannot read is built
again, another version of the model code is another file, and two processes that need the same
timing at once build it once."""

from __future__ import annotations

import threading
import time

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
    """The kept timings (not the configurations' lock files)."""
    return sorted(p.name for p in d.glob("*.pickle")) if d.exists() else []


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
    (path,) = memo_dir.glob("*.pickle")
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


class _SlowTiming(SliceTiming):
    """A timing whose build takes long enough for a second caller to arrive meanwhile."""
    builds = 0

    def __init__(self, cfg):
        type(self).builds += 1
        time.sleep(0.5)
        super().__init__(cfg)


def test_two_builders_of_one_configuration_build_it_once(memo_dir):
    """Two callers at once (pytest workers, sweep points: each opens the configuration's lock
    file itself, as two threads do here): the second waits for the first's build and loads
    it."""
    _SlowTiming.builds = 0
    got = []
    callers = [threading.Thread(target=lambda: got.append(slice_memo._memo("slice", _SlowTiming, CFG)))
               for _ in range(2)]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    assert len(got) == 2 and _SlowTiming.builds == 1 and _same(got[0], got[1])
    assert len(_files(memo_dir)) == 1
