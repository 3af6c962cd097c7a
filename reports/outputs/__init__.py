"""Output formats: the files a run writes besides results.csv, one module each in this folder
(registered on import, found by `formats()`): a new output format is one new file.

Each format gets the same `RunData` and writes one file, atomically. `default` formats go into
every run directory; the others only where asked (`harness run --junit FILE`)."""
from __future__ import annotations

import importlib
import pkgutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd


@dataclass(frozen=True)
class RunData:
    """What a run's reports are made from."""
    results: pd.DataFrame
    summary: pd.DataFrame
    exit_code: int = 0
    title: str = ""
    env: dict = field(default_factory=dict)
    baseline: pd.DataFrame | None = None
    suite: str = ""
    headline: tuple[str, ...] = ()        # what the command said, for the report to lead with (identify)


@dataclass(frozen=True)
class OutputFormat:
    name: str
    filename: str                                  # its name in a run directory
    write: Callable[[RunData, Path], None]         # writes one file, atomically
    default: bool = True
    # loads what `write` needs (imports, fonts) ahead of time; safe in a background thread
    prepare: Callable[[], None] | None = None


_REGISTRY: dict[str, OutputFormat] = {}
_DISCOVERED: list[bool] = []
_DISCOVERY = threading.Lock()      # a command's preload thread and its main thread may both ask


def register(fmt: OutputFormat) -> OutputFormat:
    _REGISTRY[fmt.name] = fmt
    return fmt


def formats() -> dict[str, OutputFormat]:
    """Every registered format, once every module of this folder has imported (a failed import
    raises here, and again at the next call)."""
    with _DISCOVERY:
        if not _DISCOVERED:
            for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
                importlib.import_module(f"{__name__}.{m.name}")
            _DISCOVERED.append(True)
    return dict(_REGISTRY)


def prepare_outputs(skip: tuple[str, ...] = ()) -> None:
    """Run every default format's `prepare`: a sweep calls this in a background thread, so the
    report's imports load while the workers compute instead of after them."""
    for fmt in formats().values():
        if fmt.default and fmt.name not in skip and fmt.prepare is not None:
            fmt.prepare()


def write_outputs(directory: Path, data: RunData, skip: tuple[str, ...] = ()) -> list[Path]:
    """Every default format's file in `directory` (except those named in `skip`)."""
    out = []
    for fmt in formats().values():
        if fmt.default and fmt.name not in skip:
            path = Path(directory) / fmt.filename
            fmt.write(data, path)
            out.append(path)
    return out
