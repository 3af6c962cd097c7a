"""One pipeline drives every pair: the sweep, the pytest plugin, hypothesis exploration, bisect's
judge and replay give the same result for the same pair — every column that neither measures time
nor names the command that produced it. The pair is a real failure (SiLU in bf16), so the typed
findings (fail_kind, their words, the worst element) are compared, not just `pass`. The sweep,
exploration and the judge run the pair in a worker; replay and the plugin inline (one worker start
less each), so the comparison also covers both isolations."""
from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
from hypothesis import strategies as st

from harness.cases.suite import load_suite
from harness.reports.rundir import read_results
from tests.conftest import SILU_IN_BF16
from tests.test_pytest_plugin import _outer_env

SPEC = "k=kern:make"
SUITE = '[[case]]\ndtype = "bf16"\nshape = [4, 32]\n'
SAME = ["output", "reference", "reference_kind", "reference_model", "status", "fail_kind", "reason", "budget",
        "budget_metric", "max_ulp", "mean_ulp", "max_abs_err", "max_rel_err", "max_scaled_err", "p99_ulp",
        "count_over", "worst_index", "worst_got", "worst_ref", "worst_inputs", "cr_mismatch", "certified",
        "uncertified", "repeatable", "differing_elements", "inputs_modified", "impl_spec", "impl_hash"]


def _same(df: pd.DataFrame) -> list:
    d = df.sort_values(["output", "reference"]).reset_index(drop=True)
    return d[SAME].astype(str).to_numpy().tolist()


def test_every_path_gives_the_same_result(tmp_path, monkeypatch):
    import harness
    from harness.api import plan
    from harness.explore import explore
    from harness.replay import replay, write_replay_results
    src = tmp_path / "src"
    src.mkdir()
    (src / "kern.py").write_text(SILU_IN_BF16 + "\nmake = silu_in_bf16\n")
    suite = tmp_path / "one.toml"
    suite.write_text(SUITE)
    case = load_suite(str(suite)).cases[0]
    monkeypatch.syspath_prepend(str(src))
    env = {**_outer_env(), "PYTHONPATH": os.pathsep.join([str(src)] + sys.path[1:])}
    got = {}

    got["sweep"] = harness.verify(SPEC, cases=str(suite), device="cpu").frame

    p = plan(SPEC, str(suite), "cpu")
    explore(p.impls, p.settings, 1, 0, tmp_path / "explore", strategy=st.just(case))
    got["explore"] = read_results(tmp_path / "explore" / "results.csv")

    judged = subprocess.run([sys.executable, "-m", "harness.bisect_judge", "--impl", SPEC, "--cases", str(suite),
                             "--device", "cpu", "--out", str(tmp_path / "judge"), "--root", str(src)],
                            env=env, capture_output=True, text=True, cwd=tmp_path)
    assert judged.returncode == 1, judged.stdout + judged.stderr              # BAD: the commit fails
    got["bisect"] = read_results(tmp_path / "judge" / "results.csv")

    write_replay_results(replay(case.case_id, SPEC, str(suite), "cpu", top=1, isolate="inline"), tmp_path / "replay")
    got["replay"] = read_results(tmp_path / "replay" / "results.csv")

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "test_it.py").write_text(
        f"import harness.pytest_plugin as hp\ntest_k = hp.suite({SPEC!r}, cases={str(suite)!r})\n")
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                    f"--harness-out={tmp_path / 'plugin'}", "--harness-device=cpu", "--harness-isolate=inline"],
                   cwd=tmp_path / "proj", env=env, capture_output=True)
    got["plugin"] = read_results(tmp_path / "plugin" / "results.csv")

    first = _same(got["sweep"])
    assert len(first) == 10 and {r[SAME.index("fail_kind")] for r in first} >= {"over_budget"}
    for path, df in got.items():
        assert _same(df) == first, path
