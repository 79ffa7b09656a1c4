"""A tiny RV32IM assembler for tests: one function per instruction, returning the word.

Only what directed and random tests need; it range-checks every field so that a test
cannot silently encode something other than what it asks for.
"""

from tricut.rtl.dsu.layouts import Opcode

__all__ = ["R_OPS", "I_OPS", "SHIFT_IMM_OPS", "LOAD_OPS", "STORE_OPS", "BRANCH_OPS", "M_OPS",
           "r_type", "i_type", "s_type", "b_type", "u_type", "j_type", "encode", "li",
           "mnemonic", "random_program", "random_trap_program", "trap_handler", "NOP", "ECALL", "EBREAK", "MRET", "WFI", "FENCE", "FENCE_I"]

# name: (funct3, funct7)
R_OPS = {"add": (0, 0), "sub": (0, 0x20), "sll": (1, 0), "slt": (2, 0), "sltu": (3, 0),
         "xor": (4, 0), "srl": (5, 0), "sra": (5, 0x20), "or": (6, 0), "and": (7, 0)}
M_OPS = {"mul": (0, 1), "mulh": (1, 1), "mulhsu": (2, 1), "mulhu": (3, 1),
         "div": (4, 1), "divu": (5, 1), "rem": (6, 1), "remu": (7, 1)}
I_OPS = {"addi": 0, "slti": 2, "sltiu": 3, "xori": 4, "ori": 6, "andi": 7}
SHIFT_IMM_OPS = {"slli": (1, 0), "srli": (5, 0), "srai": (5, 0x20)}
LOAD_OPS = {"lb": 0, "lh": 1, "lw": 2, "lbu": 4, "lhu": 5}
STORE_OPS = {"sb": 0, "sh": 1, "sw": 2}
BRANCH_OPS = {"beq": 0, "bne": 1, "blt": 4, "bge": 5, "bltu": 6, "bgeu": 7}
CSR_OPS = {"csrrw": 1, "csrrs": 2, "csrrc": 3, "csrrwi": 5, "csrrsi": 6, "csrrci": 7}

NOP = 0x00000013
ECALL = 0x00000073
EBREAK = 0x00100073
MRET = 0x30200073
WFI = 0x10500073
FENCE = 0x0FF0000F
FENCE_I = 0x0000100F


def _reg(r):
    if not (isinstance(r, int) and 0 <= r < 32):
        raise ValueError(f"register must be 0..31, not {r!r}")
    return r


def _simm(value, bits, align=1):
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)) or value % align:
        raise ValueError(f"immediate {value} does not fit {bits} signed bits "
                         f"(multiple of {align})")
    return value & ((1 << bits) - 1)


def r_type(funct7, funct3, rd, rs1, rs2, opcode=Opcode.OP):
    return (funct7 << 25) | (_reg(rs2) << 20) | (_reg(rs1) << 15) | (funct3 << 12) | \
        (_reg(rd) << 7) | opcode


def i_type(funct3, rd, rs1, imm, opcode=Opcode.OP_IMM):
    return (_simm(imm, 12) << 20) | (_reg(rs1) << 15) | (funct3 << 12) | (_reg(rd) << 7) | opcode


def s_type(funct3, rs1, rs2, imm):
    i = _simm(imm, 12)
    return ((i >> 5) << 25) | (_reg(rs2) << 20) | (_reg(rs1) << 15) | (funct3 << 12) | \
        ((i & 0x1F) << 7) | Opcode.STORE


def b_type(funct3, rs1, rs2, offset):
    i = _simm(offset, 13, 2)
    return (((i >> 12) & 1) << 31) | (((i >> 5) & 0x3F) << 25) | (_reg(rs2) << 20) | \
        (_reg(rs1) << 15) | (funct3 << 12) | (((i >> 1) & 0xF) << 8) | \
        (((i >> 11) & 1) << 7) | Opcode.BRANCH


def u_type(opcode, rd, imm20):
    if not 0 <= imm20 < (1 << 20):
        raise ValueError(f"upper immediate {imm20:#x} does not fit 20 bits")
    return (imm20 << 12) | (_reg(rd) << 7) | opcode


def j_type(rd, offset):
    i = _simm(offset, 21, 2)
    return (((i >> 20) & 1) << 31) | (((i >> 1) & 0x3FF) << 21) | (((i >> 11) & 1) << 20) | \
        (((i >> 12) & 0xFF) << 12) | (_reg(rd) << 7) | Opcode.JAL


