"""Model architecture specs: exact parameter counts for named models and HF config.json files.

A `ModelSpec` holds the numbers that decide a decoder-only transformer's parameter count and
training FLOPs: Llama-style dense (GQA, SwiGLU/GeGLU, RMSNorm, optional QK-norm and biases), MoE
(router, routed and shared experts, leading dense layers) and DeepSeek-style MLA attention.

Counting follows the modules as Hugging Face transformers and TorchTitan build them:

- attention: q, k, v, o projections (+ biases, + per-head-dim QK-norm weights, + gpt-oss sinks);
  MLA: q_a_proj, q_a_layernorm, q_b_proj (or one q_proj without a q LoRA rank),
  kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj;
- MLP: gate, up, down (SwiGLU and GeGLU have the same shapes);
- MoE: router weight (+ bias), routed experts, shared experts (one MLP of width
  moe_intermediate_size * num_shared_experts, as DeepSeek builds it);
- two RMSNorm weights per layer (four with Gemma's sandwich norms), a final norm, the input
  embedding and the output projection (one matrix when tied).

Not counted: buffers (rotary tables, DeepSeek's e_score_correction_bias, which HF and TorchTitan keep
as buffers) and DeepSeek-V3's multi-token-prediction module (the published 671B excludes it too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainready.core.config import ConfigError
from trainready.data import model_entries


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer. Sizes are HF config values; zero means "not present"."""

    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # for MLA: the query/key head dim, qk_nope_head_dim + qk_rope_head_dim
    intermediate_size: int  # dense MLP width (used by every layer of a dense model)
    tie_embeddings: bool = False
    qk_norm: bool = False
    attention_bias: bool = False  # biases on q, k, v and o (HF Llama's attention_bias, gpt-oss)
    qkv_bias: bool = False  # biases on q, k, v only (Qwen2)
    mlp_bias: bool = False  # biases on MLP and expert projections and on the router (gpt-oss)
    attention_sinks: bool = False  # one learned logit per head (gpt-oss)
    sandwich_norm: bool = False  # extra norms after attention and after the MLP (Gemma 2/3)
    # MoE
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_k_dense: int = 0  # leading layers with a dense MLP instead of MoE
    # MLA (DeepSeek-V3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        for field_name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "head_dim"):
            if getattr(self, field_name) < 1:
                raise ConfigError(f"model {self.name!r}: {field_name} must be >= 1")
        if self.is_moe:
            self._check_moe()
        elif self.intermediate_size < 1:
            raise ConfigError(f"model {self.name!r}: intermediate_size must be >= 1")
        if self.is_mla:
            self._check_mla()
        elif self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model {self.name!r}: num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )

    def _check_moe(self) -> None:
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise ConfigError(
                f"model {self.name!r}: experts_per_token must be in 1..num_experts "
                f"({self.num_experts}), got {self.experts_per_token}"
            )
        if self.moe_intermediate_size < 1:
            raise ConfigError(f"model {self.name!r}: moe_intermediate_size must be >= 1")
        if not 0 <= self.first_k_dense <= self.num_layers:
            raise ConfigError(f"model {self.name!r}: first_k_dense must be in 0..num_layers")
        if self.first_k_dense and self.intermediate_size < 1:
            raise ConfigError(f"model {self.name!r}: dense layers need intermediate_size >= 1")

    def _check_mla(self) -> None:
        if min(self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim) < 1:
            raise ConfigError(
                f"model {self.name!r}: MLA needs qk_nope_head_dim, qk_rope_head_dim, v_head_dim"
            )
        if self.attention_bias or self.qkv_bias or self.qk_norm or self.attention_sinks:
            raise ConfigError(
                f"model {self.name!r}: attention biases, QK-norm and sinks are not modelled for MLA"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_qk_dim(self) -> int:
        """Head dim of the q @ k^T contraction."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def attention_v_dim(self) -> int:
        """Head dim of the scores @ v contraction."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def total_params(self) -> int:
        """Every parameter, all experts; a tied embedding/output matrix once."""
        return self._count(self.num_experts, input_embedding=True)

    def active_params(self) -> int:
        """Parameters one token uses: as total_params, with only experts_per_token routed experts
        per MoE layer (the "A3B" of Qwen3-30B-A3B; embeddings included)."""
        return self._count(self.experts_per_token, input_embedding=True)

    def matmul_params(self, active: bool = True) -> int:
        """N of the 6 * N FLOPs term, by TorchTitan's convention (get_nparams_and_active_nparams):
        all parameters, norms and biases included, routed experts weighted by k / E when `active`,
        and the input embedding excluded unless it is tied to the output projection (a lookup is
        not a matmul; a tied matrix is the output projection and is counted once)."""
        return self._count(self.experts_per_token if active else self.num_experts, False)

    def _count(self, routed_experts: int, input_embedding: bool) -> int:
        dense_layers = self.first_k_dense if self.is_moe else self.num_layers
        moe_layers = self.num_layers - dense_layers
        per_layer = self._attention_params() + self._layer_norm_params()
        blocks = (
            self.num_layers * per_layer
            + dense_layers * self._mlp_params(self.intermediate_size)
            + moe_layers * self._moe_params(routed_experts)
        )
        output = self.embedding_params + self.hidden_size  # output projection and final norm
        separate_input = input_embedding and not self.tie_embeddings
        return blocks + output + (self.embedding_params if separate_input else 0)

    def _attention_params(self) -> int:
        if self.is_mla:
            return self._mla_params()
        q_width = self.num_heads * self.head_dim
        kv_width = self.num_kv_heads * self.head_dim
        n = self.hidden_size * (q_width + 2 * kv_width) + q_width * self.hidden_size
        if self.attention_bias or self.qkv_bias:
            n += q_width + 2 * kv_width
        if self.attention_bias:
            n += self.hidden_size
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.attention_sinks:
            n += self.num_heads
        return n

    def _mla_params(self) -> int:
        h, q_width = self.hidden_size, self.num_heads * self.attention_qk_dim
        if self.q_lora_rank:
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * q_width
        else:
            q = h * q_width
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        kv_b = self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
        o = self.num_heads * self.v_head_dim * h
        return q + kv_a + kv_b + o

    def _mlp_params(self, width: int) -> int:
        n = 3 * self.hidden_size * width  # gate, up, down
        return n + (2 * width + self.hidden_size if self.mlp_bias else 0)

    def _moe_params(self, routed_experts: int) -> int:
        router = self.hidden_size * self.num_experts + (self.num_experts if self.mlp_bias else 0)
        shared_width = self.moe_intermediate_size * self.num_shared_experts
        shared = self._mlp_params(shared_width) if shared_width else 0
        return router + shared + routed_experts * self._mlp_params(self.moe_intermediate_size)

    def _layer_norm_params(self) -> int:
        return (4 if self.sandwich_norm else 2) * self.hidden_size


# --- Hugging Face config.json -----------------------------------------------------------------

_KNOWN_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "deepseek_v3",
        "kimi_k2",
        "gpt_oss",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
    }
)
# Traits HF hard-codes per architecture rather than writing into config.json.
_QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text"})
_QKV_BIAS_TYPES = frozenset({"qwen2"})
_SANDWICH_NORM_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text"})
_TIED_BY_DEFAULT_TYPES = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
_GPT_OSS_TYPES = frozenset({"gpt_oss"})  # biased experts and router, attention sinks


