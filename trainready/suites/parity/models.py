"""Where a parity case's model comes from: the Hugging Face zoos, timm, diffusers, the synthetic
matrix, or a factory.

A case names its model by `source`:

- `hf`: `model` is a transformers causal-LM type, built tiny by `trainready.models.zoo.hf_causal`;
- `hf_task`: `model` is any other transformers type with a task head, built tiny with the head
  users train most by `trainready.models.zoo.hf_tasks` (a `TaskModel`);
- `timm`, `diffusers`: `model` names a tiny model of `trainready.models.zoo.timm` /
  `trainready.models.zoo.diffusers` (a `TaskModel`);
- `synthetic`: `config` is a synthetic-matrix config, built by `trainready.models.synthetic`;
- `factory`: `factory` is "package.module:function", called as `function(seed)`; it returns a
  `TaskModel`, or an `nn.Module` whose forward(input_ids [B, T]) returns logits [B, T, V]. Optional attributes on the
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
from trainready.models.task import TaskModel

DEFAULT_SEQ_LEN = 32


@dataclass
class Subject:
    """A model under test, in float32 on the CPU, with what the case needs to feed it: a causal
    LM's vocabulary and sequence length, or nothing for a `TaskModel` (it makes its own batch)."""

    model: nn.Module
    vocab_size: int
    seq_len: int
    traits: dict[str, str] = field(default_factory=dict)
    modality: str = "text-decoder"

    @property
    def is_task(self) -> bool:
        return isinstance(self.model, TaskModel)


def _modality(model_type: str, default: str) -> str:
    """The families table's modality of a transformers type, where that table exists."""
    try:
        from trainready.models.zoo.families import modality
    except ImportError:
        return default
    return modality(model_type)


def hf_modality(model_type: str) -> str:
    """The modality of a transformers type: the families table's, else text-decoder for a
    causal LM and its head's for a task type."""
    from trainready.models.zoo import hf_causal as hf
    from trainready.models.zoo import hf_tasks

    if model_type in hf.model_types():
        return _modality(model_type, "text-decoder")
    try:
        return _modality(model_type, hf_tasks.head_modality(model_type))
    except hf.BuildError:  # a type of neither zoo: its case says why
        return "unknown"


def _extra_traits(config: Any) -> dict[str, str]:
    """The families table's extra traits of a config (ssm, conv, cross-attention...), if any."""
    try:
        from trainready.models.zoo.families import extra_traits
    except ImportError:
        return {}
    return dict(extra_traits(config))


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
    from trainready.models.zoo import hf_causal as hf

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
    traits = hf.traits(config) | _extra_traits(config)
    return Subject(model, vocab, hf.SEQ_LEN, traits, _modality(model_type, "text-decoder"))


def _from_hf_task(model_type: str, seed: int) -> Subject:
    from trainready.models.zoo import hf_causal as hf
    from trainready.models.zoo import hf_tasks

    try:
        model = hf_tasks.build(model_type, seed)
    except hf.BuildError as e:
        raise Unsupported(f"{model_type}: {e}") from None
    traits = model.traits | _extra_traits(model.model.config)
    return Subject(model, 0, 0, traits, _modality(model_type, model.modality))


# The zoos of other libraries: source -> (module, the pip extra it needs).
ZOOS = {"timm": "trainready.models.zoo.timm", "diffusers": "trainready.models.zoo.diffusers"}


def zoo_module(source: str) -> Any:
    """The zoo module of a library source; ImportError (with the reason) when the library or the
    zoo is not installed."""
    return importlib.import_module(ZOOS[source])


def _from_zoo(source: str, name: str, seed: int) -> Subject:
    try:
        model = zoo_module(source).build(name, seed)
    except ImportError as e:
        raise Unsupported(f"the {source} zoo needs {source}: {e}") from None
    return Subject(model, 0, 0, dict(model.traits or {}), model.modality)


def _from_synthetic(config: dict[str, Any], seed: int) -> Subject:
    from trainready.models import synthetic

    model = synthetic.build(config, seed)
    return Subject(model, synthetic.VOCAB_SIZE, synthetic.SEQ_LEN, synthetic.traits(config))


def _from_factory(path: str, seed: int) -> Subject:
    model = load_factory(path)(seed)
    if isinstance(model, TaskModel):  # it makes its own batch and computes its own loss
        return Subject(model, 0, 0, dict(model.traits or {}), model.modality)
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
    elif source == "hf_task":
        subject = _from_hf_task(params["model"], seed)
    elif source in ZOOS:
        subject = _from_zoo(source, params["model"], seed)
    elif source == "synthetic":
        subject = _from_synthetic(params["config"], seed)
    elif source == "factory":
        subject = _from_factory(params["factory"], seed)
    else:
        valid = ", ".join(["hf", "hf_task", *ZOOS, "synthetic", "factory"])
        raise ValueError(f"unknown model source {source!r}; valid: {valid}")
    subject.model.float().train()
    return subject


def declared_traits(params: dict[str, Any]) -> dict[str, str]:
    """Traits from a case's config alone, for a model that could not be built (so an unbuildable
    MoE still counts among the MoE models); {} when even the config cannot say."""
    try:
        if params.get("source") == "hf":
            from trainready.models.zoo import hf_causal as hf

            return hf.traits(hf.model_class(params["model"]).config_class())
        if params.get("source") == "hf_task":
            from trainready.models.zoo import hf_causal as hf
            from trainready.models.zoo import hf_tasks

            _, name = hf_tasks.head(params["model"])
            return hf.traits(hf.import_class(name).config_class())
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
