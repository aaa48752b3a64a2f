// emu's device memory: every tensor byte lives in a block this allocator mallocs for one
// device, and is counted in that device's statistics (torch.accelerator.memory_* read them
// through the c10::DeviceAllocator interface). No caching: freeing a tensor frees its block,
// so reserved == allocated. Each allocation and free is reported to the profiler with its device,
// as cuda's caching allocator reports them: a trace taken with profile_memory=True shows emu's
// memory timeline, and that the run used the device even where no kernel of it is recorded.
// The minimal profile's allocator is a plain c10::Allocator, as a young backend's is: it keeps
// the same blocks and capacity (so out-of-memory still raises), but torch.accelerator's
// memory_* calls find no c10::DeviceAllocator behind PrivateUse1 and fail.
#include "emu.h"

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace trainready_emu {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kAlignment = 64; // as c10's CPU allocator: vectorised CPU kernels use it
constexpr size_t kLargeBlock = 1 << 20; // cuda's split between its small and large pools
constexpr int64_t kDefaultCapacityGiB = 16;

// Bytes each device may hold: a real limit, so running out of memory is testable.
// TRAINREADY_EMU_MEMORY_GIB overrides it (read once, at the first allocation).
size_t capacity_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("TRAINREADY_EMU_MEMORY_GIB");
    double gib = env ? std::atof(env) : 0.0;
    if (gib <= 0) {
      gib = static_cast<double>(kDefaultCapacityGiB);
    }
    return static_cast<size_t>(gib * static_cast<double>(1ull << 30));
  }();
  return bytes;
}

struct Block {
  size_t requested;
  size_t padded;
  c10::DeviceIndex device;
};

void count(StatArray& stats, size_t pool, int64_t amount) {
  for (size_t type : {static_cast<size_t>(StatType::AGGREGATE), pool}) {
    if (amount >= 0) {
      stats[type].increase(static_cast<size_t>(amount));
    } else {
      stats[type].decrease(static_cast<size_t>(-amount));
    }
  }
}

// One block in or out (sign +1 / -1): as cuda counts them, allocated and reserved bytes are
// whole blocks (here: padded to the alignment), requested bytes what the caller asked for.
void account(DeviceStats& s, const Block& b, int sign) {
  const auto pool = static_cast<size_t>(
      b.padded >= kLargeBlock ? StatType::LARGE_POOL : StatType::SMALL_POOL);
  const auto padded = sign * static_cast<int64_t>(b.padded);
  for (StatArray* a : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes}) {
    count(*a, pool, padded);
  }
  count(s.requested_bytes, pool, sign * static_cast<int64_t>(b.requested));
  for (StatArray* a : {&s.allocation, &s.segment, &s.active}) {
    count(*a, pool, sign);
  }
  (sign > 0 ? s.num_device_alloc : s.num_device_free)++;
}

#ifdef TRAINREADY_EMU_MINIMAL
using AllocatorBase = c10::Allocator;
#define EMU_DEVICE_ALLOCATOR_OVERRIDE // the statistics below are this file's own, unexported
#else
using AllocatorBase = c10::DeviceAllocator;
#define EMU_DEVICE_ALLOCATOR_OVERRIDE override
#endif

class Allocator final : public AllocatorBase {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = current_device();
    void* ptr = nbytes ? reserve(device, nbytes) : nullptr;
    return {ptr, ptr, &release_block, c10::Device(kType, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &release_block;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count); // device memory is host memory
  }