def encode(name, *args):
    """Encode ``name`` with operands in assembly order, e.g. ``encode("lw", rd, rs1, off)``,
    ``encode("sw", rs2, rs1, off)``, ``encode("beq", rs1, rs2, off)``,
    ``encode("csrrw", rd, csr, rs1_or_uimm)``."""
    if name in R_OPS:
        f3, f7 = R_OPS[name]
        return r_type(f7, f3, *args)
    if name in M_OPS:
        f3, f7 = M_OPS[name]
        return r_type(f7, f3, *args)
    if name in I_OPS:
        return i_type(I_OPS[name], *args)
    if name in SHIFT_IMM_OPS:
        f3, f7 = SHIFT_IMM_OPS[name]
        rd, rs1, shamt = args
        if not 0 <= shamt < 32:
            raise ValueError(f"shift amount must be 0..31, not {shamt}")
        return i_type(f3, rd, rs1, (f7 << 5) | shamt)
    if name in LOAD_OPS:
        rd, rs1, off = args
        return i_type(LOAD_OPS[name], rd, rs1, off, Opcode.LOAD)
    if name in STORE_OPS:
        rs2, rs1, off = args
        return s_type(STORE_OPS[name], rs1, rs2, off)
    if name in BRANCH_OPS:
        return b_type(BRANCH_OPS[name], *args)
    if name == "lui":
        return u_type(Opcode.LUI, *args)
    if name == "auipc":
        return u_type(Opcode.AUIPC, *args)
    if name == "jal":
        return j_type(*args)
    if name == "jalr":
        rd, rs1, off = args
        return i_type(0, rd, rs1, off, Opcode.JALR)
    if name in CSR_OPS:
        rd, csr, src = args
        if not 0 <= csr < 4096:
            raise ValueError(f"CSR address must be 0..0xfff, not {csr:#x}")
        return (csr << 20) | (_reg(src) << 15) | (CSR_OPS[name] << 12) | (_reg(rd) << 7) | \
            Opcode.SYSTEM
    raise ValueError(f"unknown instruction {name!r}")


def li(rd, value):
    """``lui rd, hi; addi rd, rd, lo`` loading any 32-bit value (two words, always)."""
    value &= 0xFFFFFFFF
    lo = value & 0xFFF
    if lo >= 0x800:
        lo -= 0x1000
    hi = ((value - lo) >> 12) & 0xFFFFF
    return [encode("lui", rd, hi), encode("addi", rd, rd, lo)]


_BY_KEY = {}
for _n, (_f3, _f7) in {**R_OPS, **M_OPS}.items():
    _BY_KEY[(Opcode.OP, _f3, _f7)] = _n
for _n, _f3 in I_OPS.items():
    _BY_KEY[(Opcode.OP_IMM, _f3, None)] = _n
for _n, (_f3, _f7) in SHIFT_IMM_OPS.items():
    _BY_KEY[(Opcode.OP_IMM, _f3, _f7)] = _n
for _n, _f3 in LOAD_OPS.items():
    _BY_KEY[(Opcode.LOAD, _f3, None)] = _n
for _n, _f3 in STORE_OPS.items():
    _BY_KEY[(Opcode.STORE, _f3, None)] = _n
for _n, _f3 in BRANCH_OPS.items():
    _BY_KEY[(Opcode.BRANCH, _f3, None)] = _n
for _n, _f3 in CSR_OPS.items():
    _BY_KEY[(Opcode.SYSTEM, _f3, None)] = _n


def mnemonic(insn):
    """Name of a (legal) instruction word, for coverage counting; ``"?"`` otherwise."""
    op, f3, f7 = insn & 0x7F, (insn >> 12) & 7, insn >> 25
    if op == Opcode.LUI:
        return "lui"
    if op == Opcode.AUIPC:
        return "auipc"
    if op == Opcode.JAL:
        return "jal"
    if op == Opcode.JALR:
        return "jalr"
    if op == Opcode.MISC_MEM:
        return "fence.i" if f3 == 1 else "fence"
    if op == Opcode.SYSTEM and f3 == 0:
        return {ECALL: "ecall", EBREAK: "ebreak", MRET: "mret", WFI: "wfi"}.get(insn, "?")
    if op == Opcode.OP:
        return _BY_KEY.get((op, f3, f7), "?")
    if op == Opcode.OP_IMM and f3 in (1, 5):
        return _BY_KEY.get((op, f3, f7), "?")
    return _BY_KEY.get((op, f3, None), "?")


