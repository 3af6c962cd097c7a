"""The run directory's lock (reports.rundir.RunDir.lock): a second run into a directory in use is
refused naming the first, also when its lock file was deleted; a lock file planted as a symbolic or
hard link is refused and the file it leads to is left untouched."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_robustness import TWO, one_line_usage, run

HOLD = ("import sys\nfrom harness.reports.rundir import RunDir\n"
        "with RunDir(sys.argv[1]).lock():\n    print('held', flush=True)\n    sys.stdin.readline()\n")


def _second_run(capsys, tmp_path, out):
    (tmp_path / "s.toml").write_text(TWO)
    return run(capsys, "run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu", "--out", out,
               "--no-report", "--repeats", "0")


def test_a_second_run_is_refused_naming_the_first_also_with_its_lock_file_deleted(capsys, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        code, _, err = _second_run(capsys, tmp_path, out)
        assert one_line_usage(code, err), err
        assert f"in use by another harness run (pid {p.pid} " in err

        (out / ".harness.lock").unlink()             # what a plug-in of the first run could do
        code, _, err = _second_run(capsys, tmp_path, out)
        assert one_line_usage(code, err), err
        assert "in use by another harness run (its lock file .harness.lock is missing" in err
        assert not (out / "results.csv").exists()
    finally:
        p.stdin.close()
        p.wait(timeout=60)


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_planted_lock_file_link_is_refused_and_its_target_untouched(capsys, tmp_path, kind):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "o"
    out.mkdir()
    (os.symlink if kind == "symlink" else os.link)(victim, out / ".harness.lock")
    code, _, err = _second_run(capsys, tmp_path, out)
    assert one_line_usage(code, err), err
    assert ".harness.lock is " in err and "left untouched" in err
    assert victim.read_text() == "precious\n"
    assert not (out / "results.csv").exists()


def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path):
    from harness.references.errors import UsageError
    from harness.reports.rundir import RunDir
    os.mkfifo(tmp_path / ".harness.lock")
    with pytest.raises(UsageError, match="not a regular file"):
        with RunDir(tmp_path).lock():
            pass


def test_where_a_directory_cannot_be_locked_the_lock_file_is(tmp_path, monkeypatch):
    """NFS emulates flock with POSIX locks, which need a file open for writing: a directory's
    descriptor cannot be locked there (EBADF), and the lock falls back to the lock file's own."""
    import errno
    import fcntl
    import stat

    from harness.references.errors import UsageError
    from harness.reports.rundir import RunDir
    real = fcntl.flock

    def nfs_flock(fd, op):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EBADF, "Bad file descriptor")
        return real(fd, op)
    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    rd = RunDir(tmp_path)
    with rd.lock():
        assert (tmp_path / ".harness.lock").read_text().startswith(f"pid {os.getpid()} ")
        with pytest.raises(UsageError, match=f"in use by another harness run \\(pid {os.getpid()} "):
            rd._acquire("--out")                 # another open file description: as a second process
    with rd.lock():                               # released: free again
        pass


def test_merge_and_report_do_not_write_into_a_directory_a_run_holds(capsys, tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    done = tmp_path / "done"
    assert _second_run(capsys, tmp_path, done)[0] == 0
    out = tmp_path / "o"
    out.mkdir()
    (out / "results.csv").write_bytes((done / "results.csv").read_bytes())     # the running sweep's rows so far
    before = (out / "results.csv").read_bytes()
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        for argv in (["merge", done, "--out", out], ["report", out]):
            code, _, err = run(capsys, *argv)
            assert one_line_usage(code, err) and f"in use by another harness run (pid {p.pid} " in err, err
        assert (out / "results.csv").read_bytes() == before and not (out / "report.html").exists()
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert run(capsys, "report", out)[0] == 0 and (out / "report.html").is_file()        # once it is free
