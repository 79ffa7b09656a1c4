"""The CLI's user errors: :class:`InputError` for bad input files and flags, and
:func:`one_line_argparse`, which makes an argparse parser report a bad flag the same way (one
line ``tricut: error: ...`` on stderr, exit 2, no usage block)."""

from __future__ import annotations

import argparse
import sys

from ..harness.waves import one_line

__all__ = ["InputError", "one_line", "one_line_argparse", "positive_int_list"]


class InputError(ValueError):
    """Bad input file or flag; printed as one line."""


def one_line_argparse(parser: argparse.ArgumentParser, *, with_command: bool = False
                      ) -> argparse.ArgumentParser:
    """Make ``parser`` report a bad flag as ``tricut: error: [<command>: ]<message>`` (one
    line, exit 2, no usage block) and refuse arguments it does not know itself instead of
    handing them to the top-level parser (which would print a usage block)."""
    command = parser.prog.removeprefix("tricut").strip()
    prefix = f"{command}: " if with_command and command else ""

    def error(message):
        print(f"tricut: error: {prefix}{one_line(message)}", file=sys.stderr)
        raise SystemExit(2)

    parse_known = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        ns, extras = parse_known(args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras

    parser.error = error
    parser.parse_known_args = parse_known_args
    return parser


def positive_int_list(text: str) -> list[int]:
    """An argparse type: ``N,N,...`` of integers >= 1 (``_`` allowed as a digit separator)."""
    values = []
    for part in text.split(","):
        try:
            value = int(part.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not an integer") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value} is not positive")
        values.append(value)
    return values
