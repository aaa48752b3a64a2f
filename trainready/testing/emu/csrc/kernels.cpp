// emu's own (native) kernels: tensor creation, views, copies, resize, fill, reading a scalar,
// and one matmul (aten::bmm, the batched product attention uses). Every other op falls back to
// the CPU (fallback.cpp), so both paths a real backend has exist here. aten::mm -- F.linear's
// GEMM, and what a peak calibration multiplies -- is deliberately not native: trainready must
// say that such an MFU is the host's, and a test that needs a native mm injects one through
// torch.library, as a backend team injecting its own kernels would. Device memory is host memory, so a kernel can run a
// CPU kernel on a CPU tensor that aliases the same bytes (cpu_alias).
#include "emu.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace trainready_emu {

std::vector<std::string>& native_ops() {
  static std::vector<std::string> names;
  return names;
}

namespace {

constexpr c10::DispatchKeySet kKeys{c10::DispatchKey::PrivateUse1};

// A CPU tensor over the same bytes, sizes and strides, with the same lazy conjugate and
// negative bits: what a CPU kernel can compute on.
at::Tensor cpu_alias(const at::Tensor& t) {
  if (!t.is_privateuseone()) {
    return t;
  }
  auto alias = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  alias._set_conj(t.is_conj());
  alias._set_neg(t.is_neg());
  return alias;
}

c10::Device emu_device(std::optional<c10::Device> device) {
  const auto d = c10::device_or_default(device);
  TORCH_CHECK(d.type() == kType, "emu kernel asked to allocate on ", d);
  return c10::Device(kType, resolve_index(d.index()));
}

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "emu has strided tensors only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "only cpu tensors can be pinned");
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  const c10::DeviceGuard guard(emu_device(device)); // the allocator serves the current device
  return at::detail::empty_generic(
      size, c10::GetAllocator(kType), kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  const c10::DeviceGuard guard(emu_device(device));
  return at::detail::empty_strided_generic(
      size, stride, c10::GetAllocator(kType), kKeys, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(
    const at::Tensor& self,
    c10::SymIntArrayRef size,
    c10::SymIntArrayRef stride,
    std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset.has_value()) {
    offset = storage_offset->expect_int();
  }
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(
    const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

// Any direction: cpu -> emu, emu -> cpu, emu:i -> emu:j (the CPU copy kernel converts dtypes,
// handles every stride and resolves a lazy conjugate or negation where the two tensors' bits
// differ: see the Conjugate/Negative fallthroughs below). Overlap is checked here, on the real
// tensors: the CPU kernel sees two aliases with storages of their own and could not tell.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, self);
  cpu_alias(dst).copy_(cpu_alias(self), non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

const at::Tensor& resize_(
    const at::Tensor& self,
    c10::SymIntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  // The CPU resize grows storage with the storage's allocator (ours); the guard picks the
  // tensor's device for it.
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

#ifndef TRAINREADY_EMU_MINIMAL
// Compute: the minimal profile leaves fill, reading a scalar and bmm to the CPU fallback.
at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  cpu_alias(self).fill_(value);
  return self;
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(cpu_alias(self));
}

#endif // TRAINREADY_EMU_MINIMAL

at::Tensor& set_storage(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, storage_offset, size, stride);
}

at::Tensor& set_whole_storage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  // An empty storage of emu's own (the CPU kernel would give it a CPU one).
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(kType), /*resizable=*/true);
  return self.set_(storage, 0, {0}, {});
}

#ifndef TRAINREADY_EMU_MINIMAL
void check_matmul_operands(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: both operands must be batches of matrices");
  TORCH_CHECK(
      a.device() == b.device(),
      "Expected all tensors to be on the same device, but found ",
      a.device(),
      " and ",
      b.device());
}

// The one native compute kernel: the CPU BLAS on aliases of the operands, any strides.
at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  check_matmul_operands(a, b);
  TORCH_CHECK(out.device() == a.device(), "bmm: out is on ", out.device(), ", not ", a.device());
  at::native::resize_output(out, {a.size(0), a.size(1), b.size(2)});
  auto result = cpu_alias(out);
  at::bmm_out(result, cpu_alias(a), cpu_alias(b));
  return out;
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  check_matmul_operands(a, b);
  auto out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
  bmm_out(a, b, out);
  return out;
}

#endif // TRAINREADY_EMU_MINIMAL

// Registers an emu kernel and records its name, so native_kernels() is what was registered.
#define EMU_NATIVE(m, name, fn)      \
  m.impl(name, TORCH_FN(fn));        \
  native_ops().emplace_back("aten::" name)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  EMU_NATIVE(m, "empty.memory_format", empty_memory_format);
  EMU_NATIVE(m, "empty_strided", empty_strided);
  EMU_NATIVE(m, "as_strided", as_strided);
  EMU_NATIVE(m, "view", view);
  EMU_NATIVE(m, "_reshape_alias", reshape_alias);
  EMU_NATIVE(m, "_copy_from", copy_from);
  EMU_NATIVE(m, "_copy_from_and_resize", copy_from_and_resize);
  EMU_NATIVE(m, "resize_", resize_);
  EMU_NATIVE(m, "set_.source_Storage_storage_offset", set_storage);
  EMU_NATIVE(m, "set_.source_Storage", set_whole_storage);
  EMU_NATIVE(m, "set_.source_Tensor", set_tensor);
  EMU_NATIVE(m, "set_", set_empty);
#ifndef TRAINREADY_EMU_MINIMAL
  EMU_NATIVE(m, "fill_.Scalar", fill_scalar);
  EMU_NATIVE(m, "_local_scalar_dense", local_scalar_dense);
  EMU_NATIVE(m, "bmm", bmm);
  EMU_NATIVE(m, "bmm.out", bmm_out);
#endif
}

// A copy reaches emu's kernel with its tensors' lazy conjugate and negative bits, as copy_
// reaches the CPU's: the math-bit fallbacks would resolve the source by cloning it, and a clone
// on emu is itself a copy with the bit set -- an endless recursion (a complex rotary embedding's
// backward, `grad * freqs.conj()`, overflowed the stack).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

} // namespace
} // namespace trainready_emu
