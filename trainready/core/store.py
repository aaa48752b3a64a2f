"""SQLite store: one file per output directory, many runs, one row per (run, case).

WAL mode so a reader (a report, a second shell) never blocks the runner, and every result is
committed the moment it arrives: killing the parent loses only the cases in flight. A new store is
built in a private file and linked into place complete, so whoever finds the file finds its tables.

The layout has a version (`PRAGMA user_version`, `SCHEMA_VERSION`): a writer upgrades an older
store through `_MIGRATIONS`, in one transaction; a store from a newer trainready is refused, never
rewritten. Read commands (`report`, `gate`, `history`, merge's inputs: `Store(..., create=False)`)
open the file read-only (as immutable where its directory cannot be written: read-only media, where
no writer can be at work): they never add tables, switch the journal or touch a file that is not
a trainready store (another SQLite database, an empty file). Every failure -- a corrupt file, a
read-only directory, a full disk -- is a `StoreError` of one line; what was stored stays as it was.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainready.core.case import Case, Result
from trainready.core.flock import try_lock

DB_NAME = "trainready.db"
SCHEMA_VERSION = 1  # PRAGMA user_version of a current store

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
# Version N -> N + 1: the statements, run in one transaction with the version bump. 0 is every
# store made before the version existed, complete or left half-made (tables created one by one):
# it gets the tables it lacks.
_MIGRATIONS: dict[int, str] = {0: _SCHEMA}


class StoreError(Exception):
    """A store that cannot be opened, read or written, or a run that does not exist."""


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


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _check_layout(db: sqlite3.Connection, db_path: Path, writable: bool) -> bool:
    """Refuse what is not a store this trainready can use; True when it needs `_migrate`.
    Only reads."""
    version, tables = _version(db), _tables(db)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{db_path} was written by a newer trainready (store version {version}; this one "
            f"knows up to {SCHEMA_VERSION}): upgrade trainready to read it"
        )
    if version == 0 and tables and "runs" not in tables:
        shown = ", ".join(sorted(tables)[:4])
        raise StoreError(f"{db_path} is not a trainready store (an SQLite file of: {shown})")
    if version == 0 and not tables and not writable:
        raise StoreError(f"{db_path} is empty: not a trainready store")
    return version < SCHEMA_VERSION or bool(_TABLES - tables)


def _migrate(db: sqlite3.Connection) -> None:
    """Bring the store up to SCHEMA_VERSION, each step in one transaction with its version bump
    (taken with BEGIN IMMEDIATE and checked again inside: two writers never apply one twice)."""
    saved, db.isolation_level = db.isolation_level, None  # transactions by hand
    try:
        while True:
            db.execute("BEGIN IMMEDIATE")
            try:
                version = _version(db)
                if version >= SCHEMA_VERSION:
                    db.execute("COMMIT")
                    return
                for statement in _MIGRATIONS[version].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {version + 1}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
    finally:
        db.isolation_level = saved


def _read_as_is(db: sqlite3.Connection) -> None:
    """An older store read without changing it: the tables it lacks read as empty (TEMP tables
    live in this connection only, never in the file)."""
    missing = _TABLES - _tables(db)
    for statement in _SCHEMA.split(";"):
        name = statement.split("EXISTS", 1)[-1].split("(", 1)[0].strip()
        if name in missing:
            db.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))


def _renameat2_noreplace() -> object | None:
    """Linux's renameat2(..., RENAME_NOREPLACE) from the C library, or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _rename_noreplace(src: Path, dst: Path) -> bool:
    """Rename `src` to `dst` unless `dst` exists, atomically: True when renamed, False when `dst`
    was there. OSError when the system or file system cannot say atomically."""
    fn = _renameat2_noreplace()
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.EEXIST:
        return False
    raise OSError(code, os.strerror(code))


