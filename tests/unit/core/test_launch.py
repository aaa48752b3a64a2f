"""The launcher: torchrun-started ranks on gloo, per-rank results, errors, timeouts, teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from trainready.core.context import Unsupported
from trainready.core.launch import LaunchError, RankEnv, RankPool, launch, target_name


# -- targets the ranks import by name ------------------------------------------------------------
def summed(env: RankEnv, scale: int = 1) -> dict:
    t = torch.full((4,), float(env.rank + 1) * scale)
    dist.all_reduce(t)
    return {
        "rank": env.rank,
        "world": env.world_size,
        "device": env.device,
        "backend": env.backend,
        "pid": os.getpid(),
        "sum": t.tolist(),
    }


def unsupported_everywhere(env: RankEnv) -> dict:
    print(f"rank {env.rank} says hello")
    raise Unsupported("not on this backend")


def checkpoint_fails(env: RankEnv) -> dict:
    """As torch.distributed.checkpoint fails: a CheckpointException (a BaseException, not an
    Exception) gathering every rank's own error."""
    import traceback

    from torch.distributed.checkpoint.api import CheckpointException

    cause = NotImplementedError("no pinned host memory")
    stack = traceback.StackSummary()
    raise CheckpointException("save failed", {r: (cause, stack) for r in range(env.world_size)})


def rank1_skips(env: RankEnv) -> dict:
    env.phase("before")
    if env.rank != 1:
        env.phase("all_reduce")
        dist.all_reduce(torch.ones(1))
    return {"pid": os.getpid()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_target_names() -> None:
    assert target_name(summed) == "tests.unit.core.test_launch:summed"
    assert target_name("a.b:c") == "a.b:c"
    with pytest.raises(ValueError):
        target_name("a.b.c")
    with pytest.raises(ValueError):
        target_name(lambda env: {})


@pytest.mark.slow
def test_pool_runs_many_calls_on_one_start_and_tears_down_a_hung_one() -> None:
    with RankPool(2, device="cpu") as pool:
        first = pool.run(summed, {"scale": 2}, timeout_s=120)
        assert first.ok and first.start_s > 0 and not first.timed_out
        assert [r["sum"] for r in first.per_rank] == [[6.0] * 4, [6.0] * 4]
        assert [r["rank"] for r in first.per_rank] == [0, 1]
        assert {(r["world"], r["device"], r["backend"]) for r in first.per_rank} == {
            (2, "cpu", "gloo")
        }
        pids = pool.pids
        assert pids == [r["pid"] for r in first.per_rank]

        # Every rank raised: each says why, and the pool stays up (nothing is stuck).
        err = pool.run(unsupported_everywhere, timeout_s=30)
        assert err.status == ["error", "error"] and err.kinds == ["unsupported", "unsupported"]
        assert err.first_error == (0, "Unsupported: not on this backend")
        assert "rank 1 says hello" in err.stderr_tails[1]
        # An error that is no Exception (DCP's) is the case's too, named by its root cause.
        ckpt = pool.run(checkpoint_fails, timeout_s=30)
        assert ckpt.status == ["error", "error"] and ckpt.kinds == ["error", "error"]
        assert ckpt.first_error == (
            0,
            "CheckpointException from ranks [0, 1]: NotImplementedError: no pinned host memory",
        )
        again = pool.run(summed, timeout_s=30)
        assert again.ok and again.start_s == 0.0 and pool.starts == 1 and pool.pids == pids

        # Rank 1 returns; rank 0 waits for it in all_reduce until the deadline: torn down.
        hung = pool.run(rank1_skips, timeout_s=2.0)
        assert hung.status == ["lost", "ok"] and hung.timed_out and not hung.ok
        assert hung.phases == ["all_reduce", "before"]
        assert 2.0 <= hung.elapsed_s < 10.0
        assert not pool.up and not any(_alive(p) for p in pids)


@pytest.mark.slow
def test_launch_is_one_call_on_fresh_ranks() -> None:
    res = launch(
        "tests.unit.core.test_launch:summed", 2, device="cpu", args={"scale": 3}, timeout_s=120
    )
    assert res.ok and [r["sum"] for r in res.per_rank] == [[9.0] * 4, [9.0] * 4]
    assert not any(_alive(r["pid"]) for r in res.per_rank)


@pytest.mark.slow
def test_a_backend_that_cannot_start_is_a_launch_error() -> None:
    with pytest.raises(LaunchError) as err, RankPool(1, device="cpu", backend="nosuch") as pool:
        pool.start(timeout_s=120)
    assert not err.value.timed_out
    assert "torchrun exited" in str(err.value) and "nosuch" in str(err.value)


_HOLDER = """
import sys, time
from trainready.core.launch import RankPool
pool = RankPool(1, device="cpu")
pool.start(timeout_s=120)
print(pool.launcher_pid, *pool.pids, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_ranks_die_with_the_process_that_started_them() -> None:
    """The trainready runner SIGKILLs a worker that overran its budget: its ranks must follow."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        pids = [int(p) for p in holder.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)  # torchrun, rank 0
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
