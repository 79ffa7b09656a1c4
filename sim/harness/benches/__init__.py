"""cocotb benches the package runs itself (tricut te run, tricut dsu run)."""
