"""Where a parity case's model comes from: the Hugging Face zoo, the synthetic matrix, or a factory.

A case names its model by `source`:

- `hf`: `model` is a transformers model type, built tiny by `trainready.models.hf`;
- `synthetic`: `config` is a synthetic-matrix config, built by `trainready.models.synthetic`;
- `factory`: `factory` is "package.module:function", called as `function(seed)`; it returns an
  `nn.Module` whose forward(input_ids [B, T]) returns logits [B, T, V]. Optional attributes on the
  module: `vocab_size` (default: V from a first forward), `seq_len` (default 32), `traits` (a dict
  of architecture traits), `aux_loss()` (added to the loss). This is how users point parity at
  their own models (`--set models=mypkg.models:tiny_llama`), and how the tests plant faults.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainready.core.context import Unsupported

DEFAULT_SEQ_LEN = 32


@dataclass
class Subject:
    """A model under test, in float32 on the CPU, with what the case needs to feed it."""

    model: nn.Module
    vocab_size: int
    seq_len: int
    traits: dict[str, str] = field(default_factory=dict)


def load_factory(path: str) -> Callable[[int], nn.Module]:
    """'package.module:function' -> the function."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"model factory {path!r}: expected 'package.module:function'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"model factory {path!r}: {module_name} has no {attr!r}") from None


def _from_hf(model_type: str, seed: int) -> Subject:
    from trainready.models import hf

    try:
        config = hf.tiny_config(model_type)
        model = hf.build(model_type, seed, config)
    except hf.BuildError as e:
        raise Unsupported(f"{model_type}: {e}") from None
    head = model.model.get_output_embeddings()
    if isinstance(head, nn.ModuleList):  # one head per codebook (musicgen)
        head = head[0]
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = int(head.weight.shape[0])
    vocab = min(vocab, int(getattr(text, "vocab_size", vocab) or vocab))
    return Subject(model, vocab, hf.SEQ_LEN, hf.traits(config))


def _from_synthetic(config: dict[str, Any], seed: int) -> Subject:
    from trainready.models import synthetic

    model = synthetic.build(config, seed)
    return Subject(model, synthetic.VOCAB_SIZE, synthetic.SEQ_LEN, synthetic.traits(config))


def _from_factory(path: str, seed: int) -> Subject:
    model = load_factory(path)(seed)
    seq_len = int(getattr(model, "seq_len", DEFAULT_SEQ_LEN))
    vocab = getattr(model, "vocab_size", None)
    if vocab is None:
        with torch.no_grad():
            vocab = model(torch.zeros(1, seq_len, dtype=torch.long)).shape[-1]
    return Subject(model, int(vocab), seq_len, dict(getattr(model, "traits", {}) or {}))


def load(params: dict[str, Any], seed: int) -> Subject:
    source = params["source"]
    if source == "unavailable":
        raise Unsupported(params["reason"])
    if source == "hf":
        subject = _from_hf(params["model"], seed)
    elif source == "synthetic":
        subject = _from_synthetic(params["config"], seed)
    elif source == "factory":
        subject = _from_factory(params["factory"], seed)
    else:
        raise ValueError(f"unknown model source {source!r}; valid: hf, synthetic, factory")
    subject.model.float().train()
    return subject


def declared_traits(params: dict[str, Any]) -> dict[str, str]:
    """Traits from a case's config alone, for a model that could not be built (so an unbuildable
    MoE still counts among the MoE models); {} when even the config cannot say."""
    try:
        if params.get("source") == "hf":
            from trainready.models import hf

            return hf.traits(hf.model_class(params["model"]).config_class())
        if params.get("source") == "synthetic":
            from trainready.models import synthetic

            return synthetic.traits(params["config"])
    except Exception:  # noqa: BLE001 - a config that does not even construct has no traits
        return {}
    return {}


def aux_loss(model: nn.Module) -> torch.Tensor | float:
    """The model's auxiliary loss of its last forward (MoE balancing), 0 when it has none."""
    fn = getattr(model, "aux_loss", None)
    return fn() if callable(fn) else 0.0


def after_step(model: nn.Module) -> None:
    """Per-step model upkeep outside autograd (aux-loss-free MoE bias updates)."""
    fn = getattr(model, "update_moe_bias", None)
    if callable(fn):
        fn()
