"""The harness's own sensitivity: every mutant caught by quick, every correct built-in passes."""
from harness.mutants import MUTANTS
from harness.selftest import run_selftest


def test_selftest_catches_every_mutant_and_passes_correct_builtins(tmp_path):
    report = run_selftest("quick", "cpu", tmp_path)
    assert set(MUTANTS) <= set(report)
    for name, (kind, ok, detail, bug) in report.items():
        assert ok, f"{name} ({kind}): {detail}"
        if kind == "mutant":
            assert " vs " in detail          # names the output and reference that caught it
