"""op_db, imported in a worker with its side effects undone, and how each entry is judged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from trainready.suites.ops import database

CHECK = """
import json, os, warnings, torch
before = (dict(os.environ), len(warnings.filters))
from trainready.suites.ops import database
ops = database.load()
print(json.dumps({
    "entries": len(ops),
    "frozen": torch.backends.flags_frozen(),
    "env_same": dict(os.environ) == before[0],
    "filters_same": len(warnings.filters) == before[1],
}))
"""


def test_loading_op_db_leaves_the_process_as_it_was():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["entries"] > 500
    assert state == {**state, "frozen": False, "env_same": True, "filters_same": True}


@pytest.fixture(scope="module")
def ops():
    return database.load()


def test_judging_reads_op_dbs_marks_for_the_cpu_comparison(ops):
    f32 = torch.float32
    assert database.judging(ops["add"], "emu", f32) == ("numerics", "")
    assert database.judging(ops["special.zeta"], "emu", f32)[0] == "reference_invalid"
    how, why = database.judging(ops["bernoulli"], "emu", f32)
    assert how == "invariants" and "non-deterministic" in why
    assert database.judging(ops["linalg.svd"], "emu", f32)[0] == "invariants"
    # `mode` is skipped for cuda in fp32 only: not for another device
    assert "Skipped!" in database.compare_cpu_marks(ops["mode"], "cuda", f32)
    assert database.compare_cpu_marks(ops["mode"], "emu", f32) == []


def test_describe_reads_the_cpus_dtypes(ops):
    add = database.describe("add", ops["add"])
    assert add["autograd"] and {"fp32", "bf16", "fp64"} <= set(add["dtypes"])
    assert add["inplace"] and add["out"]
    assert database.entry_name("normal", "in_place") == "normal(in_place)"


class _Generatorless:
    """A young backend's device module: it has no generator state to save."""

    restored = None

    def get_rng_state(self):
        raise RuntimeError("emu has no generator")

    def set_rng_state(self, state):
        self.restored = state


class _Seeded(_Generatorless):
    def get_rng_state(self):
        return "accelerator state"


def _as_current_accelerator(monkeypatch, module):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("meta")
    )
    monkeypatch.setattr(torch, "get_device_module", lambda device_type: module)


def _draw_inside_frozen_state() -> tuple[torch.Tensor, torch.Tensor]:
    """(what the CPU generator gives after the block, what it would have given without it)."""
    torch.manual_seed(7)
    untouched = torch.rand(3)
    torch.manual_seed(7)
    with database.freeze_rng_state():
        torch.manual_seed(123)  # what op_db's random wrappers do inside it
        torch.rand(3)
    return torch.rand(3), untouched


def test_random_ops_run_beside_an_accelerator_without_generator_state(ops, monkeypatch):
    import torch.testing._utils as torch_utils

    # op_db's random wrappers look `freeze_rng_state` up in torch's modules: load() swapped it
    assert torch_utils.freeze_rng_state is database.freeze_rng_state
    _as_current_accelerator(monkeypatch, _Generatorless())
    after, untouched = _draw_inside_frozen_state()  # torch's own helper raises here
    assert torch.equal(after, untouched)


def test_an_accelerators_generator_state_is_still_restored(monkeypatch):
    seeded = _Seeded()
    _as_current_accelerator(monkeypatch, seeded)
    after, untouched = _draw_inside_frozen_state()
    assert torch.equal(after, untouched)
    assert seeded.restored == "accelerator state"