def _int(cfg: Mapping[str, Any], where: str, *keys: str, default: int | None = None) -> int:
    """The first of `keys` present (and not null) in cfg, as a non-negative int."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: {key} must be a non-negative integer, got {value!r}")
        return value
    if default is None:
        raise ConfigError(f"{where}: missing required key {' or '.join(map(repr, keys))}")
    return default


def _bool(cfg: Mapping[str, Any], where: str, key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def _leading_dense_layers(cfg: Mapping[str, Any], where: str) -> int:
    """Dense layers before the MoE ones; other MoE layouts cannot be represented, so refuse them."""
    first_k = _int(cfg, where, "first_k_dense_replace", default=0)
    step = _int(cfg, where, "decoder_sparse_step", "moe_layer_freq", default=1)
    if step != 1:
        raise ConfigError(f"{where}: MoE every {step} layers is not supported (only leading dense)")
    dense_only = cfg.get("mlp_only_layers") or []
    if not dense_only:
        return first_k
    if first_k or dense_only != list(range(len(dense_only))):
        raise ConfigError(
            f"{where}: mlp_only_layers {dense_only!r} is not supported (only leading dense layers)"
        )
    return len(dense_only)


def _moe_fields(cfg: Mapping[str, Any], where: str, intermediate: int) -> dict[str, int]:
    experts = _int(cfg, where, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    if not experts:
        return {}
    return {
        "num_experts": experts,
        "experts_per_token": _int(cfg, where, "num_experts_per_tok"),
        # Mixtral and gpt-oss give the expert width as intermediate_size.
        "moe_intermediate_size": _int(cfg, where, "moe_intermediate_size", default=intermediate),
        "num_shared_experts": _int(cfg, where, "n_shared_experts", "num_shared_experts", default=0),
        "first_k_dense": _leading_dense_layers(cfg, where),
    }


def _mla_fields(cfg: Mapping[str, Any], where: str) -> dict[str, int]:
    kv_lora_rank = _int(cfg, where, "kv_lora_rank", default=0)
    if not kv_lora_rank:
        return {}
    nope = _int(cfg, where, "qk_nope_head_dim")
    rope = _int(cfg, where, "qk_rope_head_dim")
    return {
        "kv_lora_rank": kv_lora_rank,
        "q_lora_rank": _int(cfg, where, "q_lora_rank", default=0),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": _int(cfg, where, "v_head_dim"),
        "head_dim": nope + rope,
    }


def spec_from_hf_config(
    config: Mapping[str, Any],
    name: str,
    *,
    where: str,
    model_type: str | None = None,
    source: str | None = None,
) -> ModelSpec:
    """A ModelSpec from a Hugging Face style config dict. `where` names it in error messages;
    `model_type` overrides config["model_type"] (it decides traits HF hard-codes per class)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where}: expected a JSON object, got {type(config).__name__}")
    cfg = dict(config)
    if isinstance(cfg.get("text_config"), Mapping):  # multimodal configs (Gemma 3) nest the LM
        cfg.update(cfg["text_config"])
    kind = model_type or cfg.get("model_type") or ""
    heads = _int(cfg, where, "num_attention_heads")
    hidden = _int(cfg, where, "hidden_size")
    intermediate = _int(cfg, where, "intermediate_size")
    fields: dict[str, Any] = {
        "num_kv_heads": _int(cfg, where, "num_key_value_heads", default=heads),
        "head_dim": _int(cfg, where, "head_dim", default=hidden // heads if heads else 0),
        **_moe_fields(cfg, where, intermediate),
        **_mla_fields(cfg, where),
    }
    if "kv_lora_rank" in fields:
        fields["num_kv_heads"] = heads  # kv_b_proj expands the latent to every head
    note = (
        "" if kind in _KNOWN_TYPES else f" (model_type {kind or 'missing'!r}: read as Llama-style)"
    )
    return ModelSpec(
        name=name,
        vocab_size=_int(cfg, where, "vocab_size"),
        hidden_size=hidden,
        num_layers=_int(cfg, where, "num_hidden_layers"),
        num_heads=heads,
        intermediate_size=intermediate,
        tie_embeddings=_bool(cfg, where, "tie_word_embeddings", kind in _TIED_BY_DEFAULT_TYPES),
        qk_norm=_bool(cfg, where, "qk_norm", kind in _QK_NORM_TYPES),
        attention_bias=_bool(cfg, where, "attention_bias", False),
        qkv_bias=kind in _QKV_BIAS_TYPES,
        mlp_bias=_bool(cfg, where, "mlp_bias", kind in _GPT_OSS_TYPES),
        attention_sinks=kind in _GPT_OSS_TYPES,
        sandwich_norm=kind in _SANDWICH_NORM_TYPES,
        source=(source or where) + note,
        **fields,
    )


def load_hf_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from a config.json file, or from a model folder holding one."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read model config ({e.strerror or e})") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from e
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return spec_from_hf_config(config, name, where=str(path))


