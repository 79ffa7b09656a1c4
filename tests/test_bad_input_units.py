"""Bad input to the unit commands ends as ONE line ``tricut: error: ...`` on stderr and exit
status 2, before any work: no traceback, nothing written (and nothing outside ``-o``).

This file covers ``tricut te run`` and ``tricut verilog``; :data:`BAD_INPUT_CASES` lists
``(command, case id)`` so the count per command is easy to read (``collections.Counter(c for
c, _ in BAD_INPUT_CASES)``). Calls are in-process (``tricut.sim.cli.main``).
"""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

from tricut.sim.cli import main

_R = np.random.default_rng(0)


def _f(*shape, dtype=np.float32):
    return _R.standard_normal(shape).astype(dtype)


def _vec(path, **over):
    """An .npz with q [1, 64], k, v [3, 64] float32, entries replaced/added by ``over`` (a
    value None drops the entry)."""
    arrays = {"q": _f(1, 64), "k": _f(3, 64), "v": _f(3, 64)}
    arrays.update(over)
    with open(path, "wb") as f:        # a file object: savez adds no .npz suffix
        np.savez(f, **{k: v for k, v in arrays.items() if v is not None})
    return str(path)


def _npz_raw(path, members):
    """An .npz written member by member: ``{name: ndarray}`` (pickled if object) or
    ``{name: (shape, dtype)}`` for a header with no data behind it."""
    with zipfile.ZipFile(path, "w") as z:
        for name, a in members.items():
            buf = io.BytesIO()
            if isinstance(a, tuple):
                np.lib.format.write_array_header_1_0(
                    buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(a[1])),
                          "fortran_order": False, "shape": a[0]})
            else:
                np.lib.format.write_array(buf, a, allow_pickle=True)
            z.writestr(name + ".npy", buf.getvalue())
    return str(path)


def _k_with(value, at=(1, 2)):
    k = _f(3, 64)
    k[at] = value
    return k


# Every case: (command, case id, setup(tmp) -> argv, text the error line must contain).
# setup runs in the test's temporary directory (the current directory).
def _te(*extra, vec=None):
    return lambda t: ["te", "run", "--in", vec(t) if vec else _vec(t / "v.npz"),
                      "--out", "res.npz", *extra]


def _tv(*extra, **over):
    """te run on a vector file with ``over`` replacing/adding arrays (see :func:`_vec`)."""
    return _te(*extra, vec=lambda t: _vec(t / "v.npz", **over))


def _traw(members):
    return _te(vec=lambda t: _npz_raw(t / "v.npz", members))


def _te_out(out):
    return lambda t: ["te", "run", "--in", _vec(t / "v.npz"), "--out",
                      out(t) if callable(out) else out]


def _mk(kind):
    def make(t):
        if kind == "dir":
            (t / "res.npz").mkdir()
            return "res.npz"
        if kind == "fifo":
            os.mkfifo(t / "fifo.npz")
            return "fifo.npz"
        if kind == "text":
            (t / "text.npz").write_text("hello")
            return "text.npz"
        if kind == "npy":
            np.save(t / "plain.npy", _f(1, 64))
            return "plain.npy"
        if kind == "indir":
            (t / "vecdir").mkdir()
            return "vecdir"
        raise AssertionError(kind)
    return make


def _te_in(kind):
    return lambda t: ["te", "run", "--in", _mk(kind)(t), "--out", "res.npz"]


def _long(t):
    z = np.zeros((30_000, 128), np.float16)
    return _vec(t / "long.npz", q=_f(4, 128), k=z, v=z)


