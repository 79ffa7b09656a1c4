"""The modules of one Verilog file that Amaranth wrote, and that file with one module per kind.

Amaranth writes one module per instance: the TE engines of an array, the lanes of an engine
and the cores of a DSU cluster are each a module of their own, equal but for their names.
:func:`dedupe` merges the modules that are equal up to

* their own name and the kinds of the modules they instantiate,
* Amaranth's ``\\port$<id>$<bit>`` port names, whose ``id`` is numbered design-wide
  (renamed ``\\port$<k>$<bit>``, the ``k``-th such port of the module, in the module and where
  it is instantiated),
* Yosys's numbered ``\\$auto$...$<n>`` wires (the backend's dummy registers, inverters),
  also numbered design-wide: a wire that a continuous ``assign`` drives is named by its
  driver, the others in the order they first appear in the module,
* the order of their single-line continuous assignments (Yosys writes them in hash order).

Two merged modules are then the same text up to names local to them that stand for the same
signal and the order of continuous assignments, so they are the same logic: the merged file
simulates cycle for cycle as the original.
Yosys synthesizes each kind once (:mod:`.area`); Verilator compiles each kind's C++ once
(the ``-O0`` builds: :func:`.cocotb_run.verilator_source`).
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field

__all__ = ["VerilogModulesError", "Module", "parse_modules", "dedupe", "module_name"]


class VerilogModulesError(ValueError):
    """The Verilog is not a file of modules as Amaranth writes them; one line."""


_MODULE = re.compile(r"^module (\\\S+ |[A-Za-z_][\w$]*)\s*\(", re.M)
_AUTO = re.compile(r"\\\$auto\$\S+ ")
_END = re.compile(r"^endmodule\s*$", re.M)
_PORT = re.compile(r"\\port\$\d+\$(\d+) ")
_AUTO_ASSIGN = re.compile(r"^  assign (\\\$auto\$\S+ ) = (.*);$", re.M)


def module_name(token: str) -> str:
    """A Verilog identifier as written (``\\escaped`` with its trailing space, or plain) to
    its name."""
    return token[1:].rstrip() if token.startswith("\\") else token


def _token(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][\w$]*", name) else f"\\{name} "


@dataclass
class Module:
    name: str
    text: str                                     # from ``module`` to ``endmodule``
    instances: list = field(default_factory=list)  # (instance name, module name)


def parse_modules(text: str) -> dict[str, Module]:
    """The modules of one Verilog file written by Amaranth, in file order."""
    heads = list(_MODULE.finditer(text))
    mods = {}
    for h in heads:
        end = _END.search(text, h.end())
        if end is None:
            raise VerilogModulesError(f"module {module_name(h.group(1))} has no endmodule")
        mods[module_name(h.group(1))] = Module(module_name(h.group(1)),
                                               text[h.start():end.end()])
    inst = re.compile(r"^  (\\\S+ |[A-Za-z_][\w$]*) +(\\\S+ |[A-Za-z_][\w$]*) *\($", re.M)
    for m in mods.values():
        for i in inst.finditer(m.text):
            child = module_name(i.group(1))
            if child in mods:
                m.instances.append((module_name(i.group(2)), child))
    return mods


def _canonical_ports(mods: dict[str, Module]) -> None:
    """Rename the ``\\port$<id>$<bit>`` ports of every module ``\\port$<k>$<bit>`` in the
    module and in the instantiations of it, so that equal modules get equal text."""
    renames: dict[str, dict[str, str]] = {}
    for m in mods.values():
        header = m.text[:m.text.index(";")]
        names: dict[str, str] = {}
        for p in _PORT.finditer(header):
            names.setdefault(p.group(0), f"\\port${len(names)}${p.group(1)} ")
        if names:
            renames[m.name] = names
            m.text = _PORT.sub(lambda p: names.get(p.group(0), p.group(0)), m.text)
    for m in mods.values():
        for _, child in m.instances:
            if child not in renames:
                continue
            names = renames[child]
            out, pos = [], 0
            for i in re.finditer(rf"^  {re.escape(_token(child))} +\S+ *\($.*?^  \);$", m.text,
                                 re.M | re.S):
                out += [m.text[pos:i.start()],
                        _PORT.sub(lambda p: names.get(p.group(0), p.group(0)), i.group(0))]
                pos = i.end()
            m.text = "".join(out) + m.text[pos:]


def _kind_text(body: str) -> str:
    """``body`` as its kind's key: each ``\\$auto$`` wire that a continuous ``assign`` drives
    named by what drives it (Yosys's inverters: two wires of one driver are one signal), the
    others numbered in the order they first appear, and the single-line continuous
    assignments, whose order does not matter, sorted after the rest."""
    drivers = {m.group(1): m.group(2) for m in _AUTO_ASSIGN.finditer(body)}
    names: dict[str, str] = {}
    for a in _AUTO.finditer(body):
        if a.group(0) not in drivers:
            names.setdefault(a.group(0), f"\0auto{len(names)}\0")

    def name(token, depth=0):
        if token not in names:
            if depth > 100:
                raise VerilogModulesError("numbered wires driven in a loop")
            expr = _AUTO.sub(lambda a: name(a.group(0), depth + 1), drivers[token])
            names[token] = f"\0auto[{expr}]\0"
        return names[token]
    lines = _AUTO.sub(lambda a: name(a.group(0)), body).split("\n")
    assigns = [x for x in lines if x.startswith("  assign ") and x.endswith(";")]
    return "\n".join([x for x in lines if not (x.startswith("  assign ") and x.endswith(";"))]
                     + sorted(assigns))


def dedupe(mods: dict[str, Module], top: str) -> tuple[str, dict[str, str]]:
    """Verilog of ``top`` and what it instantiates with one module per kind (see the module
    docs), and each module's representative (the first of its kind, instantiated in its
    place). Renames the ``\\port$<id>$<bit>`` ports of ``mods``."""
    if top not in mods:
        raise VerilogModulesError(f"no module {top}")
    _canonical_ports(mods)
    key: dict[str, str] = {}
    rep: dict[str, str] = {}
    first: dict[str, str] = {}

    def kind(name, depth=0):
        if name in key:
            return key[name]
        if depth > 1000:
            raise VerilogModulesError("module hierarchy too deep")
        m = mods[name]
        body = _kind_text(m.text.replace(_token(name), "\0SELF\0", 1))
        for _, child in m.instances:
            body = body.replace(_token(child), f"\0{kind(child, depth + 1)}\0")
        key[name] = k = hashlib.sha1(body.encode()).hexdigest()
        return k

    order = []

    def visit(name, depth=0):
        k = kind(name)
        if k not in first:
            first[k] = name
            order.append(name)
        rep[name] = first[k]
        for _, child in mods[name].instances:
            if child not in rep:
                visit(child, depth + 1)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    visit(top)
    out = []
    for name in order:
        text = mods[name].text
        for _, child in mods[name].instances:
            if rep[child] != child:
                text = text.replace(_token(child), _token(rep[child]))
        out.append(text)
    return "\n\n".join(out) + "\n", rep