  bool initialized() EMU_DEVICE_ALLOCATOR_OVERRIDE {
    return true;
  }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) EMU_DEVICE_ALLOCATOR_OVERRIDE {
  } // nothing cached
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/)
      EMU_DEVICE_ALLOCATOR_OVERRIDE {} // one stream

  DeviceStats getDeviceStats(c10::DeviceIndex device) EMU_DEVICE_ALLOCATOR_OVERRIDE {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_.at(resolve_index(device));
  }

  void resetAccumulatedStats(c10::DeviceIndex device) EMU_DEVICE_ALLOCATOR_OVERRIDE {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_.at(resolve_index(device));
    for (StatArray* a : arrays(s)) {
      for (auto& stat : *a) {
        stat.reset_accumulated();
      }
    }
    s.num_alloc_retries = s.num_ooms = s.num_sync_all_streams = 0;
    s.num_device_alloc = s.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) EMU_DEVICE_ALLOCATOR_OVERRIDE {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_.at(resolve_index(device));
    for (StatArray* a : arrays(s)) {
      for (auto& stat : *a) {
        stat.reset_peak();
      }
    }
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device)
      EMU_DEVICE_ALLOCATOR_OVERRIDE {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto reserved = stats_.at(resolve_index(device)).reserved_bytes[0].current;
    return {capacity_bytes() - static_cast<size_t>(reserved), capacity_bytes()};
  }

  std::optional<c10::DeviceIndex> device_of(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(const_cast<void*>(ptr));
    if (it == blocks_.end()) {
      return std::nullopt;
    }
    return it->second.device;
  }

  void free_block(void* ptr) {
    if (ptr == nullptr) {
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) {
      return; // not emu's: never free it (and never throw from a deleter)
    }
    auto& s = stats_[it->second.device];
    account(s, it->second, -1);
    report(ptr, -static_cast<int64_t>(it->second.padded), s, it->second.device);
    blocks_.erase(it);
    std::free(ptr);
  }

 private:
  static void release_block(void* ptr);

  // One allocation (+bytes) or free (-bytes) to the profiler, with the totals after it (a
  // no-op unless a profiler with profile_memory=True is running).
  static void report(void* ptr, int64_t bytes, const DeviceStats& s, c10::DeviceIndex device) {
    const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
    c10::reportMemoryUsageToProfiler(
        ptr,
        bytes,
        static_cast<size_t>(s.allocated_bytes[aggregate].current),
        static_cast<size_t>(s.reserved_bytes[aggregate].current),
        c10::Device(kType, device));
  }

  static std::array<StatArray*, 9> arrays(DeviceStats& s) {
    return {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
            &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes};
  }

  void* reserve(c10::DeviceIndex device, size_t nbytes) {
    const size_t padded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_[device];
    const auto reserved = static_cast<size_t>(s.reserved_bytes[0].current);
    void* ptr = nullptr;
    if (reserved + padded <= capacity_bytes()) {
      if (posix_memalign(&ptr, kAlignment, padded) != 0) {
        ptr = nullptr;
      }
    }
    if (ptr == nullptr) {
      s.num_ooms++;
      TORCH_CHECK_WITH(
          OutOfMemoryError,
          false,
          "emu out of memory: tried to allocate ",
          nbytes,
          " bytes on emu:",
          static_cast<int>(device),
          ", which holds ",
          reserved,
          " of its ",
          capacity_bytes(),
          " bytes (TRAINREADY_EMU_MEMORY_GIB sets the capacity)");
    }
    const Block block{nbytes, padded, device};
    blocks_.emplace(ptr, block);
    account(s, block, +1);
    report(ptr, static_cast<int64_t>(padded), s, device);
    return ptr;
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;
  std::array<DeviceStats, kDeviceCount> stats_;
};

// Leaked on purpose: tensors freed while Python exits must still find their allocator.
Allocator* const g_allocator = new Allocator();

void Allocator::release_block(void* ptr) {
  g_allocator->free_block(ptr);
}

[[maybe_unused]] const bool allocator_registered = [] {
  c10::SetAllocator(kType, g_allocator);
  return true;
}();

#ifndef TRAINREADY_EMU_MINIMAL
void put(c10::Dict<std::string, int64_t>& out, const std::string& key, const Stat& stat) {
  out.insert(key + ".current", stat.current);
  out.insert(key + ".peak", stat.peak);
  out.insert(key + ".allocated", stat.allocated);
  out.insert(key + ".freed", stat.freed);
}
#endif // TRAINREADY_EMU_MINIMAL

} // namespace

std::optional<c10::DeviceIndex> device_of(const void* ptr) {
  return g_allocator->device_of(ptr);
}

#ifndef TRAINREADY_EMU_MINIMAL
c10::Dict<std::string, int64_t> memory_stats(c10::DeviceIndex device) {
  // The flat keys of torch.cuda.memory_stats / torch.accelerator.memory_stats.
  const DeviceStats s = g_allocator->getDeviceStats(device);
  const std::pair<const char*, const StatArray*> arrays[] = {
      {"allocation", &s.allocation},
      {"segment", &s.segment},
      {"active", &s.active},
      {"inactive_split", &s.inactive_split},
      {"allocated_bytes", &s.allocated_bytes},
      {"reserved_bytes", &s.reserved_bytes},
      {"active_bytes", &s.active_bytes},
      {"inactive_split_bytes", &s.inactive_split_bytes},
      {"requested_bytes", &s.requested_bytes},
  };
  const char* pools[] = {"all", "small_pool", "large_pool"};
  c10::Dict<std::string, int64_t> out;
  for (const auto& [name, array] : arrays) {
    for (const auto i : c10::irange(3)) {
      put(out, std::string(name) + "." + pools[i], (*array)[i]);
    }
  }
  put(out, "oversize_allocations", s.oversize_allocations);
  put(out, "oversize_segments", s.oversize_segments);
  out.insert("num_alloc_retries", s.num_alloc_retries);
  out.insert("num_ooms", s.num_ooms);
  out.insert("num_sync_all_streams", s.num_sync_all_streams);
  out.insert("num_device_alloc", s.num_device_alloc);
  out.insert("num_device_free", s.num_device_free);
  out.insert("max_split_size", s.max_split_size);
  return out;
}

std::pair<int64_t, int64_t> memory_info(c10::DeviceIndex device) {
  const auto [free, total] = g_allocator->getMemoryInfo(device);
  return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

void reset_peak_memory_stats(c10::DeviceIndex device) {
  g_allocator->resetPeakStats(device);
}

void reset_accumulated_memory_stats(c10::DeviceIndex device) {
  g_allocator->resetAccumulatedStats(device);
}
#endif // TRAINREADY_EMU_MINIMAL

} // namespace trainready_emu