TE_CASES = [
    # output location (item 1, 2)
    ("out-missing-dir", _te_out("missing/dir/x.npz"), "does not exist"),
    ("out-no-npz-suffix", _te_out("x"), "must end in .npz"),
    ("out-is-directory", lambda t: ["te", "run", "--in", _vec(t / "v.npz"), "--out", _mk("dir")(t)],
     "is a directory"),
    ("out-plain-directory", _te_out("."), "must end in .npz"),
    ("out-in-proc", _te_out("/proc/res.npz"), "cannot write in /proc"),
    ("out-under-a-file", lambda t: ["te", "run", "--in", _vec(t / "v.npz"), "--out", "v.npz/x.npz"],
     "not a directory"),
    ("out-empty", _te_out(""), "empty path"),
    ("out-is-in", lambda t: ["te", "run", "--in", _vec(t / "v.npz"), "--out", "v.npz"],
     "is the --in file"),
    # the vector file (item 3)
    ("in-missing", lambda t: ["te", "run", "--in", "nope.npz", "--out", "res.npz"],
     "file not found"),
    ("in-directory", _te_in("indir"), "is a directory"),
    ("in-fifo", _te_in("fifo"), "not a regular file"),
    ("in-not-npz", _te_in("text"), "not a readable .npz"),
    ("in-plain-npy", _te_in("npy"), "not a readable .npz"),
    ("missing-array", _tv(v=None), "missing array 'v'"),
    ("unknown-array", _tv(bias=np.zeros(3)), "unknown array 'bias'"),
    ("scale-string", _tv(scale=np.array("abc")), "scale must be one real number"),
    ("scale-nan", _tv(scale=np.float32(np.nan)), "finite float32"),
    ("scale-inf-f64", _tv(scale=np.float64(1e300)), "finite float32"),
    ("scale-two-values", _tv(scale=np.ones(2)), "scale must be one real number"),
    ("scale-bool", _tv(scale=np.array(True)), "scale must be one real number"),
    ("scale-object", _traw({"q": _f(1, 64), "k": _f(3, 64), "v": _f(3, 64),
                            "scale": np.array([0.1], dtype=object)}), "object array"),
    ("q-object-pickled", _traw({"q": np.ones((1, 64), dtype=object), "k": _f(3, 64),
                                "v": _f(3, 64)}), "object array"),
    ("q-complex", _tv(q=_f(1, 64).astype(np.complex64)), "complex"),
    ("k-int", _tv(k=np.ones((3, 64), np.int32)), "int32 (integers)"),
    ("v-bool", _tv(v=np.ones((3, 64), bool)), "booleans"),
    ("q-strings", _tv(q=np.full((1, 64), "x")), "float16/32/64"),
    ("q-structured", _tv(q=np.zeros((1, 64), [("a", "f4")])), "float16/32/64"),
    ("q-1d", _tv(q=_f(64)), "q must be a 2-D float array"),
    ("k-3d", _tv(k=_f(3, 1, 64)), "k must be a 2-D float array"),
    ("q-empty-no-heads", _tv(q=np.zeros((0, 64), np.float32)), "G in 1..16"),
    ("q-empty-head-dim-0", _tv(q=np.zeros((1, 0), np.float32)), "head_dim"),
    ("head-dim-32", _tv(q=_f(1, 32), k=_f(3, 32), v=_f(3, 32)),
     "supports 64, 128, 256"),
    ("g-17", _tv(q=_f(17, 64)), "G in 1..16"),
    ("k-v-shapes-differ", _tv(v=_f(2, 64)), "differ in shape"),
    ("head-dim-mismatch", _tv(q=_f(1, 128)), "head_dim 128 but k has 64"),
    ("n-over-20-bits", _traw({"q": _f(1, 64), "k": ((1 << 20, 64), "f2"),
                              "v": ((1 << 20, 64), "f2")}), "20-bit field"),
    ("q-beyond-float32", _tv(q=_f(1, 64, dtype=np.float64) * 1e39),
     "outside the float32 range"),
    ("k-inf-fp8", _tv("--kv-dtype", "fp8", k=_k_with(np.inf)),
     "E4M3 (fp8) has no inf"),
    ("k-nan-nvfp4", _tv("--kv-dtype", "nvfp4", k=_k_with(np.nan)),
     "NVFP4 has no inf/NaN"),
    # long runs (item 5)
    ("too-long-for-amaranth", _te(vec=_long), "use --sim verilator"),
    ("max-cycles-zero", _te("--max-cycles", "0"), "--max-cycles"),
    ("max-cycles-not-a-number", _te("--max-cycles", "lots"), "--max-cycles"),
    # waves (item 6)
    ("wave-bad-suffix", _te("--wave", "w.txt"), "must end in .vcd or .fst"),
    ("wave-missing-dir", _te("--wave", "nodir/w.vcd"), "does not exist"),
    ("wave-is-directory", lambda t: (t.joinpath("w.vcd").mkdir(), _te("--wave", "w.vcd")(t))[1],
     "is a directory"),
    ("wave-in-proc", _te("--wave", "/proc/w.vcd"), "cannot write in /proc"),
    ("wave-is-out", _te("--wave", "res.npz"), "must end in .vcd or .fst"),
    ("wave-is-in", lambda t: ["te", "run", "--in", _vec(t / "v.vcd"), "--out", "res.npz",
                              "--wave", "v.vcd"],
     "same file as --in"),
    ("window-no-colon", _te("--wave", "w.vcd", "--wave-window", "5"), "expected START:END"),
    ("window-not-numbers", _te("--wave", "w.vcd", "--wave-window", "a:b"), "expected START:END"),
    ("window-negative", _te("--wave", "w.vcd", "--wave-window=-3:4"), "expected START:END"),
    ("window-negative-spaced", _te("--wave", "w.vcd", "--wave-window", "-3:4"), "--wave-window"),
    ("window-three-parts", _te("--wave", "w.vcd", "--wave-window", "1:2:3"), "expected START:END"),
    ("window-reversed", _te("--wave", "w.vcd", "--wave-window", "9:3"), "greater than START"),
    ("window-empty", _te("--wave", "w.vcd", "--wave-window", "4:4"), "must be greater than START"),
    ("window-past-the-run", _te("--wave", "w.vcd", "--wave-window", "5000:6000"),
     "the run has only"),
    ("window-without-wave", _te("--wave-window", "1:3"), "needs --wave"),
    # flags
    ("lanes-3", _te("--lanes", "3"), "invalid choice"),
    ("kv-dtype-fp16", _te("--kv-dtype", "fp16"), "invalid choice"),
    ("sim-unknown", _te("--sim", "iverilog"), "invalid choice"),
    ("engine-unknown", _te("--engine", "fast"), "invalid choice: 'fast'"),
    ("unknown-flag", _te("--fast"), "unrecognized arguments"),
    ("stray-argument", _te("extra"), "unrecognized arguments"),
    ("missing-out", lambda t: ["te", "run", "--in", _vec(t / "v.npz")], "required: --out"),
    ("no-subcommand", lambda t: ["te"], "required"),
    ("unknown-subcommand", lambda t: ["te", "walk"], "invalid choice"),
]


