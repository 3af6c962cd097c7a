"""The subcommands, one function each (arguments in, exit code out). Library code never prints;
these do. Exit codes: 0 within budget, 1 over budget / regressed / not found, 2 usage or input
error or an unfinished sweep, 130 interrupted, 3 an internal error of the harness (harness.cli)."""
from __future__ import annotations

import sys

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def err(line: str) -> None:
    """A line on stderr, flushed (progress and events while long work runs)."""
    print(line, file=sys.stderr, flush=True)


class Progress:
    """A tqdm bar on a terminal; in CI (no tty) one plain line per 10 % so logs stay short."""

    def __init__(self, want: bool | None = None):
        self.want, self.bar = want, None

    def __call__(self, done: int, total: int, what: str, rows: list[dict]) -> None:
        tty = sys.stderr.isatty() if self.want is None else self.want
        if tty:
            if self.bar is None:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="pair", file=sys.stderr, leave=False)
            self.bar.set_postfix_str(what[:40])
            self.bar.update(1)
            if done == total:
                self.bar.close()
        elif total and (done == total or done % max(1, total // 10) == 0):
            bad = sum(r.get("status") not in ("pass", "skip") for r in rows)
            err(f"[{done}/{total}] {what}{'  ' + str(bad) + ' not passing' if bad else ''}")


_COMMANDS = {
    "run": "harness.commands.run:cmd_run", "cases": "harness.commands.tools:cmd_cases",
    "merge": "harness.commands.merge:cmd_merge", "report": "harness.commands.run:cmd_report",
    "identify": "harness.commands.identify:cmd_identify", "replay": "harness.commands.tools:cmd_replay",
    "budgets": "harness.commands.tools:cmd_budgets", "selftest": "harness.commands.tools:cmd_selftest",
    "bisect": "harness.commands.tools:cmd_bisect", "exhaustive": "harness.commands.tools:cmd_exhaustive",
}


def _prespawn(args) -> None:
    """A sweep's (or a replay's) first workers, started before this process imports torch (a second
    or more) so that their imports overlap its own and its input checks; unused ones end with the
    command."""
    import os
    if args.cmd == "replay" and args.isolate != "inline":
        from harness.worker import prespawn
        prespawn([dict(os.environ)])
        return
    if args.cmd not in ("run", "identify") or args.isolate == "inline" or args.cases == "hypothesis" \
            or args.jobs < 1 or (args.threads is not None and args.threads < 1):
        return
    try:
        gpus = tuple(int(g) for g in args.gpus.split(",")) if args.gpus else ()
    except ValueError:
        return                                   # the command says why, in one line
    import sys
    from harness.worker import cores, prespawn, sweep_envs
    path = list(sys.path)
    # the path the sweep will send: a plug-in's loading puts the current directory on it
    # (harness.impls.registry.load_plugin)
    if any("=" in s for s in args.impl) and os.getcwd() not in path and "" not in path:
        path.insert(0, os.getcwd())
    if len(set(gpus)) < len(gpus):
        return                                   # a GPU given twice: the command says why
    try:
        envs = sweep_envs(args.jobs, args.threads, gpus)
    except IndexError:
        return                                   # a GPU it does not see, or a negative index: likewise
    prespawn(envs[:max(cores(), len(gpus))], preload=builtin_names(args.impl), cuda=args.device != "cpu", path=path)


def builtin_names(specs: list[str]) -> tuple[str, ...]:
    """The --impl values that can name a built-in (NAME or NAME@CLASS), without their class."""
    return tuple(dict.fromkeys(s.rpartition("@")[0] or s for s in specs if "=" not in s and "," not in s))


def dispatch(args) -> int:
    import importlib
    from harness.worker import drop_spares
    module, name = _COMMANDS[args.cmd].split(":")
    _prespawn(args)
    try:
        return getattr(importlib.import_module(module), name)(args)
    finally:
        drop_spares()
