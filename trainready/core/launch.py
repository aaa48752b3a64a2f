"""Start N ranks with torch's own launcher and run Python functions on all of them, bounded in time.

    from trainready.core.launch import launch
    res = launch("mypkg.mod:fn", nproc=2, device="cpu", args={"n": 4}, timeout_s=60)
    res.ok, res.per_rank   # [{"...": ...}, {"...": ...}]: what fn returned on each rank

`fn(env: RankEnv, **args) -> dict` runs on every rank once the default process group is up
(`env.device` is the rank's own device, `env.backend` the process-group backend). Its dict must be
JSON-able. An exception on a rank (any BaseException but exit and interrupt) is caught there and
reported (`errors[rank]`, `kinds[rank]`).
`env.phase("name")` records what the rank is doing, so a call that hangs says where
(`result.phases[rank]`).

`RankPool` keeps the ranks alive between calls, so many short jobs (a sweep of collectives, say)
pay the start-up (torchrun, `import torch`, rendezvous: seconds) once:

    with RankPool(2, device="cpu") as pool:
        a = pool.run("mypkg.mod:fn", {"size": 1024}, timeout_s=30)
        b = pool.run("mypkg.mod:other", {}, timeout_s=30)

Each call has its own deadline (including the start-up when the ranks are not up yet). A call
that ends with any rank not answering -- hung in a collective, dead, or stuck behind a rank that
raised -- tears the ranks down, so a later call starts fresh ranks and never meets a half-finished
collective. A call in which every rank answered leaves the pool up, errors or not.

How: `python -m torch.distributed.run --standalone --nproc-per-node N -m trainready.core.launch` starts
the ranks (this module's `_rank_main`). Host and ranks talk through a `torch.distributed.TCPStore`
the host serves on a free port: the host sets `cmd/{seq}` (target and args), every rank answers
`res/{seq}/{rank}` (JSON). Each rank writes its stdout/stderr to `rank{r}.log` in a temp dir, read
back as the tail of what it printed during the call.

Teardown (`close`, a failed call) is SIGKILL: ranks hold nothing worth a graceful exit. No rank
outlives its caller: torchrun runs in the caller's process group (the trainready runner kills a
case worker's whole group on timeout) and is killed by the kernel when the caller dies
(PR_SET_PDEATHSIG, set before exec: `core.procs.guarded_command`); every rank asks the same for
itself when torchrun dies (torchrun puts ranks in sessions of their own); and the pool kills the
rank pids it knows as well as torchrun. A case worker whose run has stopped starts no ranks
(`core.procs.RunnerGone`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from trainready.core.procs import die_with_parent, guarded_command
from trainready.core.worker import redirect_output

ENV_SPEC = "TRAINREADY_LAUNCH_SPEC"
POLL_S = 0.005
ERROR_GRACE_S = 2.0  # after a rank raised, how long the others get to answer before teardown
STDERR_TAIL_CHARS = 3000
Target = str | Callable[..., dict[str, Any]]


class LaunchError(RuntimeError):
    """The ranks could not be started (the message carries the launcher's and ranks' output);
    `timed_out` when they were still starting at the deadline, else torchrun exited."""

    def __init__(self, message: str, *, timed_out: bool):
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True)
class RankEnv:
    """What a target function learns about the rank it runs on."""

    rank: int
    world_size: int
    local_rank: int
    device: str  # this rank's device, e.g. "cpu" or "cuda:1"
    backend: str  # the default process group's backend, e.g. "gloo"
    report_phase: Callable[[str], None] = field(default=lambda _p: None, repr=False, compare=False)

    def phase(self, name: str) -> None:
        """Say what this rank is doing now; a call that times out reports each rank's last."""
        self.report_phase(name)