def _publish(tmp: Path, db_path: Path) -> None:
    """Make the finished file `tmp` appear at `db_path` in one step, never over another store:
    a hard link, else (a file system without them) a rename that refuses to replace, else a
    rename under an exclusive lock that every creator of this store takes."""
    try:
        os.link(tmp, db_path)
        return
    except FileExistsError:
        return  # another process created the store first; theirs is complete too
    except OSError:
        pass
    try:
        _rename_noreplace(tmp, db_path)  # False: another process's store is there; keep it
        return
    except OSError:
        pass
    with open(db_path.with_name(f".{db_path.name}.create-lock"), "a") as guard:
        while not try_lock(guard):  # raises OSError without locks: nothing safe is left
            time.sleep(0.01)
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
            _migrate(db)
        finally:
            db.close()  # the last connection checkpoints and removes tmp's -wal and -shm
        _publish(tmp, db_path)
    except (OSError, sqlite3.Error) as e:
        raise StoreError(f"cannot create a trainready store at {db_path}: {_reason(e)}") from None
    finally:
        with contextlib.suppress(OSError):  # e.g. EROFS: it never existed; keep the real error
            tmp.unlink(missing_ok=True)


def _reason(error: BaseException) -> str:
    """An OS or SQLite error as a short phrase."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror + (f": {error.filename}" if error.filename else "")
    return str(error)


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
    """A directory holding `trainready.db`. Open with a directory or the .db path itself;
    `create=False` opens an existing store read-only (what read commands do)."""

    def __init__(self, path: str | Path, create: bool = True):
        if str(path) == ":memory:":
            self.db_path, self.dir, self.readonly = Path(":memory:"), Path("."), False
            self._connect(":memory:")
            return
        path = Path(path)
        self.db_path = path if path.suffix == ".db" else path / DB_NAME
        self.dir = self.db_path.parent
        self.readonly = not create
        if not self.db_path.exists():
            if not create:
                raise StoreError(f"no trainready store at {path} (expected {self.db_path})")
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(
                    f"cannot create a trainready store in {self.dir}: {_reason(e)}"
                ) from None
            _create_store_file(self.db_path)
        self._connect(self.db_path)

    @classmethod
    def in_memory(cls) -> Store:
        """A scratch store, e.g. to put runs from several stores side by side in one report."""
        return cls(":memory:")

    def _connect(self, target: str | Path) -> None:
        """Open the file (read-only for read commands), check its layout, upgrade it if older
        (writers only), and only then switch a writer's journal to WAL."""
        try:
            if self.readonly:
                # In a directory no one can write (read-only media, CI artifacts) no writer can
                # be at work and SQLite cannot make the WAL index: read the file as it is.
                frozen = "&immutable=1" if not os.access(self.dir, os.W_OK) else ""
                uri = f"{Path(target).absolute().as_uri()}?mode=ro{frozen}"
                self._db = sqlite3.connect(uri, uri=True)
            else:
                self._db = sqlite3.connect(target, timeout=30)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the trainready store {self.db_path}: {e}") from None
        try:
            self._db.row_factory = sqlite3.Row
            older = _check_layout(self._db, self.db_path, writable=not self.readonly)
            if self.readonly:
                if older:
                    _read_as_is(self._db)
                return
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            if older:
                _migrate(self._db)
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as e:
            self._db.close()
            if type(e) is sqlite3.DatabaseError:  # not a database, or a corrupt one
                raise StoreError(f"{self.db_path} is not a trainready store: {e}") from None
            # e.g. a read-only file system, a full disk (no room for the WAL index)
            why = "" if os.access(self.dir, os.W_OK) else f" ({self.dir} is not writable)"
            raise StoreError(f"cannot open the trainready store {self.db_path}: {e}{why}") from None

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[sqlite3.Connection]:
        """One transaction; a failure (read-only file, full disk, corrupt page) is a StoreError
        and rolls back, so what was stored before stays."""
        try:
            with self._db:
                yield self._db
        except sqlite3.Error as e:
            raise StoreError(f"cannot write {what} to {self.db_path}: {e}") from None

    def _rows(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"cannot read {self.db_path}: {e}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------
    def add_run(self, run: RunRecord) -> None:
        with self._writing(f"run {run.run_id}") as db:
            db.execute(
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
        with self._writing(f"run {run_id}") as db:
            db.execute("UPDATE runs SET planned=? WHERE run_id=?", (planned, run_id))

    def update_env(self, run_id: str, entries: dict[str, Any]) -> None:
        """Set `entries` in a run's recorded env (e.g. `interrupted`: signal, time, counts); an
        entry whose value is None is removed."""
        with self._writing(f"run {run_id}") as db:
            row = db.execute("SELECT env FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run {run_id!r} in {self.db_path}")
            env = json.loads(row["env"])
            for key, value in entries.items():
                if value is None:
                    env.pop(key, None)
                else:
                    env[key] = value
            db.execute(
                "UPDATE runs SET env=? WHERE run_id=?",
                (json.dumps(env, sort_keys=True, default=str), run_id),
            )

    def finish_run(self, run_id: str) -> None:
        with self._writing(f"run {run_id}") as db:
            db.execute("UPDATE runs SET finished_at=? WHERE run_id=?", (time.time(), run_id))

    def get_run(self, run_id: str) -> RunRecord:
        rows = self._rows("SELECT * FROM runs WHERE run_id=?", (run_id,))
        if not rows:
            known = ", ".join(r.run_id for r in self.list_runs()[-5:]) or "none"
            raise StoreError(f"no run {run_id!r} in {self.db_path} (latest: {known})")
        return _run_row(rows[0])

    def list_runs(self) -> list[RunRecord]:
        rows = self._rows("SELECT * FROM runs ORDER BY created_at, run_id")
        return [_run_row(r) for r in rows]

    def latest_run(self) -> RunRecord:
        runs = self.list_runs()
        if not runs:
            raise StoreError(f"no runs in {self.db_path}")
        return runs[-1]

    # -- results ------------------------------------------------------------------------------
    def add_result(self, run_id: str, result: Result) -> None:
        c = result.case
        with self._writing(f"the result of {c.id}") as db:
            db.execute(
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
        rows = self._rows("SELECT * FROM results WHERE run_id=? ORDER BY suite, case_id", (run_id,))
        return [_result_row(r) for r in rows]

    def done_case_ids(self, run_id: str) -> set[str]:
        rows = self._rows("SELECT case_id FROM results WHERE run_id=?", (run_id,))
        return {r[0] for r in rows}

    def add_planned(self, run_id: str, cases: list[Case]) -> None:
        with self._writing(f"the plan of run {run_id}") as db:
            db.executemany(
                "INSERT OR IGNORE INTO planned VALUES (?,?,?,?,?)",
                [(run_id, c.id, c.suite, c.name, c.params_json()) for c in cases],
            )

    def planned(self, run_id: str) -> list[Case]:
        rows = self._rows(
            "SELECT suite, name, params FROM planned WHERE run_id=? ORDER BY suite, case_id",
            (run_id,),
        )
        return [Case(r["suite"], r["name"], json.loads(r["params"])) for r in rows]

    def copy_run(self, other: Store, run_id: str) -> None:
        """Copy a run, its plan and its results from another store (same run id)."""
        self.add_run(other.get_run(run_id))
        self.add_planned(run_id, other.planned(run_id))
        for r in other.results(run_id):
            self.add_result(run_id, r)

    # -- calibrations (measured peak FLOP/s for devices not in the peak table) ----------------
    def get_calibration(self, device_key: str, dtype: str) -> dict[str, Any] | None:
        rows = self._rows(
            "SELECT * FROM calibrations WHERE device_key=? AND dtype=?", (device_key, dtype)
        )
        if not rows:
            return None
        row = rows[0]
        return {
            "peak_flops": row["peak_flops"],
            "measured_at": row["measured_at"],
            **json.loads(row["details"]),
        }

    def put_calibration(
        self, device_key: str, dtype: str, peak_flops: float, details: dict[str, Any]
    ) -> None:
        with self._writing(f"the peak of {device_key}") as db:
            db.execute(
                "INSERT OR REPLACE INTO calibrations VALUES (?,?,?,?,?)",
                (device_key, dtype, peak_flops, time.time(), json.dumps(details, sort_keys=True)),
            )
