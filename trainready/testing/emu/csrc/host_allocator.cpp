// emu's pinned host memory: what `tensor.pin_memory()`, `torch.empty(..., pin_memory=True)` and
// DataLoader(pin_memory=True) ask the device for, and what torch.distributed.checkpoint stages
// shards in before a `non_blocking` copy. A real backend page-locks it so its DMA engine can
// read it; emu's copies are synchronous memcpys, so page-aligned host memory is all it needs.
// Each block is remembered so `is_pinned()` (the hooks' isPinnedPtr) tells it from any other
// host memory. No caching: a freed block goes back to the system at once.
#include "emu.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <unistd.h>

namespace trainready_emu {
namespace {

size_t page_size() {
  static const size_t bytes = [] {
    const long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? static_cast<size_t>(page) : size_t{4096};
  }();
  return bytes;
}

std::mutex mutex;
std::unordered_map<const void*, size_t> blocks; // start -> bytes

void release(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    blocks.erase(ptr);
  }
  std::free(ptr);
}

struct HostAllocator final : at::HostAllocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* data = nullptr;
    if (nbytes > 0) {
      const size_t padded = (nbytes + page_size() - 1) / page_size() * page_size();
      data = std::aligned_alloc(page_size(), padded);
      TORCH_CHECK(data, "emu: out of pinned host memory allocating ", nbytes, " bytes");
      std::lock_guard<std::mutex> lock(mutex);
      blocks.emplace(data, nbytes);
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &release;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  // emu's copies finish before they return: no stream work can still read a freed block.
  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override {
    return true;
  }
  void empty_cache() override {} // nothing cached
  at::HostStats get_stats() override {
    return {};
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

HostAllocator host_allocator;
REGISTER_HOST_ALLOCATOR(kType, &host_allocator);

} // namespace

bool is_pinned_host(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex);
  if (blocks.count(ptr)) {
    return true;
  }
  for (const auto& [start, bytes] : blocks) { // a view into a pinned block is pinned too
    const auto* begin = static_cast<const char*>(start);
    if (ptr >= begin && ptr < begin + bytes) {
      return true;
    }
  }
  return false;
}

at::Allocator* pinned_host_allocator() {
  return &host_allocator;
}

} // namespace trainready_emu
