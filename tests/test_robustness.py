"""A gate that cannot be fooled and loses nothing: what a hostile or broken implementation, a killed
sweep or a second sweep into the same directory does to `harness run` (bad files, names pandas
reads as missing and NaN references: tests/test_robustness_inputs.py; a second run, kill -9, a detached
grandchild, an import that hangs: tests/test_process_lifetime.py).

Each test drives the real command (in this process through harness.cli.main, or as subprocesses
where processes are the point) on tiny suites; the plug-ins misbehave on the hidden-16 case, which
the suites put first, so every test also shows that the sweep goes on after it."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.reports.rundir import read_results

REPO = Path(__file__).resolve().parents[1]

# The bad case (fp32 2x16) first, then a good one (bf16 4x32).
TWO = """
[[group]]
dtype = ["fp32"]
shape = [[2, 16]]
[[group]]
dtype = ["bf16"]
shape = [[4, 32]]
"""

# Plug-ins that misbehave on hidden size 16 and are the eager chain elsewhere. Each misbehaviour
# first appends a line to calls-WHAT.txt beside this module, so a test can count how often it ran.
EVIL = '''
import ctypes, os, signal, sys, time
from harness.impls.torch_ref import GatedRMSNorm, chain

HERE = os.path.dirname(os.path.abspath(__file__))

def act(what):
    with open(os.path.join(HERE, f"calls-{what}.txt"), "a") as f:
        f.write("call\\n")
    if what == "exit0":
        sys.exit(0)
    if what == "osexit":
        os._exit(3)
    if what == "segv":
        ctypes.string_at(0)
    if what == "hang":
        time.sleep(1000)
    if what == "slow":
        while os.path.exists(os.path.join(HERE, "SLOW")):
            time.sleep(0.1)
    if what == "memerr":
        raise MemoryError("cannot allocate 1 TiB")
    if what == "sigkill":                 # what the kernel's OOM killer does
        os.kill(os.getpid(), signal.SIGKILL)

def forward_does(what):
    class M(GatedRMSNorm):
        def forward(self, x, gate):
            if x.shape[-1] == 16:
                act(what)
            return super().forward(x, gate)
    def make(h, **kw):
        return M(h, **kw)
    return make

def factory_does(what):
    def make(h, **kw):
        if h == 16:
            act(what)
        return chain(h, **kw)
    return make

fwd_exit0, fwd_osexit, fwd_segv, fwd_hang, fwd_memerr, fwd_sigkill = (
    forward_does(w) for w in ("exit0", "osexit", "segv", "hang", "memerr", "sigkill"))

class Slow(GatedRMSNorm):             # waits, while SLOW exists, on hidden 16 and on all-negative gates
    def forward(self, x, gate):
        if x.shape[-1] == 16 or bool((gate < 0).all()):
            act("slow")
        return super().forward(x, gate)

def fwd_slow(h, **kw):
    return Slow(h, **kw)
fac_exit0 = factory_does("exit0")
sup_exit = factory_does("never")
sup_exit.supports = lambda case: sys.exit(0) if case.hidden == 16 else None
'''


@pytest.fixture
def plug(tmp_path, monkeypatch):
    """tmp_path holds evil.py and the suite two.toml; workers find evil through the parent's path."""
    (tmp_path / "evil.py").write_text(EVIL)
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "two.toml").write_text(TWO)
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in ("evil", "exits_on_import"):
        sys.modules.pop(m, None)
    return tmp_path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_usage(code, err):
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("harness: error:")]
    return code == 2 and len(lines) == 1 and "Traceback" not in err


def calls(tmp_path, what) -> int:
    f = tmp_path / f"calls-{what}.txt"
    return len(f.read_text().splitlines()) if f.exists() else 0


def pairs(df):
    return df.groupby(["case_id", "impl"]).size()


# ---------------------------------------------------------------------- 1, 3: exits, crashes, memory

CRASHES = {   # impl name -> (plug-in, what its error rows must say)
    "f0": ("fwd_exit0", "forward/backward raised SystemExit: 0"),
    "c0": ("fac_exit0", "factory raised SystemExit: 0"),
    "su": ("sup_exit", "raised SystemExit: 0"),
    "ox": ("fwd_osexit", "exited with status 3"),
    "sv": ("fwd_segv", "killed by SIGSEGV"),
    "me": ("fwd_memerr", "out of memory in the forward/backward: MemoryError"),
    "sk": ("fwd_sigkill", "killed by SIGKILL (out of memory?"),
}


