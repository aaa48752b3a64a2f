"""The training loop: synthetic data, the spec, one tiny run in this process, bf16 parameters with
fp32 master weights, and FSDP2 on two CPU ranks (fp32 and bf16 parameters) sharding every
parameter and giving the losses of one process."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trainready.core.config import ConfigError
from trainready.metrics.flops import training_flops_per_token
from trainready.models.qwen3 import Qwen3, qwen3_config
from trainready.probes.numerics import loss_curve_compare
from trainready.suites.train.loop import (
    Fp32Master,
    TrainSpec,
    failure_kind,
    rank_slice,
    synthetic_tokens,
    train,
)
from trainready.suites.train.processes import combine_ranks
from trainready.suites.train.suite import PARITY_REL_TOL


def test_synthetic_tokens_are_seeded_progressions_and_ranks_split_the_batch():
    a = synthetic_tokens(seed=0, step=3, batch=4, seq_len=16, vocab=512)
    assert torch.equal(a, synthetic_tokens(0, 3, 4, 16, 512))
    assert not torch.equal(a, synthetic_tokens(0, 4, 4, 16, 512))
    assert a.shape == (4, 17) and a.min() >= 0 and a.max() < 512
    stride = (a[:, 1] - a[:, 0]) % 512
    assert torch.equal((a[:, 1:] - a[:, :-1]) % 512, stride[:, None].expand(4, 16))
    halves = [rank_slice(a, r, 2) for r in range(2)]
    assert torch.equal(torch.cat(halves), a)
    with pytest.raises(ConfigError, match="does not split"):
        rank_slice(a, 0, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"compile": "everything"}, "unknown compile"),
        ({"precision": "fp8"}, "unknown precision"),
        ({"steps": 1}, "steps must be >= 2"),
        ({"seq_len": 0}, "seq_len must be a positive integer"),
        ({"model": "gpt-17"}, "unknown Qwen3 size"),
        ({"model_overrides": {"mlp_activation": "swish9"}}, "unknown mlp_activation"),
        ({"steps": 3, "warmup": 2}, "warmup must leave a steady step"),
        ({"timing_s": -1.0}, "timing_s be >= 0"),
    ],
)
def test_spec_rejects_bad_input(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TrainSpec(**kwargs)


def test_spec_round_trips_through_json():
    spec = TrainSpec(model_overrides={"extra_norm": True}, compile="blocks", seq_len=32)
    assert TrainSpec.from_json(spec.to_json()) == spec
    assert spec.tokens_per_step == spec.batch_size * 32


def test_eager_run_in_process_measures_both_clocks():
    spec = TrainSpec(seq_len=16, batch_size=2, steps=4, dtype="fp32")
    r = train(spec)
    assert len(r["losses"]) == 4 and r["finite"]
    assert len(r["step_times_s"]) == 3 and all(t > 0 for t in r["step_times_s"])
    parts = r["first_step_phases"]
    assert set(parts) == {"setup_s", "forward_s", "backward_s", "optimizer_s"}
    assert r["first_step_s"] >= sum(parts.values()) * 0.99
    cfg = qwen3_config("debug")
    assert r["flops_per_token"] == training_flops_per_token(
        r["params"], cfg.num_layers, cfg.num_heads, cfg.head_dim, 16
    )
    assert r["compile"]["graph_breaks"] == 0 and r["compile"]["recompiles"] == 0
    # The same seed trains the same way: the run is reproducible, step for step.
    assert train(spec)["losses"] == r["losses"]


def test_steady_steps_go_on_past_the_planned_ones_only_within_their_budget(monkeypatch):
    """The sampler decides the steady steps: with no budget exactly the planned ones; with one,
    more until their median's interval concludes or the budget ends. Planted step times (a
    noisy then a quiet stream) make it exact; the losses kept are the planned steps' alone."""
    from trainready.suites.train import loop as training

    plain = train(TrainSpec(seq_len=8, batch_size=2, steps=4, dtype="fp32", warmup=1))
    assert len(plain["step_times_s"]) == 3 and plain["sampling"]["samples"] == 2
    # One warm-up, then the steady steps: noisy, then quiet.
    times = [iter([0.5, 1.0, 3.0, 0.2, 2.0] + [1.0] * 200)]

    class Planted:
        clock = "wall"

        def __init__(self, device):
            pass

        def start(self):
            pass

        def stop(self):
            return next(times[0])

    monkeypatch.setattr(training, "Timer", Planted)
    spec = TrainSpec(seq_len=8, batch_size=2, steps=4, dtype="fp32", warmup=1, timing_s=60.0)
    r = train(spec)
    v = r["sampling"]
    assert v["concluded"] and v["samples"] > 2 and len(r["step_times_s"]) == v["samples"] + 1
    assert len(r["losses"]) == 4 and r["finite"]
    # A budget spent by the first steady step still runs every planned one.
    times[0] = iter([0.5, 1.0, 30.0] + [10.0] * 10)
    short = train(dataclasses.replace(spec, timing_s=1e-6))
    assert len(short["step_times_s"]) == 3 and short["sampling"]["samples"] == 2


