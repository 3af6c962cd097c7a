"""`harness identify` (SPEC §4): the model and math class each built-in realises, found on its own;
the one-line verdict and exit codes; an implementation that fits no single model named as such.
What is under test is the command, not the worker: its runs use --isolate inline, except the one
that also writes the report (the default isolation, workers and all)."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.cli import main
from harness.commands.identify import format_identify
from harness.reports.realised import model_fits, realised

SUITE = """
[[group]]
dtype = ["bf16", "fp16"]
shape = [[8, 32]]
zero_centered_gamma = [false, true]
[[group]]
dtype = ["bf16"]
shape = [[8, 32]]
group_size = [8]
norm_before_gate = [true, false]
"""
INLINE = ["--isolate", "inline"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    f = tmp_path_factory.mktemp("identify") / "s.toml"
    f.write_text(SUITE)
    return str(f)


@pytest.mark.parametrize("impl,model", [("torch", "chain"), ("torch-fused", "fused"), ("torch-xhat", "xhat"),
                                        ("mutant=harness.mutants:chain_declared_fused", "chain")])
def test_identify_finds_the_model_of_each_builtin(impl, model, suite, tmp_path, capsys):
    """Whatever it declares (the mutant declares fused), the model it computes is the one named."""
    assert main(["identify", "--impl", impl, "--cases", suite, "--device", "cpu", "--out", str(tmp_path),
                 "--no-report", *INLINE]) == 0
    out = capsys.readouterr().out
    name = impl.split("=")[0]
    assert out.strip().splitlines()[-1] == f"{name} realises {model}, accurate math"
    assert f"{name:24s} bf16  y        within budget of: {model} (accurate)" in out
    assert out.splitlines()[0].split()[:3] == ["implementation", "dtype", "output"]


def test_an_implementation_fitting_no_model(suite, tmp_path, capsys):
    assert main(["identify", "--impl", "bug=harness.mutants:silu_in_bf16", "--cases", suite, "--device", "cpu",
                 "--out", str(tmp_path), "--no-report", *INLINE]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("bug realises no single declared model: ") and "bf16 y" in last


def test_identify_usage_errors(capsys):
    assert main(["identify", "--impl", "torch", "--impl", "torch-fused", "--device", "cpu"]) == 2
    assert "one --impl" in capsys.readouterr().err
    # identify judges the first call's values only: run's timing and repeat options are not its own
    for flag in (["--repeats", "-1"], ["--repeats", "3"], ["--allow-nondeterministic"]):
        assert main(["identify", "--impl", "torch", "--device", "cpu", *flag]) == 2
        assert "unrecognized arguments" in capsys.readouterr().err


def test_an_implementation_whose_every_pair_errors_verified_nothing(suite, tmp_path, capsys):
    """Nothing verified is exit 1 (README), said on stderr in one line."""
    assert main(["identify", "--impl", "boom=tests.test_identify:raising", "--cases", suite, "--device", "cpu",
                 "--out", str(tmp_path), "--no-report", *INLINE]) == 1
    cap = capsys.readouterr()
    assert "harness: identify: no model check was measured (every pair errored or was skipped)" in cap.err
    assert cap.out == ""


def raising(hidden_size, **kw):
    raise RuntimeError("no kernel today")


def test_verdict_logic_on_hand_made_rows():
    rows = []
    for model, ok_y, ok_dx in (("chain", True, False), ("fused", False, True)):
        for out, ok in (("y", ok_y), ("dx", ok_dx)):
            rows.append({"impl": "k", "out_dtype": "bf16", "output": out, "reference": f"model:{model}",
                         "reference_kind": "model", "reference_model": model, "status": "pass" if ok else "fail"})
    df = pd.DataFrame(rows)
    whole, mc, none = realised(model_fits(df.assign(reference_math="accurate")))
    assert whole == [] and mc == "" and none == []          # each output fits one model, none fits all
    code, lines, verdicts = format_identify(df.assign(reference_math="accurate"))
    assert code == 1 and "no one model fits all" in lines[-1] and verdicts == lines[-1:]
    df2 = df.assign(status="pass", reference_math="accurate")
    code, lines, verdicts = format_identify(df2)
    assert code == 0 and lines[-1] == "k realises chain = fused (the models coincide on these cases), accurate math"


def test_the_least_permissive_class_that_fits_is_named():
    """A model reference is at its own math class (reference_model, reference_math). The least
    permissive class at which a model fits every output is named, whatever was declared."""
    rows = []
    for model, mc, ok_y, ok_dg in (("fused", "fast", True, True), ("fused", "accurate", True, False),
                                   ("fused", "accurate+ftz", False, True), ("chain", "fast+ftz", True, True)):
        for out, ok in (("y", ok_y), ("dgate", ok_dg)):
            rows.append({"impl": "k", "out_dtype": "fp32", "output": out, "reference": f"model:{model}@{mc}",
                         "reference_kind": "model", "reference_model": model, "reference_math": mc, "math": "fast",
                         "status": "pass" if ok else "fail"})
    fit = model_fits(pd.DataFrame(rows))
    assert set(zip(fit["model"], fit["math"])) == {("fused", "fast"), ("fused", "accurate"),
                                                   ("fused", "accurate+ftz"), ("chain", "fast+ftz")}
    assert realised(fit) == (["fused"], "fast", [])
    code, lines, _ = format_identify(pd.DataFrame(rows))
    assert code == 0 and lines[-1] == "k realises fused, fast math"
    assert "fp32  dgate    within budget of: chain (fast+ftz), fused (accurate+ftz)" in "\n".join(lines)


def test_identify_names_the_fast_class_of_the_fast_math_emulation(tmp_path, capsys):
    """torch-fastmath (exp as exp2 of the float32-rounded t log2 e) fits fused only at `fast`: the
    float32 outputs next to saturating gates tell it from accurate math (the bf16 case, fused from
    the other models)."""
    f = tmp_path / "s.toml"
    f.write_text('[[group]]\ndtype = ["fp32", "bf16"]\ngate_dtype = ["fp32"]\nshape = [[8, 64]]\n'
                 'gate_dist = ["saturating"]\n')
    assert main(["identify", "--impl", "torch-fastmath@accurate", "--cases", str(f), "--device", "cpu",
                 "--out", str(tmp_path / "o"), "--no-report", *INLINE]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == "torch-fastmath realises fused, fast math"
    assert "fp32  dgate    within budget of: fused (fast)" in out and "bf16  y        within budget of: fused (accurate)" in out


def test_the_report_says_what_the_command_said(suite, tmp_path, capsys):
    """The checks against the models torch does not declare are over budget: they say which model
    it is, they are not its verdict. The report leads with the model and identify's exit code."""
    assert main(["identify", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    verdict = html[html.index('id="verdict"'):html.index('id="models"')]
    assert 'class="badge b-PASS"' in verdict and "exit code <b>0</b>" in verdict
    assert '<p class="headline"><b>torch realises chain, accurate math</b></p>' in verdict
