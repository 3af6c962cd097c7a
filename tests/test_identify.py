"""`harness identify` (SPEC §4): the model each built-in realises, found on its own; the one-line
verdict and exit codes; an implementation that fits no single model named as such."""
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
                 "--no-report"]) == 0
    out = capsys.readouterr().out
    name = impl.split("=")[0]
    assert out.strip().splitlines()[-1] == f"{name} realises {model}"
    assert f"{name:24s} bf16  y        within budget of: {model}" in out
    assert out.splitlines()[0].split()[:3] == ["implementation", "dtype", "output"]


def test_an_implementation_fitting_no_model(suite, tmp_path, capsys):
    assert main(["identify", "--impl", "bug=harness.mutants:silu_in_bf16", "--cases", suite, "--device", "cpu",
                 "--out", str(tmp_path), "--no-report"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("bug realises no single declared model: ") and "bf16 y" in last


def test_identify_usage_errors(capsys):
    assert main(["identify", "--impl", "torch", "--impl", "torch-fused", "--device", "cpu"]) == 2
    assert "one --impl" in capsys.readouterr().err


def test_verdict_logic_on_hand_made_rows():
    rows = []
    for model, ok_y, ok_dx in (("chain", True, False), ("fused", False, True)):
        for out, ok in (("y", ok_y), ("dx", ok_dx)):
            rows.append({"impl": "k", "out_dtype": "bf16", "output": out, "reference": f"model:{model}",
                         "reference_kind": "model", "reference_model": model, "status": "pass" if ok else "fail"})
    df = pd.DataFrame(rows)
    whole, none = realised(model_fits(df))
    assert whole == [] and none == []                       # each output fits one model, none fits all
    code, lines, verdicts = format_identify(df)
    assert code == 1 and "no one model fits all" in lines[-1] and verdicts == lines[-1:]
    df2 = df.assign(status="pass")
    code, lines, verdicts = format_identify(df2)
    assert code == 0 and lines[-1] == "k realises chain = fused (the models coincide on these cases)"


def test_the_report_says_what_the_command_said(suite, tmp_path, capsys):
    """The checks against the models torch does not declare are over budget: they say which model
    it is, they are not its verdict. The report leads with the model and identify's exit code."""
    assert main(["identify", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    verdict = html[html.index('id="verdict"'):html.index('id="models"')]
    assert 'class="badge b-PASS"' in verdict and "exit code <b>0</b>" in verdict
    assert '<p class="headline"><b>torch realises chain</b></p>' in verdict