_RANDOM_VALUES = [0, 1, 2, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 31, 32, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF]


def random_program(rng, n_items, data_base):
    """Random valid RV32IM code (a list of words, the last one ``jal x0, 0``); see
    :func:`_random_program`."""
    return _random_program(rng, n_items, data_base, 0)[0]


def random_trap_program(rng, n_items, data_base, handler, trap_weight=3):
    """Like :func:`random_program`, with trapping instructions mixed in (ECALL, EBREAK,
    illegal words, misaligned loads/stores/jumps, loads/stores outside memory, i.e. at
    0xffffff00 and up). The program first sets mtvec to ``handler``, where the caller
    places :func:`trap_handler`. Returns ``(words, expected)``, ``expected`` mapping the
    pc of each trapping instruction to ``(cause, mtval)``."""
    return _random_program(rng, n_items, data_base, trap_weight, handler)


def trap_handler():
    """Handler for :func:`random_trap_program`: x1 <- mcause, x2 <- mtval, mepc += 4, mret
    (clobbers x1, x2 and the jalr scratch x30 only)."""
    return [encode("csrrs", 1, 0x342, 0), encode("csrrs", 2, 0x343, 0),
            encode("csrrs", 30, 0x341, 0), encode("addi", 30, 30, 4),
            encode("csrrw", 0, 0x341, 30), MRET]


_ILLEGAL_WORDS = [0x00000000, 0xFFFFFFFF, 0x00000001, 0x20208033, 0x00004073, 0x0200F0B3 | 0x40000000,
                  0x7C0022F3, 0xF14092F3, 0xC0001073]


def _random_program(rng, n_items, data_base, trap_weight, handler=None):
    """Random valid RV32IM code (a list of words, the last one ``jal x0, 0``).

    Registers are preset to edge/random values, x31 = data pointer (data_base + 0x800,
    never written), x30 = jalr scratch, x29 = loop counter (0; written only by loops);
    loads/stores go through x31 with aligned offsets inside the data area. Branches and
    jumps go forward to item starts, except the back edge of counted loops
    (``addi x29, x0, n`` / body / ``addi x29, x29, -1; blt x0, x29, body``, n = 1..3, not
    nested). Code entering a loop body from outside finds x29 <= 0 or another loop's
    remaining count, and x29 only grows at a loop's ``addi``, so every stream terminates
    at the final ``jal x0, 0``."""
    prologue = [] if handler is None else li(1, handler) + [encode("csrrw", 0, 0x305, 1)]
    for r in range(1, 31):   # every register is written before it is read
        v = rng.choice(_RANDOM_VALUES) if rng.random() < 0.5 else rng.getrandbits(32)
        prologue += li(r, 0 if r == 29 else v)
    prologue += li(31, data_base + 0x800)

    def reg():
        return rng.randrange(32)

    def rd():
        return 0 if rng.random() < 0.05 else rng.randrange(1, 29)

    kinds = ["r"] * 20 + ["m"] * 4 + ["div"] + ["i"] * 14 + ["sh"] * 4 + ["u"] * 3 + \
        ["ld"] * 10 + ["st"] * 8 + ["br"] * 8 + ["jal"] * 2 + ["jalr"] * 2 + ["fence"] + \
        ["loop"] * 2 + ["trap"] * trap_weight
    expected = {}
    items = []   # (kind, fields) ; branch targets resolved after sizes are known
    loop_start = loop_end = None
    for _ in range(n_items):
        k = rng.choice(kinds)
        if loop_end is not None and len(items) >= loop_end:
            items.append(("back", loop_start))
            loop_start = loop_end = None
            continue
        if k == "loop":
            if loop_end is None:
                items.append([encode("addi", 29, 0, rng.randrange(1, 4))])
                loop_start = len(items)
                loop_end = loop_start + rng.randrange(2, 10)
            continue
        if k == "r":
            items.append([encode(rng.choice(list(R_OPS)), rd(), reg(), reg())])
        elif k == "m":
            items.append([encode(rng.choice(["mul", "mulh", "mulhsu", "mulhu"]), rd(), reg(), reg())])
        elif k == "div":
            items.append([encode(rng.choice(["div", "divu", "rem", "remu"]), rd(), reg(), reg())])
        elif k == "i":
            imm = rng.choice([0, 1, -1, 2047, -2048]) if rng.random() < 0.3 else rng.randrange(-2048, 2048)
            items.append([encode(rng.choice(list(I_OPS)), rd(), reg(), imm)])
        elif k == "sh":
            items.append([encode(rng.choice(list(SHIFT_IMM_OPS)), rd(), reg(),
                            rng.choice([0, 31, rng.randrange(32)]))])
        elif k == "u":
            items.append([encode(rng.choice(["lui", "auipc"]), rd(), rng.getrandbits(20))])
        elif k == "ld":
            op = rng.choice(list(LOAD_OPS))
            size = 1 << (LOAD_OPS[op] & 3)
            items.append([encode(op, rd(), 31, rng.randrange(-2048, 2048 - size + 1) & ~(size - 1))])
        elif k == "st":
            op = rng.choice(list(STORE_OPS))
            size = 1 << STORE_OPS[op]
            items.append([encode(op, reg(), 31, rng.randrange(-2048, 2048 - size + 1) & ~(size - 1))])
        elif k == "fence":
            items.append([FENCE])
        elif k == "trap":
            items.append(_trap_item(rng, data_base, rd))
        else:
            items.append((k, rng.randrange(1, 9), reg(), reg(), rd(), rng.randrange(2)))
    items.append([encode("jal", 0, 0)])
    pos = [len(prologue)]
    for it in items:
        pos.append(pos[-1] + (2 if isinstance(it, tuple) and it[0] in ("jalr", "back") else
                              1 if isinstance(it, tuple) else len(it)))
    words = list(prologue)
    last = len(items) - 1
    for i, it in enumerate(items):
        if not isinstance(it, tuple):
            words += it
            continue
        if it[0] == "trap":
            word, cause, tval = it[1](4 * pos[i])
            words.append(word)
            expected[4 * pos[i]] = (cause, tval)
            continue
        if it[0] == "back":
            words += [encode("addi", 29, 29, -1),
                      encode("blt", 0, 29, 4 * (pos[it[1]] - pos[i] - 1))]
            continue
        k, skip, r1, r2, dest, odd = it
        target = min(i + skip, last)
        off = 4 * (pos[target] - pos[i])
        if k == "br":
            words.append(encode(rng.choice(list(BRANCH_OPS)), r1, r2, off))
        elif k == "jal":
            words.append(encode("jal", dest, off))
        else:
            words += [encode("auipc", 30, 0), encode("jalr", dest, 30, off + odd)]
        assert len(words) == pos[i + 1]
    return words, expected


