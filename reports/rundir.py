"""A run's output directory: the one home of its files' names, formats, appends, reads, atomic writes,
schema version and lock.

results.csv is appended one (case, implementation) pair at a time in one write(), so a killed
sweep loses at most the pairs in flight (one per worker): what write() returned sits in the kernel's
page cache, which outlives the process. No fsync per pair (9 ms each on a CI disk; it guards only
against the machine going down); the sweep's end rewrites the file whole, atomically, in suite
order. `repair_for_resume` drops a torn tail and any incomplete pair. pair-timing.csv is appended
the same way. Every other file is written whole, atomically (temporary file beside it, fsync,
rename), with the process's normal permissions. A sweep holds the directory's lock (an flock on the
directory itself, which the kernel drops when the holder dies, however it dies, and which no file
operation inside the directory can undo) while it runs: a second run into the same directory fails
at once, naming the first. The lock file .harness.lock names the holder on its first line (the pid
of the command as its user started it: harness.supervise), then `worker PID` for every worker it
starts; it is opened only as a regular file of one link, never through a symbolic link."""
from __future__ import annotations

import csv
import errno
import io
import os
import socket
import stat
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from harness.references.atomic import atomic_write
from harness.references.errors import UsageError
from harness.reports.schema import (BLANK_NUMBER, INT_COLUMNS, KEY, REQUIRED, SCHEMA_VERSION, TEXT_COLUMNS, columns,
                                    missing_columns)
from harness.reports.trust import problem

RESULTS, SUMMARY, REPORT, TIMING, PAIR_TIMING, LOCK = (
    "results.csv", "summary.csv", "report.html", "timing.csv", "pair-timing.csv", ".harness.lock")
OUTPUTS = (RESULTS, SUMMARY, REPORT, TIMING, PAIR_TIMING)          # what a run writes in its directory
PAIR = ["case_id", "impl"]
_HELD: dict[str, list] = {}     # resolved directory -> [its fd (flocked), lock file fd, depth]: this process's locks
_HELD_LOCK = threading.Lock()


def _cell(column: str, v):
    """One cell as pandas' to_csv writes it for the whole frame: a float by its repr (numpy's too,
    whose repr names its type), NaN, NA and None blank, an integral float of a count column as an integer (the
    frame's column is then Int64: results_text)."""
    if v is None or v is pd.NA:
        return ""
    if isinstance(v, float):
        if v != v:
            return ""
        if column in INT_COLUMNS and v.is_integer():
            return int(v)
        return repr(float(v))
    return v


def render_rows(rows: list[dict]) -> str:
    """results.csv's lines for these rows, header left out: the text results_text gives the frame of
    every row, line for line, so that lines rendered as pairs arrive make the final file without
    rendering it again (to_csv of a 16k-row frame: seconds)."""
    cols = columns()
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    for r in rows:
        w.writerow({k: _cell(k, r.get(k, SCHEMA_VERSION if k == "schema_version" else "")) for k in cols})
    return buf.getvalue()


def results_header() -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(columns())
    return buf.getvalue()


def _try_flock(fd: int) -> bool | None:
    """An exclusive flock on fd without waiting: True taken, False held by another, None where the
    filesystem cannot lock this kind of file."""
    import fcntl
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            return None
        raise


def read_csv(path, text=TEXT_COLUMNS) -> pd.DataFrame:
    """A CSV of this harness (a path or a binary buffer): text columns stay text (never NaN: an
    implementation called "NA" or "None" keeps its name), numbers may be blank. Each column's type
    is inferred from the whole file (low_memory=False): read in chunks, a column blank in some
    (`repeatable` on skip rows) came back mixed, with a DtypeWarning on the command's output."""
    head = pd.read_csv(path, nrows=0).columns
    if hasattr(path, "seek"):
        path.seek(0)
    return pd.read_csv(path, dtype={c: str for c in text if c in head}, keep_default_na=False,
                       na_values={c: list(BLANK_NUMBER) for c in head if c not in text}, low_memory=False)


