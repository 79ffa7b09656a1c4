"""The house plan, checked: which room may import which, and the installed package reads no
test files. models <- rtl <- sim.harness; models <- sim.fast; sim.cli on top of both."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = {"models": "tricut.models", "rtl": "tricut.rtl", "sim": "tricut.sim"}

#: room -> module prefixes it must not import
FORBIDDEN = {
    "models": ("tricut.rtl", "tricut.sim"),
    "rtl": ("tricut.sim",),
    "sim/fast": ("tricut.rtl", "tricut.sim.harness", "tricut.sim.cli"),
    "sim/harness": ("tricut.sim.cli",),
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    top = PACKAGE_DIRS[rel.parts[0]]
    parts = list(rel.with_suffix("").parts[1:])
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([top, *parts])


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved to absolute names."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def _sources(room: str):
    return sorted((ROOT / room).rglob("*.py"))


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_rooms_import_only_what_the_plan_allows(room):
    files = _sources(room)
    assert files, f"no Python files under {room}/"
    bad = [f"{f.relative_to(ROOT)} imports {m}" for f in files for m in sorted(imported_modules(f))
           if m.startswith(FORBIDDEN[room])]
    assert not bad, "; ".join(bad)


def test_the_checker_sees_relative_imports(tmp_path):
    sample = ROOT / "sim" / "fast" / "system.py"
    assert "tricut.sim.fast.timing.StepModel" in imported_modules(sample)


@pytest.mark.parametrize("room", ["models", "rtl", "sim"])
def test_installed_package_reads_no_test_files(room):
    bad = []
    for f in _sources(room):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Constant) and node.value == "tests":
                bad.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"the package names the test tree: {', '.join(bad)}"


@pytest.mark.parametrize("room", ["rtl", "sim/harness"])
def test_no_function_is_longer_than_150_lines(room):
    """Long elaborates are split by pipeline stage (docs: one unit per file, stages as methods),
    long benches by phase."""
    long, files = [], _sources(room)
    assert files, f"no Python files under {room}/"
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 150:
                    long.append(f"{f.relative_to(ROOT)}:{node.name} ({lines} lines)")
    assert not long, "; ".join(long)
