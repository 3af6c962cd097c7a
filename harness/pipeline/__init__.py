"""The one pair pipeline: every (case, implementation) pair — in a sweep, a pytest test, a
hypothesis example, a bisect step or a replay — runs through Pipeline.run and comes back as a
typed PairResult (harness.analysis.result).

Two sides, kept apart:
  call   the implementation's calls on private copies of the inputs; the first call's outputs,
         cloned into plain tensors at once, are what is judged; later calls say whether it repeats.
  judge  the case's own inputs and references (once per case, shared by its implementations) and
         the checks; in a process that never runs implementation code.
settings (what a run's pairs share), wire (a call record as bytes: no pickle from the
implementation's side), serve (the worker's two processes), remote (the command's side of a worker:
pairs in, results out, pipelined), fpenv (flush-to-zero), drive (Pipeline)."""
