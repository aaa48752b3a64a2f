"""Routed MoE dispatch: each token runs through the experts it picked, and no others.

`blocks.MoE` dispatches densely (every expert on every token, weighted by a combine matrix that is
zero where a token did not pick the expert): exact and simple, but num_experts / top_k times the
routed-expert FLOPs, so a 30B-A3B step does 16x the expert work real trainers do and its MFU
means nothing. `RoutedMoE` is the same module (same parameters, router and balancing loss) with
the dispatch trainers use (TorchTitan, Hugging Face's grouped_mm experts):

1. the N * k (token, slot) pairs are sorted by expert, so each expert's rows are contiguous, and
   `offsets` (int32, cumulative rows per expert) say where each expert's rows end;
2. each projection is one grouped GEMM over those rows (`grouped_mm`), the activation between;
3. each row is weighted by its routing weight, put back in token order and the k slots summed.

Shapes are static whatever the routing (N * k rows, E offsets), so there is no host sync and
`torch.compile(fullgraph=True)` traces it. The grouped GEMM is torch's own (`F.grouped_mm`, else
`torch._grouped_mm`) where it runs, else a loop over experts (`expert_mm`):

- torch's op takes fp32, bf16 and fp16 in eager (not float64, so the float64 parity reference
  takes the loop: the same arithmetic, expert by expert); under torch.compile, bf16 only (its
  meta kernel refuses the others in torch 2.13); and only on devices whose kernel works, which
  `grouped_mm_works` finds out by trying it once per device type and dtype;
- the loop is a custom op (`trainready::expert_mm`), so compile sees one opaque node rather than
  a data-dependent loop; it reads the offsets on the host (one sync per call).
"""

from __future__ import annotations

import torch
from torch import nn

from trainready.device.compat import grouped_mm
from trainready.models.blocks import MoE

_TORCH_GROUPED_MM = grouped_mm()  # F.grouped_mm, or torch._grouped_mm before torch 2.10
_EAGER_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_COMPILED_DTYPES = (torch.bfloat16,)
_WORKS: dict[tuple[str, torch.dtype], bool] = {}  # (device type, dtype) -> torch's op ran

GROUPED_MM = "grouped_mm"
LOOP = "loop over experts"


def _try_grouped_mm(device: torch.device, dtype: torch.dtype) -> bool:
    """Forward and backward of a tiny grouped GEMM (two groups, one empty) on the device."""
    try:
        x = torch.ones(4, 16, device=device, dtype=dtype, requires_grad=True)
        w = torch.ones(3, 16, 16, device=device, dtype=dtype, requires_grad=True)
        offs = torch.tensor([2, 2, 4], device=device, dtype=torch.int32)
        _TORCH_GROUPED_MM(x, w, offs=offs).square().sum().backward()
        return bool(torch.isfinite(w.grad).all())
    except Exception:  # noqa: BLE001 - whatever a backend raises, the op does not run here
        return False


def grouped_mm_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch's grouped GEMM runs on this device type in this dtype (tried once, eagerly).

    While compiling it cannot be tried: an untried pair then takes the loop, which always works.
    `trainready.suites.train.loop` tries the pair it will train in before it compiles anything."""
    if _TORCH_GROUPED_MM is None or dtype not in _EAGER_DTYPES:
        return False
    key = (device.type, dtype)
    if key not in _WORKS:
        if torch.compiler.is_compiling():
            return False
        _WORKS[key] = _try_grouped_mm(device, dtype)
    return _WORKS[key]


def implementation(device: torch.device, dtype: torch.dtype, compiling: bool) -> str:
    """GROUPED_MM or LOOP: what `expert_mm` runs for this device, compute dtype and mode."""
    if compiling and dtype not in _COMPILED_DTYPES:
        return LOOP
    return GROUPED_MM if grouped_mm_works(device, dtype) else LOOP


# --- the loop, as an opaque op (forward and both gradients) ---------------------------------------


@torch.library.custom_op("trainready::expert_mm", mutates_args=())
def _loop_mm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """x [S, K] sorted by expert, w [E, K, M] -> [S, M]: rows of expert e times w[e]."""
    out = x.new_zeros(x.shape[0], w.shape[-1])
    start = 0
    for e, end in enumerate(offsets.tolist()):
        if end > start:
            out[start:end] = x[start:end] @ w[e]
        start = end
    return out


@_loop_mm.register_fake
def _(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[-1])


@torch.library.custom_op("trainready::expert_mm_weight_grad", mutates_args=())
def _loop_weight_grad(x: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """d(loss)/d(w) of `_loop_mm`: [E, K, M], expert e's rows of x transposed times its grads."""
    out = x.new_zeros(offsets.shape[0], x.shape[1], grad.shape[1])
    start = 0
    for e, end in enumerate(offsets.tolist()):
        if end > start:
            out[e] = x[start:end].T @ grad[start:end]
        start = end
    return out


