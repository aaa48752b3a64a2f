"""PyTorch's OpInfo database, imported the one safe way, and what the suite reads from an entry.

The entries come from `torch.testing._internal.common_methods_invocations.op_db`: internal to
PyTorch, with no stability promise. What this module reads of an entry (name,
variant_test_name, supports_autograd, supported_dtypes, supported_backward_dtypes,
sample_inputs, inplace_variant, supports_out, decorators) is the part every release since 2.0
has kept; an entry that lacks one of them is described as broken (`describe` returns its error)
and only that entry's cases say so.

Importing it has side effects on the process, measured with torch 2.13.0: it freezes
`torch.backends` flags (`disable_global_flags`: setting `torch.backends.cudnn.enabled` raises
afterwards), sets TORCHINDUCTOR_CACHE_DIR in the environment and adds warning filters. Workers
serve every suite of a run, so `load` undoes all three: a parity or train case that runs in the
same worker afterwards sees the process as it was. It also needs `expecttest` (pure Python, not
installed by torch): without it the suite's cases are `unsupported` with the import error.

op_db's random ops (dropout, the `normal` and `bernoulli` wrappers) reseed inside torch's
`freeze_rng_state`, which saves and restores the current accelerator's generator even while the
CPU reference runs. A young backend may have no generator state to save (emu's minimal profile):
then every such case ended `cpu_unsupported` for the harness's sake, not the device's. `load`
swaps in `freeze_rng_state` below, which keeps the accelerator's state where it has one; a device
without a generator then fails its own random op, when it runs one.

Run as `python -m trainready.suites.ops.database` it prints the catalog (one JSON line per
entry, `describe`): the parent plans cases from that, in a child process, so the parent never
imports the database itself (catalog.py).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import warnings
from typing import Any

import torch

# op_db's dtypes by the names trainready uses (core.config.DTYPES).
DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float64: "fp64",
}
_COMPARE_CPU = ("TestCommon", "test_compare_cpu")
# test_compare_cpu skips whose reason says the output is not a function of the input: judged by
# invariants (shape, dtype) only. Other skips ("Skipped!": slow, or a device's own bug) do not
# excuse an entry from the numerics rule.
_UNDETERMINED = ("determin", "undefined")


def entry_name(name: str, variant: str) -> str:
    """How cases name an entry: `nn.functional.conv2d`, `normal(in_place)`."""
    return f"{name}({variant})" if variant else name


@functools.cache
def load() -> dict[str, Any]:
    """{entry name: OpInfo} of op_db, imported once per process with its side effects undone."""
    env = dict(os.environ)
    filters = list(warnings.filters)
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    finally:
        for key in set(os.environ) - set(env):
            del os.environ[key]
        os.environ.update(env)
        warnings.filters[:] = filters
        # disable_global_flags() has no public undo: its flag is a global of the functions'
        # module (whose dict is not torch.backends' own: the module object is replaced).
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    _tolerate_accelerators_without_generators()
    return {entry_name(op.name, op.variant_test_name): op for op in op_db}


# Where torch's test helpers look `freeze_rng_state` up when a random op's wrapper calls it (the
# module of `wrapper_set_seed` moved between releases; each binds the name at import).
_RNG_HOLDERS = (
    "torch.testing._utils",
    "torch.testing._internal.common_utils",
    "torch.testing._internal.opinfo.core",
    "torch.testing._internal.common_methods_invocations",
)


def _accelerator_rng() -> tuple[Any, Any] | None:
    """(device module, its generator state) of the current accelerator, or None where there is
    no accelerator or it keeps no state to read."""
    try:
        accelerator = torch.accelerator.current_accelerator(check_available=True)
        if accelerator is None:
            return None
        module = torch.get_device_module(accelerator.type)
        return module, module.get_rng_state()
    except (RuntimeError, AttributeError, NotImplementedError):
        return None


@contextlib.contextmanager
def freeze_rng_state():
    """torch's `freeze_rng_state` (the CPU's and the accelerator's generator states restored on
    exit), but an accelerator without a generator is left alone instead of raising."""
    from torch.utils._mode_utils import no_dispatch

    with no_dispatch(), torch._C._DisableFuncTorch():
        cpu, accelerator = torch.get_rng_state(), _accelerator_rng()
    try:
        yield
    finally:
        with no_dispatch(), torch._C._DisableFuncTorch():
            if accelerator is not None:
                module, state = accelerator
                module.set_rng_state(state)
            torch.set_rng_state(cpu)


def _tolerate_accelerators_without_generators() -> None:
    for name in _RNG_HOLDERS:
        module = sys.modules.get(name)  # all four are loaded by op_db's import, where they exist
        if module is not None and hasattr(module, "freeze_rng_state"):
            module.freeze_rng_state = freeze_rng_state


def _dtype_names(dtypes: Any) -> list[str]:
    return sorted(DTYPE_NAMES[d] for d in dtypes if d in DTYPE_NAMES)


def _reason(decorator: Any) -> str:
    """The reason a unittest.skip decorator carries ('expectedFailure' for that one)."""
    if decorator.__name__ == "expectedFailure":
        return "expectedFailure"
    cells = getattr(decorator, "__closure__", None) or ()
    texts = [c.cell_contents for c in cells if isinstance(c.cell_contents, str)]
    return texts[0] if texts else "skipped"


def compare_cpu_marks(op: Any, device_type: str | None, dtype: torch.dtype | None) -> list[str]:
    """The reasons op_db gives for not comparing `op` with the CPU on `device_type` (None: marks
    that name no device) in `dtype`: 'expectedFailure' or a skip's reason."""
    out = []
    for info in getattr(op, "decorators", ()) or ():
        if (getattr(info, "cls_name", None), getattr(info, "test_name", None)) != _COMPARE_CPU:
            continue
        if info.device_type is not None and info.device_type != device_type:
            continue
        if info.dtypes is not None and dtype is not None and dtype not in info.dtypes:
            continue
        if not all(_active(cond) for cond in [info.active_if]):
            continue
        out.extend(_reason(d) for d in info.decorators)
    return out


