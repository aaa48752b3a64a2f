// Device management for emu: the current device, the DeviceGuard implementation (streams,
// events) and the PrivateUse1 hooks that torch.accelerator and the generators go through.
// The minimal profile (TRAINREADY_EMU_MINIMAL) keeps only what c10 makes a guard implement
// (pure virtual: device get/set/exchange, the count, getStream/exchangeStream) and leaves every
// other method to c10's defaults, which raise "Backend doesn't support ..." as on a young
// backend; its hooks keep what torch needs to find the device at all (see Hooks below).
#include "emu.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <chrono>

namespace trainready_emu {

namespace {
// Per thread, as CUDA's current device is.
thread_local c10::DeviceIndex t_current = 0;
} // namespace

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      index >= 0 && index < kDeviceCount,
      "emu device index ",
      static_cast<int>(index),
      " is out of range: emu has ",
      static_cast<int>(kDeviceCount),
      " devices");
}

c10::DeviceIndex resolve_index(c10::DeviceIndex index) {
  if (index < 0) {
    return t_current;
  }
  check_index(index);
  return index;
}

c10::DeviceIndex current_device() {
  return t_current;
}

void set_device(c10::DeviceIndex index) {
  check_index(index);
  t_current = index;
}

namespace {

#ifndef TRAINREADY_EMU_MINIMAL
// The device runs every op to completion before returning, so an event is recorded the
// moment `record` is called: a host timestamp is exactly when the work before it ended.
struct Event {
  bool timing = false;
  bool recorded = false;
  double ms = 0.0;
};

double host_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

#endif // TRAINREADY_EMU_MINIMAL

c10::Stream default_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::DEFAULT, c10::Device(kType, resolve_index(index)));
}

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  GuardImpl() = default;
  explicit GuardImpl(c10::DeviceType t) {
    TORCH_CHECK(t == kType, "emu's guard got device type ", t);
  }

  c10::DeviceType type() const override {
    return kType;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = current_device();
    setDevice(d);
    return c10::Device(kType, old);
  }

  c10::Device getDevice() const override {
    return c10::Device(kType, current_device());
  }

  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kType, "expected an emu device, got ", d);
    set_device(resolve_index(d.index()));
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kDeviceCount) {
      t_current = d.index();
    }
  }

  // One stream per device, the default one: the device is synchronous, so more would only
  // be names for the same order of work.
  c10::Stream getStream(c10::Device d) const override {
    return default_stream(d.index());
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return default_stream(s.device_index());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return kDeviceCount;
  }

#ifndef TRAINREADY_EMU_MINIMAL
  c10::Stream getDefaultStream(c10::Device d) const override {
    return default_stream(d.index());
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return default_stream(d.index());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return default_stream(d.index());
  }

  c10::DeviceCapability getDeviceCapability(c10::Device /*d*/) const override {
    return c10::DeviceCapability(); // every dtype: kernels run on the CPU
  }

  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "event of emu:",
        static_cast<int>(device_index),
        " recorded on a stream of emu:",
        static_cast<int>(stream.device_index()));
    auto* e = static_cast<Event*>(*event);
    if (e == nullptr) {
      e = new Event();
      e->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = e;
    }
    e->recorded = true;
    e->ms = host_ms();
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<Event*>(event);
  }

  // Work is finished when its op returns: nothing is ever pending.
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override {
    return true;
  }
  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {}

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/)
      const override {
    auto* a = static_cast<Event*>(start);
    auto* b = static_cast<Event*>(end);
    TORCH_CHECK(a && b && a->recorded && b->recorded, "both events must be recorded first");
    TORCH_CHECK(
        a->timing && b->timing, "both events must be created with enable_timing=True");
    return b->ms - a->ms;
  }
#endif // TRAINREADY_EMU_MINIMAL
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// What torch.accelerator, the autograd engine and the generators reach through. The minimal
// profile keeps only hasPrimaryContext (pure virtual), yet must register the hooks: without
// them torch still finds the device (torch.accelerator.current_accelerator() names it) but every
// backward on it fails with "Please register PrivateUse1HooksInterface by
// `RegisterPrivateUse1HooksInterface` first" (torch 2.13). Every other hook keeps c10's
// default, which raises NotImplementedError naming the hook (getNewGenerator,
// getPinnedMemoryAllocator, resizePrivateUse1Bytes...), or says "not pinned" (isPinnedPtr).
struct Hooks final : public at::PrivateUse1HooksInterface {
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override {
    return true; // nothing to initialise: the device is host memory and CPU kernels
  }
#ifndef TRAINREADY_EMU_MINIMAL
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return true;
  }
  c10::DeviceIndex deviceCount() const override {
    return kDeviceCount;
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_device(device);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = current_device();
    set_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= kDeviceCount) {
      return current_device(); // "maybe": no device to switch to is not an error
    }
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }
  c10::Device getDeviceFromPtr(void* data) const override {
    auto device = device_of(data);
    TORCH_CHECK(device.has_value(), "pointer ", data, " is not emu memory");
    return c10::Device(kType, *device);
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned_host(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_host_allocator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    // Host memory, so the CPU resize (allocate with the storage's allocator, memcpy) is right;
    // the guard makes that allocator allocate on the storage's own device.
    c10::DeviceGuard guard(storage.device());
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }
#endif // TRAINREADY_EMU_MINIMAL
};

[[maybe_unused]] const bool hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks()); // leaked on purpose: lives as long as torch
  return true;
}();

} // namespace
} // namespace trainready_emu