@dataclass
class LaunchResult:
    """One call's outcome on every rank (lists are indexed by rank).

    `status[r]`: "ok" (returned), "error" (raised: `errors[r]`, `kinds[r]` in "error",
    "unsupported", "oom"), "lost" (no answer: hung, or killed when the call was abandoned), or
    "dead" (its process had exited). `tracebacks[r]`: the traceback of what rank r raised.
    """

    per_rank: list[dict[str, Any] | None]
    status: list[str]
    errors: list[str | None]
    kinds: list[str | None]
    stderr_tails: list[str]
    timed_out: bool
    elapsed_s: float
    start_s: float = 0.0  # the part of elapsed_s spent starting the ranks (0 on a warm pool)
    launcher_tail: str = ""  # torchrun's own output, when the ranks were torn down
    tracebacks: list[str | None] = field(default_factory=list)  # per rank, where it raised
    phases: list[str | None] = field(default_factory=list)  # per rank, the last `env.phase(...)`

    @property
    def ok(self) -> bool:
        return all(s == "ok" for s in self.status)

    @property
    def first_error(self) -> tuple[int, str] | None:
        """(rank, error) of the lowest rank that raised, if any did."""
        return next(((r, e) for r, e in enumerate(self.errors) if e), None)


def target_name(target: Target) -> str:
    """'pkg.mod:fn' for a module-level function (or the string itself)."""
    if isinstance(target, str):
        if ":" not in target:
            raise ValueError(f"target {target!r} must be 'package.module:function'")
        return target
    if "<locals>" in target.__qualname__ or target.__module__ == "__main__":
        raise ValueError(
            f"{target.__qualname__} is not importable by the ranks: use a module-level function"
        )
    return f"{target.__module__}:{target.__qualname__}"


