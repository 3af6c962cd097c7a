"""The pytest plugin (harness.pytest_plugin): one test per case with the failure record, skips,
isolation, --harness-out, --harness-regen, hypothesis under the active profile, xdist groups and
one GPU per worker (simulated with HARNESS_GPUS on the CPU). Sessions run in subprocesses, as a
kernel repository's CI runs them; the plugin comes from the installed entry point."""
from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import harness.pytest_plugin as hp
from harness.cases.case import Case
from tests.conftest import SILU_IN_BF16

KERNELS = SILU_IN_BF16 + """
import os

from harness.impls.torch_ref import chain, xhat


def good(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)


good.supports = lambda case: "no fp16 kernel" if case.dtype == "fp16" else None


bad = silu_in_bf16


def quits(hidden_size, **kw):
    os._exit(3)


def gpu_only(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)


gpu_only.devices = ("cuda",)


# xhat rounding declared as chain: over the default budgets by a few ULP (what regen is for)
def xhat_as_chain(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return xhat(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
"""

SUITE = """\
name = "plugin-tiny"
[[case]]
dtype = "bf16"
shape = [4, 64]
[[case]]
dtype = "fp16"
shape = [4, 64]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    (root / "kern.py").write_text(KERNELS)
    (root / "tiny.toml").write_text(SUITE)
    return root


def _outer_env() -> dict:
    """This process's environment without what an enclosing `pytest -n` gave it (its worker id, and
    the GPU the plugin pinned it to): the inner session must see a fresh machine."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT")) and k not in ("CUDA_VISIBLE_DEVICES",)}


def session(project: Path, tmp_path: Path, test_file: str, *args, conftest: str = "", env=None, name="proj"):
    """pytest in a fresh directory holding `test_file` (and `conftest`); (exit code, output)."""
    d = tmp_path / name
    d.mkdir()
    (d / "test_it.py").write_text(test_file)
    if conftest:
        (d / "conftest.py").write_text(conftest)
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args], cwd=d,
                       capture_output=True, text=True,
                       env={**_outer_env(), "PYTHONPATH": str(project), **(env or {})})
    return p.returncode, p.stdout + p.stderr


# ---------------------------------------------------------------------------------------------
# Pure parts.

