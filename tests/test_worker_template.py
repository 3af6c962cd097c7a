"""Worker templates (harness.worker_template, harness.pipeline.template): workers forked from one
process that imported torch and the harness once, each with the environment it asked for; a
template that dies takes its workers with it and the next worker starts from a new one; a template
whose imports fail leaves the workers to fresh interpreters, which say why."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness import worker as W
from harness import worker_template as T
from harness.impls.registry import resolve
from harness.pipeline.remote import Worker
from harness.pipeline.settings import Settings
from tests.conftest import make_case, running

PROBE = """\
import os

import harness


def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    env = os.environ
    raise harness.Unsupported(f"probe={env.get('HARNESS_PROBE')} cuda={env.get('CUDA_VISIBLE_DEVICES')} "
                              f"cwd={os.getcwd()} umask={oct(os.umask(0o22))}")
"""


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def probe(tmp_path, monkeypatch):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return resolve("probe=probe_mod:make")


def said(w: Worker, impl) -> str:
    (_, _, result, why), = w.run_many([(make_case(shape=(4, 32)), impl)], 120)
    assert result is not None, why
    assert result.checks and all(c.status == "skip" for c in result.checks)
    return result.checks[0].finding.text


def test_workers_are_forked_from_one_template_with_the_environment_they_asked_for(tmp_path, monkeypatch):
    impl = probe(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)             # the command's directory and umask, as a fresh interpreter's
    old = os.umask(0o027)
    base = {**W.sweep_envs(1, None)[0], "HARNESS_PROBE": "a"}
    base.pop("CUDA_VISIBLE_DEVICES", None)
    workers = [Worker(Settings("cpu"), env) for env in
               (base, {**base, "CUDA_VISIBLE_DEVICES": "0"}, {**base, "HARNESS_PROBE": "b"})]
    try:
        texts = [said(w, impl) for w in workers]
        where = f" cwd={tmp_path} umask=0o27"
        assert texts == ["probe=a cuda=None" + where, "probe=a cuda=0" + where, "probe=b cuda=None" + where]
        assert all(w.p.forked for w in workers)
        templates = [parent_of(w.pid) for w in workers]
        # CUDA_VISIBLE_DEVICES is read when CUDA starts, after the fork: one template serves both;
        # any other difference is another template's
        assert templates[0] == templates[1] != templates[2] and os.getpid() not in templates
    finally:
        os.umask(old)
        for w in workers:
            w.stop()


def test_a_template_that_dies_takes_its_workers_and_the_next_starts_from_a_new_one(tmp_path, monkeypatch):
    impl = probe(tmp_path, monkeypatch)
    env = {**W.sweep_envs(1, None)[0], "HARNESS_PROBE": "dies"}
    w = Worker(Settings("cpu"), env)
    try:
        assert said(w, impl).startswith("probe=dies cuda=None")
        judge, template = w.pid, parent_of(w.pid)
        os.kill(template, signal.SIGKILL)
        end = time.monotonic() + 30
        while running(judge) and time.monotonic() < end:
            time.sleep(0.05)
        assert not running(judge)                          # its parent-death signal
        assert w.p.proc.wait(30) == -signal.SIGKILL
        assert said(w, impl).startswith("probe=dies cuda=None")     # a new worker, from a new template
        assert w.p.forked and parent_of(w.pid) != template
    finally:
        w.stop()


def test_a_template_whose_imports_fail_leaves_fresh_interpreters_to_say_why(tmp_path):
    broken = tmp_path / "shadow" / "mpmath"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('mpmath broken for this test')\n")
    env = {**W.sweep_envs(1, None)[0], "PYTHONPATH": str(broken.parent)}
    w = Worker(Settings("cpu"), env)
    try:
        why = w.start()
        assert why is not None and "mpmath broken for this test" in why
        t = T._TEMPLATES[T.key_of({"PYTHONUNBUFFERED": "1", **env})]
        assert not t.alive and "mpmath broken for this test" in t.crashed and not t.ready
        p = W.Process(env)                                  # its template failed: a fresh interpreter
        try:
            assert not p.forked
        finally:
            p.end()
    finally:
        w.stop()


def test_a_subreaper_command_reaps_the_workers_of_a_template_that_died(tmp_path):
    """The command line is a child subreaper (harness.worker.end_orphans_at_exit): the workers of a
    template that died become its children, zombies until reaped, and must read as ended."""
    script = tmp_path / "subreaper.py"
    script.write_text(
        "import os, signal, time\n"
        "from harness import worker as W\n"
        "from harness.pipeline.remote import Worker\n"
        "from harness.pipeline.settings import Settings\n"
        "W.prctl(36, 1)\n"
        "w = Worker(Settings('cpu'), W.sweep_envs(1, None)[0])\n"
        "assert w.start() is None and w.p.forked\n"
        "with open(f'/proc/{w.pid}/stat', 'rb') as f:\n"
        "    template = int(f.read().rsplit(b')', 1)[1].split()[1])\n"
        "os.kill(template, signal.SIGKILL)\n"
        "t0 = time.monotonic()\n"
        "code = w.p.proc.wait(30)\n"
        "print(code, round(time.monotonic() - t0, 1), os.path.exists(f'/proc/{w.pid}'))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    code, _, left = p.stdout.split()
    assert int(code) == -signal.SIGKILL and left == "False"          # reaped: no zombie left


def test_what_a_template_said_before_it_ended_with_a_request_unread_is_read():
    """A template that ends with a request of the command's unread (it crashed while importing)
    makes Linux report ECONNRESET on the command's end once, before the messages it sent: its
    "crash" must still be read (under load it was lost before: the listener took the error for the
    end). A socketpair stands in for the template's control socket."""
    import pickle
    import socket
    import threading
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.send(pickle.dumps(("fork", 0, {}, "/", 0o22, ())))           # never read
    theirs.send(pickle.dumps(("crash", "its imports failed")))
    theirs.close()
    t = object.__new__(T.Template)
    t.control, t.cond = ours, threading.Condition()
    t.alive, t.ready, t.crashed, t.pids, t.refused, t.exits = True, False, "", {}, {}, {}
    t._listen()                                     # returns at the end
    assert not t.alive and t.crashed == "its imports failed"


