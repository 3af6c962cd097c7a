"""Correct rounding and ulp against the dtypes' own bit patterns."""
import math

import numpy as np
import pytest
import torch

from harness.references.formats import FORMATS, fmt_of, round_to, to_dtype_exact, ulp


def hard_values(name: str) -> torch.Tensor:
    """float64 values where rounding into format `name` is hard, both signs: each format's midpoints
    (ties either way) and their float64 neighbours, around powers of two, across the subnormal range
    (its midpoints, half the smallest subnormal and its neighbours), the largest finite, the
    overflow threshold (largest + half its ulp: a tie that goes to inf) and its neighbours, values
    far past it, float64 subnormals, +-0, inf, NaN (a payload, a signalling one) and random values."""
    f64 = torch.float64
    fmt = FORMATS[name]
    g = torch.Generator().manual_seed(43)
    p, emin = min(fmt.precision, 53), max(fmt.emin, -1022)
    # representable values: random significands across the whole exponent range
    exps = torch.randint(emin, math.frexp(fmt.max)[1], (4000,), generator=g).double()
    sig = torch.randint(2 ** (p - 1), 2 ** p, (4000,), generator=g, dtype=torch.int64).double() if p < 53 else \
        1 + torch.rand(4000, generator=g, dtype=f64)
    x = torch.ldexp(sig / 2 ** (p - 1), exps)
    sub = torch.arange(0, 64, dtype=f64) * fmt.min_subnormal                  # subnormals (and 0)
    x = torch.cat([x, sub, torch.ldexp(torch.ones(8, dtype=f64), torch.arange(-3, 5, dtype=f64))])
    q = torch.ldexp(torch.ones_like(x), (torch.frexp(x)[1] - 1).clamp(min=fmt.emin) - fmt.precision + 1)
    mids = x + q / 2
    m, tiny = fmt.max, fmt.min_subnormal
    top_ulp = 2.0 ** (math.frexp(m)[1] - fmt.precision)
    edges = torch.tensor([m, m + top_ulp / 2, 2 * m, 2.0 ** min(math.frexp(m)[1], 1023), 1e300, 1.7976931348623157e308,
                          tiny / 2, 3 * tiny / 2, 2.0 ** fmt.emin - tiny / 2, 2.0 ** -1074, 2.0 ** -1022,
                          2.0 ** -1023, 0.0, 1 + 2.0 ** -8 + 2.0 ** -30], dtype=f64)
    hard = torch.cat([x, mids, edges])
    around = torch.cat([hard, torch.nextafter(hard, torch.full_like(hard, math.inf)),
                        torch.nextafter(hard, torch.zeros_like(hard))])
    rnd = torch.randn(4000, generator=g, dtype=f64) * 2.0 ** torch.randint(emin - 30, 140, (4000,), generator=g)
    v = torch.cat([around, rnd])
    v = torch.cat([v, -v, torch.tensor([math.inf, -math.inf, math.nan], dtype=f64)])
    nans = torch.tensor([0x7FF8000000000123, 0x7FF0000000000001, -0x0008000000000456], dtype=torch.int64)
    return torch.cat([v, nans.view(f64)])


def plain_ulp(v: torch.Tensor, f) -> torch.Tensor:
    """ulp written plainly: 2^(max(e, emin) - p + 1), e from frexp (-1 for inf and NaN, as frexp's 0)."""
    m, e = torch.frexp(v.abs())
    e = torch.where(torch.isfinite(v) & (v != 0), e - 1, torch.where(v == 0, torch.full_like(e, -1023),
                                                                      torch.full_like(e, -1)))
    return torch.ldexp(torch.ones_like(v), (torch.clamp(e, min=f.emin) - f.precision + 1).to(torch.float64))