def read_results(path: Path) -> pd.DataFrame:
    """The one reader of results.csv; a missing, empty or foreign file is the user's error."""
    try:
        df = read_csv(Path(path))
    except (OSError, pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{path}: not a readable results.csv ({type(e).__name__}: {e})") from None
    if missing := missing_columns(df, REQUIRED):
        raise UsageError(f"{path}: not a results.csv (missing column {missing[0]!r})")
    if why := problem(df):
        raise UsageError(f"{path}: {why}")
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


def whole_records(data: bytes) -> bytes:
    """`data` up to its last whole CSV record: through the last newline outside a quoted field (one
    with an even count of quotes before it; a doubled quote counts twice), so that a write torn
    inside a message that holds a newline is cut at the record's start, not inside its quotes."""
    end, quotes = len(data), data.count(b'"')
    while (nl := data.rfind(b"\n", 0, end)) >= 0:
        quotes -= data.count(b'"', nl + 1, end)
        if quotes % 2 == 0:
            return data[: nl + 1]
        end = nl
    return b""


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

    def check_outputs(self, names=OUTPUTS, flag: str = "--out") -> "RunDir":
        """Before the work: none of the files the run will write is in the way (a directory, or a
        file that cannot be replaced)."""
        for name in names:
            p = self.file(name)
            if p.is_dir():
                raise UsageError(f"{flag} {self.path}: {name} is a directory; remove it or choose another --out")
            if p.exists() and not os.access(p, os.W_OK) and name == RESULTS:
                raise UsageError(f"{flag} {self.path}: {name} is not writable")
        return self

    def clear(self, names) -> None:
        """Remove earlier files of these names (a new run must not sit beside an old run's report)."""
        for name in names:
            self.file(name).unlink(missing_ok=True)

    # ------------------------------------------------------------------------------ results.csv

    def append_pair(self, rows: list[dict]) -> str:
        """One pair's rows in one write, handed to the kernel (see the module docstring); returns
        their lines (render_rows), for write_rendered."""
        lines = render_rows(rows)
        new = not self.results.exists() or self.results.stat().st_size == 0
        with open(self.results, "a", newline="") as f:
            f.write((results_header() if new else "") + lines)
        return lines

    def read_results(self) -> pd.DataFrame:
        return read_results(self.results)

    def write_results(self, df: pd.DataFrame, read_back: bool = False) -> pd.DataFrame | None:
        """results.csv, whole and atomically; with `read_back`, `df` as read back from that text:
        the types every reader sees, without reading the file (or rendering the text twice)."""
        text = results_text(df)
        self.write_text(RESULTS, text)
        return read_csv(io.StringIO(text)) if read_back else None

    def write_rendered(self, pairs: list[str]) -> pd.DataFrame:
        """results.csv, whole and atomically, from pairs' lines (render_rows) in the order given;
        returns the frame as read back from that text (the types every reader sees)."""
        text = results_header() + "".join(pairs)
        self.write_text(RESULTS, text)
        return read_csv(io.StringIO(text))

    def repair_for_resume(self, expected: dict[str, set]) -> pd.DataFrame:
        """The complete pairs in results.csv, for resuming: a torn last record (a write cut short)
        dropped, a repeated key's last row kept, and only pairs whose implementation is in
        `expected` (name -> its set of (output, reference)) with exactly that set of rows. The file
        is left as it was; the caller writes what it keeps."""
        if not self.results.exists():
            return pd.DataFrame()
        data = whole_records(self.results.read_bytes())
        if not data.strip():
            return pd.DataFrame()
        try:
            df = read_csv(io.BytesIO(data))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
            raise UsageError(f"--resume: {self.results}: not a readable results.csv ({type(e).__name__}: {e}); "
                             f"move it away or run without --resume") from None
        if missing := missing_columns(df, REQUIRED):
            raise UsageError(f"--resume: {self.results}: not a results.csv (missing column {missing[0]!r})")
        df = df.drop_duplicates(list(KEY), keep="last")
        got: dict[tuple, set] = {}
        for c, i, o, r in zip(df["case_id"], df["impl"], df["output"], df["reference"]):
            got.setdefault((c, i), set()).add((o, r))
        complete = {k for k, keys in got.items() if k[1] in expected and keys == expected[k[1]]}
        keep = df[[(c, i) in complete for c, i in zip(df["case_id"], df["impl"])]].reset_index(drop=True)
        keep.attrs["pairs_found"] = len(got)          # whole or not, of any implementation: what the file held
        return keep

    def keep_pair_timing(self, pairs: set) -> None:
        """pair-timing.csv cut down to `pairs` ((case_id, impl)), one line each, torn lines dropped."""
        path = self.file(PAIR_TIMING)
        if not path.exists():
            return
        with open(path, newline="", errors="replace") as f:
            rows = list(csv.reader(f))
        if not rows:
            path.unlink()
            return
        head, last = rows[0], {}
        if "case_id" not in head or "impl" not in head:
            path.unlink()
            return
        ci, ii = head.index("case_id"), head.index("impl")
        for r in rows[1:]:
            if len(r) == len(head) and (r[ci], r[ii]) in pairs:
                last[(r[ci], r[ii])] = r
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(head)
        w.writerows(last.values())
        self.write_text(PAIR_TIMING, buf.getvalue())

    # ------------------------------------------------------------------------------ other files

    def write_text(self, name: str, text: str) -> Path:
        path = self.file(name)
        with atomic_write(path, "w") as f:
            f.write(text)
        return path

    def write_frame(self, name: str, df: pd.DataFrame) -> Path:
        return self.write_text(name, df.to_csv(index=False))

    def append_csv_row(self, name: str, row: dict, fields: list[str]) -> None:
        """One line, in one write (a kill leaves at most a torn last line, which readers drop)."""
        path = self.file(name)
        new = not path.exists() or path.stat().st_size == 0
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()})
        with open(path, "a", newline="") as f:
            f.write(buf.getvalue())

    # ------------------------------------------------------------------------------ lock

    @contextmanager
    def lock(self, flag: str = "--out"):
        """Hold the directory for this process (re-entrant within it); a second process fails at
        once with one line naming the holder (see _acquire)."""
        key = str(self.path.resolve())
        with _HELD_LOCK:
            held = _HELD.get(key)
            if held is not None:
                held[2] += 1
        if held is not None:
            try:
                yield self
            finally:
                with _HELD_LOCK:
                    _HELD[key][2] -= 1
            return
        dir_fd, note_fd = self._acquire(flag)
        with _HELD_LOCK:
            _HELD[key] = [dir_fd, note_fd, 1]
        try:
            yield self
        finally:
            with _HELD_LOCK:
                del _HELD[key]
            os.close(note_fd)
            os.close(dir_fd)

    def _acquire(self, flag: str) -> tuple[int, int]:
        """The lock is an flock on the directory itself, which nothing in it can delete or replace
        (deleting .harness.lock does not let a second run in). The lock file only names the holder;
        it is opened without following a symbolic link and must be a regular file with one link, so
        that a planted link cannot make the harness truncate another file. Where the filesystem
        cannot lock a directory (NFS emulates flock with POSIX locks, which need a file open for
        writing), the lock file's own descriptor is locked instead, as every run there does."""
        try:
            dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise UsageError(f"{flag} {self.path}: cannot open the directory ({e.strerror or e})") from None
        note_fd = -1
        try:
            locked = _try_flock(dir_fd)
            if locked is False:
                raise UsageError(self._in_use(flag))
            note_fd = self._open_note(flag, os.O_RDWR | os.O_CREAT)
            if locked is None:
                locked = _try_flock(note_fd)
                if locked is None:
                    raise UsageError(f"{flag} {self.path}: its filesystem cannot lock files; choose another directory")
                if not locked:
                    raise UsageError(self._in_use(flag))
            os.ftruncate(note_fd, 0)
            given = os.environ.get("HARNESS_COMMAND_PID", "")     # the watching parent's (harness.supervise)
            holder = given if given.isdigit() and int(given) == os.getppid() else os.getpid()
            os.pwrite(note_fd, f"pid {holder} on {socket.gethostname()} since "
                               f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv[:6])}\n".encode(), 0)
            return dir_fd, note_fd
        except BaseException:
            if note_fd >= 0:
                os.close(note_fd)
            os.close(dir_fd)
            raise

    def _in_use(self, flag: str) -> str:
        return (f"{flag} {self.path}: in use by another harness run ({self._holder(flag)}); wait for it or "
                f"choose another directory")

    def _open_note(self, flag: str, mode: int) -> int:
        """The lock file, opened with `mode`: a regular file of one link, never through a symlink."""
        path = self.file(LOCK)
        try:
            fd = os.open(path, mode | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UsageError(f"{flag} {self.path}: {LOCK} is a symbolic link, not the harness's lock file; "
                                 f"remove it (the file it points to was left untouched)") from None
            raise UsageError(f"{flag} {self.path}: cannot open its lock file {LOCK} ({e.strerror or e})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} hard links"
            raise UsageError(f"{flag} {self.path}: {LOCK} is {what}, not the harness's lock file; remove it "
                             f"(it was left untouched)")
        return fd

    def _holder(self, flag: str) -> str:
        """The holder's line of the lock file, for the refusal message."""
        try:
            fd = self._open_note(flag, os.O_RDONLY)
        except UsageError:
            return f"its lock file {LOCK} is missing or was replaced"
        try:
            first = os.pread(fd, 4096, 0).decode(errors="replace").splitlines()
        finally:
            os.close(fd)
        return first[0].strip() if first and first[0].strip() else "another process"

    def note_worker(self, pid: int) -> None:
        """Add `worker PID` to the lock file of a directory this process holds (else nothing)."""
        with _HELD_LOCK:
            held = _HELD.get(str(self.path.resolve()))
            if held is not None:
                fd = held[1]
                os.pwrite(fd, f"worker {pid}\n".encode(), os.fstat(fd).st_size)
