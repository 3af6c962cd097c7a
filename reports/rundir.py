"""A run's output directory: the one home of its files' names, formats, appends, reads, atomic writes,
schema version and lock.

results.csv is appended one (case, implementation) pair at a time, flushed and fsync'd, so a killed
sweep loses at most the pair in flight; `repair_for_resume` drops a torn tail and any incomplete pair.
Every other file is written whole, atomically (temporary file beside it, fsync, rename), with the
process's normal permissions. A sweep holds the directory's lock while it runs: a second run into
the same directory fails at once, naming the first."""
from __future__ import annotations

import csv
import io
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from harness.references.atomic import atomic_write
from harness.references.errors import UsageError
from harness.reports.schema import INT_COLUMNS, KEY, REQUIRED, SCHEMA_VERSION, TEXT_COLUMNS, columns

RESULTS, SUMMARY, REPORT, TIMING, PAIR_TIMING, LOCK = (
    "results.csv", "summary.csv", "report.html", "timing.csv", "pair-timing.csv", ".harness.lock")
PAIR = ["case_id", "impl"]
_NA = ["", "nan", "NaN", "-nan"]                 # what a blank or missing number reads as


def _cell(v):
    if isinstance(v, float):
        return repr(v)
    return v


def read_csv(path: Path, text=TEXT_COLUMNS) -> pd.DataFrame:
    """A CSV of this harness: text columns stay text (never NaN), numbers may be blank."""
    head = pd.read_csv(path, nrows=0).columns
    return pd.read_csv(path, dtype={c: str for c in text if c in head}, keep_default_na=False,
                       na_values={c: _NA for c in head if c not in text})


def read_results(path: Path) -> pd.DataFrame:
    """The one reader of results.csv; a missing, empty or foreign file is the user's error."""
    try:
        df = read_csv(Path(path))
    except (OSError, pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{path}: not a readable results.csv ({type(e).__name__}: {e})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise UsageError(f"{path}: not a results.csv (missing column {missing[0]!r})")
    return df


def results_text(df: pd.DataFrame) -> str:
    d = df.copy()
    d["schema_version"] = SCHEMA_VERSION
    for c in INT_COLUMNS:           # counts stay integers where blank cells made pandas read floats
        if c in d.columns and d[c].dtype.kind == "f" and bool((d[c].dropna() % 1 == 0).all()):
            d[c] = d[c].astype("Int64")
    cols = list(columns())
    cols += [c for c in d.columns if c not in cols]
    return d.reindex(columns=cols).to_csv(index=False)


class RunDir:
    def __init__(self, path: Path | str):
        self.path = Path(path)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def results(self) -> Path:
        return self.file(RESULTS)

    def create(self, flag: str = "--out") -> "RunDir":
        """Make the directory (one line, UsageError, where that cannot be done)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{flag} {self.path}: cannot create the directory ({e.strerror or e})") from None
        if not self.path.is_dir():
            raise UsageError(f"{flag} {self.path}: not a directory")
        if not os.access(self.path, os.W_OK):
            raise UsageError(f"{flag} {self.path}: not writable")
        return self

    # ------------------------------------------------------------------------------ results.csv

    def append_pair(self, rows: list[dict]) -> None:
        """One pair's rows in one write, flushed to disk."""
        cols = columns()
        new = not self.results.exists() or self.results.stat().st_size == 0
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({k: _cell(r.get(k, SCHEMA_VERSION if k == "schema_version" else "")) for k in cols})
        with open(self.results, "a", newline="") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())

    def read_results(self) -> pd.DataFrame:
        return read_results(self.results)

    def write_results(self, df: pd.DataFrame) -> None:
        self.write_text(RESULTS, results_text(df))

    def repair_for_resume(self, rows_per_pair: int) -> pd.DataFrame:
        """Truncate a torn last line, drop incomplete and duplicated pairs; the complete rows."""
        if not self.results.exists():
            return pd.DataFrame()
        data = self.results.read_bytes()
        if data and not data.endswith(b"\n"):
            data = data[: data.rfind(b"\n") + 1]
            self.results.write_bytes(data)
        if not data.strip():
            return pd.DataFrame()
        df = self.read_results().drop_duplicates(list(KEY), keep="last")
        counts = df.groupby(PAIR).size()
        complete = {k for k, n in counts.items() if n == rows_per_pair}
        keep = df[[(c, i) in complete for c, i in zip(df["case_id"], df["impl"])]]
        if len(keep) != len(df) or len(df) != data.count(b"\n") - 1:
            self.write_results(keep)
        return keep.reset_index(drop=True)

    # ------------------------------------------------------------------------------ other files

    def write_text(self, name: str, text: str) -> Path:
        path = self.file(name)
        with atomic_write(path, "w") as f:
            f.write(text)
        return path

    def write_frame(self, name: str, df: pd.DataFrame) -> Path:
        return self.write_text(name, df.to_csv(index=False))

    def append_csv_row(self, name: str, row: dict, fields: list[str]) -> None:
        path = self.file(name)
        new = not path.exists() or path.stat().st_size == 0
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()})

    # ------------------------------------------------------------------------------ lock

    @contextmanager
    def lock(self, flag: str = "--out"):
        """Hold the directory for this process; a second holder fails at once with one line."""
        import fcntl
        path = self.file(LOCK)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
                raise UsageError(f"{flag} {self.path}: in use by another harness run ({holder}); wait for it "
                                 f"or choose another directory") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                          f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv[:6])}\n".encode(), 0)
            yield self
        finally:
            os.close(fd)
