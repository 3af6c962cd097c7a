"""Spreading a sweep: --jobs N workers each pinned to a GPU of --gpus (simulated: the workers report
the CUDA_VISIBLE_DEVICES they were given), and multi-host shards (--shard K/N) that `harness merge`
combines only when they cover the suite exactly once, from one harness version and suite."""
from __future__ import annotations

import textwrap

import pandas as pd
import pytest

from harness.cli import main
from harness.worker import gpu_device, visible_gpus

SUITE = """
[[group]]
dtype = ["bf16", "fp16"]
shape = [[4, 16], [4, 24], [2, 32]]
"""

PROBE = '''
import os
import harness
def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    raise harness.Unsupported("gpu=" + os.environ.get("CUDA_VISIBLE_DEVICES", "-") + " pid=" + str(os.getpid()))
'''


@pytest.fixture
def suite(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(SUITE)
    return str(f)


def test_gpu_indices_count_among_the_gpus_the_command_sees():
    """--gpus K is cuda:K as the command sees it: under an allocation (CUDA_VISIBLE_DEVICES set, by
    index, UUID or MIG id) the K-th entry, never the machine's GPU K, which is another job's."""
    allocated = {"CUDA_VISIBLE_DEVICES": "4, 6,2"}
    assert visible_gpus(allocated) == ["4", "6", "2"]
    assert [gpu_device(k, allocated) for k in (0, 1, 2)] == ["4", "6", "2"]
    for bad in (3, -1):
        with pytest.raises(IndexError):
            gpu_device(bad, allocated)
    assert gpu_device(5, {}) == "5"                                         # unset: the machine's own numbering
    with pytest.raises(IndexError):
        gpu_device(-1, {})


@pytest.mark.parametrize("value, seen", [
    ("GPU-8f2c,GPU-77aa", ["GPU-8f2c", "GPU-77aa"]),
    ("MIG-1a2b", ["MIG-1a2b"]),
    ("", []),                               # set and empty: none
    ("-1", []),                             # the usual way to hide every GPU
    ("0,-1,1", ["0"]),                      # the first invalid entry ends the list
    ("0,,1", ["0"]),
    ("3,GPU-8f2c", ["3"]),                  # one kind per list
    ("GPU-8f2c, GPU-77aa", ["GPU-8f2c"]),   # a UUID is not stripped
    ("1,0,1", []),                          # a device twice: none
])
def test_cuda_visible_devices_read_as_cuda_reads_it(value, seen):
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": value}) == seen


def test_unset_the_machine_counts(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert visible_gpus({}) == ["0", "1"]


def test_jobs_spread_over_the_gpus_by_compile_key(tmp_path, monkeypatch, suite):
    """Two of three allocated GPUs (simulated on the CPU: the probe reports its CUDA_VISIBLE_DEVICES)."""
    (tmp_path / "probe_mod.py").write_text(textwrap.dedent(PROBE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7,9")
    out = tmp_path / "out"
    assert main(["run", "--impl", "probe=probe_mod:make", "--cases", suite, "--device", "cpu", "--jobs", "2",
                 "--gpus", "2,0", "--out", str(out), "--no-report"]) == 1          # only skips: nothing verified
    df = pd.read_csv(out / "results.csv", dtype={"case_id": str})
    assert set(df["status"]) == {"skip"} and df["case_id"].nunique() == 6
    where = df.drop_duplicates("case_id").assign(
        gpu=lambda d: d["reason"].str.extract(r"gpu=(\S+) ")[0], pid=lambda d: d["reason"].str.extract(r"pid=(\d+)")[0],
        key=lambda d: d["hidden"].astype(str) + d["dtype"])
    assert set(where["gpu"]) == {"9", "5"} and where["pid"].nunique() == 2        # two workers, two GPUs
    assert (where.groupby("key")["gpu"].nunique() == 1).all()                    # a compile key on one worker
    assert (where.groupby("gpu")["pid"].nunique() == 1).all()


@pytest.mark.parametrize("visible, gpus, says", [
    (None, "0,x", "--gpus '0,x': expected GPU indices, e.g. 0,1"),
    ("5,7", "0,2", "--gpus 0,2: this command sees 2 GPUs, numbered from 0 (CUDA_VISIBLE_DEVICES='5,7'); "
                   "2 is not among them"),
    ("", "0", "--gpus 0: this command sees no GPU (CUDA_VISIBLE_DEVICES=''); 0 is not among them"),
    (None, "3,0,2", "--gpus 3,0,2: this command sees 2 GPUs, numbered from 0 (the machine's); 2, 3 are not among them"),
])
@pytest.mark.parametrize("cmd", ["run", "identify"])
def test_gpus_flag_is_checked(suite, capsys, monkeypatch, tmp_path, visible, gpus, says, cmd):
    import torch
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)             # where CUDA_VISIBLE_DEVICES is unset
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    out = tmp_path / "out"
    assert main([cmd, "--impl", "torch", "--cases", suite, "--device", "cpu", "--gpus", gpus, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"harness: error: {says}\n" and not out.exists()


def run_shard(suite, out, k, n):
    """One shard, inline: what merge checks is which cases ran, not where."""
    return main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--shard", f"{k}/{n}",
                 "--shard-by", "shape", "--out", str(out), "--no-report", "--repeats", "0", "--isolate", "inline"])


def test_merge_checks_coverage(tmp_path, suite, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_shard(suite, a, 1, 2) == 0 and run_shard(suite, b, 2, 2) == 0
    merged = tmp_path / "m"
    junit = tmp_path / "merged.xml"
    assert main(["merge", str(a), str(b), "--out", str(merged), "--cases", suite, "--junit", str(junit)]) == 0
    df = pd.read_csv(merged / "results.csv", dtype={"case_id": str})
    assert df["case_id"].nunique() == 6 and len(df) == 6 * 10
    assert junit.read_text().count("<testcase ") == len(df)    # one test case per check
    capsys.readouterr()
    assert main(["merge", str(a), "--out", str(tmp_path / "m2"), "--cases", suite]) == 2     # a shard missing
    assert "missing" in capsys.readouterr().err
    assert main(["merge", str(a), str(a), "--out", str(tmp_path / "m3")]) == 2                # twice
    assert "more than one input" in capsys.readouterr().err
    other = tmp_path / "o.toml"
    other.write_text(SUITE)
    c = tmp_path / "c"
    assert run_shard(str(other), c, 2, 2) == 0
    assert main(["merge", str(a), str(c), "--out", str(tmp_path / "m4")]) == 2                # another suite
    assert "different suites" in capsys.readouterr().err
    bad = pd.read_csv(b / "results.csv", dtype=str, keep_default_na=False)
    bad["harness_version"] = "0.0.0"
    bad.to_csv(b / "results.csv", index=False)
    assert main(["merge", str(a), str(b), "--out", str(tmp_path / "m5")]) == 2                # another version
    assert "harness version" in capsys.readouterr().err


def test_merge_without_cases_checks_the_recorded_suite_and_says_when_it_cannot_find_it(tmp_path, capsys, monkeypatch):
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    (here / "s.toml").write_text(SUITE)
    monkeypatch.chdir(here)
    assert run_shard("s.toml", here / "a", 1, 2) == 0 and run_shard("s.toml", here / "b", 2, 2) == 0
    capsys.readouterr()
    assert main(["merge", "a", "--out", "m1"]) == 2                                   # the suite the rows name
    assert "a shard did not run; run it and merge again" in capsys.readouterr().err
    monkeypatch.chdir(elsewhere)                                                      # s.toml: not from here
    args = ["merge", str(here / "a"), str(here / "b"), "--out", "m2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "the suite the shards recorded" in err and "give it with --cases" in err and "Traceback" not in err
    assert main([*args, "--cases", str(here / "s.toml")]) == 0


def test_merge_takes_the_results_of_cases_given_as_a_list(tmp_path, capsys):
    """The Python API and the pytest plugin write no suite for cases given as objects: two such
    result sets merge (no suite to check coverage against), beside a named suite's they do not."""
    import harness
    from tests.conftest import make_case
    for name, shape in (("a", (4, 16)), ("b", (4, 32))):
        r = harness.verify("torch", cases=[make_case(shape=shape)], device="cpu", out=tmp_path / name,
                           isolate="inline", repeats=0)
        assert r.ok and set(r.frame["suite"].fillna("")) == {""}
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 0
    (tmp_path / "s.toml").write_text(SUITE)
    assert run_shard(str(tmp_path / "s.toml"), tmp_path / "named", 1, 2) == 0
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "named"), "--out", str(tmp_path / "m2")]) == 2
    assert "different suites ((none)," in capsys.readouterr().err
