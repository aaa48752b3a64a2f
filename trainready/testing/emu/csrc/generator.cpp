// One random generator per emu device. Its numbers come from a CPU (mt19937) engine it owns,
// because emu's random kernels are CPU kernels run by the fallback: the fallback hands them
// this engine (engine_of) in place of the emu generator, so torch.manual_seed, per-device
// seeds and get/set_rng_state govern what randn on emu draws.
#include "emu.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GeneratorImpl.h>

#include <array>
#include <mutex>

namespace trainready_emu {
namespace {

class Generator final : public c10::GeneratorImpl {
 public:
  explicit Generator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(
            c10::Device(kType, device),
            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        engine_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  static c10::DeviceType device_type() {
    return kType;
  }

  // The engine's own mutex: CPU kernels lock it while they draw.
  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    engine_.set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    engine_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    return engine_.get_offset();
  }
  uint64_t current_seed() const override {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    return engine_.current_seed();
  }
  uint64_t seed() override {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    return engine_.seed();
  }
  void set_state(const c10::TensorImpl& state) override {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    engine_.unsafeGetGeneratorImpl()->set_state(state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    return engine_.unsafeGetGeneratorImpl()->get_state();
  }

  const at::Generator& engine() const {
    return engine_;
  }

 private:
  Generator* clone_impl() const override {
    auto* copy = new Generator(device_.index());
    std::lock_guard<std::mutex> lock(engine_.mutex());
    copy->engine_ = engine_.clone();
    return copy;
  }

  mutable at::Generator engine_;
};

} // namespace

const at::Generator& default_generator(c10::DeviceIndex device) {
  // Seeded like the CPU default generator, so a fresh process draws the same numbers.
  static std::array<at::Generator, kDeviceCount> generators = [] {
    std::array<at::Generator, kDeviceCount> gens;
    for (c10::DeviceIndex i = 0; i < kDeviceCount; ++i) {
      gens[i] = at::make_generator<Generator>(i);
    }
    return gens;
  }();
  return generators[resolve_index(device)];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<Generator>(resolve_index(device));
}

at::Generator engine_of(const at::Generator& emu_generator) {
  return at::check_generator<Generator>(emu_generator)->engine();
}

} // namespace trainready_emu
