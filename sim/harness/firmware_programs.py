"""The compiled C test programs of the DSU core (``rtl/dsu/firmware/tests/``: ``sort``,
``crc32``, ``muldiv``) and the exit code each must leave in ``_exit_code``, computed here in
Python from the program's own data: :data:`C_PROGRAMS` maps a program's name to the function
that returns it. The Amaranth-simulator lockstep (tests/test_dsu_core.py), the cocotb one on
Verilator (tests/test_dsu_cocotb.py) and benchmarks/lockstep.py check the same values.
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["C_PROGRAMS"]

M32 = 0xFFFFFFFF
INT_MIN = 0x80000000
INT_MAX = 0x7FFFFFFF


def _sort_expected():
    x, a = 0x2545F491, []
    for _ in range(48):
        x ^= (x << 13) & M32
        x ^= x >> 17
        x ^= (x << 5) & M32
        s = x - (1 << 32) if x & INT_MIN else x
        a.append(s >> 8)
    a.sort()
    return sum(i * v for i, v in enumerate(a)) & M32


def _crc_expected():
    msg = bytearray(200)
    for i in range(64):
        msg[i] = (i * 7 + 3) & 0xFF
    for i in range(32):
        struct.pack_into("<H", msg, 64 + 2 * i, (0x8001 * (i + 1)) & 0xFFFF)
    for i in range(18):
        struct.pack_into("<I", msg, 128 + 4 * i, (0x9E3779B9 * (i + 1)) & M32)
    return zlib.crc32(bytes(msg))


def _s(v):
    return v - (1 << 32) if v & INT_MIN else v


def _rv_div(a, b, signed, want_rem):
    """RISC-V DIV/DIVU/REM/REMU, written out from the spec's table."""
    if signed:
        a, b = _s(a), _s(b)
    if b == 0:
        return (a if want_rem else -1) & M32
    if signed and a == -2**31 and b == -1:
        return 0 if want_rem else a & M32
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)   # truncating division
    return (a - q * b if want_rem else q) & M32


def _muldiv_expected():
    edge = [0, 1, M32, M32 - 6, INT_MAX, INT_MIN, 0x10000, (-98765) & M32]
    h, x = 0x811C9DC5, 1
    n = len(edge) + 2

    def mix(h, v):
        return ((h ^ v) * 0x01000193) & M32
    for i in range(n):
        for j in range(n):
            if i < len(edge):
                a = edge[i]
            else:
                x = (x * 1664525 + 1013904223) & M32
                a = x
            if j < len(edge):
                b = edge[j]
            else:
                x = (x * 1664525 + 1013904223) & M32
                b = x
            h = mix(h, (a * b) & M32)
            h = mix(h, ((_s(a) * _s(b)) >> 32) & M32)
            h = mix(h, ((_s(a) * b) >> 32) & M32)
            h = mix(h, ((a * b) >> 32) & M32)
            h = mix(h, _rv_div(a, b, True, False))
            h = mix(h, _rv_div(a, b, True, True))
            h = mix(h, _rv_div(a, b, False, False))
            h = mix(h, _rv_div(a, b, False, True))
    return h


#: program name -> its expected exit code (a function: computed when asked)
C_PROGRAMS = {"sort": _sort_expected, "crc32": _crc_expected, "muldiv": _muldiv_expected}
