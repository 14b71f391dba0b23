"""Run directories of ``scaletrain train`` as tables (scaletrain.read_run)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from . import _core

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class Run:
    """A run directory as read_run() reads it.

    Each table is a pandas DataFrame when pandas imports, else a list of dicts
    (one a row).
    """

    path: str
    metrics: Any
    """metrics.jsonl: one row a step, its keys as the trainer writes them
    (docs/training.md, "Watching a run")."""
    ranks: Any
    """ranks.jsonl: one row per rank and window; its ``phases`` are columns
    (``forward_s``, ``dp_comm_s``, ...)."""
    events: Any
    """What happened beside the steps, ``event`` saying which: ``straggler``
    (a rank the detector flagged, from metrics.jsonl) and ``flight`` (an
    operation of a rank's flight record, flight/rank-*.json, written when a job
    hung, died or was stopped)."""
    memory: Dict[str, Any]
    """memory.json ({} where the run has none)."""
    config: Optional[Dict[str, Any]]
    """config.resolved.toml (None before Python 3.11, which has no tomllib)."""


def read_run(run_dir: PathLike) -> Run:
    """A ``scaletrain train`` run directory (finished or still running) as tables.

    A line the trainer is still writing is skipped, as ``scaletrain report``
    skips it; a step recorded twice (a resumed run) keeps its last record.

    Raises:
        FileNotFoundError: no directory at run_dir.
        ValueError: a directory that is no run directory, or a damaged flight record.
    """
    d = Path(run_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"no run directory at '{d}': pass the --run-dir of a `scaletrain train`")
    if not (d / "metrics.jsonl").is_file() or not (d / "config.resolved.toml").is_file():
        raise ValueError(f"'{d}' is not a run directory: it has no config.resolved.toml and "
                         "metrics.jsonl; pass the --run-dir of a `scaletrain train`")
    by_step = {r["step"]: r for r in map(json.loads, _core.step_records(str(d / "metrics.jsonl")))}
    metrics = [by_step[s] for s in sorted(by_step)]
    ranks = [_flat_rank_record(json.loads(line)) for line in _core.step_records(str(d / "ranks.jsonl"))]
    events = _straggler_events(metrics) + _flight_events(d / "flight")
    return Run(path=str(d), metrics=_table(metrics), ranks=_table(ranks), events=_table(events),
               memory=_json_or_empty(d / "memory.json"), config=_toml_or_none(d / "config.resolved.toml"))


def _flat_rank_record(record: Dict[str, Any]) -> Dict[str, Any]:
    phases = record.pop("phases", None) or {}
    return {**record, **phases}


def _straggler_events(metrics: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [{"event": "straggler", "step": m["step"], **s} for m in metrics for s in m.get("stragglers", [])]


def _flight_events(flight_dir: Path) -> List[Dict[str, Any]]:
    events: List[Dict[str, Any]] = []
    files = sorted(flight_dir.glob("rank-*.json")) if flight_dir.is_dir() else []
    for f in files:
        record = _read_json(f, "a flight record")
        ops = record.get("records") if isinstance(record, dict) else None
        if not isinstance(ops, list):
            raise ValueError(f"{f} is not a flight record (damaged or cut short): it has no records list")
        head = {"event": "flight", "rank": record.get("rank"), "host": record.get("host"),
                "reason": record.get("reason")}
        events += [{**head, **op} for op in ops]
    events.sort(key=lambda e: (e["rank"] if e["rank"] is not None else -1))
    return events


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not {what} (damaged or cut short): {e}") from None


def _json_or_empty(path: Path) -> Dict[str, Any]:
    return _read_json(path, "a memory report") if path.is_file() else {}


def _toml_or_none(path: Path) -> Optional[Dict[str, Any]]:
    try:
        import tomllib
    except ImportError:
        return None
    with open(path, "rb") as f:
        return tomllib.load(f)


def _table(rows: List[Dict[str, Any]]) -> Any:
    """A DataFrame of the rows when pandas imports, else the rows."""
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame.from_records(rows)