def test_bf16_params_keep_fp32_master_weights_and_state():
    layer = torch.nn.Linear(8, 8).to(torch.bfloat16)
    params = list(layer.parameters())
    master = Fp32Master(params)
    opt = torch.optim.AdamW(master.master, lr=0.1)
    layer(torch.randn(4, 8, dtype=torch.bfloat16)).sum().backward()
    master.load_grads()
    opt.step()
    master.store()
    for p, m in zip(params, master.master, strict=True):
        assert p.dtype == torch.bfloat16 and m.dtype == torch.float32
        assert torch.equal(p, m.to(torch.bfloat16))
    assert all(s["exp_avg"].dtype == torch.float32 for s in opt.state.values())


def test_bf16_params_run_trains():
    r = train(TrainSpec(seq_len=16, batch_size=2, steps=3, precision="bf16_params"))
    assert r["finite"] and len(r["losses"]) == 3


def test_failure_kind_tells_compile_from_run_and_oom():
    import torch._dynamo.exc as dynamo_exc

    assert failure_kind(dynamo_exc.Unsupported("no")) == "compile"
    assert failure_kind(RuntimeError("CUDA out of memory")) == "oom"
    assert failure_kind(ValueError("bad")) == "run"


# --- FSDP2 on two gloo ranks ---------------------------------------------------------------------
# Two precisions, each trained on two ranks (half the global batch each) and in one process that
# sees the whole batch: fp32, where only the summation order differs; and bf16 parameters, which
# FSDP casts from fp32 shards (its mixed-precision policy) and one process keeps as bf16 copies
# of fp32 masters, so the curves agree to the suite's bf16 parity tolerance.
FSDP_SPECS = {
    "fp32": TrainSpec(seq_len=16, batch_size=4, steps=4, dtype="fp32", lr=1e-2),
    "bf16_params": TrainSpec(seq_len=16, batch_size=4, steps=4, precision="bf16_params", lr=1e-2),
}
FSDP_TOL = {"fp32": 1e-4, "bf16_params": PARITY_REL_TOL["bf16"]}
WORLD = 2


def rank_train_with_layout(env, spec: dict) -> dict:
    """`rank_train`, plus how FSDP2 laid out every parameter on this rank (`layout`), read as
    soon as the loop's own `apply_fsdp` has sharded the model."""
    from trainready.suites.train import loop as training

    layout: dict[str, dict] = {}
    real = training.apply_fsdp

    def apply_and_record(model, train_spec, device):
        real(model, train_spec, device)
        layout.update(_layout(model))

    training.apply_fsdp = apply_and_record  # this rank only, for this call
    try:
        return {**training.rank_train(env, spec), "layout": layout}
    finally:
        training.apply_fsdp = real