# --- Named models -------------------------------------------------------------------------------

_TORCHTITAN_QWEN3 = (
    "pytorch/torchtitan torchtitan/models/qwen3/__init__.py "
    "@0310b491596bfe537aa9981d61b638e858ebf0c5, qwen3_configs"
)


def _qwen3(
    flavor: str, *, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, **kw: Any
) -> ModelSpec:
    """Qwen3-<flavor> as TorchTitan's qwen3_configs builds it (head_dim 128, QK-norm)."""
    name = f"Qwen3-{flavor}"
    return ModelSpec(
        name=name,
        vocab_size=151936,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=128,
        intermediate_size=ffn,
        qk_norm=True,
        source=f"{_TORCHTITAN_QWEN3}[{flavor!r}]; same values as Qwen/{name} config.json",
        **kw,
    )


# Qwen3 flavors not in model_shapes.json (8B, 32B and 235B-A22B come from there). The three small
# ones tie embeddings; 30B-A3B's dense width (HF intermediate_size 6144) is unused: all layers MoE.
_BUILTIN: tuple[ModelSpec, ...] = (
    _qwen3("0.6B", hidden=1024, layers=28, heads=16, kv_heads=8, ffn=3072, tie_embeddings=True),
    _qwen3("1.7B", hidden=2048, layers=28, heads=16, kv_heads=8, ffn=6144, tie_embeddings=True),
    _qwen3("4B", hidden=2560, layers=36, heads=32, kv_heads=8, ffn=9728, tie_embeddings=True),
    _qwen3("14B", hidden=5120, layers=40, heads=40, kv_heads=8, ffn=17408),
    _qwen3(
        "30B-A3B",
        hidden=2048,
        layers=48,
        heads=32,
        kv_heads=4,
        ffn=6144,
        num_experts=128,
        experts_per_token=8,
        moe_intermediate_size=768,
    ),
    # TorchTitan's qwen3 "debugmodel": it logs 31,987,968 parameters.
    ModelSpec(
        name="torchtitan-qwen3-debugmodel",
        vocab_size=2048,
        hidden_size=256,
        num_layers=8,
        num_heads=16,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=3072,
        tie_embeddings=True,
        qk_norm=True,
        source=f"{_TORCHTITAN_QWEN3}['debugmodel']",
    ),
)
_BUILTIN_ALIASES = {"torchtitan-qwen3-debugmodel": ("qwen3-debugmodel", "qwen3-debug")}


