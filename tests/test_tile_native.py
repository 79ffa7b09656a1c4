"""The native replay of a co-simulation (``sim/harness/tile/native.py``,
``native_replay.cpp``, the stimulus file of ``sim/harness/tile/stimulus.py``; docs/tile/cosim.md,
"Native replay"): a cocotb run on Verilator records its stimulus, the C++ main linked against
the same build plays it with no Python and checks every value the bench read.

* on the tile without the CDU, with the CDU (``static``; ``adaptive`` with 4 engines and
  split-K) and with the DSU cluster driving the rounds (HBM faults, retries, a rolled-back
  step), the replay runs the cocotb run's cycles and every check passes;
* the replay fails, naming the signal and the half period, when what it reads differs: a
  recorded value changed, or a bit of the HBM image flipped;
* a file that is not a stimulus file is refused with one line.

The builds are the other Verilator tests' (``tests/test_tile_cosim_verilator.py``'s ``-O0``
builds, ``tests/test_tile_dsu.py``'s); the replay links against them (seconds).
"""

from __future__ import annotations

import re

import pytest

from tricut.sim.harness.tile import native as N
from tricut.sim.harness.tile import verilator as V
from tricut.sim.harness.tile.compare import compare, compare_cdu
from tricut.sim.harness.tile.cases import ADAPTIVE, DSU_BASE, EQUIV, QUICK_OPT, STATIC
from tricut.sim.harness.tile.golden import golden_run
from tricut.sim.harness.tile.setup import Setup

DSU_FAULTS = Setup(**DSU_BASE, faults=((0, 1, 1, 0, 1), (2, 0, 1, 0, 2)))
CASES = {"hbm": (EQUIV, QUICK_OPT), "static": (STATIC, QUICK_OPT),
         "adaptive-e4": (ADAPTIVE, QUICK_OPT), "dsu-faults": (DSU_FAULTS, V.DEFAULT_OPT)}


@pytest.fixture
def recorded(request, tmp_path):
    s, opt = CASES[request.param]
    golden = golden_run(s)
    res, info, b, stim, image = N.record(s, golden=golden, opt=opt, workdir=tmp_path)
    assert compare(golden, res) == [] and compare_cdu(s, res) == []
    return s, info, b, stim, image


@pytest.mark.parametrize("recorded", list(CASES), indirect=True)
def test_replay_runs_the_cocotb_runs_cycles_and_reads_the_same(recorded):
    s, info, b, stim, image = recorded
    r = N.replay(b, stim, image)
    assert r.writes > 0 and r.checks > 0 and r.loop_s > 0
    lines = stim.read_text().splitlines()
    assert r.checks == sum(line.startswith("c ") for line in lines)
    assert r.writes == sum(line.startswith("w ") for line in lines)
    if not s.dsu:           # with the DSU the bench's cycle count skips the cluster's own
        assert r.cycles == info.cycles


def _edit_last_check(path, value):
    lines = path.read_text().splitlines()
    i = max(k for k, line in enumerate(lines) if line.startswith("c "))
    kind, half, hid, old = lines[i].split()
    lines[i] = " ".join([kind, half, hid, value(old)])
    path.write_text("\n".join(lines) + "\n")
    handle = next(line.split()[2] for line in lines if line.startswith(f"handle {hid} "))
    return handle, half


@pytest.mark.parametrize("recorded", ["static"], indirect=True)
def test_replay_fails_on_a_value_read_differently(recorded):
    _, _, b, stim, image = recorded
    handle, half = _edit_last_check(stim, lambda old: format(int(old, 16) ^ 1, "x"))
    with pytest.raises(N.NativeError, match=rf"{re.escape(handle)}.* at half period {half} "
                                            r"is \w+, the cocotb run read \w+"):
        N.replay(b, stim, image)


@pytest.mark.parametrize("recorded", ["hbm"], indirect=True)
def test_replay_fails_on_a_flipped_hbm_bit(recorded):
    _, _, b, stim, image = recorded
    words = image.read_text().splitlines()
    words[1] = format(int(words[1], 16) ^ (1 << 3), "x")     # a K word of request 0's prompt
    image.write_text("\n".join(words) + "\n")
    with pytest.raises(N.NativeError, match="the cocotb run read"):
        N.replay(b, stim, image)


@pytest.mark.parametrize("recorded", ["hbm"], indirect=True)
def test_replay_refuses_a_file_that_is_not_a_stimulus(recorded, tmp_path):
    _, _, b, _, image = recorded
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\n")
    with pytest.raises(N.NativeError, match="is not a tricut stimulus file"):
        N.replay(b, bad, image)
    bad.write_text("tricut-stimulus 1\nw 0 7 1\n")
    with pytest.raises(N.NativeError, match="unknown handle in w 0 7 1"):
        N.replay(b, bad, image)