@_loop_weight_grad.register_fake
def _(x: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return x.new_empty(offsets.shape[0], x.shape[1], grad.shape[1])


def _loop_mm_backward(ctx, grad: torch.Tensor):  # noqa: ANN001 - torch.library's signature
    x, w, offsets = ctx.saved_tensors
    grad = grad.contiguous()
    grad_x = _loop_mm(grad, w.transpose(-2, -1), offsets) if ctx.needs_input_grad[0] else None
    grad_w = _loop_weight_grad(x, grad, offsets) if ctx.needs_input_grad[1] else None
    return grad_x, grad_w, None


def _loop_mm_setup(ctx, inputs, output) -> None:  # noqa: ANN001
    ctx.save_for_backward(*inputs)


_loop_mm.register_autograd(_loop_mm_backward, setup_context=_loop_mm_setup)


def expert_mm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Grouped GEMM: x [S, K] (rows sorted by expert) times w [E, K, M], expert by expert."""
    how = implementation(x.device, x.dtype, torch.compiler.is_compiling())
    if how == GROUPED_MM:
        return _TORCH_GROUPED_MM(x, w, offs=offsets)
    return _loop_mm(x, w, offsets)


# --- routed dispatch ------------------------------------------------------------------------------


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the experts' GEMMs run in: autocast's where it is on (grouped GEMMs are not on
    autocast's list, so cast as it would cast a linear layer), else the input's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def routed_experts(
    experts: nn.Module, x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """x [N, D] through the experts each token chose: chosen [N, k] expert ids, weights [N, k]
    routing weights -> [N, D], the weighted sum over each token's k experts."""
    n, k = chosen.shape
    order = chosen.flatten().argsort(stable=True)  # (token, slot) pairs grouped by expert
    expert_of_row = chosen.flatten()[order]
    ids = torch.arange(experts.w1.shape[0], device=x.device)
    offsets = torch.searchsorted(expert_of_row, ids, right=True).to(torch.int32)
    dtype = compute_dtype(x)
    rows = x[order // k].to(dtype)

    def project(inputs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        # Parameters are stored [E, out, in] (as nn.Linear): the GEMM wants [E, in, out].
        return expert_mm(inputs, w.to(dtype).transpose(-2, -1), offsets)

    h = experts.act(project(rows, experts.w1))
    if experts.w3 is not None:
        h = h * project(rows, experts.w3)
    y = project(h, experts.w2) * weights.flatten()[order].unsqueeze(-1).to(dtype)
    unsorted = torch.empty_like(y).index_copy(0, order, y)  # back in (token, slot) order
    return unsorted.view(n, k, -1).sum(dim=1)


class RoutedMoE(MoE):
    """`blocks.MoE` with routed dispatch: the same parameters, routing and balancing loss."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        scores, experts, weights = self.route(x)
        picked = torch.zeros_like(scores).scatter(-1, experts, 1.0)  # [N, E], for the loss
        out = routed_experts(self.experts, x, experts, weights)
        if self.shared_expert is not None:
            out = out + self.shared_expert(x)
        return out.view(shape), self._balancing_loss(scores, picked), picked.sum(dim=0).detach()


def use_routed_dispatch(model: nn.Module) -> None:
    """Switch every `MoE` of `model` to routed dispatch in place. Only the class changes (as
    FSDP2's fully_shard does): parameter names, values and the state dict stay as they are."""
    for module in model.modules():
        if type(module) is MoE:
            module.__class__ = RoutedMoE
