"""FlexAttention variants: the built-in ones, a user's `--variants FILE.py`, and their references.

A variant is a `score_mod` and/or a `mask_mod` for `flex_attention`, plus a `reference`: the same
scores written densely over broadcast index tensors, which the suite evaluates in float64 to judge
the kernel (tests check each built-in's reference against eager flex_attention in float64).

User file contract (`trainready run flex --variants my_variants.py`), in either of two forms.

1. A module of named functions. Each public top-level function defined in the file (not imported,
   not starting with `_`) is a variant named after the function, told apart by its signature as
   flex_attention does (required positional parameters):

       def distance_bias(score, b, h, q_idx, kv_idx):             # a score_mod (5 parameters)
           return score - 0.1 * (q_idx - kv_idx).abs()

       def distance_bias_reference(scores, b, h, q_idx, kv_idx):  # the reference of the above
           return scores - 0.1 * (q_idx - kv_idx).abs()

       def band(b, h, q_idx, kv_idx):                             # a mask_mod (4 parameters)
           return (q_idx - kv_idx).abs() <= 64

   `<name>_reference` is the dense reference of variant `<name>`; a function's docstring (first
   line) describes it in the report. A public function with any other signature is an error:
   helpers' names start with `_`. A variant with both mods, buffers sized to the case, or a budget
   of its own needs the second form.

2. A `VARIANTS` dict (when the file defines one, its functions are only helpers):

       VARIANTS = {
           "name": {
               "score_mod": fn(score, b, h, q_idx, kv_idx) -> score,    # optional
               "mask_mod": fn(b, h, q_idx, kv_idx) -> bool,              # optional (one of the two)
               "reference": fn(scores, b, h, q_idx, kv_idx) -> scores,   # optional, recommended
               "description": "one line for the report",                # optional
               "budget_s": 600,                                          # optional, per case
           },
           # Mods that need buffers sized to the case (per head, per position) come from a builder,
           # called with a Shape (B, Hq, Hkv, S, D) and a device, returning the three mod keys:
           "other": {"build": lambda shape, device: {"score_mod": ..., "reference": ...}},
       }

   A variant's `budget_s` replaces the run's default per-case budget; an explicit `--budget-s`
   replaces both.

`reference` is what the kernel is judged against: it receives the dense scores
(`q @ k^T / sqrt(D)`; float64 for the reference, the case dtype for the low-precision baseline) and
index tensors that broadcast against them (b [1,1,1,1], h [1,G,1,1], q_idx [1,1,S,1],
kv_idx [1,1,1,S]), and returns the scores after the variant (same shape), -inf where the mask
drops a pair. Write it independently of the mods (from the paper's formula), and a wrong mod fails
the numerics check. Without one, the variant's own mods are applied densely by broadcasting: that
checks the kernel against the math of the same mods, not the mods themselves. A builder is called
once for the kernel's device and once for the reference's, so its buffers must be deterministic.
Names become part of case ids: letters, digits, `_`, `-` and `.` only.

Every mistake in the file is a one-line error naming it, raised when the run is planned: loading
checks the file's shape and each function's signature, and the suite's planning
(`flex.probe_user_variant`) calls each variant's code once on a tiny CPU problem (its build, its
block mask, eager flex_attention, its reference), so a mod that raises when called is the file's
error, not the device's. Values are not judged there: a mod that runs but computes the wrong thing
is the device run's `fail_numerics`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainready.core.config import ConfigError

ScoreMod = Callable[..., torch.Tensor]
MaskMod = Callable[..., torch.Tensor]
Reference = Callable[..., torch.Tensor]

SEED = 0
SOFTCAP = 20.0  # attention-gym's tanh soft-capping example
DOCUMENTS = 4  # packed sequences per row in the document mask
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_PARAMS = {  # how each user function is called
    "score_mod": ("score", "b", "h", "q_idx", "kv_idx"),
    "mask_mod": ("b", "h", "q_idx", "kv_idx"),
    "reference": ("scores", "b", "h", "q_idx", "kv_idx"),
}
_MOD_KEYS = frozenset(_PARAMS)
_KEYS = _MOD_KEYS | {"build", "description", "budget_s"}
_REFERENCE_SUFFIX = "_reference"


@dataclass(frozen=True)
class Shape:
    """The attention problem of a case: q [B, Hq, S, D], k and v [B, Hkv, S, D]."""

    B: int
    Hq: int
    Hkv: int
    S: int
    D: int


@dataclass(frozen=True)
class Mods:
    """What flex_attention gets for one case, and the dense reference that judges it."""

    score_mod: ScoreMod | None
    mask_mod: MaskMod | None
    reference: Reference
    # Built-in masks ignore b and h, so their block mask broadcasts (B = H = None): at S = 8192
    # a per-(b, h) mask would materialise B * H * S^2 booleans for nothing.
    mask_uses_bh: bool = True


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    build: Callable[[Shape, str], Mods]  # (shape, device) -> Mods
    source: str = "built-in"  # or the user file's path
    budget_s: float | None = None  # per-case budget of this variant's cases (None: the run's)


# --- built-in variants ----------------------------------------------------------------------------


def _seeded(shape: tuple[int, ...], salt: int, device: str, scale: float = 1.0) -> torch.Tensor:
    """Deterministic fp32 values on `device`, identical for the kernel's and the reference's."""
    gen = torch.Generator().manual_seed(SEED + salt)
    return (torch.randn(shape, generator=gen) * scale).to(device)


def _masked(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return scores.masked_fill(~keep, -math.inf)


def _noop(shape: Shape, device: str) -> Mods:
    return Mods(None, None, lambda s, b, h, q, kv: s, mask_uses_bh=False)


def _causal(shape: Shape, device: str) -> Mods:
    def mask_mod(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def reference(s, b, h, q, kv):
        return _masked(s, kv <= q)

    return Mods(None, mask_mod, reference, mask_uses_bh=False)


def _alibi(shape: Shape, device: str) -> Mods:
    # ALiBi (Press et al. 2022): head h's slope is 2^(-8 (h + 1) / H).
    exponents = torch.arange(1, shape.Hq + 1, dtype=torch.float32) * (-8.0 / shape.Hq)
    slopes = torch.exp2(exponents).to(device)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    def reference(s, b, h, q, kv):
        return s + slopes[h].to(s.dtype) * (kv - q).to(s.dtype)

    return Mods(score_mod, None, reference, mask_uses_bh=False)


def _sliding_window(shape: Shape, device: str) -> Mods:
    window = shape.S // 4  # sparse at every size: a quarter of the sequence

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)

    def reference(s, b, h, q, kv):
        return _masked(s, (kv <= q) & (kv >= q - window))

    return Mods(None, mask_mod, reference, mask_uses_bh=False)


def _prefix_lm(shape: Shape, device: str) -> Mods:
    prefix = shape.S // 4  # bidirectional over the prefix, causal after it

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (kv_idx < prefix)

    def reference(s, b, h, q, kv):
        return _masked(s, (kv <= q) | (kv < prefix))

    return Mods(None, mask_mod, reference, mask_uses_bh=False)


def document_ids(seq_len: int, device: str) -> torch.Tensor:
    """Document id of each position: DOCUMENTS packed documents of seeded random lengths."""
    gen = torch.Generator().manual_seed(SEED)
    cuts = torch.randperm(seq_len - 1, generator=gen)[: DOCUMENTS - 1] + 1
    starts = torch.zeros(seq_len, dtype=torch.int32)
    starts[cuts] = 1
    return starts.cumsum(0).to(torch.int32).to(device)


def _document(shape: Shape, device: str) -> Mods:
    doc = document_ids(shape.S, device)

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    def reference(s, b, h, q, kv):
        return _masked(s, (doc[q] == doc[kv]) & (kv <= q))

    return Mods(None, mask_mod, reference, mask_uses_bh=False)


def _softcap(shape: Shape, device: str) -> Mods:
    def score_mod(score, b, h, q_idx, kv_idx):
        return SOFTCAP * torch.tanh(score / SOFTCAP)

    def reference(s, b, h, q, kv):
        return torch.tanh(s / SOFTCAP) * SOFTCAP

    return Mods(score_mod, None, reference, mask_uses_bh=False)


def _rel_pos(shape: Shape, device: str) -> Mods:
    # A learned-style bias per relative distance q - kv, read from a captured table.
    table = _seeded((2 * shape.S - 1,), salt=1, device=device, scale=0.5)
    offset = shape.S - 1

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[q_idx - kv_idx + offset]

    def reference(s, b, h, q, kv):
        return s + table[q - kv + offset].to(s.dtype)

    return Mods(score_mod, None, reference, mask_uses_bh=False)


def _head_bias(shape: Shape, device: str) -> Mods:
    bias = _seeded((shape.Hq,), salt=2, device=device)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[h]

    def reference(s, b, h, q, kv):
        return s + bias[h].to(s.dtype)

    return Mods(score_mod, None, reference, mask_uses_bh=False)


BUILTIN: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("noop", "no score_mod, no mask (full attention)", _noop),
        Variant("causal", "causal mask", _causal),
        Variant("alibi", "ALiBi: slope(h) * (kv - q), slopes 2^(-8(h+1)/H)", _alibi),
        Variant("sliding_window", "causal, window of S/4 tokens", _sliding_window),
        Variant("prefix_lm", "bidirectional prefix of S/4 tokens, causal after", _prefix_lm),
        Variant("document", f"{DOCUMENTS} packed documents, causal within each", _document),
        Variant("softcap", f"tanh soft-capping at {SOFTCAP:g}", _softcap),
        Variant("rel_pos", "relative-position bias table[q - kv]", _rel_pos),
        Variant("head_bias", "a bias per query head", _head_bias),
    )
}


# --- user variants --------------------------------------------------------------------------------


def _mods_reference(score_mod: ScoreMod | None, mask_mod: MaskMod | None) -> Reference:
    """The variant's own mods applied densely (when the user gave no independent reference)."""

    def reference(s, b, h, q, kv):
        if score_mod is not None:
            s = score_mod(s, b, h, q, kv)
        if mask_mod is not None:
            s = _masked(s, torch.broadcast_to(mask_mod(b, h, q, kv), s.shape))
        return s

    return reference


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none to read
        return None