def test_exits_crashes_and_memory_become_error_rows_and_are_not_retried(capsys, plug):
    suite, out = plug / "two.toml", plug / "o"
    args = ["run", "--cases", suite, "--device", "cpu", "--out", out, "--no-report", "--repeats", "0"]
    for name, (attr, _) in CRASHES.items():
        args += ["--impl", f"{name}=evil:{attr}"]
    args += ["--impl", "torch"]
    code, stdout, err = run(capsys, *args)
    assert code == 1, stdout + err                      # never 0, and not "unfinished" either
    df = read_results(out / "results.csv")
    assert (pairs(df) == 10).all() and len(pairs(df)) == 2 * (len(CRASHES) + 1)
    bad = df[df["hidden"] == 16]
    good = df[df["hidden"] == 32]
    for name, (_, says) in CRASHES.items():
        rows = bad[bad["impl"] == name]
        assert (rows["status"] == "error").all(), (name, rows["status"].tolist())
        assert rows["reason"].str.contains(says, regex=False).all(), (name, rows["reason"].iloc[0])
        if name in ("ox", "sv", "sk"):                  # what ended the worker's pair is logged, case named
            assert f"harness: {name} {rows['case_id'].iloc[0]} [fp32 2x16" in err, (name, err)
    assert (good["status"] == "pass").all()             # every implementation's next case ran
    assert (df[df["impl"] == "torch"]["status"] == "pass").all()
    assert df["status"].value_counts().to_dict() == {"pass": 90, "error": 70}
    assert "harness: 90 pass, 0 fail, 70 error, 0 skip" in stdout
    first = {w: calls(plug, w) for w in ("exit0", "osexit", "segv", "memerr", "sigkill")}
    assert first == {"exit0": 2, "osexit": 1, "segv": 1, "memerr": 1, "sigkill": 1}     # exit0: f0 and c0

    # an error pair is a finished pair: --resume keeps it, runs nothing, and exits the same
    code, stdout, err = run(capsys, *args, "--resume")
    assert code == 1, stdout + err
    again = read_results(out / "results.csv")
    assert {w: calls(plug, w) for w in first} == first
    assert len(again) == len(df) and not again.duplicated(["case_id", "impl", "output", "reference"]).any()
    assert again["status"].value_counts().to_dict() == {"pass": 90, "error": 70}
    assert "[1/" not in err                             # no pair ran


def test_exit_at_import_is_one_line_and_nothing_runs(capsys, plug):
    code, out, err = run(capsys, "run", "--impl", "e=exits_on_import:make", "--cases", plug / "two.toml",
                         "--device", "cpu", "--out", plug / "o")
    assert one_line_usage(code, err), err
    assert "importing 'exits_on_import' raised SystemExit" in err
    assert not (plug / "o").exists()


def test_exit_in_supports_inline_is_an_error_row(plug):
    """A factory only this process has (no --impl text: runs inline) exits in its `supports`."""
    import harness
    from harness.impls.torch_ref import chain

    def make(h, **kw):
        return chain(h, **kw)
    make.supports = lambda case: sys.exit(0) if case.hidden == 16 else None
    r = harness.verify(make, cases=str(plug / "two.toml"), device="cpu", repeats=0)
    assert not r.ok and r.exit_code == 1
    bad = r.frame[r.frame["hidden"] == 16]
    assert (bad["status"] == "error").all() and bad["reason"].str.contains("SystemExit").all()
    assert (r.frame[r.frame["hidden"] == 32]["status"] == "pass").all()


# ---------------------------------------------------------------------- 2: hangs

