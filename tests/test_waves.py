"""``tricut te run --wave FILE --wave-window START:END`` on both simulators: the file holds the
expected signals and only the window (its first time is the window's start, its last the
window's end, exactly END - START clock cycles), the windowed values equal the full trace's;
``--max-cycles`` stops a run (exit 1) and keeps its waves; the TTY progress line."""

from __future__ import annotations

import io

import numpy as np
from vcd.reader import TokenKind, tokenize

from tricut.sim.cli import main
from tricut.sim.cli import te_cmd
from tricut.sim.cli.testing import only_progress

SIGNALS = {"clk", "desc__valid", "kv__valid", "out__valid", "mac_busy", "status"}


def _vectors(path, n=3):
    r = np.random.default_rng(5)
    np.savez(path, q=r.standard_normal((1, 64)).astype(np.float32),
             k=r.standard_normal((n, 64)).astype(np.float32),
             v=r.standard_normal((n, 64)).astype(np.float32))
    return str(path)


def _run(argv, capsys):
    """``tricut argv`` in-process; ``te run`` on the serial engine: with the pipelined engine's
    many signals Amaranth's VCD uses the identifier code ``\\'`` (valid VCD, which GTKWave
    reads), and pyvcd's reader takes a leading backslash for an escaped name and fails."""
    if argv[:2] == ["te", "run"]:
        argv = argv + ["--engine", "serial"]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    return (rc, *capsys.readouterr())


def _read_vcd(path):
    """(names, scale in s, [(time, {id: value})], id of 'clk') with pyvcd's reader."""
    names, ids, sections = set(), {}, []
    scale = None
    with open(path, "rb") as f:
        for tok in tokenize(f):
            k = tok.kind
            if k is TokenKind.TIMESCALE:
                scale = tok.data.magnitude.value * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9,
                                                    "ps": 1e-12, "fs": 1e-15}[tok.data.unit.value]
            elif k is TokenKind.VAR:
                names.add(tok.data.reference)
                ids.setdefault(tok.data.reference, tok.data.id_code)
            elif k is TokenKind.CHANGE_TIME:
                sections.append((tok.data, {}))
            elif k in (TokenKind.CHANGE_SCALAR, TokenKind.CHANGE_VECTOR, TokenKind.CHANGE_REAL,
                       TokenKind.CHANGE_STRING):
                sections[-1][1][tok.data.id_code] = tok.data.value
    return names, scale, sections, ids


def _states(sections):
    """time -> the full state after that time's changes."""
    state, out = {}, {}
    for t, ch in sections:
        state.update(ch)
        out[t] = dict(state)
    return out


def _rising(changes_in_order):
    prev, n = None, 0
    for v in changes_in_order:
        if prev in ("0", 0) and v in ("1", 1):
            n += 1
        prev = v
    return n


def test_amaranth_vcd_window(tmp_path, capsys):
    vec = _vectors(tmp_path / "v.npz")
    rc, out, err = _run(["te", "run", "--in", vec, "--out", str(tmp_path / "full.npz"),
                         "--lanes", "2", "--wave", str(tmp_path / "full.vcd")], capsys)
    assert rc == 0, err
    start, end = 10, 40
    rc, out, err = _run(["te", "run", "--in", vec, "--out", str(tmp_path / "r.npz"), "--lanes", "2",
                         "--wave", str(tmp_path / "w.vcd"), "--wave-window", f"{start}:{end}"],
                        capsys)
    assert rc == 0 and only_progress(err), err
    assert "waves: " in out and f"(cycles {start}:{end})" in out
    names, scale, sections, ids = _read_vcd(tmp_path / "w.vcd")
    assert SIGNALS <= names
    # Amaranth: 1 ns clock, rising edges at 0.5 ns + k ns; cycle c starts at c*1ns - 0.5 ns
    p = round(1e-9 / scale)
    t0 = -p // 2
    times = [t for t, _ in sections]
    assert times[0] == t0 + start * p and times[-1] == t0 + end * p
    assert all(times[0] <= t <= times[-1] for t in times)
    clk = ids["clk"]
    assert _rising([ch[clk] for _, ch in sections if clk in ch]) == end - start
    # the window's values are the full trace's at the same times
    _, _, full, _ = _read_vcd(tmp_path / "full.vcd")
    full_states, win_states = _states(full), _states(sections)
    for t in times:
        assert win_states[t] == full_states[t], t
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full.npz", "full.vcd", "r.npz", "v.npz",
                                                          "w.vcd"]


def test_max_cycles_stops_the_run_and_keeps_its_waves(tmp_path, capsys):
    vec = _vectors(tmp_path / "v.npz")
    rc, out, err = _run(["te", "run", "--in", vec, "--out", str(tmp_path / "r.npz"), "--lanes", "2",
                         "--max-cycles", "20", "--wave", str(tmp_path / "w.vcd")], capsys)
    assert rc == 1 and len(err.splitlines()) == 1 and "--max-cycles budget after 20 cycles" in err
    assert not (tmp_path / "r.npz").exists()
    _, scale, sections, _ = _read_vcd(tmp_path / "w.vcd")
    assert sections[-1][0] <= 20 * round(1e-9 / scale)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.npz", "w.vcd"]


def test_progress_line(monkeypatch):
    clock = iter(range(0, 100))
    monkeypatch.setattr(te_cmd.time, "monotonic", lambda: float(next(clock)))
    buf = io.StringIO()
    prog = te_cmd.Progress(10_000, stream=buf)
    for c in (0, 256, 512):
        prog(c)
    prog.done()
    text = buf.getvalue()
    assert "\rte run: 512 / 10,000 cycles (5.1 %), 256 cycles/s, ETA 37 s" in text
    assert text.endswith("\r\x1b[K")


def test_verilator_fst_window(tmp_path, capsys):
    import pylibfst      # a dependency (pyproject.toml): missing, the test errors
    from pylibfst import lib

    vec = _vectors(tmp_path / "v.npz")
    start, end = 5, 30
    wave = tmp_path / "w.fst"
    rc, out, err = _run(["te", "run", "--in", vec, "--out", str(tmp_path / "r.npz"), "--lanes", "2",
                         "--sim", "verilator", "--wave", str(wave),
                         "--wave-window", f"{start}:{end}"], capsys)
    assert rc == 0, err
    assert "RTL == model: True" in out
    fst = lib.fstReaderOpen(str(wave).encode())
    try:
        scale = 10.0 ** lib.fstReaderGetTimescale(fst)
        t_first, t_last = lib.fstReaderGetStartTime(fst), lib.fstReaderGetEndTime(fst)
        _, signals = pylibfst.get_scopes_signals2(fst)
        names = {n.rsplit(".", 1)[-1].split(" ")[0] for n in signals.by_name}
        assert SIGNALS <= names
        clk = next(s.handle for n, s in signals.by_name.items() if n.endswith(".clk"))
        changes = []
        lib.fstReaderSetFacProcessMaskAll(fst)
        pylibfst.fstReaderIterBlocks(
            fst, lambda _u, t, h, v: changes.append((t, h, pylibfst.string(v))))
    finally:
        lib.fstReaderClose(fst)
    # the cocotb bench's clock is 10 ns: the file spans exactly END - START cycles
    p = round(10e-9 / scale)
    assert t_last - t_first == (end - start) * p
    assert all(t_first <= t <= t_last for t, _, _ in changes)
    assert min(t for t, _, _ in changes) == t_first
    assert _rising([v for t, h, v in changes if h == clk]) == end - start
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.npz", "v.npz", "w.fst"]
