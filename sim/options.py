"""The user's input below the command line: :class:`InputError`, the error of every bad input
(a file, a flag, a grid's setting), and the options of a run as text.

A typed run's options (:class:`tricut.sim.fast.run.RunOptions`,
:class:`tricut.sim.harness.tile.options.TileRunOptions`) declare each field with
:func:`option`: the command line's flag, which also names the option in a message, and the
parser of its text. The command line (argparse, ``type=``) and a sweep's grid (its values
rendered as the flag's text) parse with the same parser, so that a value is refused with the
same message wherever it comes from: ``argument --tp: 0 must be > 0``.

Which options act in which mode is declared once per command, as a table ``{field name:
(Needs, ...)}`` beside its options (``RunOptions``: ``APPLIES`` in ``sim/fast/run.py``;
``TileRunOptions``: ``APPLIES`` in ``sim/harness/tile/options.py``; the unit commands beside
their parsers): :func:`refuse_inapplicable` refuses an option that was given where it would
not act, with one line naming it and what it needs (``--cdu-sets needs --policy``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

__all__ = ["InputError", "Option", "option", "options_of", "positive_ints", "checked_fields",
           "values_of", "Needs", "given_fields", "refuse_inapplicable", "given_on_command_line"]


class InputError(ValueError):
    """Bad input file, flag or setting; printed as one line."""


@dataclass(frozen=True)
class Option:
    """One option of a run as the command line takes it: ``flag``; ``parse``, its text to its
    value (an :class:`InputError` saying why not; None: the text itself); ``choices``, the
    values allowed in the order a message lists them (or a function returning them); ``text``,
    a value back to its text; ``switch``: a flag without a value (true when given); ``repeat``:
    the flag may be given again, its values collected."""
    flag: str
    parse: Callable[[str], Any] | None = None
    choices: Sequence | Callable[[], Sequence] | None = None
    text: Callable[[Any], str] = str
    switch: bool = False
    repeat: bool = False

    def allowed(self) -> Sequence | None:
        return self.choices() if callable(self.choices) else self.choices

    def value(self, text: str):
        """``text`` as the command line parses the flag's value; an :class:`InputError`
        ``argument FLAG: why`` (argparse's words) if it refuses it."""
        try:
            value = text if self.parse is None else self.parse(text)
        except InputError as e:
            raise InputError(f"argument {self.flag}: {e}") from None
        allowed = self.allowed()
        if allowed is not None and value not in allowed:
            raise InputError(f"argument {self.flag}: invalid choice: {value!r} (choose from "
                             f"{', '.join(map(repr, allowed))})")
        return value


def option(flag: str, default=None, parse=None, **kw):
    """A dataclass field that is the option ``flag`` (:class:`Option`'s other arguments)."""
    return field(default=default, metadata={"option": Option(flag, parse, **kw)})


def options_of(cls) -> dict[str, Option]:
    """``{field name: Option}`` of a dataclass declared with :func:`option`, in field order."""
    return {f.name: f.metadata["option"] for f in fields(cls) if "option" in f.metadata}


def values_of(cls, items, exclusive: Sequence[Sequence[str]] = ()) -> dict:
    """``items`` (``(field name, text)`` pairs; a switch's text is ignored) parsed in their
    order as the command line parses ``FLAG TEXT ...``: each value refused with the command's
    message, a repeatable option's values collected in a tuple, the second option of an
    ``exclusive`` group refused (``argument --b: not allowed with argument --a``). Returns
    ``{field name: value}`` for :meth:`cls(**values) <cls>`."""
    table, values, seen = options_of(cls), {}, []
    for name, text in items:
        opt = table[name]
        value = True if opt.switch else opt.value(text)
        for group in exclusive:
            other = next((n for n in seen if n in group and n != name), None) if name in group else None
            if other is not None:
                raise InputError(f"argument {opt.flag}: not allowed with argument {table[other].flag}")
        seen.append(name)
        values[name] = values.get(name, ()) + (value,) if opt.repeat else value
    return values


def checked_fields(obj, exclusive: Sequence[Sequence[str]] = ()) -> None:
    """Check and normalise every field of ``obj`` (a frozen dataclass declared with
    :func:`option`) that is neither None nor its default: its value is what its text
    (``Option.text``) parses to, so a value the command line would refuse is refused with the
    same message, and a value is stored as the command line would store it (``2`` as ``2.0``
    for a number, a list as a tuple). At most one field of each ``exclusive`` group may be
    set."""
    for f in fields(obj):
        if "option" not in f.metadata:
            continue
        opt, value = f.metadata["option"], getattr(obj, f.name)
        if _at_default(f, value):
            continue
        if opt.switch:
            if not isinstance(value, bool):
                raise InputError(f"argument {opt.flag}: expected true or false, got {value!r}")
            continue
        if opt.repeat:
            value = tuple(opt.value(opt.text(v)) for v in value)
        else:
            value = opt.value(opt.text(value))
        object.__setattr__(obj, f.name, value)
    table = options_of(type(obj))
    for group in exclusive:
        given = [n for n in group if getattr(obj, n) is not None]
        if len(given) > 1:
            raise InputError(f"argument {table[given[1]].flag}: not allowed with argument "
                             f"{table[given[0]].flag}")


def _at_default(f, value) -> bool:
    default = f.default if f.default is not MISSING else None
    return value is None or (value == default and type(value) is type(default))


def given_fields(obj) -> set[str]:
    """The options of ``obj`` (a dataclass declared with :func:`option`) set to neither None
    nor their default: those a user gave, when nothing says which were given."""
    return {f.name for f in fields(obj)
            if "option" in f.metadata and not _at_default(f, getattr(obj, f.name))}


@dataclass(frozen=True)
class Needs:
    """What an option needs to act: ``holds(options)``, whether the options give it, and
    ``says``, the refusal after the flag when they do not (``needs --policy (the tile has no
    CDU without one)``, ``does not apply to --trace``; one starting with a colon follows the
    flag at once: ``--hang: needs ...``). A command declares ``{field name: (Needs, ...)}``
    once (its mode table), and :func:`refuse_inapplicable` applies it."""
    says: str
    holds: Callable[[Any], bool]

    def message(self, flag: str) -> str:
        return f"{flag}{'' if self.says.startswith(':') else ' '}{self.says}"


def refuse_inapplicable(options, applies: dict[str, Sequence[Needs]], given=None,
                        flags: dict[str, str] | None = None) -> None:
    """Refuse an option given where it would not act: for each option of ``applies`` that was
    given, the first of its :class:`Needs` that does not hold is an :class:`InputError`
    ``FLAG SAYS`` (``--cdu-sets needs --policy ...``). ``given``: the names given (on the
    command line, in a grid point); None: of a dataclass declared with :func:`option`, those
    not at their default (:func:`given_fields`); of parsed flags (an argparse namespace), its
    ``flags_given`` (set by ``tricut``'s main: :func:`given_on_command_line`), else those set.
    ``flags``: name -> flag (default: the dataclass's options' flags, else ``--name`` with
    hyphens)."""
    if given is None and hasattr(type(options), "__dataclass_fields__"):
        given = given_fields(options)
    elif given is None:         # parsed flags: those given on the command line, else those set
        given = getattr(options, "flags_given", None)
        if given is None:
            given = {name for name in applies if getattr(options, name, None) not in (None, False, (), [])}
    if flags is None:
        table = options_of(type(options)) if hasattr(type(options), "__dataclass_fields__") else {}
        flags = {name: opt.flag for name, opt in table.items()}
    for name, needs in applies.items():
        if name not in given:
            continue
        for need in needs:
            if not need.holds(options):
                raise InputError(need.message(flags.get(name, "--" + name.replace("_", "-"))))


def given_on_command_line(parser: argparse.ArgumentParser, argv) -> frozenset[str]:
    """The destinations of the options ``argv`` gives to ``parser`` (or to its subcommands'
    parsers), whatever their values: ``argv`` parsed again with every default suppressed, so
    that only what it gives is set. ``argv`` must parse."""
    saved, seen = [], set()

    def suppress(p):
        if id(p) in seen:
            return
        seen.add(id(p))
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    suppress(sub)
            elif a.option_strings and a.default is not argparse.SUPPRESS:
                saved.append((a, a.default))
                a.default = argparse.SUPPRESS
    suppress(parser)
    try:
        namespace = parser.parse_args(list(argv))
    finally:
        for a, default in saved:
            a.default = default
    return frozenset(vars(namespace))


def positive_ints(text: str) -> list[int]:
    """``N,N,...`` of integers >= 1 (``_`` allowed as a digit separator)."""
    values = []
    for part in text.split(","):
        try:
            value = int(part.replace("_", ""))
        except ValueError:
            raise InputError(f"{part!r} is not an integer") from None
        if value < 1:
            raise InputError(f"{value} is not positive")
        values.append(value)
    return values