def positional_args(fn: Callable[..., Any]) -> int | None:
    """Required positional parameters, counted as flex_attention counts them to tell a score_mod
    (5) from a mask_mod (4); None when the signature cannot be read."""
    signature = _signature(fn)
    if signature is None:
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(
        p.kind in positional and p.default is inspect.Parameter.empty
        for p in signature.parameters.values()
    )


def _call_text(key: str) -> str:
    """'(score, b, h, q_idx, kv_idx)': how the suite calls a `key` function."""
    return f"({', '.join(_PARAMS[key])})"


def _check_signatures(entry: dict[str, Any], where: str) -> None:
    """Each mod takes the arguments it is called with; caught now, not as a device's compile error."""
    for key, params in _PARAMS.items():
        fn = entry.get(key)
        count = None if fn is None else positional_args(fn)
        if count is not None and count != len(params):
            raise ConfigError(
                f"{where}: {key} takes {count} positional argument(s), but is called with"
                f" {len(params)}: {_call_text(key)}"
            )


def _mods(entry: Any, where: str) -> Mods:
    """Mods from {score_mod, mask_mod, reference}, checked; ConfigError naming `where` if bad."""
    if not isinstance(entry, dict):
        raise ConfigError(
            f"{where}: expected a dict of score_mod/mask_mod/reference, got {entry!r}"
        )
    unknown = set(entry) - _MOD_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; valid: {sorted(_MOD_KEYS)}")
    score_mod, mask_mod = entry.get("score_mod"), entry.get("mask_mod")
    if score_mod is None and mask_mod is None:
        raise ConfigError(f"{where}: needs a score_mod, a mask_mod or both")
    for key in _MOD_KEYS:
        if entry.get(key) is not None and not callable(entry[key]):
            raise ConfigError(f"{where}: {key} is not callable")
    _check_signatures(entry, where)
    reference = entry.get("reference") or _mods_reference(score_mod, mask_mod)
    return Mods(score_mod, mask_mod, reference)


