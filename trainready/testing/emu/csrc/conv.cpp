// emu's convolution. PyTorch routes a PrivateUse1 convolution to convolution_overrideable and
// its backward to convolution_backward_overrideable, hooks only a backend implements: their
// CompositeExplicitAutograd kernels raise NotImplementedError for every backend, and a boxed
// fallback never runs for an op with a composite kernel. Vendors implement both (Cambricon's
// MLU, Enflame's GCU); without them a backend trains no conv net. emu's kernels run the CPU's
// convolution on its tensors -- emu memory is host memory, as for its bmm -- so they are its own
// kernels (native_kernels() lists them), not the counted CPU fallback.
#include "emu.h"

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <torch/library.h>

#include <array>

namespace trainready_emu {
namespace {

using torch::jit::drop;
using torch::jit::last;
using torch::jit::push;

std::optional<at::Tensor> on_cpu(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? std::optional<at::Tensor>(t->cpu()) : std::nullopt;
}

// (input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
void convolution(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto args = last(*stack, 9);
  const at::Tensor input = args[0].toTensor();
  auto out = at::convolution(
      input.cpu(), args[1].toTensor().cpu(), on_cpu(args[2].toOptional<at::Tensor>()),
      args[3].toIntVector(), args[4].toIntVector(), args[5].toIntVector(), args[6].toBool(),
      args[7].toIntVector(), args[8].toInt());
  drop(*stack, 9);
  push(*stack, out.to(input.device()));
}

// (grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
//  output_mask) -> (grad_input, grad_weight, grad_bias)
void convolution_backward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto args = last(*stack, 10);
  const at::Tensor grad = args[0].toTensor();
  const at::Tensor weight = args[2].toTensor();
  const bool transposed = args[6].toBool();
  const int64_t groups = args[8].toInt();
  const auto mask_list = args[9].toBoolList();
  const std::array<bool, 3> mask{mask_list[0], mask_list[1], mask_list[2]};
  const std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto grads = at::convolution_backward(
      grad.cpu(), args[1].toTensor().cpu(), weight.cpu(), at::OptionalIntArrayRef(bias_sizes),
      args[3].toIntVector(), args[4].toIntVector(), args[5].toIntVector(), transposed,
      args[7].toIntVector(), groups, mask);
  drop(*stack, 10);
  for (const at::Tensor& g : {std::get<0>(grads), std::get<1>(grads), std::get<2>(grads)}) {
    push(*stack, g.defined() ? g.to(grad.device()) : g);
  }
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl(
      "convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution>());
  native_ops().emplace_back("aten::convolution_overrideable");
  m.impl(
      "convolution_backward_overrideable",
      torch::CppFunction::makeFromBoxedFunction<&convolution_backward>());
  native_ops().emplace_back("aten::convolution_backward_overrideable");
}

} // namespace trainready_emu
