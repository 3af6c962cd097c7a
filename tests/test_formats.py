"""Correct rounding and ulp against the dtypes' own bit patterns."""
import math

import numpy as np
import pytest
import torch

from harness.references.formats import FORMATS, fmt_of, round_to, ulp


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

    from harness.references.formats import FORMATS, round_to, ulp

    def plain_ulp(v, f):
        m, e = torch.frexp(v.abs())
        e = torch.where(torch.isfinite(v) & (v != 0), e - 1, torch.where(v == 0, torch.full_like(e, -1023),
                                                                          torch.full_like(e, -1)))
        return torch.ldexp(torch.ones_like(v), (torch.clamp(e, min=f.emin) - f.precision + 1).to(torch.float64))

    def plain_round(v, f):
        q = plain_ulp(v, f)
        r = torch.round(v.abs() / q) * q
        r = torch.where(r > f.max, torch.full_like(r, math.inf), r)
        return torch.copysign(torch.where(torch.isfinite(v), r, v.abs()), v)
    g = torch.Generator().manual_seed(29)
    v = torch.cat([torch.randint(-2**63, 2**63 - 1, (1 << 15,), dtype=torch.int64, generator=g).view(torch.float64),
                   torch.randn(1 << 15, dtype=torch.float64, generator=g)
                   * 2.0 ** torch.randint(-160, 140, (1 << 15,), generator=g).double(),
                   torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 65504.0, 65520.0, 3.4e38, 3.5e38,
                                 2.0 ** -149, 2.0 ** -150, 3 * 2.0 ** -151, 2.0 ** -24, 2.0 ** -25],
                                dtype=torch.float64)])
    normal = ~torch.isnan(v) & (v.abs() >= 2.0 ** -1022)          # frexp's exponent is the field's there
    for name in ("bf16", "fp16", "fp32"):
        f = FORMATS[name]
        assert torch.equal(round_to(v, f).view(torch.int64), plain_round(v, f).view(torch.int64)), name
        assert torch.equal(ulp(v[normal], f), plain_ulp(v[normal], f)), name
