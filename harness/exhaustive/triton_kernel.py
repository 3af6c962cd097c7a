"""The Triton kernel of harness.exhaustive.triton_pass (its docstring says what it computes and
why it agrees bit for bit with metrics.element_errors). A module of its own so that importing
Triton (a few tenths of a second) happens only where the kernel runs."""
import triton
import triton.language as tl


@triton.jit
def _decode(raw, EMIN: tl.constexpr, PM1: tl.constexpr):
    """float64 value of 16-bit patterns (int16) of a format with PM1 fraction bits and minimum
    exponent EMIN, by integer operations: no float32 step that could flush a subnormal."""
    b = raw.to(tl.int32) & 0xFFFF
    ef = (b >> PM1) & (3 - 2 * EMIN)                           # the exponent field; all ones: 3 - 2 emin
    frac = b & ((1 << PM1) - 1)
    sig = tl.where(ef > 0, frac + (1 << PM1), frac).to(tl.float64)
    scale = ((tl.maximum(ef, 1) + EMIN - 1 - PM1 + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
    mag = sig * scale                                          # exact: a power-of-two scaling
    mag = tl.where(ef == 3 - 2 * EMIN, tl.where(frac == 0, float("inf"), float("nan")), mag)
    return tl.where(b >= 0x8000, -mag, mag)


@triton.jit(do_not_specialize=["n", "ncols", "r0"])
def stats_kernel(c_ptr, xm_ptr, ax_ptr, t_ptr, g_ptr, k_ptr, e_ptr, part_h_ptr, part_f_ptr, cand_ptr,
                 n, ncols, r0, EMIN: tl.constexpr, PM1: tl.constexpr, NE: tl.constexpr,
                 BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    off = pid * BLOCK + tl.arange(0, BLOCK)
    m = off < n
    row = off // ncols
    col = off - row * ncols
    c = _decode(tl.load(c_ptr + off, mask=m, other=0), EMIN, PM1)
    xm = tl.load(xm_ptr + r0 + row, mask=m, other=0.0)
    ax = tl.load(ax_ptr + r0 + row, mask=m, other=0.0)
    t = tl.load(t_ptr + col, mask=m, other=0.0)
    g = tl.load(g_ptr + col, mask=m, other=0.0)
    u = tl.load(k_ptr + 0)
    msh = tl.load(k_ptr + 1)
    fmax = tl.load(k_ptr + 2)
    bound2 = tl.load(k_ptr + 3)
    budget = tl.load(k_ptr + 4)
    skey = tl.load(k_ptr + 5)
    inf = float("inf")

    v = xm * t
    ga = ax * g
    va = tl.abs(v)
    # ulp(v): the exponent field of |v| (inf / NaN read as -1), clamped to the format's emin
    e = (va.to(tl.int64, bitcast=True) >> 52) - 1023
    e = tl.where(e == 1024, -1, e)
    e = tl.maximum(e, EMIN)
    qe = e - PM1
    q = ((qe + 1023) << 52).to(tl.float64, bitcast=True)
    inv_q = ((1023 - qe) << 52).to(tl.float64, bitcast=True)
    r = va * inv_q
    two52 = 4503599627370496.0
    k = tl.where(r < two52, (r + two52) - two52, r)          # round half to even
    gold = k * q
    gold = tl.where(gold > fmax, inf, gold)
    gold_s = tl.where(v < 0, -gold, gold)
    same = c == gold_s
    c_nan = c != c
    c_inf = tl.abs(c) == inf
    g_inf = gold == inf
    special = c_nan | c_inf | g_inf | (v != v)
    sp_val = tl.where(same, 0.0, inf).to(tl.float64)
    dist = tl.maximum(c, v) - tl.minimum(c, v)
    err = tl.where(special, sp_val, dist * inv_q)
    sc = tl.where(special, sp_val, tl.where(dist == 0, 0.0, dist / (u * ga + msh)))
    rel = tl.where(special, sp_val, tl.where(dist == 0, 0.0, dist / va))
    ab = tl.where(special, sp_val, dist)
    cand = tl.abs(r - k) >= 0.5 - bound2 * ga * inv_q
    key = tl.where(skey != 0.0, sc, err)
    over = key > budget
    nonfin = (c_nan | c_inf) & (gold != inf)

    ub = tl.zeros([BLOCK], dtype=tl.int32)
    sb = tl.zeros([BLOCK], dtype=tl.int32)
    for i in tl.static_range(NE):
        edge = tl.load(e_ptr + i)
        ub += (err > edge).to(tl.int32)
        sb += (sc > edge).to(tl.int32)
    ub = tl.where(m, ub, 15)                               # bin 15: padding, never counted
    sb = tl.where(m, sb, 15)
    flags = ((c != gold_s).to(tl.int32) | (nonfin.to(tl.int32) << 1) | (cand.to(tl.int32) << 2)
             | (over.to(tl.int32) << 3))
    flags = tl.where(m, flags, 0)                          # code 0 counts nothing
    hb = part_h_ptr + pid * 48 + tl.arange(0, 16)
    tl.store(hb, tl.histogram(ub, 16))
    tl.store(hb + 16, tl.histogram(sb, 16))
    tl.store(hb + 32, tl.histogram(flags, 16))
    fb = part_f_ptr + pid * 6
    tl.store(fb + 0, tl.sum(tl.where(m, err, 0.0), axis=0))
    tl.store(fb + 1, tl.sum(tl.where(m, sc, 0.0), axis=0))
    tl.store(fb + 2, tl.max(tl.where(m, err, 0.0), axis=0))
    tl.store(fb + 3, tl.max(tl.where(m, sc, 0.0), axis=0))
    tl.store(fb + 4, tl.max(tl.where(m, ab, 0.0), axis=0))
    tl.store(fb + 5, tl.max(tl.where(m, rel, 0.0), axis=0))
    tl.store(cand_ptr + off, cand.to(tl.int8), mask=m)
