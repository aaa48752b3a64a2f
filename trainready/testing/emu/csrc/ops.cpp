// What Python reaches of emu, as ops in torch.ops.trainready_emu (no pybind module needed):
// devices, memory statistics, generators, and the native / fallback bookkeeping. The minimal
// profile defines only the device and bookkeeping ops: what it lacks has no op to reach.
#include "emu.h"

#include <ATen/core/Tensor.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <tuple>

namespace trainready_emu {
namespace {

c10::DeviceIndex index_arg(int64_t device) {
  return resolve_index(static_cast<c10::DeviceIndex>(device));
}

int64_t device_count() {
  return kDeviceCount;
}

int64_t get_current_device() {
  return current_device();
}

void set_current_device(int64_t device) {
  set_device(index_arg(device));
}

#ifndef TRAINREADY_EMU_MINIMAL
void synchronize(int64_t device) {
  c10::impl::getDeviceGuardImpl(kType)->synchronizeDevice(index_arg(device));
}

c10::Dict<std::string, int64_t> stats(int64_t device) {
  return memory_stats(index_arg(device));
}

std::vector<int64_t> mem_get_info(int64_t device) {
  const auto [free, total] = memory_info(index_arg(device));
  return {free, total};
}

void reset_peak(int64_t device) {
  reset_peak_memory_stats(index_arg(device));
}

void reset_accumulated(int64_t device) {
  reset_accumulated_memory_stats(index_arg(device));
}

at::Generator get_default_generator(int64_t device) {
  return default_generator(index_arg(device));
}

#endif // TRAINREADY_EMU_MINIMAL

// Which build this is: the Python package checks it loaded the one it chose.
std::string profile() {
#ifdef TRAINREADY_EMU_MINIMAL
  return "minimal";
#else
  return "full";
#endif
}

std::vector<std::string> native_kernels() {
  return native_ops();
}

std::tuple<std::vector<std::string>, std::vector<int64_t>> counts() {
  std::tuple<std::vector<std::string>, std::vector<int64_t>> out;
  for (const auto& [name, calls] : fallback_counts()) {
    std::get<0>(out).push_back(name);
    std::get<1>(out).push_back(calls);
  }
  return out;
}

} // namespace

TORCH_LIBRARY(trainready_emu, m) {
  m.def("device_count() -> int", &device_count);
  m.def("current_device() -> int", &get_current_device);
  m.def("set_device(int device) -> ()", &set_current_device);
#ifndef TRAINREADY_EMU_MINIMAL
  m.def("synchronize(int device) -> ()", &synchronize);
  m.def("memory_stats(int device) -> Dict(str, int)", &stats);
  m.def("mem_get_info(int device) -> int[]", &mem_get_info);
  m.def("reset_peak_memory_stats(int device) -> ()", &reset_peak);
  m.def("reset_accumulated_memory_stats(int device) -> ()", &reset_accumulated);
  m.def("default_generator(int device) -> Generator?", &get_default_generator);
#endif
  m.def("profile() -> str", &profile);
  m.def("native_kernels() -> str[]", &native_kernels);
  m.def("fallback_counts() -> (str[], int[])", &counts);
  m.def("reset_fallback_counts() -> ()", &reset_fallback_counts);
}

} // namespace trainready_emu
