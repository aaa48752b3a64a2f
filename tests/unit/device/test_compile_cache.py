"""Compile caches: `device.compile_cache_env` puts every on-disk compile cache of a device under one
root, and the train suite gives each mode of a case a fresh root that its scenarios share, in
order (cold fills it, warm and the others find what cold left)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainready.core.case import Outcome
from trainready.core.config import RunConfig
from trainready.core.context import CaseContext
from trainready.device import compile_cache_env
from trainready.suites.train import plan, suite
from trainready.suites.train import processes as train_processes
from trainready.suites.train.loop import TrainSpec
from trainready.suites.train.suite import SCENARIOS

CACHE_VARS = {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR"}
NEURON_VARS = {"TORCH_NEURONX_NEFF_CACHE_DIR", "NEURON_COMPILE_CACHE_URL"}


def _assert_apart_under(env: dict[str, str], root: Path) -> None:
    """Every cache in a directory of its own under `root`: none left at its default (the user's
    home or /var/tmp, which would outlive a cold run), no two sharing one."""
    paths = [Path(v) for v in env.values()]
    assert all(p.parent == root for p in paths), env
    assert len(set(paths)) == len(paths), env


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "xpu", "mps"])
def test_inductor_and_triton_caches_go_under_the_root(tmp_path, device):
    env = compile_cache_env(device, tmp_path)
    assert set(env) == CACHE_VARS
    _assert_apart_under(env, tmp_path)


# Where a process started with the environment keeps inductor's precompiled headers, which
# TORCHINDUCTOR_CACHE_DIR does not move (a warm one would make a "cold" CPU compile seconds short).
_HEADER_DIR = """
import json, tempfile
from torch._inductor import codecache
print(json.dumps([codecache._HEADER_DIR, codecache.cache_dir(), tempfile.gettempdir()]))
"""


def test_inductors_precompiled_headers_and_temporary_files_go_under_the_root_too(tmp_path):
    env = compile_cache_env("cpu", tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", _HEADER_DIR],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    headers, cache, temp = (Path(p) for p in json.loads(out.stdout))
    assert temp == tmp_path / "tmp"
    assert headers.is_relative_to(tmp_path / "tmp") and headers.name == "precompiled_headers"
    assert cache == tmp_path / "inductor"


# torch knows the device type "neuron" once torch-neuronx names the PrivateUse1 backend after it,
# which a process can do only once: so in a fresh interpreter.
_NEURON_ENVS = """
import json, sys, torch
torch.utils.rename_privateuse1_backend("neuron")
from trainready.device import compile_cache_env
print(json.dumps([compile_cache_env(d, sys.argv[1]) for d in ("neuron", "neuron:1")]))
"""


def test_xla_gets_the_neuron_persistent_cache_of_older_torch_neuronx(tmp_path):
    env = compile_cache_env("xla", tmp_path)
    assert set(env) == CACHE_VARS | {"NEURON_COMPILE_CACHE_URL"}
    _assert_apart_under(env, tmp_path)


def test_neuron_gets_its_vendor_caches_too(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _NEURON_ENVS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    for env in json.loads(out.stdout):
        assert set(env) == CACHE_VARS | NEURON_VARS
        _assert_apart_under(env, tmp_path)


class FakeScenarios:
    """Stands in for the scenario processes: records the spec and cache env each one got and what
    its caches already held, then leaves a file in every cache, as a compile would."""

    def __init__(self) -> None:
        self.calls: list[tuple[TrainSpec, dict[str, str], list[list[str]]]] = []

    def run(self, spec: TrainSpec, env: dict[str, str]) -> suite.Scenario:
        dirs = [Path(env[var]) for var in sorted(CACHE_VARS)]
        held = [sorted(f.name for f in d.glob("*")) for d in dirs]
        n = sum(e == env for _, e, _ in self.calls)
        self.calls.append((spec, dict(env), held))
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            (d / f"from-scenario-{n}").touch()
        return suite.Scenario("", "", record={})

    def single(self, spec, env, work, timeout_s, profile=None):
        return self.run(spec, env)

    def ranks(self, spec, nproc, backend, env, timeout_s, profile=None):
        return self.run(spec, env)


@pytest.mark.parametrize("nproc", [1, 2])
def test_each_mode_gets_a_fresh_cache_that_its_scenarios_share_in_order(monkeypatch, nproc):
    fake = FakeScenarios()
    monkeypatch.setattr(train_processes, "run_single", fake.single)
    monkeypatch.setattr(train_processes, "run_ranks", fake.ranks)
    monkeypatch.setattr(suite, "judge", lambda p, runs, peak: Outcome("pass", {}, {}))
    (case,) = suite.cases(RunConfig(suites=["train"], device="cpu", options={"nproc": nproc}))
    ctx = CaseContext(device="cpu", dtype="bf16", budget_s=60)
    for _ in range(2):  # the case twice: its second run must not find the first's caches
        suite.execute(case, ctx)

    # Scenario by scenario, both modes in turn (so load drifting over the case hits both alike).
    expected = [
        plan.scenario_spec(case.params, "cpu", m, s) for s in SCENARIOS for m in suite.MODES
    ]
    assert [spec for spec, _, _ in fake.calls] == expected * 2
    runs = [fake.calls[i : i + len(expected)] for i in (0, len(expected))]
    roots = []
    for block in (
        [c for c in run if c[0].compile == mode] for run in runs for mode in ("none", "blocks")
    ):
        env = block[0][1]
        assert set(env) == CACHE_VARS
        assert all(e == env for _, e, _ in block), "a mode's scenarios share one cache"
        # In order: cold finds its caches empty, every later scenario what those before it left.
        for i, (_, _, held) in enumerate(block):
            assert held == [[f"from-scenario-{j}" for j in range(i)]] * len(CACHE_VARS)
        (root,) = {Path(v).parent for v in env.values()}
        roots.append(root)
    # Fresh: a root of its own for each mode of each run, deleted when the case ends.
    assert len(set(roots)) == len(roots) == 2 * len(suite.MODES)
    assert not any(root.exists() for root in roots)
