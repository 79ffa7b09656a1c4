"""The garbage collector's thresholds (``sim/collector.py``): every command sets them."""

from __future__ import annotations

import gc

from tricut.sim import collector
from tricut.sim.cli.testing import run_cli


def test_the_command_line_sets_the_thresholds(capsys):
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        code, cap = run_cli(["roofline", "--model", "llama-3-8b", "--gpu", "h100-sxm5",
                             "--context", "4096", "--batch", "1"], capsys)
        assert code == 0 and cap.out, cap.err
        assert gc.get_threshold() == collector.THRESHOLDS
    finally:
        gc.set_threshold(*saved)
