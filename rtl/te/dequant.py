"""K/V element decoder: bf16, FP8 E4M3 or NVFP4 codes of one beat -> fp32 lanes."""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tricut.models.te import KV_CODE_BITS, LANES

from .fmul import FP32Mul
from .fputil import QNAN
from .layouts import NVFP4_BLOCK, kv_scale_bits

__all__ = ["KVDequant", "bf16_to_f32", "e4m3_to_f32", "e2m1_to_f32"]


def bf16_to_f32(m, c, name):
    """bf16 code -> fp32 bits, subnormals flushed to a signed zero."""
    y = Signal(32, name=name)
    with m.If(c[7:15] == 0):
        m.d.comb += y.eq(Cat(Const(0, 31), c[15]))
    with m.Else():
        m.d.comb += y.eq(Cat(Const(0, 16), c))
    return y


def e4m3_to_f32(m, c, name):
    """E4M3FN code -> fp32 bits (exact); 0x7F/0xFF -> canonical NaN."""
    y = Signal(32, name=name)
    s, e, mm = c[7], c[3:7], c[0:3]
    with m.If(c[0:7] == 0x7F):
        m.d.comb += y.eq(QNAN)
    with m.Elif(e != 0):
        m.d.comb += y.eq(Cat(Const(0, 20), mm, e + 120, s))
    with m.Elif(mm[2]):
        m.d.comb += y.eq(Cat(Const(0, 21), mm[0:2], Const(120, 8), s))
    with m.Elif(mm[1]):
        m.d.comb += y.eq(Cat(Const(0, 22), mm[0], Const(119, 8), s))
    with m.Elif(mm[0]):
        m.d.comb += y.eq(Cat(Const(0, 23), Const(118, 8), s))
    with m.Else():
        m.d.comb += y.eq(Cat(Const(0, 31), s))
    return y


def e2m1_to_f32(m, c, name):
    """E2M1 code (4 bits) -> fp32 bits (exact)."""
    y = Signal(32, name=name)
    s, e, mb = c[3], c[1:3], c[0]
    with m.If(e != 0):
        m.d.comb += y.eq(Cat(Const(0, 22), mb, e + 126, s))
    with m.Elif(mb):
        m.d.comb += y.eq(Cat(Const(0x3F000000, 31), s))
    with m.Else():
        m.d.comb += y.eq(Cat(Const(0, 31), s))
    return y


class KVDequant(wiring.Component):
    """Decode the ``lanes`` element codes of one K/V beat to fp32 (combinational).

    bf16: ``code << 16`` with subnormals flushed; fp8: exact E4M3 decode (both ignore
    ``scale``); nvfp4: lane ``i`` is ``fmul(e2m1(code_i), fmul(tensor_scale, e4m3(scale_j)))``
    with ``j = i // 16`` its micro-block (one scale multiplier per micro-block, i.e. 1 for
    ``lanes <= 16`` and 2 for 32, plus ``lanes`` fp32 multipliers).
    Bit-exact with :func:`tricut.models.te.dequant_kv`.

    Ports: ``codes`` (lanes codes), ``scale`` (:func:`~.layouts.kv_scale_bits` bits: E4M3
    block-scale code ``j`` in bits ``8j..8j+7``), ``tensor_scale`` (fp32 bits), ``values``
    (lanes fp32), ``nonfinite`` (some lane is inf/NaN).
    """

    def __init__(self, lanes, kv_dtype):
        if lanes not in LANES:
            raise ValueError(f"lanes must be one of {LANES}, got {lanes!r}")
        if kv_dtype not in KV_CODE_BITS:
            raise ValueError(f"kv_dtype must be one of {tuple(KV_CODE_BITS)}, got {kv_dtype!r}")
        self.lanes = lanes
        self.kv_dtype = kv_dtype
        super().__init__({
            "codes": In(data.ArrayLayout(KV_CODE_BITS[kv_dtype], lanes)),
            "scale": In(kv_scale_bits(lanes)),
            "tensor_scale": In(32),
            "values": Out(data.ArrayLayout(32, lanes)),
            "nonfinite": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        vals = []
        smuls = []
        if self.kv_dtype == "nvfp4":
            for j in range(kv_scale_bits(self.lanes) // 8):
                smul = FP32Mul()
                # the 1-block case keeps its historical names (scale_mul, bscale)
                sfx = "" if j == 0 else str(j)
                m.submodules[f"scale_mul{sfx}"] = smul
                m.d.comb += [smul.a.eq(self.tensor_scale),
                             smul.b.eq(e4m3_to_f32(m, self.scale[8 * j:8 * j + 8],
                                                   f"bscale{sfx}"))]
                smuls.append(smul)
        for i in range(self.lanes):
            c = self.codes[i]
            if self.kv_dtype == "bf16":
                vals.append(bf16_to_f32(m, c, f"v{i}"))
            elif self.kv_dtype == "fp8":
                vals.append(e4m3_to_f32(m, c, f"v{i}"))
            else:
                mul = FP32Mul()
                m.submodules[f"mul{i}"] = mul
                m.d.comb += [mul.a.eq(e2m1_to_f32(m, c, f"e2m1_{i}")),
                             mul.b.eq(smuls[i // NVFP4_BLOCK].y)]     # lane i: block i // 16
                vals.append(mul.y)
        for i, v in enumerate(vals):
            m.d.comb += self.values[i].eq(v)
        nf = 0
        for v in vals:
            nf = nf | (v[23:31] == 0xFF)
        m.d.comb += self.nonfinite.eq(nf)
        return m