def _budget(entry: dict[str, Any], where: str) -> float | None:
    budget = entry.get("budget_s")
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0:
        raise ConfigError(f"{where}: budget_s must be a positive number of seconds, got {budget!r}")
    return float(budget)


def _user_variant(name: Any, entry: Any, path: str) -> Variant:
    where = f"--variants {path}: variant {name!r}"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{where}: names may hold only letters, digits, '_', '-' and '.'")
    if name in BUILTIN:
        raise ConfigError(f"{where}: clashes with the built-in variant of that name")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a dict, got {type(entry).__name__}")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; valid: {sorted(_KEYS)}")
    description = str(entry.get("description") or "user variant")
    budget = _budget(entry, where)
    build = entry.get("build")
    mod_entry = {k: v for k, v in entry.items() if k in _MOD_KEYS}
    if build is None:
        mods = _mods(mod_entry, where)  # checked now: a mistake fails before any case runs
        return Variant(name, description, lambda shape, device: mods, path, budget)
    if mod_entry or not callable(build):
        raise ConfigError(f"{where}: give either a callable build(shape, device) or the mods")
    built = f"{where}: build(shape, device)"
    return Variant(
        name, description, lambda shape, device: _mods(build(shape, device), built), path, budget
    )


# --- the file's two forms -------------------------------------------------------------------------


