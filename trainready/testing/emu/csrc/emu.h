// Shared declarations of the emu reference PrivateUse1 device (see ../__init__.py).
//
// Two builds share these sources: the full profile, and the minimal one (compiled with
// -DTRAINREADY_EMU_MINIMAL, see ../__init__.py) that registers only what a young backend has:
// an allocator without statistics, a DeviceGuard without synchronize, events or streams beyond
// the one the guard must name, hooks without generators or pinned memory, the empty/view/copy
// kernels and the CPU fallback. What the minimal build leaves out is behind
// `#ifndef TRAINREADY_EMU_MINIMAL`; whole files (generator, host allocator, conv, autocast)
// are left out of its source list instead.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Dict.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainready_emu {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
constexpr c10::DeviceIndex kDeviceCount = 2;

// -- devices (runtime.cpp) --
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
void check_index(c10::DeviceIndex index);
c10::DeviceIndex resolve_index(c10::DeviceIndex index); // -1 -> the current device

// -- memory (allocator.cpp) --
std::optional<c10::DeviceIndex> device_of(const void* ptr);

#ifndef TRAINREADY_EMU_MINIMAL
c10::Dict<std::string, int64_t> memory_stats(c10::DeviceIndex device);
std::pair<int64_t, int64_t> memory_info(c10::DeviceIndex device); // free, total bytes
void reset_peak_memory_stats(c10::DeviceIndex device);
void reset_accumulated_memory_stats(c10::DeviceIndex device);

// -- pinned host memory (host_allocator.cpp) --
bool is_pinned_host(const void* ptr); // within a block pin_memory() allocated
c10::Allocator* pinned_host_allocator();

// -- random numbers (generator.cpp) --
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
// The CPU engine that draws an emu generator's numbers, for CPU kernels run by the fallback.
at::Generator engine_of(const at::Generator& emu_generator);
#endif // TRAINREADY_EMU_MINIMAL

// -- kernels (kernels.cpp, fallback.cpp) --
// "aten::name.overload" of every op with an emu kernel of its own, in registration order.
std::vector<std::string>& native_ops();
std::vector<std::pair<std::string, int64_t>> fallback_counts();
void reset_fallback_counts();

} // namespace trainready_emu
