"""Parity cases of one model share their CPU runs (suites/parity/cache.py), judged bit for bit the
same as when each computes its own."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from trainready.core.config import RunConfig
from trainready.core.context import CaseContext
from trainready.core.worker import execute_case
from trainready.probes.compile import FIRST_COMPILE_KEY
from trainready.suites.parity import cache as parity_cache
from trainready.suites.parity import suite as parity
from trainready.suites.parity.engine import Trace

OPTIONS = {"zoo": "synthetic", "steps": 4}


def _cases(variant: str = "base") -> dict[str, object]:
    cfg = RunConfig(["parity"], preset="quick", options=OPTIONS)
    found = {c.params["mode"]: c for c in parity.cases(cfg) if c.params["model"] == variant}
    assert set(found) == {"eager", "compile"}
    return found


def _run(case, run_dir: Path | None):
    ctx = CaseContext("cpu", "fp32", 600.0, preset="quick", options=OPTIONS)
    ctx.run_dir = None if run_dir is None else str(run_dir)
    return execute_case(parity, case, ctx)


def _judged(value):
    """A result's diagnostics or metrics less what is timed (keys ending in _s, and whether the
    compile was its process's first), and less the note of which runs were shared."""
    if isinstance(value, dict):
        return {
            k: _judged(v)
            for k, v in value.items()
            if not str(k).endswith("_s") and k not in ("shared_runs", FIRST_COMPILE_KEY)
        }
    if isinstance(value, list):
        return [_judged(v) for v in value]
    return value


def _same(a, b) -> None:
    assert a.status == b.status
    assert _judged(a.diagnostics) == _judged(b.diagnostics)
    assert _judged(a.metrics) == _judged(b.metrics)


@pytest.mark.parametrize("first", ["eager", "compile"])
def test_eager_and_compiled_cases_judge_the_same_with_shared_cpu_runs(tmp_path, first):
    """A synthetic variant's eager and compiled cases, each computing its own reference and CPU
    baseline, then sharing them (either case first): every stored diagnostic and metric but the
    timings is identical, and the second case did load both runs."""
    cases = _cases()
    alone = {mode: _run(c, None) for mode, c in cases.items()}
    assert alone["eager"].status == alone["compile"].status == "pass"
    assert "shared_runs" not in alone["eager"].diagnostics
    second = "compile" if first == "eager" else "eager"
    shared = {first: _run(cases[first], tmp_path)}
    files = tmp_path / "parity_shared"
    assert sorted(p.suffix for p in files.iterdir()) == [".pt", ".pt"]
    shared[second] = _run(cases[second], tmp_path)
    for mode in cases:
        _same(alone[mode], shared[mode])
    assert "shared_runs" not in shared[first].diagnostics
    assert shared[second].diagnostics["shared_runs"] == (
        ["reference", "cpu baseline"] if second == "compile" else ["reference", "device run"]
    )
    assert not list(files.iterdir())  # their last user loaded them: deleted


def test_the_share_switch_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.setenv(parity_cache.ENV, "0")
    cases = _cases()
    _run(cases["eager"], tmp_path)
    assert not (tmp_path / "parity_shared").exists()


def test_nothing_is_written_when_no_other_case_needs_it(tmp_path):
    """--set modes=eager: the model's one case computes its runs and writes none."""
    case = _cases()["eager"]
    ctx = CaseContext("cpu", "fp32", 600.0, preset="quick", options={**OPTIONS, "modes": "eager"})
    ctx.run_dir = str(tmp_path)
    assert execute_case(parity, case, ctx).status == "pass"
    assert not (tmp_path / "parity_shared").exists()


# --- the cache itself -----------------------------------------------------------------------------


def _trace(x: float) -> Trace:
    t = torch.tensor([x])
    return Trace(t, t, {"w": t}, {"w": t}, [x, x / 2], 0.1, 0.2)