def _own_functions(module: Any) -> dict[str, Callable[..., Any]]:
    """The public functions the file itself defines, in file order (imports and _helpers left)."""
    return {
        name: obj
        for name, obj in vars(module).items()
        if inspect.isfunction(obj)
        and obj.__module__ == module.__name__
        and not name.startswith("_")
    }


def _function_kind(name: str, fn: Callable[..., Any], path: str) -> str:
    """'score_mod', 'mask_mod' or 'reference', by name and signature; ConfigError naming it else."""
    count = positional_args(fn)
    if name.endswith(_REFERENCE_SUFFIX):
        if count == len(_PARAMS["reference"]):
            return "reference"
        wanted = f"a reference takes {_call_text('reference')}"
    else:
        kinds = {len(_PARAMS[k]): k for k in ("score_mod", "mask_mod")}
        if count in kinds:
            return kinds[count]
        wanted = (
            f"a variant is a score_mod {_call_text('score_mod')} or a mask_mod"
            f" {_call_text('mask_mod')}; start a helper's name with '_'"
        )
    signature = _signature(fn) or "(?)"
    raise ConfigError(f"--variants {path}: function {name!r} takes {signature}: {wanted}")


def _first_line(text: str | None) -> str | None:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else None


def _function_table(module: Any, path: str) -> dict[str, dict[str, Any]]:
    """VARIANTS entries from a module of named functions (form 1 in the module docstring)."""
    table: dict[str, dict[str, Any]] = {}
    references: dict[str, Callable[..., Any]] = {}
    for name, fn in _own_functions(module).items():
        kind = _function_kind(name, fn, path)
        if kind == "reference":
            references[name.removesuffix(_REFERENCE_SUFFIX)] = fn
        else:
            table[name] = {kind: fn, "description": _first_line(inspect.getdoc(fn))}
    for name, fn in references.items():
        if name not in table:
            raise ConfigError(
                f"--variants {path}: function {name + _REFERENCE_SUFFIX!r}: no score_mod or"
                f" mask_mod {name!r} in the file for it to be the reference of"
            )
        table[name]["reference"] = fn
    return table


def _variant_table(module: Any, path: str) -> dict[Any, Any]:
    """The file's variants as VARIANTS entries: its VARIANTS dict, else its named functions."""
    if hasattr(module, "VARIANTS"):
        table = module.VARIANTS
        if not isinstance(table, dict) or not table:
            raise ConfigError(f"--variants {path}: VARIANTS is not a dict of named variants")
        return table
    table = _function_table(module, path)
    if not table:
        raise ConfigError(
            f"--variants {path}: defines no VARIANTS dict and no score_mod/mask_mod functions"
        )
    return table


_loaded: dict[tuple[str, float], dict[str, Variant]] = {}


def _import_file(path: Path) -> Any:
    # A unique module name per file, so two files never share a module in sys.modules. It must be
    # there: dynamo looks a traced mod's globals (`torch.tanh`) up through sys.modules.
    name = "trainready_user_variants_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"--variants {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any error in the user's file is reported as theirs
        sys.modules.pop(name, None)
        first = (str(e).splitlines() or [""])[0]
        raise ConfigError(
            f"--variants {path}: cannot import it: {type(e).__name__}: {first}"
        ) from e
    return module


def load_user_variants(path_text: str) -> dict[str, Variant]:
    """The variants a user file defines (module docstring); ConfigError naming the file if bad.

    This checks the file's form and signatures; calling the code is flex.probe_user_variant's job
    (it needs the suite's inputs and reference, and flex.py imports this module)."""
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError(f"--variants {path}: no such file")
    key = (str(path.resolve()), path.stat().st_mtime)
    if key not in _loaded:
        table = _variant_table(_import_file(path), str(path))
        _loaded[key] = {name: _user_variant(name, v, str(path)) for name, v in table.items()}
    return _loaded[key]


def variants(options: dict[str, Any]) -> dict[str, Variant]:
    """Built-in variants, then the user's (`options["variants"]`, a file path) if given."""
    user = load_user_variants(options["variants"]) if options.get("variants") else {}
    return {**BUILTIN, **user}