def _natural_key(name: str) -> list[str | int]:
    """Sort key that puts Qwen3-4B before Qwen3-14B."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name.lower())]


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _shipped_specs() -> list[tuple[ModelSpec, tuple[str, ...]]]:
    specs = []
    for entry in model_entries():
        name = entry["name"]
        spec = spec_from_hf_config(
            entry["config"],
            name,
            where=f"model_shapes.json model {name!r}",
            model_type=entry["family"].split()[0],  # e.g. "deepseek_v3 (architecture)"
            source="; ".join(entry["source"]),
        )
        aliases = [entry["hf_id"], entry["hf_id"].rsplit("/", 1)[-1]]
        if name.lower().startswith("llama-"):
            aliases.append("llama" + name[len("llama-") :])  # llama3.1-8b
        specs.append((spec, tuple(aliases)))
    return specs


def _build_registry() -> tuple[dict[str, ModelSpec], list[str]]:
    registry: dict[str, ModelSpec] = {}
    names = []
    builtin = [(spec, _BUILTIN_ALIASES.get(spec.name, ())) for spec in _BUILTIN]
    for spec, aliases in (*builtin, *_shipped_specs()):
        names.append(spec.name)
        for alias in {_normalize(a) for a in (spec.name, *aliases)}:
            if registry.setdefault(alias, spec) is not spec:
                raise RuntimeError(f"model name {alias!r} is defined twice")
    return registry, sorted(names, key=_natural_key)


_REGISTRY, _NAMES = _build_registry()


def list_specs() -> list[str]:
    """Canonical names of the named models (lookups also accept aliases and HF ids)."""
    return list(_NAMES)


def get_spec(name_or_path: str | Path) -> ModelSpec:
    """A named model (case-insensitive; aliases and HF ids work), or a path to a Hugging Face style
    config.json (or a folder holding one)."""
    spec = _REGISTRY.get(_normalize(str(name_or_path)))
    if spec is not None:
        return spec
    path = Path(name_or_path)
    if path.exists() or path.suffix == ".json":
        return load_hf_config(path)
    raise ConfigError(
        f"unknown model {str(name_or_path)!r}; valid: {', '.join(_NAMES)}, "
        "or a path to a Hugging Face config.json"
    )