RNG_PROBE = """\
import numpy as np

import harness


def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    raise harness.Unsupported(f"draw={np.random.randint(1 << 62)}")
"""


def test_forked_workers_draw_their_own_numpy_numbers(tmp_path, monkeypatch):
    """numpy's legacy global generator is seeded from the OS in each fresh interpreter; workers
    forked from one template must not all draw the template's sequence (a plug-in's random inputs)."""
    (tmp_path / "rng_probe.py").write_text(RNG_PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    impl = resolve("rng=rng_probe:make")
    site = tmp_path / "site"                 # the template's interpreter creates the generator at start
    site.mkdir()
    (site / "sitecustomize.py").write_text("import numpy.random\n")
    env = {**W.sweep_envs(1, None)[0], "PYTHONPATH": str(site)}
    workers = [Worker(Settings("cpu"), env) for _ in range(2)]
    try:
        draws = [said(w, impl) for w in workers]
        assert all(w.p.forked for w in workers) and parent_of(workers[0].pid) == parent_of(workers[1].pid)
        assert draws[0] != draws[1], draws
    finally:
        for w in workers:
            w.stop()


def test_a_template_killed_before_it_was_ready_is_started_again_once(tmp_path, monkeypatch):
    """Killed while importing (memory?), with nothing said: the next worker comes from a new
    template; a second such end leaves that environment to fresh interpreters. A template that dies
    once ready is always replaced."""
    impl = probe(tmp_path, monkeypatch)
    env = {**W.sweep_envs(1, None)[0], "HARNESS_PROBE": "again"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    full = {"PYTHONUNBUFFERED": "1", **env}

    def kill_while_importing():
        forked, *ends = T.fork(full, (), 60)         # a new template, asked at once, still importing
        t = T._TEMPLATES[T.key_of(full)]
        assert not t.ready
        t.proc.kill()
        with t.cond:
            assert t.cond.wait_for(lambda: not t.alive, 30)
        assert t.crashed == T.ENDED_UNREADY and forked.wait(30) == 1
        for e in ends:
            e.close()
        return t

    first = kill_while_importing()
    w = Worker(Settings("cpu"), env)
    try:
        assert said(w, impl).startswith("probe=again") and w.p.forked       # from a new template
        second = T._TEMPLATES[T.key_of(full)]
        assert second is not first and second.ready
        second.proc.kill()                                                 # dies once ready
        with second.cond:
            assert second.cond.wait_for(lambda: not second.alive, 30)
    finally:
        w.stop()
    kill_while_importing()                                                 # a third, killed unready too
    p = W.Process(env)
    try:
        assert not p.forked                                                # no more templates for it
    finally:
        p.end()