def plain_round(v: torch.Tensor, f) -> torch.Tensor:
    """The rounding written plainly: q = 2^(max(e, emin) - p + 1) from frexp, round(|v| / q) * q
    (half to even), inf past the largest finite, non-finite passed through, the sign copied."""
    if f.precision >= 53:
        return v.clone()
    m, e = torch.frexp(v.abs())
    e = torch.where(torch.isfinite(v) & (v != 0), e - 1, torch.where(v == 0, torch.full_like(e, -1023),
                                                                      torch.full_like(e, -1)))
    q = torch.ldexp(torch.ones_like(v), (torch.clamp(e, min=f.emin) - f.precision + 1).to(torch.float64))
    r = torch.round(v.abs() / q) * q
    r = torch.where(r > f.max, torch.full_like(r, math.inf), r)
    return torch.copysign(torch.where(torch.isfinite(v), r, v.abs()), v)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}
    return a.dtype == b.dtype and torch.equal(a.view(ints[a.element_size()]), b.view(ints[b.element_size()]))


def test_round_to_matches_numpy_single_rounding():
    rng = np.random.default_rng(0)
    v = rng.standard_normal(100000) * np.exp2(rng.integers(-30, 20, 100000))
    t = torch.from_numpy(v)
    assert torch.equal(round_to(t, fmt_of("fp32")), torch.from_numpy(v.astype(np.float32).astype(np.float64)))
    assert torch.equal(round_to(t, fmt_of("fp16")), torch.from_numpy(v.astype(np.float16).astype(np.float64)))


def test_bf16_single_rounding_where_torch_double_rounds():
    v = torch.tensor([1 + 2 ** -8 + 2 ** -30], dtype=torch.float64)
    assert round_to(v, fmt_of("bf16")).item() == 1 + 2 ** -7
    assert v.to(torch.bfloat16).double().item() == 1.0     # torch goes through float32: twice


def test_round_to_matches_float32_to_bf16_for_float32_values():
    # for float32 inputs torch's float32 -> bf16 is a single correct rounding: must agree
    g = torch.Generator().manual_seed(1)
    bits = torch.randint(-2 ** 31, 2 ** 31 - 1, (200000,), generator=g, dtype=torch.int64).to(torch.int32)
    f = bits.view(torch.float32)
    f = f[torch.isfinite(f)]
    want = f.to(torch.bfloat16).double()
    assert torch.equal(round_to(f.double(), fmt_of("bf16")), want)


@pytest.mark.parametrize("name,itype", [("bf16", torch.int16), ("fp16", torch.int16), ("fp32", torch.int32)])
def test_ulp_is_the_bit_pattern_spacing(name, itype):
    fmt = fmt_of(name)
    g = torch.Generator().manual_seed(2)
    hi = 0x7f7f if name == "bf16" else (0x7bff if name == "fp16" else 0x7f7fffff)
    bits = torch.randint(0, hi, (50000,), generator=g).to(itype)
    v = bits.view(fmt.dtype)
    nxt = (bits + 1).view(fmt.dtype)
    spacing = nxt.double() - v.double()
    assert torch.equal(ulp(v.double(), fmt), spacing)


def test_ties_to_even_overflow_and_specials():
    bf = fmt_of("bf16")
    mid = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8)], dtype=torch.float64)
    assert round_to(mid, bf).tolist() == [1.0, 1 + 2 ** -6, -1.0]
    f16 = fmt_of("fp16")
    assert round_to(torch.tensor([65519.0, 65520.0]), f16).tolist() == [65504.0, math.inf]
    sp = round_to(torch.tensor([math.nan, -math.inf, -0.0]), f16)
    assert math.isnan(sp[0]) and sp[1] == -math.inf and math.copysign(1, sp[2]) == -1
    assert ulp(torch.tensor([0.0]), f16).item() == 2.0 ** -24
    assert FORMATS["bf16"].precision == 8 and FORMATS["fp16"].precision == 11


