"""SQLite store: one file per output directory, many runs, one row per (run, case).

WAL mode so a reader (a report, a second shell) never blocks the runner, and every result is
committed the moment it arrives: killing the parent loses only the cases in flight. A new store is
built in a private file and linked into place complete, so whoever finds the file finds its tables.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainready.core.case import Case, Result

DB_NAME = "trainready.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    created_at  REAL NOT NULL,
    finished_at REAL,
    suites      TEXT NOT NULL,   -- JSON list
    device      TEXT NOT NULL,
    preset      TEXT NOT NULL,
    dtype       TEXT,
    shard       TEXT,            -- "i/n" or NULL
    config      TEXT NOT NULL,   -- JSON: everything that decides which cases run and how
    env         TEXT NOT NULL,   -- JSON environment snapshot
    command     TEXT,
    planned     INTEGER          -- number of cases the run set out to do
);
CREATE TABLE IF NOT EXISTS results (
    run_id      TEXT NOT NULL REFERENCES runs(run_id),
    case_id     TEXT NOT NULL,
    suite       TEXT NOT NULL,
    name        TEXT NOT NULL,
    params      TEXT NOT NULL,   -- JSON
    status      TEXT NOT NULL,
    phase       TEXT,
    metrics     TEXT NOT NULL,   -- JSON {name: number}
    diagnostics TEXT NOT NULL,   -- JSON
    started_at  REAL,
    duration_s  REAL,
    PRIMARY KEY (run_id, case_id)
);
CREATE TABLE IF NOT EXISTS planned (  -- every case a run set out to do, so a gap has a name
    run_id      TEXT NOT NULL REFERENCES runs(run_id),
    case_id     TEXT NOT NULL,
    suite       TEXT NOT NULL,
    name        TEXT NOT NULL,
    params      TEXT NOT NULL,
    PRIMARY KEY (run_id, case_id)
);
CREATE TABLE IF NOT EXISTS calibrations (
    device_key  TEXT NOT NULL,
    dtype       TEXT NOT NULL,
    peak_flops  REAL NOT NULL,
    measured_at REAL NOT NULL,
    details     TEXT NOT NULL,
    PRIMARY KEY (device_key, dtype)
);
"""
_TABLES = frozenset({"runs", "results", "planned", "calibrations"})


class StoreError(Exception):
    """A store that cannot be opened or a run that does not exist."""


@dataclass
class RunRecord:
    run_id: str
    created_at: float
    suites: list[str]
    device: str
    preset: str
    dtype: str | None = None
    shard: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    planned: int | None = None
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _create_schema(db: sqlite3.Connection) -> None:
    """Create the tables a store lacks, all in one transaction (a store left half-made by an
    older version gets them all at once); a complete store is only read, never locked."""
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if _TABLES - have:  # some table missing
        db.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")


def _publish(tmp: Path, db_path: Path) -> None:
    """Make the finished file `tmp` appear at `db_path` in one step, never over another store."""
    try:
        os.link(tmp, db_path)
    except FileExistsError:
        pass  # another process created the store first; theirs is complete too
    except OSError:  # a file system without hard links: rename, unless a store appeared meanwhile
        if not db_path.exists():
            os.replace(tmp, db_path)


