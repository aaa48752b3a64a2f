"""The train suite's zygote: scenario processes forked from one that imported torch, each with
exactly its own environment, log and budget, and nothing of torch's compile stacks run before."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trainready.suites.train import zygote as train_zygote
from trainready.suites.train.loop import TrainSpec

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")


@pytest.fixture
def zygote():
    z = train_zygote.Zygote()
    yield z
    z.close()


def _spec(tmp_path, **kw) -> list[str]:
    spec = TrainSpec(dtype="fp32", steps=2, seq_len=16, batch_size=2, **kw)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec.to_json()))
    return [str(path), str(tmp_path / "result.json")]


def test_a_child_trains_with_its_own_environment_and_starts_fresh(zygote, tmp_path):
    probe = tmp_path / "probe.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "TRAINREADY_IMPORT": "tests.support.zygote_probe",
        "ZYGOTE_PROBE_OUT": str(probe),
        "ZYGOTE_PROBE_MARKER": "scenario-1",
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
        "TMPDIR": str(tmp_path),  # where inductor keeps its precompiled headers (compile_cache)
    }
    argv = _spec(tmp_path)
    assert zygote.run(argv, env, str(tmp_path / "log"), 120.0) == 0
    seen = json.loads(probe.read_text())
    assert seen["marker"] == "scenario-1"
    assert seen["inductor_cache"] == str(tmp_path / "cache")
    assert seen["tempdir"] == str(tmp_path)
    assert seen["torch"] and seen["preloaded"] == []
    assert seen["pid"] != os.getpid()
    assert json.loads((tmp_path / "result.json").read_text())["losses"]
    # The next child sees its own environment, not the first one's.
    env2 = {k: v for k, v in env.items() if k != "ZYGOTE_PROBE_MARKER"}
    assert zygote.run(argv, env2, str(tmp_path / "log2"), 120.0) == 0
    assert json.loads(probe.read_text())["marker"] is None


def test_a_failing_run_gives_its_code_and_its_log(zygote, tmp_path):
    env = {**os.environ, "TRAINREADY_IMPORT": "no_such_module_anywhere"}
    argv = _spec(tmp_path)
    assert zygote.run(argv, env, str(tmp_path / "log"), 60.0) == 1
    assert "no_such_module_anywhere" in json.loads((tmp_path / "result.json").read_text())["error"]


# 0 s: the budget is spent before the fork's pid comes back (a loaded host); the child is
# still killed, and the zygote's replies stay in step for the next run.
@pytest.mark.parametrize("budget_s", [3.0, 0.0])
def test_a_child_past_its_budget_is_killed_and_the_zygote_serves_on(zygote, tmp_path, budget_s):
    argv = _spec(tmp_path)
    long = TrainSpec(dtype="fp32", steps=100_000, seq_len=16, batch_size=2)
    (tmp_path / "spec.json").write_text(json.dumps(long.to_json()))
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run(argv, dict(os.environ), str(tmp_path / "log"), budget_s)
    short = tmp_path / "short"
    short.mkdir()
    assert zygote.run(_spec(short), dict(os.environ), str(short / "log"), 120.0) == 0


def test_a_lost_zygote_is_said_so(tmp_path):
    z = train_zygote.Zygote()
    z._proc.kill()
    z._proc.wait()
    with pytest.raises(train_zygote.ZygoteLost):
        z.run(_spec(tmp_path), dict(os.environ), str(tmp_path / "log"), 30.0)
    z.close()


def test_only_devices_whose_runtime_torch_import_leaves_alone_fork():
    assert not train_zygote.usable("emu:0") and not train_zygote.usable("xla")
    assert not train_zygote.usable("neuron")
    assert train_zygote.usable("cpu") == (
        not list(train_zygote.entry_points(group="torch.backends"))
    )
