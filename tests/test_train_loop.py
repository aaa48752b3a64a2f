"""The training loop: synthetic data, the spec, one tiny run in this process, bf16 parameters with
fp32 master weights, and FSDP2 on two CPU ranks giving the losses of one process."""

from __future__ import annotations

import pytest
import torch

from trainready.config import ConfigError
from trainready.models.qwen3 import qwen3_config
from trainready.probes.flops import training_flops_per_token
from trainready.probes.numerics import loss_curve_compare
from trainready.suites.train import run_ranks, run_single
from trainready.training import (
    Fp32Master,
    TrainSpec,
    failure_kind,
    rank_slice,
    synthetic_tokens,
    train,
)


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


def test_fsdp2_on_two_cpu_ranks_matches_one_process(tmp_path):
    """Data parallel over two gloo ranks, each with half the global batch, gives the loss curve of
    one process that sees the whole batch (fp32, so the only difference is summation order)."""
    spec = TrainSpec(seq_len=16, batch_size=4, steps=4, dtype="fp32", lr=1e-2)
    one = run_single(spec, {}, tmp_path / "one", timeout_s=300)
    two = run_ranks(spec, 2, None, {}, timeout_s=300)
    assert one.record is not None, one.error
    assert two.record is not None, f"{two.error}\n{two.detail}"
    assert two.record["world_size"] == 2 and one.record["world_size"] == 1
    verdict = loss_curve_compare(one.record["losses"], two.record["losses"], rel_tol=1e-4)
    assert verdict["ok"], verdict
    # The loss moved, so the gradients (reduce-scattered across ranks) took part.
    assert one.record["losses"][0] != one.record["losses"][-1]


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
    from trainready.models.qwen3 import Qwen3, num_params

    r = train(TrainSpec(model="debug-moe", seq_len=16, batch_size=2, steps=2, dtype="fp32"))
    model = Qwen3(qwen3_config("debug-moe"))
    assert r["params"] == num_params(model, exclude_embedding=True, active=True)
    assert r["params"] < num_params(model, exclude_embedding=True)
    assert r["finite"]
