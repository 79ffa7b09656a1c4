"""Unit-level commands: `tricut te`, `tricut cdu`, `tricut dsu` and `tricut verilog`, one
module each."""

from __future__ import annotations

from . import cdu_cmd, dsu_cmd, te_cmd, verilog_cmd
from .errors import InputError

__all__ = ["add_commands", "InputError"]


def add_commands(sub) -> None:
    cdu_cmd.add_commands(sub)
    te_cmd.add_commands(sub)
    dsu_cmd.add_commands(sub)
    verilog_cmd.add_commands(sub)