def _active(cond: Any) -> bool:
    return bool(cond() if callable(cond) else cond)


def judging(op: Any, device_type: str, dtype: torch.dtype) -> tuple[str, str]:
    """How a case of `op` is judged: ("numerics", ""), ("invariants", why) for outputs that are
    not a function of the inputs, or ("reference_invalid", why) where op_db marks the CPU's
    result as wrong for a comparison with a device."""
    marks = compare_cpu_marks(op, device_type, dtype)
    if "expectedFailure" in marks:
        return "reference_invalid", "op_db expects the CPU comparison to fail (test_compare_cpu)"
    # "non-deterministic (when dropout_p > 0)": only some samples are; those are found by the
    # random-number ops they run (suite.py), the others judged by the rule.
    undetermined = [
        m for m in marks if any(w in m.lower() for w in _UNDETERMINED) and "when" not in m.lower()
    ]
    if undetermined:
        return "invariants", undetermined[0]
    if getattr(op, "has_nondeterministic_output", False):
        return "invariants", "op_db: has_nondeterministic_output"
    if op.name.startswith(UNINITIALIZED):
        return "invariants", "returns uninitialized memory"
    why = NOT_UNIQUE.get(op.name)
    if why:
        return "invariants", why
    return "numerics", ""


# Entries whose outputs are correct in more than one form, which op_db does not flag: a device's
# valid answer may differ from the CPU's. Judged by invariants only.
NOT_UNIQUE: dict[str, str] = {
    "svd": "singular vectors are unique only up to sign",
    "linalg.svd": "singular vectors are unique only up to sign",
    "linalg.eig": "eigenvectors are unique only up to a complex phase",
    "linalg.eigh": "eigenvectors are unique only up to sign",
    "linalg.qr": "Q and R are unique only up to the signs of R's diagonal",
    "qr": "Q and R are unique only up to the signs of R's diagonal",
    "geqrf": "Householder reflectors are unique only up to sign",
}
# Entries that return uninitialized memory (op_db's own marks for them change between releases:
# torch 2.9 skips empty_strided's comparison as "Skipped!").
UNINITIALIZED = ("empty", "new_empty", "torch.empty")
# Entries whose integer outputs are indices that may pick any of tied values (bf16 inputs tie
# often): their values are judged by the rule, their indices by shape and dtype only.
TIED_INDICES = frozenset(
    {
        "argmax",
        "argmin",
        "argsort",
        "kthvalue",
        "max",
        "median",
        "min",
        "mode",
        "msort",
        "nanmedian",
        "sort",
        "topk",
        "nn.functional.max_pool1d",
        "nn.functional.max_pool2d",
        "nn.functional.max_pool3d",
        "nn.functional.adaptive_max_pool1d",
        "nn.functional.adaptive_max_pool2d",
        "nn.functional.adaptive_max_pool3d",
        "cummax",
        "cummin",
    }
)


def describe(name: str, op: Any) -> dict[str, Any]:
    """One catalog line: what the planner needs about an entry, read on the CPU. `error` instead
    of the rest where the entry lacks what this module reads."""
    try:
        return {
            "entry": name,
            "op": op.name,
            "variant": op.variant_test_name,
            "autograd": bool(op.supports_autograd),
            "dtypes": _dtype_names(op.supported_dtypes("cpu")),
            "backward_dtypes": _dtype_names(op.supported_backward_dtypes("cpu"))
            if op.supports_autograd
            else [],
            "inplace": op.inplace_variant is not None,
            "out": bool(op.supports_out),
        }
    except Exception as e:  # noqa: BLE001 - one entry's break is that entry's
        return {"entry": name, "error": f"{type(e).__name__}: {e}"}


def main() -> int:
    """Print the catalog, one JSON line per entry, after a header line naming torch."""
    ops = load()
    print(json.dumps({"torch": torch.__version__, "entries": len(ops)}))
    for name, op in ops.items():
        print(json.dumps(describe(name, op)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
