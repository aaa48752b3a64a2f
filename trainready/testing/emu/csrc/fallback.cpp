// Every op without an emu kernel runs through PyTorch's boxed CPU fallback, wrapped here to
// (1) count calls per op, so tests and backend authors see exactly what fell back,
// (2) only when TRAINREADY_EMU_FALLBACK_WARN=1, warn as MPS and Ascend NPU do ("The operator
//     'aten::x' is not currently supported on the emu backend and will fall back to run on the
//     CPU."): once per op, or on every call under torch.set_warn_always(True). Silent by
//     default, as PyTorch's cpu_fallback and most PrivateUse1 plugins are: the case trainready
//     must catch without any vendor record. The switch exercises the warning record too,
// (3) hand random ops the CPU engine of emu's generator instead of the CPU's own. Not in the
//     minimal profile, which has no generator: there random ops on emu draw from the CPU's
//     default generator, as they do on a young backend that relies on this fallback.
#include "emu.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

namespace trainready_emu {
namespace {

std::mutex g_mutex;
std::map<std::string, int64_t>& counts() {
  static std::map<std::string, int64_t> c;
  return c;
}
std::set<std::string>& warned() {
  static std::set<std::string> w;
  return w;
}

std::string full_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

#ifndef TRAINREADY_EMU_MINIMAL
bool is_generator(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::OptionalType) {
    return type->containedType(0)->kind() == c10::TypeKind::GeneratorType;
  }
  return type->kind() == c10::TypeKind::GeneratorType;
}

// The emu device the op runs on: that of its first emu tensor argument.
c10::DeviceIndex op_device(c10::ArrayRef<c10::IValue> args) {
  for (const auto& v : args) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) {
      return v.toTensor().device().index();
    }
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (t.defined() && t.is_privateuseone()) {
          return t.device().index();
        }
      }
    }
  }
  return current_device();
}

// CPU kernels draw from the generator they are given, else the CPU default one: give them
// the engine behind the emu generator they were called with, or behind the device's default.
void use_emu_generators(const c10::FunctionSchema& schema, torch::jit::Stack& stack) {
  const auto n = schema.arguments().size();
  const auto first = stack.size() - n;
  for (size_t i = 0; i < n; ++i) {
    if (!is_generator(schema.arguments()[i].real_type())) {
      continue;
    }
    auto& value = stack[first + i];
    if (value.isNone()) {
      const auto args = c10::ArrayRef<c10::IValue>(stack).slice(first);
      value = engine_of(default_generator(op_device(args)));
    } else if (value.isGenerator() && value.toGenerator().device().type() == kType) {
      value = engine_of(value.toGenerator());
    }
  }
}

#endif // TRAINREADY_EMU_MINIMAL

bool warnings_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TRAINREADY_EMU_FALLBACK_WARN");
    return value != nullptr && std::string(value) == "1";
  }();
  return enabled;
}

void count_and_fall_back(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto name = full_name(op);
  // An op the CPU has no kernel for (`_thnn_fused_lstm_cell`: CUDA's alone) is one this device
  // lacks: said as a backend without the kernel says it, not as the CPU's "Could not run ...
  // from the 'CPU' backend", which blames the wrong device.
  TORCH_CHECK_NOT_IMPLEMENTED(
      op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU),
      "Could not run '",
      name,
      "' on the emu backend: emu has no kernel for it, and the CPU it falls back to has none "
      "either (a backend must implement it)");
  bool warn = c10::WarningUtils::get_warnAlways();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    ++counts()[name];
    warn = warned().insert(name).second || warn;
  }
  if (warn && warnings_enabled()) {
    TORCH_WARN(
        "The operator '",
        name,
        "' is not currently supported on the emu backend and will fall back to run on the CPU.");
  }
#ifndef TRAINREADY_EMU_MINIMAL
  use_emu_generators(op.schema(), *stack);
#endif
  at::native::cpu_fallback(op, stack);
}

} // namespace

std::vector<std::pair<std::string, int64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {counts().begin(), counts().end()};
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  counts().clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&count_and_fall_back>());
}

} // namespace trainready_emu
