"""The CLI's user errors: :class:`InputError` for bad input files and flags (declared in
``sim/options.py``, below the command line, and raised by the layers under it too),
:func:`one_line_argparse`, which makes an argparse parser report a bad flag the same way (one
line ``tricut: error: ...`` on stderr, exit 2, no usage block), and :func:`argparse_type`,
an option's parser as an argparse ``type``."""

from __future__ import annotations

import argparse
import sys

from ..harness.waves import one_line
from ..options import InputError, positive_ints

__all__ = ["InputError", "argparse_type", "one_line", "one_line_argparse", "positive_int_list"]


def argparse_type(parse):
    """``parse`` (text -> value, :class:`InputError` saying why not) as an argparse ``type``:
    argparse prints the refusal as ``argument FLAG: why``."""
    def convert(text):
        try:
            return parse(text)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


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


#: An argparse type: ``N,N,...`` of integers >= 1 (``_`` allowed as a digit separator;
#: :func:`~tricut.sim.options.positive_ints`).
positive_int_list = argparse_type(positive_ints)
