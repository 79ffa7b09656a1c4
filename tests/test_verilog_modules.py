"""One module per kind (``sim/harness/verilog_modules.py``): which modules merge and which do
not, and the Verilator builds at ``-O0`` compiling the merged Verilog
(``cocotb_run.verilator_source``). That the merged Verilog simulates as the original does is
checked wherever an ``-O0`` build runs against its golden model (the tile co-simulation on
Verilator, the units' cocotb benches)."""

import pytest

from tricut.sim.harness.cocotb_run import verilator_source
from tricut.sim.harness.verilog_modules import VerilogModulesError, dedupe, parse_modules


def _design(*bodies: str) -> str:
    """A top that chains one instance per body, ``\\top.u<i>``, each a module of its own with
    input ``a``, output ``y`` and the body."""
    nets = ["a"] + [f"w{i}" for i in range(len(bodies) - 1)] + ["y"]
    wires = "".join(f" wire {n};" for n in nets[1:-1])
    insts = "".join(f"  \\top.u{i}  u{i} (\n    .a({nets[i]}), .y({nets[i + 1]})\n  );\n"
                    for i in range(len(bodies)))
    mods = "".join(f"\nmodule \\top.u{i} (a, y);\n  input a; output y;\n  {b}\nendmodule\n"
                   for i, b in enumerate(bodies))
    return f"module top(a, y);\n  input a; output y;{wires}\n{insts}endmodule\n{mods}"


def test_dedupe_keeps_different_modules_apart():
    mods = parse_modules(_design("assign y = ~a;", "assign y = ~a;", "assign y = a;"))
    assert [i for _, i in mods["top"].instances] == ["top.u0", "top.u1", "top.u2"]
    out, rep = dedupe(mods, "top")
    assert rep == {"top": "top", "top.u0": "top.u0", "top.u1": "top.u0", "top.u2": "top.u2"}
    assert "module \\top.u1 " not in out and out.count("\\top.u0  u") == 2


#: two inverters through Yosys's numbered wires, in the order u0 uses them
AUTO_U0 = ("wire \\$auto$rtlil.cc:1:Not$5 ; wire \\$auto$rtlil.cc:1:Not$9 ;\n"
           "  assign \\$auto$rtlil.cc:1:Not$5  = ~a;\n"
           "  assign \\$auto$rtlil.cc:1:Not$9  = ~\\$auto$rtlil.cc:1:Not$5 ;\n"
           "  assign y = \\$auto$rtlil.cc:1:Not$9 ;")


def test_numbered_wires_merge_when_they_map_one_to_one():
    """u1 is u0 with its wires numbered otherwise (Yosys numbers them design-wide): one kind."""
    u1 = AUTO_U0.replace("Not$5", "Not$12").replace("Not$9", "Not$7")
    out, rep = dedupe(parse_modules(_design(AUTO_U0, u1)), "top")
    assert rep["top.u1"] == "top.u0" and "module \\top.u1 " not in out


def test_numbered_wires_used_crosswise_keep_modules_apart():
    """u1 declares the same two wires but drives its output from the first inverter, not the
    second: a key that named every numbered wire alike would merge them."""
    u1 = AUTO_U0.replace("assign y = \\$auto$rtlil.cc:1:Not$9 ;",
                         "assign y = \\$auto$rtlil.cc:1:Not$5 ;")
    assert u1 != AUTO_U0
    out, rep = dedupe(parse_modules(_design(AUTO_U0, u1)), "top")
    assert rep["top.u1"] == "top.u1" and "module \\top.u1 " in out


def test_inverters_of_one_signal_assigned_in_another_order_merge():
    """Two numbered wires with one driver are one signal, and continuous assignments may come
    in any order (the two TE engines of the shipped tile differ so)."""
    body = ("wire \\$auto$rtlil.cc:1:Not$5 ; wire \\$auto$rtlil.cc:1:Not$9 ;\n"
            "  assign \\$auto$rtlil.cc:1:Not$5  = ~a;\n"
            "  assign \\$auto$rtlil.cc:1:Not$9  = ~a;\n"
            "  assign y = \\$auto$rtlil.cc:1:Not$5  & \\$auto$rtlil.cc:1:Not$9 ;")
    lines = body.split("\n")
    swapped = "\n".join([lines[0], lines[2], lines[1], lines[3]])
    out, rep = dedupe(parse_modules(_design(body, swapped)), "top")
    assert rep["top.u1"] == "top.u0" and "module \\top.u1 " not in out
    # a third inverter of another signal in its place is another module
    other = swapped.replace("Not$9  = ~a;", "Not$9  = a;")
    out, rep = dedupe(parse_modules(_design(body, other)), "top")
    assert rep["top.u1"] == "top.u1"


def test_numbered_ports_merge():
    """Amaranth's ``\\port$<id>$<bit>`` ports, numbered design-wide, are renamed per module and
    where the module is instantiated."""
    text = _design("assign y = ~a;", "assign y = ~a;")
    for unit, port, net in (("u0", "\\port$3$0 ", "w0"), ("u1", "\\port$8$0 ", "y")):
        text = text.replace(f"module \\top.{unit} (a, y);\n  input a; output y;\n  assign y = ~a;",
                            f"module \\top.{unit} (a, {port});\n  input a; output {port};\n"
                            f"  assign {port} = ~a;")
        text = text.replace(f".y({net})", f".{port}({net})")
    assert text.count("port$3$0") == 4 and text.count("port$8$0") == 4
    out, rep = dedupe(parse_modules(text), "top")
    assert rep["top.u1"] == "top.u0"
    assert out.count(".\\port$0$0 (") == 2 and "port$3$" not in out and "port$8$" not in out


def test_bad_verilog_is_one_error():
    with pytest.raises(VerilogModulesError, match="module top has no endmodule"):
        parse_modules("module top(a);\n  input a;\n")
    with pytest.raises(VerilogModulesError, match="no module nowhere"):
        dedupe(parse_modules(_design("assign y = a;")), "nowhere")


def test_only_the_quick_builds_compile_the_merged_verilog():
    text = _design("assign y = ~a;", "assign y = ~a;")
    merged = verilator_source(text, "top", "-O0")
    assert merged == dedupe(parse_modules(text), "top")[0] and "module \\top.u1 " not in merged
    for opt in ("-O1", "-O2", "-O3", None):
        assert verilator_source(text, "top", opt) == text