def _layout(model: torch.nn.Module) -> dict[str, dict]:
    """name -> how this rank stores the parameter: placements as [kind, dim] (Shard(0) reads
    ["Shard", 0]; str() of a placement varies between torch versions), mesh size, global and
    local shape, local dtype. A plain tensor reads as no placements, all of it local."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in model.named_parameters():
        placements = getattr(p, "placements", ())
        local = p.to_local() if isinstance(p, DTensor) else p
        out[name] = {
            "placements": [[type(x).__name__, getattr(x, "dim", None)] for x in placements],
            "mesh_size": p.device_mesh.size() if placements else 1,
            "global": list(p.shape),
            "local": list(local.shape),
            "dtype": str(local.dtype),
        }
    return out


@pytest.fixture(scope="module")
def fsdp_runs() -> dict[str, tuple[dict, list[dict]]]:
    """precision -> (the one-process record, the two ranks' records): both precisions on the same
    pool of ranks, so they pay one start-up."""
    from trainready.core.launch import RankPool

    runs = {}
    with RankPool(WORLD, device="cpu") as pool:
        for name, spec in FSDP_SPECS.items():
            res = pool.run(rank_train_with_layout, {"spec": spec.to_json()}, timeout_s=300)
            assert res.ok, f"{res.first_error}\n{res.tracebacks}"
            runs[name] = (train(spec), res.per_rank)
    return runs


@pytest.mark.parametrize("precision", list(FSDP_SPECS))
@pytest.mark.slow
def test_fsdp2_on_two_cpu_ranks_matches_one_process(fsdp_runs, precision):
    """Data parallel over two gloo ranks gives the loss curve of one process."""
    one, ranks = fsdp_runs[precision]
    two = combine_ranks(ranks)
    assert two["world_size"] == WORLD and one["world_size"] == 1
    verdict = loss_curve_compare(one["losses"], two["losses"], rel_tol=FSDP_TOL[precision])
    assert verdict["ok"], verdict
    # The loss moved, so the gradients (reduce-scattered across ranks) took part.
    assert one["losses"][0] != one["losses"][-1]


@pytest.mark.parametrize("precision", list(FSDP_SPECS))
@pytest.mark.slow
def test_fsdp2_shards_every_parameter_in_half_along_dim_0(fsdp_runs, precision):
    """Not replicated: every parameter is a DTensor split Shard(0) over both ranks, each rank
    holding half of it, and kept in fp32 (bf16 is FSDP's compute copy, not what it stores)."""
    _, ranks = fsdp_runs[precision]
    with torch.device("meta"):
        names = {n for n, _ in Qwen3(qwen3_config(FSDP_SPECS[precision].model)).named_parameters()}
    for rank in ranks:
        assert set(rank["layout"]) == names
        for name, p in rank["layout"].items():
            assert p["placements"] == [["Shard", 0]] and p["mesh_size"] == WORLD, name
            assert p["global"][0] % WORLD == 0, name  # so half is exact
            assert p["local"] == [p["global"][0] // WORLD, *p["global"][1:]], name
            assert p["dtype"] == "torch.float32", name


def test_checkpointing_and_whole_model_compile_keep_the_eager_losses():
    """aot_eager traces and partitions like Inductor but runs the graphs with eager kernels: the
    wrappers (activation checkpointing, whole-model compile) must not change a single loss."""
    base = {"seq_len": 16, "batch_size": 2, "steps": 3, "dtype": "fp32"}
    eager = train(TrainSpec(**base))
    wrapped = train(
        TrainSpec(
            **base, activation_checkpointing=True, compile="model", compile_backend="aot_eager"
        )
    )
    assert wrapped["compile"]["graphs"] >= 1 and wrapped["compile"]["graph_breaks"] == 0
    assert loss_curve_compare(eager["losses"], wrapped["losses"], rel_tol=1e-5)["ok"]


def test_moe_flops_count_the_active_experts():
    from trainready.models.qwen3 import num_params

    r = train(TrainSpec(model="debug-moe", seq_len=16, batch_size=2, steps=2, dtype="fp32"))
    model = Qwen3(qwen3_config("debug-moe"))
    assert r["params"] == num_params(model, exclude_embedding=True, active=True)
    assert r["params"] < num_params(model, exclude_embedding=True)
    assert r["finite"]
    # Routed, so those FLOPs are the ones the step does; the record says which GEMM ran.
    assert r["moe_dispatch"] == "routed: grouped_mm"


def test_moe_dispatch_follows_dtype_and_compile():
    from trainready.models.moe import GROUPED_MM, LOOP, implementation

    cpu = torch.device("cpu")
    # torch's grouped GEMM: no float64; compiled, bf16 only (torch 2.13's meta kernel).
    assert implementation(cpu, torch.float64, compiling=False) == LOOP
    assert implementation(cpu, torch.float32, compiling=True) == LOOP
    assert implementation(cpu, torch.bfloat16, compiling=True) == GROUPED_MM
    dense = train(TrainSpec(model="debug", seq_len=8, batch_size=2, steps=2, dtype="fp32"))
    assert dense["moe_dispatch"] is None
