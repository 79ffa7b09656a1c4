"""The decode tile's code, counted at two git revisions: lines of the tile wing (the tile's RTL,
its co-simulation harness, its timing models), the co-simulation harness's modules, import
cycles and private-name imports among them, its simulation tops, and the places outside the
tests that compose a tile-level design.

    .venv/bin/python benchmarks/tile_wing.py                      # before (--base) and HEAD
    .venv/bin/python benchmarks/tile_wing.py --write              # ... into docs/tile/figures.md

Files are read from git (``git show REV:PATH``), so the working tree does not matter. The tile
wing is ``rtl/tile/`` (all of it), the co-simulation harness (``sim/harness/tile/``, or before
it the modules ``sim/harness/attention_tile*.py`` and ``sim/harness/tile_cosim*.py``) and the
tile's timing models (``models/tile_timing.py`` and ``models/te_array_timing.py``, or before
them ``sim/fast/tile_timing.py`` and ``sim/fast/cached_tile_timing.py``). An import cycle is a
cycle among the harness's modules counting every ``import`` statement, module-level or inside a
function; a private-name import is ``from M import _name`` between two of them. A simulation
top is a class of the harness whose name ends in ``Top``; a composition site is a call of
``AttentionTile(``, ``CachedAttentionTile(`` (the names before), ``AttentionPath(`` or
``DecodeTile(`` in ``rtl/``, ``sim/`` or
``benchmarks/``. ``--write`` replaces the text between ``<!-- tile:wing:begin -->`` and
``<!-- tile:wing:end -->`` in docs/tile/figures.md.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent

DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:wing:begin -->", "<!-- tile:wing:end -->"
SCRIPT = "benchmarks/tile_wing.py"
#: the last commit before the one-decode-tile work
BASE = "46b0c15"
HARNESS = re.compile(r"^sim/harness/(tile/[^/]+|attention_tile[^/]*|tile_cosim[^/]*)\.py$")
TIMING = re.compile(r"^(models|sim/fast)/((cached_)?tile|te_array)_timing\.py$")
COMPOSE = ("AttentionTile", "CachedAttentionTile", "AttentionPath", "DecodeTile")


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def files(rev):
    return [p for p in _git("ls-tree", "-r", "--name-only", rev).splitlines()
            if p.endswith(".py")]


def _module(path):
    return "tricut." + path[:-3].replace("/", ".")


def _imports(tree, name):
    """``(module, [imported names])`` of every import statement, resolved to full names."""
    pkg = name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            out.append((base, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def _cycles(graph):
    """The strongly connected components of more than one module (each is one cycle or more)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return comps


def _calls(source):
    """Calls of a tile-level design's constructor in ``source``."""
    n = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            n += name in COMPOSE
    return n


def count(rev):
    paths = files(rev)
    text = {p: _git("show", f"{rev}:{p}") for p in paths
            if p.startswith(("rtl/", "sim/", "benchmarks/")) or TIMING.match(p)}
    lines = {k: sum(len(text[p].splitlines()) for p in text if sel(p)) for k, sel in (
        ("rtl", lambda p: p.startswith("rtl/tile/")),
        ("harness", lambda p: bool(HARNESS.match(p))),
        ("timing", lambda p: bool(TIMING.match(p))))}
    harness = sorted(p for p in text if HARNESS.match(p) and not p.endswith("__init__.py"))
    mods = {_module(p): p for p in harness}
    graph, private, tops = {}, 0, 0
    for name, p in mods.items():
        tree = ast.parse(text[p])
        deps = set()
        for base, names in _imports(tree, name):
            if base in mods:
                deps.add(base)
                private += sum(n.startswith("_") for n in names)
            deps |= {f"{base}.{n}" for n in names if f"{base}.{n}" in mods}
        graph[name] = deps - {name}
        tops += sum(isinstance(n, ast.ClassDef) and n.name.endswith("Top") for n in ast.walk(tree))
    sites = sum(_calls(t) for p, t in text.items() if p.startswith(("rtl/", "sim/", "benchmarks/")))
    return dict(lines=lines, total=sum(lines.values()), modules=len(harness),
                cycles=len(_cycles(graph)), private=private, tops=tops, sites=sites)


def report(base, head, rows):
    b, h = rows
    head_line = (f"Counted by `.venv/bin/python {SCRIPT} --base {base}` (files read from git; "
                 f"definitions in the script's docstring): before = `{base}`, after = "
                 f"`{head}`.")
    table = ["| | before | after |", "|---|---:|---:|"]
    for label, key in (("tile RTL lines (`rtl/tile/`)", ("lines", "rtl")),
                       ("co-simulation harness lines", ("lines", "harness")),
                       ("tile timing model lines", ("lines", "timing")),
                       ("tile wing lines, total", ("total",)),
                       ("co-simulation harness modules", ("modules",)),
                       ("import cycles among them", ("cycles",)),
                       ("private-name imports between them", ("private",)),
                       ("simulation tops", ("tops",)),
                       ("places that construct a tile-level design", ("sites",))):
        vals = []
        for r in (b, h):
            v = r
            for k in key:
                v = v[k]
            vals.append(f"{v:,}")
        table.append(f"| {label} | {vals[0]} | {vals[1]} |")
    return head_line + "\n\n" + "\n".join(table) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--base", default=BASE, help="the revision before (default: %(default)s)")
    ap.add_argument("--head", default="HEAD", help="the revision after (default: %(default)s)")
    ap.add_argument("--write", action="store_true",
                    help="write the table into docs/tile/figures.md")
    args = ap.parse_args(argv)
    try:
        head = _git("rev-parse", "--short", args.head).strip()
        base = _git("rev-parse", "--short", args.base).strip()
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"{SCRIPT}: not a git revision: {e.cmd[-1]}")
    text = report(base, head, [count(base), count(head)])
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
