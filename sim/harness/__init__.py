"""RTL against golden models: the units in Amaranth's simulator and on Verilator (cocotb),
the toolchain, firmware builds and Verilog output."""
