"""The whole command's phases and process-seconds split (harness.commands.phases: timing.csv's
`phase:*` and `share:*` rows), on hand-set marks; the CLI's rows are checked in test_speed_columns."""
from __future__ import annotations


def test_phases_of_the_command_add_up():
    """timing.csv's phases from the command's marks: each phase between its marks, the sweep less
    its workers' start, `other` what none covers."""
    from harness.commands.phases import Clock, line, rows, share_line
    c = Clock()
    c.start = 100.0
    c.marks = {"sweep": 102.0, "swept": 110.0, "written": 110.5, "reported": 112.0, "end": 112.25}
    t = {"wall": 7.5, "worker_start": 1.5, "impl:a": 3.0, "timing": 1.0, "references": 2.0, "analysis": 4.0}
    p = c.phases(t)
    assert p == {"startup": 2.0, "worker_start": 1.5, "sweep": 6.0, "write": 0.5, "report": 1.5, "total": 12.25,
                 "other": 0.75}
    r = rows(p, t)
    assert r["phase:total"] == 12.25 and r["share:implementations"] == 4.0 and r["share:harness"] == 6.0
    assert (r["share:first_calls"], r["share:timed_calls"], r["share:references"], r["share:analysis"]) == \
        (3.0, 1.0, 2.0, 4.0)
    assert "whole command 12.2 s" in line(p, t) or "whole command 12.3 s" in line(p, t)
    assert share_line(t) == ("implementations 4.0 (first calls 3.0, timed calls 1.0), harness 6.0 (references 2.0, "
                             "analysis 4.0)") and line(p, t).endswith("process-seconds: " + share_line(t))
    del c.marks["reported"]                                    # --no-report
    assert c.phases(t)["report"] == 0


def test_process_start_is_before_now():
    import time

    from harness.commands.phases import process_start
    assert 0 <= time.monotonic() - process_start() < 24 * 3600


def test_in_background_gives_its_result_or_raises_what_it_raised():
    """What `harness run` learns while its sweep runs (the environment) comes back as if called then."""
    import pytest

    from harness.commands.run import in_background
    assert in_background(sorted, [3, 1, 2]).result(timeout=60) == [1, 2, 3]
    with pytest.raises(ZeroDivisionError):
        in_background(divmod, 1, 0).result(timeout=60)


def test_the_environment_scans_distributions_once_and_each_folder_once(monkeypatch):
    """The write phase's environment: every installed distribution's metadata is scanned once, and
    git asked once per folder, however many implementations share them (built-ins share one)."""
    import importlib.metadata

    import harness.environment as E
    from harness.impls.registry import resolve
    asked, scans = [], []
    monkeypatch.setattr(E, "_git", lambda folder: asked.append(folder) or "")
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: scans.append(1) or {})
    env = E.environment("cpu", [resolve("torch"), resolve("torch-fused"), resolve("torch-fastmath")])
    assert {"impl torch", "impl torch-fused", "impl torch-fastmath"} <= set(env)
    assert len(scans) == 1 and len(asked) == len(set(asked)) == 2          # the cwd, harness/impls