def test_a_second_case_waits_for_the_run_in_progress_and_loads_it(tmp_path):
    calls: list[str] = []
    started = threading.Event()

    def slow():
        calls.append("holder")
        started.set()
        time.sleep(0.5)
        return _trace(1.0)

    def fast():
        calls.append("waiter")
        return _trace(2.0)

    out = {}
    holder = threading.Thread(
        target=lambda: out.update(a=parity_cache._shared(tmp_path, "k", slow))
    )
    holder.start()
    started.wait()
    out["b"] = parity_cache._shared(tmp_path, "k", fast)
    holder.join()
    assert calls == ["holder"]
    assert out["a"][1] is False and out["b"][1] is True
    assert torch.equal(out["b"][0].loss, torch.tensor([1.0])) and out["b"][0].curve == [1.0, 0.5]
    assert not (tmp_path / "k.lock").exists()


def test_a_holder_that_fails_leaves_the_waiter_to_compute(tmp_path):
    started = threading.Event()

    def broken():
        started.set()
        time.sleep(0.3)
        raise RuntimeError("model raised")

    def run_holder():
        with pytest.raises(RuntimeError):
            parity_cache._shared(tmp_path, "k", broken)

    holder = threading.Thread(target=run_holder)
    holder.start()
    started.wait()
    trace, loaded = parity_cache._shared(tmp_path, "k", lambda: _trace(3.0))
    holder.join()
    assert loaded is False and trace.curve == [3.0, 1.5]
    assert (tmp_path / "k.pt").exists()


def test_a_lock_left_by_a_dead_worker_is_taken_over(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    import socket

    (tmp_path / "k.lock").write_text(f"{socket.gethostname()} {dead}")
    t0 = time.monotonic()
    trace, loaded = parity_cache._shared(tmp_path, "k", lambda: _trace(4.0))
    assert loaded is False and trace.curve == [4.0, 2.0]
    assert time.monotonic() - t0 < 5


def test_a_half_written_or_foreign_file_is_never_loaded(tmp_path):
    (tmp_path / "k.pt").write_bytes(b"PK\x03\x04 truncated")
    trace, loaded = parity_cache._shared(tmp_path, "k", lambda: _trace(5.0))
    assert loaded is False and trace.curve == [5.0, 2.5]
    # written whole under its own key; another key's file is not this run
    os.replace(tmp_path / "k.pt", tmp_path / "j.pt")
    trace, loaded = parity_cache._shared(tmp_path, "j", lambda: _trace(6.0))
    assert loaded is False and trace.curve == [6.0, 3.0]
    trace, loaded = parity_cache._shared(tmp_path, "j", lambda: _trace(7.0))
    assert loaded is True and trace.curve == [6.0, 3.0]
    assert not list(tmp_path.glob(".*.tmp"))


def test_only_eager_cpu_runs_are_shared():
    from trainready.suites.parity.engine import Spec

    assert parity_cache.shareable(Spec("cpu", "fp64", 3))
    assert not parity_cache.shareable(Spec("cpu", "fp32", 3, "inductor"))
    assert not parity_cache.shareable(Spec("cuda:0", "fp32", 3))


# --- the other repeated runs removed --------------------------------------------------------------


def test_recording_the_routing_leaves_the_device_run_as_it_is():
    """A routed eager case records its routing in its one device run (no second device run): the
    recorder must leave that run bit for bit a plain run, and its first step the ops probe's."""
    from trainready.models.synthetic import BASE
    from trainready.probes.routing import Routing
    from trainready.suites.parity.engine import Data, Spec, first_step, train
    from trainready.suites.parity.models import load

    params = {"source": "synthetic", "model": "moe", "config": {**BASE, "moe": "topk"}}
    subject = load(params, 0)
    data = Data.fixed(subject.vocab_size, subject.seq_len, 0)
    spec = Spec("cpu", "fp32", 3)
    recorder = Routing()
    with recorder:
        recorded = train(subject.model, data, spec)
    plain = train(subject.model, data, spec)
    assert recorder.log and recorded.curve == plain.curve
    for name, t in plain.named().items():
        assert torch.equal(recorded.named()[name], t), name
    probed = first_step(subject.model, data, spec)
    for name, t in probed.named().items():
        assert torch.equal(recorded.named()[name], t), name