def resolve_target(name: str) -> Callable[..., dict[str, Any]]:
    module, _, attr = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _tail(path: Path, offset: int, chars: int = STDERR_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            f.seek(max(offset, end - chars))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by torchrun) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class RankPool:
    """N ranks under torchrun, kept up between calls; see the module docstring."""

    def __init__(
        self,
        nproc: int,
        *,
        device: str = "cpu",
        backend: str | None = None,
        env: dict[str, str] | None = None,
        pg_timeout_s: float = 600.0,
    ):
        if nproc < 1:
            raise ValueError(f"nproc must be >= 1, got {nproc}")
        from trainready.device import default_pg_backend

        self.nproc = nproc
        self.device = device
        self.backend = backend or default_pg_backend(device)
        self.extra_env = dict(env or {})
        self.pg_timeout_s = pg_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._store: Any = None
        self._dir: Path | None = None
        self._pids: list[int] = []
        self._seq = 0
        self.starts = 0  # how many times ranks were started (tests and reports read it)

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def up(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def launcher_pid(self) -> int | None:
        """torchrun's process id while the pool is up."""
        return self._proc.pid if self.up and self._proc is not None else None

    @property
    def pids(self) -> list[int]:
        """The ranks' process ids (rank order) while the pool is up."""
        return list(self._pids)

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rank_log(self, rank: int) -> Path:
        assert self._dir is not None
        return self._dir / f"rank{rank}.log"

    def _launcher_log(self) -> Path:
        assert self._dir is not None
        return self._dir / "torchrun.log"

    def start(self, timeout_s: float) -> float:
        """Start the ranks and wait until each has its process group; returns seconds taken."""
        import torch.distributed as dist

        self.close()
        # Refused (RunnerGone) when the run this process works for has stopped.
        cmd, guard_env = guarded_command(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={self.nproc}",
                "--max-restarts=0",
                "--monitor-interval=0.05",
                "-m",
                "trainready.core.launch",
            ]
        )
        self._seq = 0
        t0 = time.monotonic()
        self._dir = Path(tempfile.mkdtemp(prefix="trainready-ranks-"))
        self._store = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30)
        )
        spec = {
            "store_port": self._store.port,
            "device": self.device,
            "backend": self.backend,
            "log_dir": str(self._dir),
            "pg_timeout_s": self.pg_timeout_s,
        }
        env = {**os.environ, **self.extra_env, **guard_env, ENV_SPEC: json.dumps(spec)}
        # Ranks import the target by name: give them the caller's import roots too.
        paths = [p for p in sys.path if p and Path(p).is_dir()]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([os.getcwd(), *paths]))
        with open(self._launcher_log(), "wb") as log:
            # Same process group as the caller: whoever kills the caller's group kills torchrun;
            # torchrun also dies with the caller (PR_SET_PDEATHSIG before exec), and the ranks
            # with torchrun.
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        self.starts += 1
        deadline = t0 + timeout_s
        ready: dict[int, dict[str, Any]] = {}
        while len(ready) < self.nproc:
            for r in range(self.nproc):
                if r not in ready and self._store.check([f"ready/{r}"]):
                    ready[r] = json.loads(self._store.get(f"ready/{r}"))
            self._pids = [ready[r]["pid"] for r in sorted(ready)]
            if len(ready) == self.nproc:
                break
            exited = self._proc.poll() is not None
            if exited or time.monotonic() > deadline:
                why = (
                    f"torchrun exited with code {self._proc.returncode}"
                    if exited
                    else f"ranks not ready within {timeout_s:g} s ({len(ready)}/{self.nproc} up)"
                )
                tail = self._output_tail()
                self.close()
                raise LaunchError(f"{why}\n{tail}", timed_out=not exited)
            time.sleep(POLL_S)
        return time.monotonic() - t0

    def _output_tail(self) -> str:
        if self._dir is None:
            return ""
        parts = [f"[torchrun]\n{_tail(self._launcher_log(), 0)}"]
        for r in range(self.nproc):
            text = _tail(self._rank_log(r), 0, 1500)
            if text:
                parts.append(f"[rank {r}]\n{text}")
        return "\n".join(parts)

    def close(self) -> None:
        """Kill the ranks and torchrun, and clean up. Ranks hold nothing worth a graceful exit:
        a call's answer is in the host's hands before the call returns."""
        self.kill()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._store = None

    def kill(self) -> None:
        """SIGKILL torchrun and every rank now, without asking."""
        for pid in self._pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait()
        self._wait_ranks_exit(5.0)
        self._proc = None
        self._pids = []

    def _wait_ranks_exit(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(_alive(p) for p in self._pids) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _phase(self, seq: int, rank: int) -> str | None:
        key = _phase_key(seq, rank)
        if self._store is None or not self._store.check([key]):
            return None
        phase = self._store.get(key).decode()
        self._store.delete_key(key)
        return phase

    # -- calls ----------------------------------------------------------------------------------
    def run(
        self, target: Target, args: dict[str, Any] | None = None, *, timeout_s: float
    ) -> LaunchResult:
        """Run `target(env, **args)` on every rank; wait at most `timeout_s` (start-up included).

        Raises LaunchError only when the ranks cannot be started at all.
        """
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        start_s = 0.0 if self.up else self.start(timeout_s)
        assert self._proc is not None and self._store is not None
        seq = self._seq
        self._seq += 1
        offsets = [_size(self._rank_log(r)) for r in range(self.nproc)]
        payload = {"target": target_name(target), "args": dict(args or {})}
        self._store.set(f"cmd/{seq}", json.dumps(payload))

        answers: dict[int, dict[str, Any]] = {}
        first_error_at: float | None = None
        dead = False
        while len(answers) < self.nproc:
            for r in range(self.nproc):
                key = f"res/{seq}/{r}"
                if r not in answers and self._store.check([key]):
                    answers[r] = json.loads(self._store.get(key))
                    self._store.delete_key(key)
                    if not answers[r]["ok"] and first_error_at is None:
                        first_error_at = time.monotonic()
            if len(answers) == self.nproc:
                break
            now = time.monotonic()
            if self._proc.poll() is not None:
                dead = True
                break
            if now > deadline or (
                first_error_at is not None and now > first_error_at + ERROR_GRACE_S
            ):
                break
            time.sleep(POLL_S)
        timed_out = len(answers) < self.nproc and not dead and first_error_at is None

        per_rank: list[dict[str, Any] | None] = [None] * self.nproc
        status: list[str] = ["lost"] * self.nproc
        errors: list[str | None] = [None] * self.nproc
        kinds: list[str | None] = [None] * self.nproc
        tracebacks: list[str | None] = [None] * self.nproc
        for r, a in answers.items():
            if a["ok"]:
                per_rank[r], status[r] = a["value"], "ok"
            else:
                status[r], errors[r], kinds[r] = "error", a["error"], a["kind"]
                tracebacks[r] = a["traceback"]
        if dead:
            status = [s if r in answers else "dead" for r, s in enumerate(status)]
        phases = [self._phase(seq, r) for r in range(self.nproc)]
        launcher_tail = ""
        if len(answers) < self.nproc:
            # Someone is stuck or gone: nothing more can be trusted from these ranks.
            launcher_tail = _tail(self._launcher_log(), 0)
            self.kill()
        tails = [_tail(self._rank_log(r), offsets[r]) for r in range(self.nproc)]
        if not self.up:
            self.close()
        return LaunchResult(
            per_rank=per_rank,
            status=status,
            errors=errors,
            kinds=kinds,
            stderr_tails=tails,
            timed_out=timed_out,
            elapsed_s=time.monotonic() - t0,
            start_s=start_s,
            launcher_tail=launcher_tail,
            tracebacks=tracebacks,
            phases=phases,
        )


def _phase_key(seq: int, rank: int) -> str:
    return f"phase/{seq}/{rank}"


def launch(
    target: Target,
    nproc: int,
    *,
    device: str = "cpu",
    backend: str | None = None,
    args: dict[str, Any] | None = None,
    timeout_s: float = 300.0,
    env: dict[str, str] | None = None,
) -> LaunchResult:
    """Start `nproc` ranks, run `target(env, **args)` once on each, tear them down.

    `backend` None picks the device's process-group backend (gloo, nccl, xccl, or a vendor's).
    `timeout_s` bounds everything, start-up included; on timeout every rank is killed and the
    result says `timed_out`. Raises LaunchError when the ranks cannot start.
    """
    with RankPool(nproc, device=device, backend=backend, env=env) as pool:
        return pool.run(target, args, timeout_s=timeout_s)


# -- the rank side -------------------------------------------------------------------------------
def _error_kind(exc: BaseException) -> str:
    from trainready.core.context import is_unsupported
    from trainready.device import is_oom

    if is_unsupported(exc):
        return "unsupported"
    return "oom" if is_oom(exc) else "error"


def _call(target: str, env: RankEnv, args: dict[str, Any]) -> dict[str, Any]:
    from trainready.core.errors import PROCESS_EXITS, error_head, root_cause

    try:
        value = resolve_target(target)(env, **args)
        json.dumps(value)  # fail here, with a clear error, if it cannot travel
        return {"ok": True, "value": value}
    except PROCESS_EXITS:
        raise
    except BaseException as e:  # noqa: BLE001 - a case's error (core/errors.py); the host judges
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        return {"ok": False, "error": error_head(e), "kind": _error_kind(root_cause(e)),
                "traceback": text[-3000:]}  # fmt: skip


def _import_requested() -> None:
    """The run's --import modules, which the ranks learn from TRAINREADY_IMPORT (inherited from
    the caller), before the device is touched: one may register it. A failure ends the rank with
    one line naming the module, which the caller's LaunchError carries."""
    from trainready.core.imports import ImportFailed, import_from_env

    try:
        import_from_env()
    except ImportFailed as e:
        sys.exit(f"error: {e}")


def _rank_main() -> None:
    die_with_parent(signal.SIGKILL)  # with torchrun, however it dies
    spec = json.loads(os.environ[ENV_SPEC])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    redirect_output(os.path.join(spec["log_dir"], f"rank{rank}.log"))
    _import_requested()

    import torch
    import torch.distributed as dist

    from trainready.device import rank_device, set_current_device

    device = rank_device(spec["device"], local_rank)
    set_current_device(device)
    timeout = timedelta(seconds=spec["pg_timeout_s"])
    on_accelerator = torch.device(device).type != "cpu"
    dist.init_process_group(
        spec["backend"], timeout=timeout, device_id=torch.device(device) if on_accelerator else None
    )
    store = dist.TCPStore(
        "127.0.0.1", spec["store_port"], is_master=False, timeout=timedelta(days=1)
    )
    store.set(f"ready/{rank}", json.dumps({"pid": os.getpid(), "device": device}))
    seq = 0
    while True:  # until the host kills the ranks
        store.wait([f"cmd/{seq}"])
        cmd = json.loads(store.get(f"cmd/{seq}"))
        key = _phase_key(seq, rank)
        env = RankEnv(
            rank,
            world,
            local_rank,
            device,
            str(dist.get_backend()),
            report_phase=lambda name, key=key: store.set(key, name),
        )
        answer = _call(cmd["target"], env, cmd["args"])
        sys.stdout.flush()
        sys.stderr.flush()
        store.set(f"res/{seq}/{rank}", json.dumps(answer))
        seq += 1


if __name__ == "__main__":
    _rank_main()
