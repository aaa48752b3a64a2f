"""A memory metric the installed torch or the backend cannot give is reported as unavailable, with
the reason, never dropped without a word (an older torch lacks some of torch.accelerator's memory
API; a backend may raise for what it does not implement)."""

from __future__ import annotations

import pytest
import torch

from trainready.device import memory_stats

# Any accelerator type: the torch.accelerator functions are replaced, so none need be present.
DEVICE = "cuda:0"
APIS = ("memory_allocated", "memory_reserved", "max_memory_allocated", "get_memory_info")


@pytest.fixture
def accelerator(monkeypatch):
    """torch.accelerator's memory queries answering fixed numbers; tests take some away."""
    answers = {
        "memory_allocated": lambda dev: 1000,
        "memory_reserved": lambda dev: 2000,
        "max_memory_allocated": lambda dev: 1500,
        "get_memory_info": lambda dev: (7000, 8000),
    }
    for name, fn in answers.items():
        monkeypatch.setattr(torch.accelerator, name, fn)
    return monkeypatch


def test_every_metric_known_has_no_unavailable_entry(accelerator):
    assert memory_stats(DEVICE) == {
        "allocated": 1000,
        "reserved": 2000,
        "peak_allocated": 1500,
        "total": 8000,
        "source": "allocator",
    }


def test_an_api_this_torch_lacks_is_unavailable_with_the_reason(accelerator):
    accelerator.delattr(torch.accelerator, "memory_reserved")
    stats = memory_stats(DEVICE)
    assert "reserved" not in stats
    assert stats["unavailable"] == {
        "reserved": f"torch {torch.__version__} has no torch.accelerator.memory_reserved"
    }
    # The metrics the other queries give are still there.
    assert (stats["allocated"], stats["peak_allocated"], stats["total"]) == (1000, 1500, 8000)


def test_a_query_the_backend_refuses_is_unavailable_with_its_error(accelerator):
    def refuses(dev):
        raise RuntimeError("getMemoryInfo is not implemented for this backend\nC++ frames...")

    accelerator.setattr(torch.accelerator, "get_memory_info", refuses)
    stats = memory_stats(DEVICE)
    assert "total" not in stats
    why = stats["unavailable"]["total"]
    assert "refuses" in why and "RuntimeError" in why
    assert why.endswith("getMemoryInfo is not implemented for this backend")  # first line only


def test_with_no_memory_api_at_all_every_reason_is_kept(accelerator):
    for name in APIS:
        accelerator.delattr(torch.accelerator, name)
    stats = memory_stats(DEVICE)
    assert stats is not None  # not None: the reasons would be lost with it
    assert stats["source"] == "allocator"
    assert set(stats["unavailable"]) == {"allocated", "reserved", "peak_allocated", "total"}
    assert all("has no torch.accelerator." in why for why in stats["unavailable"].values())


def test_the_train_report_says_which_memory_metric_was_unavailable_and_why():
    from trainready.core.case import Case, Result
    from trainready.reporting.sections.train import clocks_table

    why = "torch 2.13.0 has no torch.accelerator.max_memory_allocated"
    scenario = {
        "first_step_s": 1.0,
        "step_s": 0.1,
        "peak_memory_bytes": None,
        "memory_source": "torch.accelerator",
        "memory_unavailable": {"peak_allocated": why},
    }
    diagnostics = {"scenarios": {"eager": {"cold": scenario}}}
    table = clocks_table(Result(Case("train", "t", {}), "pass", {}, diagnostics), "t")
    assert f"unavailable: peak_allocated: {why}" in table.caption