def test_round_to_and_ulp_bit_for_bit_against_the_plain_formula():
    """round_to and ulp work in place on the float64 bits (they run over every element of every
    reference); on random bit patterns (NaN payloads, subnormals, infinities) and values near every
    format's edges they give the bits of the plain formula: q = 2^(max(e, emin) - p + 1) from
    frexp, round(|v| / q) * q, inf past the largest finite, non-finite passed through, the sign copied."""
    import math

    import torch

    g = torch.Generator().manual_seed(29)
    v = torch.cat([torch.randint(-2**63, 2**63 - 1, (1 << 15,), dtype=torch.int64, generator=g).view(torch.float64),
                   torch.randn(1 << 15, dtype=torch.float64, generator=g)
                   * 2.0 ** torch.randint(-160, 140, (1 << 15,), generator=g).double(),
                   torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 65504.0, 65520.0, 3.4e38, 3.5e38,
                                 2.0 ** -149, 2.0 ** -150, 3 * 2.0 ** -151, 2.0 ** -24, 2.0 ** -25],
                                dtype=torch.float64)])
    normal = ~torch.isnan(v) & (v.abs() >= 2.0 ** -1022)          # frexp's exponent is the field's there
    for name in ("bf16", "fp16", "fp32", "fp64"):
        f = FORMATS[name]
        assert same_bits(round_to(v, f), plain_round(v, f)), name
        assert torch.equal(ulp(v[normal], f), plain_ulp(v[normal], f)), name


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32", "fp64"])
def test_round_to_on_the_hard_values(name):
    """round_to against the plain formula, and against numpy's own single rounding where it has the
    format, bit for bit on the hard values (ties, subnormals, overflow, specials)."""
    f = FORMATS[name]
    v = hard_values(name)
    r = round_to(v, f)
    assert same_bits(r, plain_round(v, f))
    assert same_bits(ulp(v, f), plain_ulp(v, f))          # zero, float64 subnormals, inf, NaN included
    if name in ("fp16", "fp32"):
        keep = ~torch.isnan(v)                            # numpy's casts do not keep NaN payloads
        with np.errstate(over="ignore"):
            once = v[keep].numpy().astype({"fp16": np.float16, "fp32": np.float32}[name]).astype(np.float64)
        assert same_bits(r[keep], torch.from_numpy(once))
    # the values meant to be hard are: ties both ways, underflow to +-0, overflow to +-inf
    fin = torch.isfinite(v) & (v.abs() <= f.max)
    assert int((r != v)[fin].sum()) > 1000 or name == "fp64"
    assert bool((r == 0)[v.abs() > 0].any()) != (name == "fp64") and bool(torch.isinf(r)[torch.isfinite(v)].any()) != (name == "fp64")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32"])
def test_round_to_on_cuda_is_the_cpu_one(name):
    """The add-and-subtract rounds the same in a GPU's float64 (NaN: still NaN; its payload is not
    compared, a GPU's arithmetic need not keep it)."""
    v = hard_values(name)
    got, want = round_to(v.cuda(), FORMATS[name]).cpu(), round_to(v, FORMATS[name])
    keep = ~torch.isnan(want)
    assert torch.equal(got.isnan(), ~keep) and same_bits(got[keep], want[keep])


def test_to_dtype_exact_casts_float32_directly_and_never_bf16_or_fp16():
    """float64 -> float32 is one IEEE rounding: to_dtype_exact's direct cast gives the bits of
    round_to then cast, on every hard value. bf16 and fp16 go through float32 (twice rounded):
    there a direct cast differs, and to_dtype_exact must not take it."""
    v = hard_values("fp32")
    want = round_to(v, FORMATS["fp32"]).to(torch.float32)
    assert same_bits(to_dtype_exact(v, FORMATS["fp32"]), want)
    for name, p in (("bf16", 8), ("fp16", 11)):
        f = FORMATS[name]
        above_tie = torch.tensor([1 + 2.0 ** -p + 2.0 ** -30], dtype=torch.float64)   # 1 + ulp/2 + a bit
        assert to_dtype_exact(above_tie, f).item() == 1 + 2.0 ** (1 - p)               # up, once rounded
        assert above_tie.to(f.dtype).item() == 1.0                                    # the direct cast: down
        hv = hard_values(name)
        assert same_bits(to_dtype_exact(hv, f), round_to(hv, f).to(f.dtype))