def _create_store_file(db_path: Path) -> None:
    """A new store file with every table, built aside and published whole: a reader polling for
    the file (a progress view, a benchmark) never opens it before its tables exist."""
    tmp = db_path.with_name(f".{db_path.name}.{uuid.uuid4().hex}.tmp")
    try:
        db = sqlite3.connect(tmp)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # persistent: recorded in the file header
            _create_schema(db)
        finally:
            db.close()  # the last connection checkpoints and removes tmp's -wal and -shm
        _publish(tmp, db_path)
    except (OSError, sqlite3.Error) as e:
        raise StoreError(f"cannot create a trainready store at {db_path}: {e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def _result_row(r: sqlite3.Row) -> Result:
    case = Case(r["suite"], r["name"], json.loads(r["params"]))
    return Result(
        case=case,
        status=r["status"],
        metrics=json.loads(r["metrics"]),
        diagnostics=json.loads(r["diagnostics"]),
        phase=r["phase"],
        started_at=r["started_at"] or 0.0,
        duration_s=r["duration_s"] or 0.0,
    )


def _run_row(r: sqlite3.Row) -> RunRecord:
    return RunRecord(
        run_id=r["run_id"],
        created_at=r["created_at"],
        finished_at=r["finished_at"],
        suites=json.loads(r["suites"]),
        device=r["device"],
        preset=r["preset"],
        dtype=r["dtype"],
        shard=r["shard"],
        config=json.loads(r["config"]),
        env=json.loads(r["env"]),
        command=r["command"],
        planned=r["planned"],
    )


class Store:
    """A directory holding `trainready.db`. Open with a directory or the .db path itself."""

    def __init__(self, path: str | Path, create: bool = True):
        if str(path) == ":memory:":
            self.db_path, self.dir = Path(":memory:"), Path(".")
            self._connect(":memory:")
            return
        path = Path(path)
        self.db_path = path if path.suffix == ".db" else path / DB_NAME
        self.dir = self.db_path.parent
        if not self.db_path.exists():
            if not create:
                raise StoreError(f"no trainready store at {path} (expected {self.db_path})")
            self.dir.mkdir(parents=True, exist_ok=True)
            _create_store_file(self.db_path)
        self._connect(self.db_path)

    @classmethod
    def in_memory(cls) -> Store:
        """A scratch store, e.g. to put runs from several stores side by side in one report."""
        return cls(":memory:")

    def _connect(self, target: str | Path) -> None:
        try:
            self._db = sqlite3.connect(target, timeout=30)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            _create_schema(self._db)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.db_path} is not a trainready store: {e}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------
    def add_run(self, run: RunRecord) -> None:
        with self._db:
            self._db.execute(
                "INSERT INTO runs (run_id, created_at, finished_at, suites, device, preset, dtype,"
                " shard, config, env, command, planned) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run.run_id,
                    run.created_at,
                    run.finished_at,
                    json.dumps(run.suites),
                    run.device,
                    run.preset,
                    run.dtype,
                    run.shard,
                    json.dumps(run.config, sort_keys=True),
                    json.dumps(run.env, sort_keys=True, default=str),
                    run.command,
                    run.planned,
                ),
            )

    def set_planned(self, run_id: str, planned: int) -> None:
        with self._db:
            self._db.execute("UPDATE runs SET planned=? WHERE run_id=?", (planned, run_id))

    def update_env(self, run_id: str, entries: dict[str, Any]) -> None:
        """Set `entries` in a run's recorded env (e.g. `interrupted`: signal, time, counts); an
        entry whose value is None is removed."""
        with self._db:
            row = self._db.execute("SELECT env FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run {run_id!r} in {self.db_path}")
            env = json.loads(row["env"])
            for key, value in entries.items():
                if value is None:
                    env.pop(key, None)
                else:
                    env[key] = value
            self._db.execute(
                "UPDATE runs SET env=? WHERE run_id=?",
                (json.dumps(env, sort_keys=True, default=str), run_id),
            )

    def finish_run(self, run_id: str) -> None:
        with self._db:
            self._db.execute("UPDATE runs SET finished_at=? WHERE run_id=?", (time.time(), run_id))

    def get_run(self, run_id: str) -> RunRecord:
        row = self._db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            known = ", ".join(r.run_id for r in self.list_runs()[-5:]) or "none"
            raise StoreError(f"no run {run_id!r} in {self.db_path} (latest: {known})")
        return _run_row(row)

    def list_runs(self) -> list[RunRecord]:
        rows = self._db.execute("SELECT * FROM runs ORDER BY created_at, run_id").fetchall()
        return [_run_row(r) for r in rows]

    def latest_run(self) -> RunRecord:
        runs = self.list_runs()
        if not runs:
            raise StoreError(f"no runs in {self.db_path}")
        return runs[-1]

    # -- results ------------------------------------------------------------------------------
    def add_result(self, run_id: str, result: Result) -> None:
        c = result.case
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO results (run_id, case_id, suite, name, params, status,"
                " phase, metrics, diagnostics, started_at, duration_s)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    c.id,
                    c.suite,
                    c.name,
                    c.params_json(),
                    result.status,
                    result.phase,
                    json.dumps(result.metrics, sort_keys=True),
                    json.dumps(result.diagnostics, sort_keys=True, default=str),
                    result.started_at,
                    result.duration_s,
                ),
            )

    def results(self, run_id: str) -> list[Result]:
        rows = self._db.execute(
            "SELECT * FROM results WHERE run_id=? ORDER BY suite, case_id", (run_id,)
        ).fetchall()
        return [_result_row(r) for r in rows]

    def done_case_ids(self, run_id: str) -> set[str]:
        rows = self._db.execute("SELECT case_id FROM results WHERE run_id=?", (run_id,))
        return {r[0] for r in rows}

    def add_planned(self, run_id: str, cases: list[Case]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT OR IGNORE INTO planned VALUES (?,?,?,?,?)",
                [(run_id, c.id, c.suite, c.name, c.params_json()) for c in cases],
            )

    def planned(self, run_id: str) -> list[Case]:
        rows = self._db.execute(
            "SELECT suite, name, params FROM planned WHERE run_id=? ORDER BY suite, case_id",
            (run_id,),
        ).fetchall()
        return [Case(r["suite"], r["name"], json.loads(r["params"])) for r in rows]

    def copy_run(self, other: Store, run_id: str) -> None:
        """Copy a run, its plan and its results from another store (same run id)."""
        self.add_run(other.get_run(run_id))
        self.add_planned(run_id, other.planned(run_id))
        for r in other.results(run_id):
            self.add_result(run_id, r)

    # -- calibrations (measured peak FLOP/s for devices not in the peak table) ----------------
    def get_calibration(self, device_key: str, dtype: str) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT * FROM calibrations WHERE device_key=? AND dtype=?", (device_key, dtype)
        ).fetchone()
        if row is None:
            return None
        return {
            "peak_flops": row["peak_flops"],
            "measured_at": row["measured_at"],
            **json.loads(row["details"]),
        }

    def put_calibration(
        self, device_key: str, dtype: str, peak_flops: float, details: dict[str, Any]
    ) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO calibrations VALUES (?,?,?,?,?)",
                (device_key, dtype, peak_flops, time.time(), json.dumps(details, sort_keys=True)),
            )
