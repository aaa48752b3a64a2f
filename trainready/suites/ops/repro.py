"""A failing case's repro: a few lines of Python that rebuild its sample and run it on the device.

Self-contained: it needs torch, the device's module and expecttest (for op_db), nothing of
trainready. The sample is rebuilt from the case's seed and index (samples.py).
"""

from __future__ import annotations

from typing import Any

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}


def repro(params: dict[str, Any], device: str, seed: int, index: int) -> str:
    """The lines that rerun sample `index` of a case (its `params`) on `device`."""
    bwd = params["direction"] == "bwd"
    call = {
        "inplace": "op.inplace_variant(d.input, *d.args, **d.kwargs)",
        "out": "op.op(d.input, *d.args, **d.kwargs, out=torch.empty_like(expected, device=dev))",
    }.get(params["form"], "op(d.input, *d.args, **d.kwargs)")
    lines = [
        "import itertools, torch",
        "from torch.testing._internal.common_methods_invocations import op_db",
        f"op = next(o for o in op_db if (o.name, o.variant_test_name) == "
        f"({params['op']!r}, {params['variant']!r}))",
        f"torch.manual_seed({seed})",
        f"gen = op.sample_inputs('cpu', torch.{_DTYPES[params['dtype']]}, requires_grad={bwd})",
        f"s = list(itertools.islice(gen, {index + 1}))[-1]",
        f"dev = {device!r}",
        "d = s.transform(lambda t: t.detach().to(dev).requires_grad_(t.requires_grad) "
        "if isinstance(t, torch.Tensor) else t)",
        "expected = op(s.input, *s.args, **s.kwargs)",
        f"actual = {call}",
    ]
    if bwd:
        lines.append(
            "# backward: torch.autograd.grad(outputs, leaves, grad_outputs, allow_unused=True)"
        )
    return "\n".join(lines)