def test_hang_times_out_names_the_case_and_goes_on(capsys, plug):
    out = plug / "o"
    t0 = time.time()
    code, stdout, err = run(capsys, "run", "--impl", "h=evil:fwd_hang", "--impl", "torch", "--cases",
                            plug / "two.toml", "--device", "cpu", "--out", out, "--no-report", "--timeout", "5",
                            "--repeats", "0")
    assert code == 1, stdout + err
    assert time.time() - t0 < 120
    df = read_results(out / "results.csv")
    hung = df[(df["impl"] == "h") & (df["hidden"] == 16)]
    assert (hung["status"] == "error").all() and hung["reason"].str.startswith("timed out after 5 s").all()
    assert hung["replay"].str.endswith("--timeout 5").all()                # its replay waits as long
    assert f"harness: h {hung['case_id'].iloc[0]} [" in err and "timed out after 5 s" in err
    rest = df[~((df["impl"] == "h") & (df["hidden"] == 16))]
    assert len(rest) == 30 and (rest["status"] == "pass").all()
    t0 = time.time()                                   # its replay, with the sweep's timeout
    code, stdout, err = run(capsys, "replay", hung["case_id"].iloc[0], "--impl", "h=evil:fwd_hang", "--cases",
                            plug / "two.toml", "--device", "cpu", "--isolate", "process", "--timeout", "5")
    assert code == 1 and "timed out after 5 s" in stdout and time.time() - t0 < 60, stdout + err
    assert run(capsys, "replay", hung["case_id"].iloc[0], "--impl", "torch", "--cases", plug / "two.toml",
               "--timeout", "0")[0] == 2


# ---------------------------------------------------------------------- 4: --resume re-gates

HEADER = "impl,rounding,dtype,output,reference,regime,metric,budget\n"


def test_resume_regates_kept_rows_and_drops_other_impls_and_suites(capsys, tmp_path):
    two = tmp_path / "two.toml"
    two.write_text(TWO)
    one = tmp_path / "one.toml"
    one.write_text(TWO.split("[[group]]", 2)[0] + "[[group]]" + TWO.split("[[group]]", 2)[2])   # bf16 case only
    worse = tmp_path / "worse.csv"          # fails torch-fused everywhere and every fp32 case
    worse.write_text(HEADER + "torch-fused,*,*,y,exact,*,ulp,0\n*,*,fp32,y,exact,*,ulp,0\n")
    tight = tmp_path / "tight.csv"          # fails every y against the exact value
    tight.write_text(HEADER + "*,*,*,y,exact,*,ulp,0\n")
    out = tmp_path / "o"
    base = ["run", "--device", "cpu", "--out", out, "--no-report", "--isolate", "inline", "--repeats", "0"]

    code, o, e = run(capsys, *base, "--impl", "torch", "--impl", "torch-fused", "--cases", two, "--budgets", worse)
    assert code == 1, o + e
    first = read_results(out / "results.csv")
    assert set(first[first["status"] == "fail"]["impl"]) == {"torch", "torch-fused"}
    seconds = dict(zip(zip(first["case_id"], first["impl"]), first["pair_seconds"]))

    # the failing rows belong to another implementation and another suite's case: dropped, not counted
    code, o, e = run(capsys, *base, "--impl", "torch", "--cases", one, "--budgets", worse, "--resume")
    assert code == 0, o + e
    assert "--resume: 3 of the 4 pairs in" in e                                   # said, not silent
    kept = read_results(out / "results.csv")
    assert set(kept["impl"]) == {"torch"} and set(kept["hidden"]) == {32} and len(kept) == 10
    assert all(seconds[k] == s for k, s in zip(zip(kept["case_id"], kept["impl"]), kept["pair_seconds"]))

    # a tighter budget file at resume fails kept rows without running them again ...
    code, o, e = run(capsys, *base, "--impl", "torch", "--cases", one, "--budgets", tight, "--resume")
    assert code == 1, o + e
    t = read_results(out / "results.csv")
    y = t[(t["output"] == "y") & (t["reference"] == "exact")]
    assert (y["status"] == "fail").all() and (y["budget"] == 0).all() and (y["budget_source"] == str(tight)).all()
    assert y["reason"].str.contains("> budget 0").all()
    assert (t["replay"].str.contains(f"--budgets {tight}")).all()
    assert list(t["pair_seconds"]) == list(kept["pair_seconds"])

    # ... and the defaults at resume pass them again
    code, o, e = run(capsys, *base, "--impl", "torch", "--cases", one, "--resume")
    assert code == 0, o + e
    d = read_results(out / "results.csv")
    assert (d["status"] == "pass").all() and (d["budget_source"] == "default").all()