def _trap_item(rng, data_base, rd):
    """One trapping instruction: ``("trap", f)`` with ``f(pc) -> (word, cause, tval)``."""
    ptr = data_base + 0x800                      # x31
    kind = rng.choice(["ecall", "ebreak", "illegal", "lmis", "smis", "lfault", "sfault", "jmis"])
    if kind == "ecall":
        return ("trap", lambda pc: (ECALL, 11, 0))
    if kind == "ebreak":
        return ("trap", lambda pc: (EBREAK, 3, pc))
    if kind == "illegal":
        w = rng.choice(_ILLEGAL_WORDS)
        return ("trap", lambda pc: (w, 2, w))
    if kind in ("lmis", "smis"):
        op = rng.choice(["lw", "lh", "lhu"] if kind == "lmis" else ["sw", "sh"])
        size = 4 if op[1] == "w" else 2
        off = rng.randrange(-2000, 2000)
        if off % size == 0:
            off += 1
        if kind == "lmis":
            w = encode(op, rd(), 31, off)
        else:
            w = encode(op, rng.randrange(32), 31, off)
        return ("trap", lambda pc: (w, 4 if kind == "lmis" else 6, (ptr + off) & 0xFFFFFFFF))
    if kind in ("lfault", "sfault"):
        off = -rng.randrange(1, 256)             # x0 + off: 0xffffff00 .. 0xffffffff
        if kind == "lfault":
            w = encode("lbu", rd(), 0, off)
        else:
            w = encode("sb", rng.randrange(32), 0, off)
        return ("trap", lambda pc: (w, 5 if kind == "lfault" else 7, off & 0xFFFFFFFF))
    dest = rd()
    skip = 4 * rng.randrange(0, 8) + 2
    return ("trap", lambda pc: (encode("jal", dest, skip), 0, pc + skip))