@pytest.mark.parametrize("env,want", [
    ({"PYTEST_XDIST_WORKER": "gw4", "HARNESS_GPUS": "0,1,2"}, "1"),
    ({"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "3,5"}, "5"),       # within the visible ones
    ({"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "3,5", "HARNESS_GPUS": "6,7"}, "7"),
    ({"PYTEST_XDIST_WORKER": "gw3", "HARNESS_GPUS": "GPU-a, GPU-b"}, "GPU-b"),
    ({"PYTEST_XDIST_WORKER": "gw1", "HARNESS_GPUS": "0"}, None),                # one GPU: nothing to spread
    ({"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": ""}, None),         # none visible
    ({"PYTEST_XDIST_WORKER": "gw1", "HARNESS_GPUS": "off", "CUDA_VISIBLE_DEVICES": "0,1"}, None),
    ({"HARNESS_GPUS": "0,1"}, None),                                            # not an xdist worker
    ({"PYTEST_XDIST_WORKER": "master", "HARNESS_GPUS": "0,1"}, None),
])
def test_worker_gpu(env, want):
    assert hp.worker_gpu(env) == want


def test_gpu_count_leaves_cuda_uninitialised():
    import torch
    gpus = hp.gpu_list({})                        # counted through NVML (none on a CPU build)
    assert gpus == [str(i) for i in range(torch.cuda.device_count())]
    assert not torch.cuda.is_initialized()


def _params(test):
    mark = next(m for m in test.pytestmark if m.name == "parametrize")
    return mark.args[1]


def test_one_test_per_case_grouped_by_compile_key():
    a = Case("bf16", "bf16", "bf16", (4, 64), False, 1e-5, "standard", "normal", "one", 0)
    b = Case("fp16", "fp16", "fp32", (2, 3, 128), True, 1e-5, "standard", "negative", "zero", 1)
    params = _params(hp.suite("torch", cases=[a, b]))
    assert [p.id for p in params] == [f"{a.case_id}-bf16_4x64_eps=1e-05_x:standard_gate:normal_gamma:one",
                                      f"{b.case_id}-fp16/w:fp32_2x3x128_zc_eps=1e-05_x:standard_gate:negative_gamma:zero"]
    groups = [[m.args[0] for m in p.marks if m.name == "xdist_group"] for p in params]
    assert groups == [["h64-bf16-bf16-bf16-g64-norm"], ["h128-fp16-fp16-fp32-g128-norm"]]
    two = _params(hp.suite(["torch", "t2=harness.impls.torch_ref:chain"], cases=[a]))
    assert [p.id.rsplit("-", 1)[1] for p in two] == ["torch", "t2"]


# ---------------------------------------------------------------------------------------------
# Sessions.

def test_failure_record_skips_isolation_and_out(project, tmp_path):
    test_file = ("import harness.pytest_plugin as hp\n"
                 f"test_k = hp.suite(['good=kern:good', 'bad=kern:bad', 'quits=kern:quits'], "
                 f"cases={str(project / 'tiny.toml')!r})\n"
                 f"test_typo = hp.suite('nosuch', cases={str(project / 'tiny.toml')!r})\n")
    rc, out = session(project, tmp_path, test_file, f"--harness-out={tmp_path / 'out'}", "--harness-device", "cpu")
    assert rc == 1, out
    assert re.search(r"^6 failed, 1 passed, 1 skipped in ", out, re.M), out
    # a usage error (here an unknown implementation) is one line in each of the suite's tests
    assert len(re.findall(r"^harness: --impl 'nosuch': unknown implementation", out, re.M)) == 2, out
    bf16 = Case("bf16", "bf16", "bf16", (4, 64), False, 1e-5, "standard", "normal", "one", 0).case_id
    fp16 = Case("fp16", "fp16", "fp16", (4, 64), False, 1e-5, "standard", "normal", "one", 0).case_id
    assert f"PASSED test_it.py::test_k[{bf16}-bf16_4x64_eps=1e-05_x:standard_gate:normal_gamma:one-good]" in out
    assert re.search(rf"^SKIPPED \[1\] \S+: {fp16}: no fp16 kernel$", out, re.M), out
    # the failure record: case id, output, reference, metric, value, budget, worst inputs in hex, replay
    rec = re.search(rf"AssertionError: {bf16} \[bf16 4x64 [^\]]*\]: \d+ of 10 checks not within budget\n(.*?)\n\n",
                    out, re.S)
    assert rec, out
    assert re.search(rf"FAIL\s+bad {bf16} y vs (exact|model:chain): .*: y ulp error [0-9.]+ > budget [0-9.]+", rec[1])
    assert re.search(r"worst element: x\[\d+,\d+\]=0x[0-9a-f]{4} \(", rec[1])
    assert f"replay: harness replay {bf16} --impl bad=kern:bad --cases {project / 'tiny.toml'} --device cpu" in rec[1]
    # a kernel that ends its process is an error of its test (the pair ran in a worker), and the
    # session goes on with a fresh worker (the fp16 tests after it ran)
    assert re.search(rf"ERROR quits {bf16} y vs exact: .*the implementation's process exited with status 3", out), out
    assert f"FAILED test_it.py::test_k[{fp16}-fp16_4x64_eps=1e-05_x:standard_gate:normal_gamma:one-bad]" in out
    with open(tmp_path / "out" / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6 * 10 and {r["status"] for r in rows} == {"pass", "fail", "skip", "error"}
    assert {(r["impl"], r["case_id"]) for r in rows if r["status"] == "skip"} == {("good", fp16)}
    assert (tmp_path / "out" / "report.html").is_file() and not (tmp_path / "out" / ".parts").exists()


def test_a_kernel_for_a_device_the_machine_lacks_skips_unless_the_device_is_asked(project, tmp_path):
    """`make.devices = ("cuda",)` on a machine without CUDA (here hidden): with the device left to
    the machine its tests skip, naming why, and the other implementations' tests of the same suite
    still run, each as itself; regen keeps the skipped one's budget lines. A suite of it alone is
    still checked whole (a bad math class fails it). Asked for by name (--harness-device cpu), every
    test of the suite fails in one line, as `harness run --device cpu` exits 2."""
    suite = str(project / "tiny.toml")
    test_file = ("import harness.pytest_plugin as hp\n"
                 f"test_k = hp.suite(['good=kern:good', 'gpu=kern:gpu_only', 'bad=kern:bad'], cases={suite!r})\n"
                 f"test_alone = hp.suite('gpu=kern:gpu_only', cases={suite!r}, math='bogus')\n")
    budgets = tmp_path / "budgets.csv"
    budgets.write_text("impl,rounding,math,dtype,output,reference,regime,metric,budget\n"
                       "gpu,*,*,*,*,*,*,ulp,7\n")
    hidden = {"CUDA_VISIBLE_DEVICES": ""}
    rc, out = session(project, tmp_path, test_file, f"--harness-budgets={budgets}", "--harness-regen",
                      env=hidden, name="auto")
    assert rc == 1, out
    assert re.search(r"^4 failed, 1 passed, 3 skipped in ", out, re.M), out      # bad's 2, alone's 2
    skipped = re.findall(r"^SKIPPED \[(\d)\] \S+: harness: unavailable: gpu runs on cuda only, not cpu "
                         r"\(the machine's device; --harness-device to insist\)$", out, re.M)
    assert sum(map(int, skipped)) == 2, out
    assert re.search(r"^PASSED test_it.py::test_k\[\w+-bf16_4x64\S*-good\]$", out, re.M), out
    assert re.search(r"^\s+FAIL\s+bad \w+ y vs model:chain: .*\n.*\n\s+replay: harness replay \w+ --impl bad=kern:bad ",
                     out, re.M), out                   # bad's tests judged bad (after the one left out)
    assert len(re.findall(r"^harness: math 'bogus'|^harness: .*'bogus'", out, re.M)) == 2, out
    assert "gpu,*,*,*,*,*,*,ulp,7" in budgets.read_text() and "\ngood," in budgets.read_text()
    rc, out = session(project, tmp_path, test_file, "--harness-device", "cpu", env=hidden, name="asked")
    assert rc == 1 and re.search(r"^8 failed in ", out, re.M), out
    assert len(re.findall(r"^harness: --impl gpu: unavailable: gpu runs on cuda only, not cpu$", out, re.M)) == 6, out


def test_regen_writes_budgets_never_below_the_defaults(project, tmp_path):
    test_file = ("import harness.pytest_plugin as hp\n"
                 f"test_x = hp.suite('xc=kern:xhat_as_chain', cases={str(project / 'tiny.toml')!r})\n")
    budgets, out = tmp_path / "budgets.csv", tmp_path / "out"
    rc, text = session(project, tmp_path, test_file, "--harness-regen", name="usage")
    assert rc == 4 and "--harness-regen: name the budget file to write with --harness-budgets FILE" in text, text
    rc, text = session(project, tmp_path, test_file, "-k", "fp16", "--harness-isolate", "inline", "--harness-regen",
                       "--harness-budgets", str(budgets), "--harness-out", str(out))
    assert rc == 1, text                                # over the default budgets: fails, as --force-regen does
    assert "--harness-regen: " in text and re.search(r"harness: grew xc,chain,accurate,fp16,\w+,model", text), text
    assert f"harness: wrote 8 budgets to {budgets}" in text, text
    with open(budgets, newline="") as fh:
        written = {(r["output"], r["reference"]): float(r["budget"]) for r in csv.DictReader(fh)}
    with open(out / "results.csv", newline="") as fh:
        gated = list(csv.DictReader(fh))                # gated with the defaults
    column = {"ulp": "max_ulp", "scaled": "max_scaled_err"}
    for r in gated:
        budget = written[({"y_infer": "y"}.get(r["output"], r["output"]), r["reference"].split(":")[0])]
        assert budget >= float(r["budget"]) and budget >= float(r[column[r["budget_metric"]]])
    assert any(float(r["budget"]) < float(r[column[r["budget_metric"]]]) for r in gated)    # some grew
    rc, text = session(project, tmp_path, test_file, "-k", "fp16", "--harness-isolate", "inline",
                       "--harness-budgets", str(budgets), name="again")
    assert rc == 0 and re.search(r"^1 passed", text, re.M), text


HYPOTHESIS_CONFTEST = """\
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

# the repository's profile: few examples, its own database, no shrinking; its kernels take no op
# variant, so most drawn cases (groups, gate first, sigmoid) are rejected: 50 rejections before a
# few accepted cases is a matter of luck (one CI run in ~15), not a fault of the test
settings.register_profile("tiny", max_examples=3, database=DirectoryBasedExampleDatabase("hdb"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate],
                          suppress_health_check=[HealthCheck.filter_too_much])
"""

HYPOTHESIS_TEST = """\
import harness.pytest_plugin as hp
from harness.cases.strategies import cases

small = cases(dtypes=("bf16",), max_hidden=16, max_tokens=4, gate_dtypes=(), weight_dtypes=(), activations=("silu",))
test_good = hp.explore("good=kern:good", small)
test_bad = hp.explore("bad=kern:bad", small)
"""


def test_explore_runs_under_the_active_profile(project, tmp_path):
    rc, out = session(project, tmp_path, HYPOTHESIS_TEST, "--hypothesis-profile=tiny",
                      "--hypothesis-show-statistics", "--harness-isolate", "inline", conftest=HYPOTHESIS_CONFTEST)
    assert rc == 1, out
    assert re.search(r"^1 failed, 1 passed", out, re.M), out
    good = out[out.index("test_it.py::test_good[good]:"):]
    assert re.search(r"^    - 3 passing(, 0 failing,| examples)", good, re.M), out    # the profile's max_examples
    assert "Stopped because settings.max_examples=3" in good, out
    assert re.search(r"(Falsifying example|Failing test case): test\(", out), out
    assert "# the case as a suite entry:\nE   [[case]]" in out, out
    assert re.search(r"replay: harness replay [0-9a-f]{12} --impl bad=kern:bad --case '\{", out), out
    assert "shrink phase" not in out                     # the profile's phases
    saved = [p for p in (tmp_path / "proj" / "hdb").rglob("*") if p.is_file()]
    assert saved, "the failing example went to the profile's database"


GPU_CONFTEST = """\
import os

# recorded when pytest imports this conftest: the plugin must have pinned the GPU before
with open(os.path.join(os.environ["RECORD"], os.environ.get("PYTEST_XDIST_WORKER", "main")), "w") as fh:
    fh.write(os.environ.get("CUDA_VISIBLE_DEVICES", "-"))
"""


def test_xdist_workers_get_one_gpu_each(project, tmp_path):
    """Plain tests (no harness suite: nothing imports torch): the mapping is the plugin's, per worker.
    Grouping by compile key and merging the workers' rows: test_adoption's `pytest -n 2`."""
    record = tmp_path / "record"
    record.mkdir()
    test_file = "import os\n\n\ndef test_sees_one_gpu():\n    assert os.environ['CUDA_VISIBLE_DEVICES'] in ('5', '7')\n"
    rc, out = session(project, tmp_path, test_file, "-n", "2", conftest=GPU_CONFTEST,
                      env={"HARNESS_GPUS": "5,7", "RECORD": str(record)})
    assert rc == 0 and re.search(r"^1 passed", out, re.M), out
    assert {p.name: p.read_text() for p in record.iterdir()} == {"main": "-", "gw0": "5", "gw1": "7"}


def test_budget_file_never_reads_back_below_a_budget():
    from harness.budgets import FILE_COLUMNS, budget_file_text, parse_budget_file
    values = [2.00439453125, 1.3, 0.5, 11.0, 2.0007, 1 / 3]
    keys = ("*", "*", "bf16", "y", "exact", "normal", "ulp")                  # one impl a line: one budget per key
    text = budget_file_text([dict(zip(FILE_COLUMNS, (f"impl{k}", *keys, v))) for k, v in enumerate(values)])
    assert [o.budget for o in parse_budget_file(text, "b.csv")] == values     # regen's floor survives the file
    assert "1.3\n" in text and "2.00439453125\n" in text