def _v(*extra, o="out"):
    return lambda t: ["verilog", *extra[:1], "-o", o, *extra[1:]]


VERILOG_CASES = [
    # the output directory (item 4)
    ("o-is-a-file", lambda t: (t.joinpath("afile").write_text("x"),
                               ["verilog", "dsu-core", "-o", "afile"])[1],
     "not a directory"),
    ("o-under-a-file", lambda t: (t.joinpath("afile").write_text("x"),
                                  ["verilog", "dsu-core", "-o", "afile/sub"])[1],
     "not a directory"),
    ("o-proc", _v("dsu-core", o="/proc"), "cannot write in it"),
    ("o-under-proc", _v("dsu-core", o="/proc/tricut/out"), "cannot create it in /proc"),
    ("o-sys", _v("dsu-core", o="/sys/tricut"), "cannot create it"),
    ("o-empty", _v("dsu-core", o=""), "empty path"),
    ("o-top-file-is-a-dir", lambda t: (t.joinpath("out", "dsu_core.v").mkdir(parents=True),
                                       ["verilog", "dsu-core", "-o", "out"])[1], "is a directory"),
    # --top
    ("top-bad-name", _v("dsu-core", "--top", "bad name!"), "not a Verilog identifier"),
    ("top-path-escape", _v("dsu-core", "--top", "../escaped"), "not a Verilog identifier"),
    ("top-absolute-path", _v("dsu-core", "--top", os.sep + "x"), "not a Verilog identifier"),
    ("top-leading-digit", _v("dsu-core", "--top", "1core"), "not a Verilog identifier"),
    ("top-empty", _v("dsu-core", "--top", ""), "not a Verilog identifier"),
    ("top-newline", _v("dsu-core", "--top", "a\nb"), "not a Verilog identifier"),
    ("top-too-long", _v("dsu-core", "--top", "a" * 200), "at most 128"),
    ("top-keyword", _v("dsu-core", "--top", "module"), "reserved word"),
    ("top-sv-keyword", _v("dsu-core", "--top", "logic"), "reserved word"),
    # -p NAME=VALUE
    ("param-unknown", _v("te", "-p", "width=3"), "te has no parameter 'width'"),
    ("param-not-a-number", _v("te", "-p", "G=abc"), "must be an integer"),
    ("param-out-of-range", _v("te", "-p", "G=99"), "G must be an int in 1..16, got 99"),
    ("param-negative", _v("cdu", "-p", "sets=-4"), "sets must be"),
    ("param-no-equals", _v("te", "-p", "G"), "expected NAME=VALUE"),
    ("param-empty-name", _v("te", "-p", "=4"), "expected NAME=VALUE"),
    ("param-bool-for-int", _v("te", "-p", "G=True"), "must be an integer"),
    ("param-float-for-int", _v("te", "-p", "head_dim=64.0"), "must be an integer"),
    ("param-string-for-int", _v("te", "-p", "G='4'"), "must be an integer"),
    ("param-given-twice", _v("te", "-p", "G=2", "-p", "G=4"), "given twice"),
    ("param-bad-choice", _v("te", "-p", "kv_dtype=fp16"), "kv_dtype must be one of"),
    ("param-huge-int", _v("te", "-p", "G=" + "9" * 5000), "must be an integer"),
    ("param-wrong-shape", _v("tile-hbm", "-p", "faults=5"), "must be a list"),
    ("param-cdu-not-bool", _v("tile", "-p", "cdu=3"), "cdu must be True or False"),
    ("param-code", _v("te", "-p", "G=__import__('os').getpid()"), "must be an integer"),
    # flags
    ("unit-unknown", _v("gpu"), "invalid choice: 'gpu'"),
    ("missing-o", lambda t: ["verilog", "te"], "required: -o"),
    ("unknown-flag", _v("te", "--fast"), "unrecognized arguments"),
    ("engine-bad-choice", _v("te", "--engine", "fast"), "invalid choice: 'fast'"),
    ("engine-not-te", _v("dsu-core", "--engine", "split"), "only for the te unit"),
]

