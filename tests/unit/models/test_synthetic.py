"""The synthetic architecture matrix: every variant builds and trains in fp32, float64 and bf16
autocast, every axis value changes the model, masks hold, and preset names are stable."""

from __future__ import annotations

import copy
import functools
import json
import re

import pytest
import torch
import torch.nn.functional as F

from tests.unit.models.test_blocks import one_thread  # noqa: F401  (autouse fixture)
from trainready.core.config import ConfigError
from trainready.models import synthetic
from trainready.models.blocks import num_params
from trainready.models.synthetic import (
    AXES,
    BASE,
    SEQ_LEN,
    VOCAB_SIZE,
    build,
    example_input,
    traits,
    variants,
)

ONE_AXIS = variants("quick")


def _float64(config: dict) -> torch.nn.Module:
    return build(config).double()


@pytest.mark.parametrize(("name", "config"), ONE_AXIS, ids=[n for n, _ in ONE_AXIS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_variant_trains_with_finite_gradients_everywhere(name, config, dtype):
    # bfloat16: fp32 weights under CPU autocast, as mixed-precision training runs
    model = build(config).to(torch.float32 if dtype == torch.bfloat16 else dtype)
    ids = example_input()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
        loss = loss + model.aux_loss()
    assert logits.shape == (2, SEQ_LEN, VOCAB_SIZE)
    assert logits.dtype == dtype
    assert torch.isfinite(logits).all()
    loss.backward()
    for pname, param in model.named_parameters():
        assert param.grad is not None, pname
        assert torch.isfinite(param.grad).all(), pname
        assert param.grad.abs().sum() > 0, f"{pname} gets no gradient"


# How each axis value changes the base model's parameters: (added, removed, reshaped), names
# without the layer index. A value not listed keeps the base's parameters, shapes and all.
PARAMETER_CHANGES: dict[str, tuple[set[str], set[str], set[str]]] = {
    "norm=layernorm": ({"attention_norm.bias", "ffn_norm.bias", "norm.bias"}, set(), set()),
    "norm=rmsnorm+qk_norm": ({"attention.q_norm.weight", "attention.k_norm.weight"}, set(), set()),
    "norm=rmsnorm/sandwich": ({"post_attention_norm.weight", "post_ffn_norm.weight"}, set(), set()),
    "norm=layernorm/post": ({"attention_norm.bias", "ffn_norm.bias", "norm.bias"}, set(), set()),
    "mlp=gelu": (set(), {"feed_forward.w3.weight"}, set()),  # not gated: no up projection
    "mlp=relu2": (set(), {"feed_forward.w3.weight"}, set()),
    **{
        f"moe={moe}": (
            {"feed_forward.router.weight", *(f"feed_forward.experts.w{i}" for i in (1, 2, 3))}
            | extra,
            {f"feed_forward.w{i}.weight" for i in (1, 2, 3)},
            set(),
        )
        for moe, extra in (
            ("topk", set()),
            ("topk+bias", set()),
            ("shared+routed", {f"feed_forward.shared_expert.w{i}.weight" for i in (1, 2, 3)}),
        )
    },
    "attention=gqa": (set(), set(), {"attention.wk.weight", "attention.wv.weight"}),
    "attention=mqa": (set(), set(), {"attention.wk.weight", "attention.wv.weight"}),
    "attention=mla": (
        {f"attention.{n}.weight" for n in ("wq_a", "wq_b", "wkv_a", "wkv_b", "q_norm", "kv_norm")},
        {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight"},
        set(),
    ),
    "attention=sinks": ({"attention.sinks"}, set(), set()),
    "position=learned": ({"pos_embeddings.weight"}, set(), set()),
    "embeddings=tied": (set(), {"output.weight"}, set()),  # the output reuses the embedding
}
KV_HEADS = {"attention=gqa": 2, "attention=mqa": 1}  # of 4 query heads, head_dim 16


def _shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """Parameter shapes by name, the layer index taken out (every layer must agree)."""
    out: dict[str, tuple[int, ...]] = {}
    for name, param in model.named_parameters():
        key = re.sub(r"^layers\.\d+\.", "", name)
        assert out.setdefault(key, tuple(param.shape)) == tuple(param.shape), name
    return out


@functools.cache
def _built(name: str) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """(parameters, logits, balancing loss) of a one-axis variant in float64, from the seed."""
    model = _float64(dict(ONE_AXIS)[name])
    with torch.no_grad():
        logits = model(example_input())
        aux = torch.as_tensor(model.aux_loss(), dtype=torch.float64)
    return {n: p.detach() for n, p in model.named_parameters()}, logits, aux


def _same_parameters(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)


@pytest.mark.parametrize(("name", "config"), ONE_AXIS[1:], ids=[n for n, _ in ONE_AXIS[1:]])
def test_every_axis_value_changes_the_model(name, config):
    base, variant = _shapes(_float64(BASE)), _shapes(_float64(config))
    added = set(variant) - set(base)
    removed = set(base) - set(variant)
    reshaped = {k for k in set(base) & set(variant) if base[k] != variant[k]}
    assert (added, removed, reshaped) == PARAMETER_CHANGES.get(name, (set(), set(), set()))
    if name in KV_HEADS:
        assert variant["attention.wk.weight"] == (KV_HEADS[name] * 16, 64)
    # Every variant with the same parameters (the base among them) gets the same weights from the
    # same seed, so what it computes -- logits or balancing loss -- must differ from each one's.
    params, logits, aux = _built(name)
    twins = [n for n, _ in ONE_AXIS if n != name and _same_parameters(_built(n)[0], params)]
    assert name in PARAMETER_CHANGES or "base" in twins
    for twin in twins:
        twin_params, twin_logits, twin_aux = _built(twin)
        assert all(torch.equal(params[k], twin_params[k]) for k in params), twin
        assert (logits - twin_logits).abs().max() > 1e-9 or (aux - twin_aux).abs() > 1e-9, twin


def test_moe_variants_route_to_k_of_e_experts():
    model = build({"moe": "topk"})
    model(example_input())
    for layer, load in zip(model.layers, model.tokens_per_expert(), strict=True):
        moe = layer.feed_forward
        assert (moe.num_experts, moe.top_k) == (4, 2)
        assert load.sum() == 2 * SEQ_LEN * 2  # every token of the batch, twice
    assert model.aux_loss() > 0
    copy.deepcopy(model)  # the last forward's graph tensors do not block copying the model
    assert build({"moe": "shared+routed"}).layers[0].feed_forward.shared_expert is not None
    balanced = build({"moe": "topk+bias"})
    balanced(example_input())
    assert balanced.aux_loss() == 0
    balanced.update_moe_bias(rate=0.1)
    assert balanced.layers[0].feed_forward.expert_bias.abs().sum() > 0


@pytest.mark.parametrize("attention", AXES["attention"])
@pytest.mark.parametrize("position", ["rope", "alibi", "learned"])
def test_future_tokens_do_not_change_past_logits(attention, position):
    model = _float64({"attention": attention, "position": position})
    ids = example_input()
    changed = ids.clone()
    changed[:, 20] = (ids[:, 20] + 1) % VOCAB_SIZE
    before, after = model(ids), model(changed)
    torch.testing.assert_close(after[:, :20], before[:, :20], rtol=0, atol=1e-12)
    assert (after[:, 20:] - before[:, 20:]).abs().max() > 1e-6


def test_sliding_window_masks_distant_tokens():
    window, layers = synthetic.WINDOW, 2
    reach = layers * (window - 1)  # each layer looks window - 1 positions further back
    ids = example_input()
    changed = ids.clone()
    changed[:, 0] = (ids[:, 0] + 1) % VOCAB_SIZE
    sliding = _float64({"attention": "sliding"})
    before, after = sliding(ids), sliding(changed)
    torch.testing.assert_close(after[:, reach + 1 :], before[:, reach + 1 :], rtol=0, atol=1e-12)
    assert (after[:, reach] - before[:, reach]).abs().max() > 1e-9
    # with a global layer in the stack, the first token reaches every position
    local_global = _float64({"attention": "local_global"})
    assert (local_global(changed)[:, -1] - local_global(ids)[:, -1]).abs().max() > 1e-9


def test_presets_and_names():
    quick = variants("quick")
    assert quick[0] == ("base", BASE)
    assert len(quick) == 1 + sum(len(v) - 1 for v in AXES.values())
    assert "attention=mla" in dict(quick)
    standard, full = variants("standard"), variants("full")
    assert len(standard) == len(quick) + 24 and len(full) == len(quick) + 96
    assert standard == variants("standard")  # stable across calls
    assert full[: len(standard)] == standard  # a smaller preset is a prefix of a larger one
    names = [n for n, _ in full]
    assert len(set(names)) == len(names)
    assert len({json.dumps(c, sort_keys=True) for _, c in full}) == len(full)
    assert names[len(quick)].startswith("combo-00:")
    name, config = standard[-1]
    assert name.startswith("combo-23:")
    assert name.split(":", 1)[1] == ",".join(f"{a}={v}" for a, v in config.items() if v != BASE[a])
    assert json.loads(json.dumps(full)) == [[n, c] for n, c in full]
    assert variants("standard", seed=1) != standard
    assert variants("standard", seed=1) == variants("standard", seed=1)


def test_build_is_seeded():
    a, b, c = build(BASE, seed=3), build(BASE, seed=3), build(BASE, seed=4)
    ids = example_input()
    assert torch.equal(a(ids), b(ids))
    assert not torch.equal(a(ids), c(ids))


def test_traits_and_config_errors():
    assert traits({"attention": "mla"}) == {**BASE, "attention": "mla"}
    assert set(traits(BASE)) == {"norm", "mlp", "moe", "attention", "position", "embeddings"}
    with pytest.raises(ConfigError, match="valid: mha, gqa, mqa, mla"):
        build({"attention": "flash"})
    with pytest.raises(ConfigError, match="valid: norm, mlp"):
        traits({"normalization": "rmsnorm"})
    with pytest.raises(ConfigError, match="dict of axis"):
        build("attention=mla")
    with pytest.raises(ConfigError, match="valid: smoke, quick, standard, full"):
        variants("huge")


def test_tied_embeddings_share_one_matrix():
    tied, untied = build({"embeddings": "tied"}), build(BASE)
    assert tied.output.weight is tied.tok_embeddings.weight
    assert num_params(untied) - num_params(tied) == VOCAB_SIZE * 64


def test_a_combination_compiles_like_eager():
    # MLA through the explicit softmax path (ALiBi), a routed MoE with its balancing loss, and
    # sandwich norms, compiled whole-graph (no graph breaks, no host syncs)
    config = {"norm": "rmsnorm/sandwich", "moe": "topk", "attention": "mla", "position": "alibi"}
    torch._dynamo.reset()
    model = build(config)
    ids = example_input()
    expected, expected_aux = model(ids), model.aux_loss()
    model.layers[1] = torch.compile(model.layers[1], backend="eager", fullgraph=True)
    got = model(ids)
    (got.sum() + model.aux_loss()).backward()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.aux_loss(), expected_aux)
    assert model.layers[1].feed_forward.router.weight.grad.abs().sum() > 0
