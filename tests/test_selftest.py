"""The harness's own sensitivity (harness/selftest.py): every mutant — the field's bugs among them —
caught with the output and case named, every correct eager built-in passing, on a compact suite
(`harness selftest` runs quick; test_cli-style CPU time is kept small here)."""
import pytest

from harness.mutants import MUTANTS
from harness.selftest import format_selftest, selftest

SUITE = """
name = "selftest-compact"
[[group]]
dtype = ["bf16", "fp16"]
shape = [[4, 19]]
zero_centered_gamma = [false, true]
[[group]]
dtype = ["bf16"]
gate_dtype = ["fp32"]
weight_dtype = ["fp32"]
shape = [[16, 64]]
zero_centered_gamma = [true]
[[group]]
dtype = ["bf16"]
shape = [[8, 64]]
group_size = [16]
norm_before_gate = [true, false]
[[group]]
dtype = ["bf16"]
shape = [[512, 32]]
dy_dist = ["ones"]
[[case]]    # a float32 output next to saturating gates: tells the math classes apart
dtype = "fp32"
shape = [8, 64]
gate_dist = "saturating"
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("selftest")
    (d / "s.toml").write_text(SUITE)
    return selftest(str(d / "s.toml"), "cpu", d / "out",
                    correct=["torch", "torch-fused", "torch-xhat", "torch-fastmath", "torch-fastmath-ftz"])


def test_every_mutant_caught_and_every_correct_builtin_passes(report):
    assert set(MUTANTS) <= set(report.report)
    for name, (kind, ok, detail, bug) in report.report.items():
        assert ok, f"{name} ({kind}): {detail}"
        if kind == "mutant":
            assert " vs " in detail and " on " in detail      # names the output, reference and case
            assert bug                                       # says what is wrong
    assert report.ok


def test_field_mutants_cite_their_source():
    for name in ("eps-outside-sqrt", "variance-bf16-accumulator", "zc-ignored-gamma-twice", "one-plus-w-in-bf16",
                 "fla-dgate-in-x-dtype", "returns-fp32", "dweight-garbage-few-rows"):
        assert any(k in MUTANTS[name].__doc__ for k in ("#", "fused_norm_gate")), name


def test_format(report):
    text = format_selftest(report)
    assert "PASS caught" in text and "PASS passes" in text and "FAIL" not in text