VERILOG_CASES += [
    # issue 32: paths as the user gave them; a generation estimated over an hour
    ("o-deep-under-a-file-relative", lambda t: (t.joinpath("afile").write_text("x"),
                                                ["verilog", "dsu-core", "-o", "afile/sub/deeper"])[1],
     "-o afile/sub/deeper: afile is not a directory"),
    ("generation-over-an-hour", _v("cdu", "-p", "sets=1024", "-p", "ways=16"),
     "more than the 60 min allowed (--allow-long runs it anyway"),
    ("area-of-a-behavioural-model", _v("tile-l2", "--area"),
     "--area: tile-l2 is a behavioural model for simulation, not for synthesis"),
]

_ALL = [("te run", *c) for c in TE_CASES] + [("verilog", *c) for c in VERILOG_CASES]
#: (command, case id) of every bad-input case in this file
BAD_INPUTS = [(cmd, case) for cmd, case, _, _ in _ALL]
BAD_INPUT_CASES = BAD_INPUTS


def _tree(root):
    return {p.relative_to(root) for p in root.rglob("*")}


@pytest.mark.parametrize("command,case,setup,needle", _ALL, ids=[f"{c}:{i}" for c, i, _, _ in _ALL])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, monkeypatch, capsys, command, case,
                                                      setup, needle):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = setup(work)
    before, around = _tree(work), _tree(tmp_path)
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:         # argparse errors
        rc = e.code
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and lines[0].startswith("tricut: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    assert needle in lines[0], lines[0]
    assert out == ""
    assert _tree(work) == before, "files written"
    assert _tree(tmp_path) == around, "files written outside the working directory"


def test_case_ids_are_unique_per_command():
    assert len(set(BAD_INPUT_CASES)) == len(BAD_INPUT_CASES)


# ---- tile run's messages (issue 32, item 7) ----------------------------------------------

def _tile_refusal(capsys, *argv):
    from tricut.sim.cli.testing import assert_one_line_error, run_cli
    code, cap = run_cli(["tile", "run", *argv], capsys)
    assert_one_line_error(code, cap, "")
    return cap.err.strip()


def test_too_many_prompt_lens_name_the_flag_given(capsys):
    line = _tile_refusal(capsys, "--prompt-lens", ",".join(map(str, range(1, 18))))
    assert "argument --prompt-lens: 17 lengths, one request each: the tile takes at most 16" \
        in line and "--synthetic" not in line


def test_a_prompt_length_beyond_the_tile_names_prompt_lens_not_max_ctx(capsys):
    line = _tile_refusal(capsys, "--prompt-lens", "3,1000000000")
    assert "argument --prompt-lens: 1000000000 is longer than the longest context the tile " \
        "takes (16368)" in line and "--max-ctx" not in line


@pytest.mark.parametrize("text", ["1e20", "100000000000000000000", "1.5"])
def test_max_prompt_out_of_bounds_is_one_clear_line_with_the_bound(capsys, text):
    line = _tile_refusal(capsys, "--max-prompt", text)
    assert "argument --max-prompt: must be" in line and "1..16368" in line and text in line
    assert "Maximum allowed size" not in line


def test_grid_max_ctx_1_is_blamed_on_max_ctx():
    """``max_ctx = 1`` in a tile sweep grid (a run's ``--max-ctx``, the tile unit's ``-p``):
    refused naming max_ctx, not split_tokens."""
    from tricut.sim.sweep.tile_tasks import TileAreaTask, TileRunTask
    for task, needle in ((TileRunTask, "--max-ctx: must be a multiple of 16"),
                         (TileAreaTask, "tile: max_ctx must be a multiple of 16")):
        with pytest.raises(ValueError) as e:
            task.check({"max_ctx": 1})
        assert needle in str(e.value) and "split_tokens" not in str(e.value), str(e.value)
