// Autocast on emu (torch.autocast("emu")): the op lists and cast policies CUDA uses, which
// torch publishes for other backends to reuse. Ops on no list pass through untouched.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

// In torch's namespace, as its own registrations are: the op lists name types unqualified.
namespace at::autocast {

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

#define EMU_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define EMU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define EMU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define EMU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(EMU_LOWER_PRECISION_FP)
  AT_FORALL_FP32(EMU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(EMU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(EMU_PROMOTE)
}

} // namespace at::autocast
