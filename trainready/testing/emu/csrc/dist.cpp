// emugloo: the process-group backend torch.distributed picks for emu tensors. It stages emu
// tensors through host (CPU) copies and runs each collective on a gloo backend, as a vendor
// backend would drive its own fabric: torch's c10d ops dispatch emu tensors (PrivateUse1) to
// the backend registered for the "emu" device type, which is this one.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <mutex>
#include <utility>

namespace trainready_emu {
namespace {

using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<Tensors>;
// (emu tensor, its host copy): results to copy back once the host collective is done.
using Writeback = std::vector<std::pair<at::Tensor, at::Tensor>>;

// A dense host copy of an emu tensor (gloo wants contiguous CPU tensors); others pass as is.
at::Tensor to_host(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone()) {
    return t;
  }
  return t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous);
}

Tensors to_host(const Tensors& ts) {
  Tensors out;
  out.reserve(ts.size());
  for (const auto& t : ts) {
    out.push_back(to_host(t));
  }
  return out;
}

TensorLists to_host(const TensorLists& lists) {
  TensorLists out;
  out.reserve(lists.size());
  for (const auto& ts : lists) {
    out.push_back(to_host(ts));
  }
  return out;
}

at::Tensor output_to_host(const at::Tensor& t, Writeback& wb) {
  auto h = to_host(t);
  if (t.defined() && t.is_privateuseone()) {
    wb.emplace_back(t, h);
  }
  return h;
}

Tensors outputs_to_host(const Tensors& ts, Writeback& wb) {
  Tensors out;
  out.reserve(ts.size());
  for (const auto& t : ts) {
    out.push_back(output_to_host(t, wb));
  }
  return out;
}

TensorLists outputs_to_host(const TensorLists& lists, Writeback& wb) {
  TensorLists out;
  out.reserve(lists.size());
  for (const auto& ts : lists) {
    out.push_back(outputs_to_host(ts, wb));
  }
  return out;
}

Tensors flatten(const TensorLists& lists) {
  Tensors out;
  for (const auto& ts : lists) {
    out.insert(out.end(), ts.begin(), ts.end());
  }
  return out;
}

// The host collective's work; completing it copies the results back into the emu tensors.
class HostWork final : public c10d::Work {
 public:
  HostWork(c10::intrusive_ptr<c10d::Work> inner, Writeback writeback, Tensors result)
      : c10d::Work(-1, inner->retrieveOpType()),
        inner_(std::move(inner)),
        writeback_(std::move(writeback)),
        result_(std::move(result)) {}

  bool isCompleted() override {
    if (!inner_->isCompleted()) {
      return false;
    }
    copy_back();
    return true;
  }
  bool isSuccess() const override {
    return inner_->isSuccess();
  }
  std::exception_ptr exception() const override {
    return inner_->exception();
  }
  int sourceRank() const override {
    return inner_->sourceRank();
  }
  std::vector<at::Tensor> result() override {
    return result_;
  }
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    inner_->wait(timeout);
    copy_back();
    return true;
  }
  // The device is synchronous: the future of a collective is handed out finished.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait();
    auto future = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(result_));
    return future;
  }

 private:
  void copy_back() {
    std::call_once(copied_, [this] {
      for (auto& [device, host] : writeback_) {
        device.copy_(host);
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> inner_;
  Writeback writeback_;
  Tensors result_;
  std::once_flag copied_;
};

c10::intrusive_ptr<c10d::Work> staged(
    c10::intrusive_ptr<c10d::Work> inner, Writeback wb, Tensors result) {
  return c10::make_intrusive<HostWork>(std::move(inner), std::move(wb), std::move(result));
}

class EmuGlooBackend final : public c10d::Backend {
 public:
  explicit EmuGlooBackend(c10::intrusive_ptr<c10d::Backend> host)
      : c10d::Backend(host->getRank(), host->getSize()), host_(std::move(host)) {}

  const std::string getBackendName() const override {
    return "emugloo";
  }

  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& ts, const c10d::BroadcastOptions& o)
      override {
    Writeback wb;
    auto h = outputs_to_host(ts, wb);
    return staged(host_->broadcast(h, o), std::move(wb), ts);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& ts, const c10d::AllreduceOptions& o)
      override {
    Writeback wb;
    auto h = outputs_to_host(ts, wb);
    return staged(host_->allreduce(h, o), std::move(wb), ts);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      Tensors& ts, const c10d::AllreduceCoalescedOptions& o) override {
    Writeback wb;
    auto h = outputs_to_host(ts, wb);
    return staged(host_->allreduce_coalesced(h, o), std::move(wb), ts);
  }

  c10::intrusive_ptr<c10d::Work> reduce(Tensors& ts, const c10d::ReduceOptions& o) override {
    Writeback wb;
    auto h = outputs_to_host(ts, wb);
    return staged(host_->reduce(h, o), std::move(wb), ts);
  }

  c10::intrusive_ptr<c10d::Work> allgather(
      TensorLists& outs, Tensors& ins, const c10d::AllgatherOptions& o) override {
    Writeback wb;
    auto ho = outputs_to_host(outs, wb);
    auto hi = to_host(ins);
    return staged(host_->allgather(ho, hi, o), std::move(wb), flatten(outs));
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) override {
    Writeback wb;
    auto ho = output_to_host(out, wb);
    auto hi = to_host(in);
    return staged(host_->_allgather_base(ho, hi, o), std::move(wb), {out});
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      TensorLists& outs, Tensors& ins, const c10d::AllgatherOptions& o) override {
    Writeback wb;
    auto ho = outputs_to_host(outs, wb);
    auto hi = to_host(ins);
    return staged(host_->allgather_coalesced(ho, hi, o), std::move(wb), flatten(outs));
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      Tensors& outs, Tensors& ins, const c10d::AllgatherOptions& o) override {
    Writeback wb;
    auto ho = outputs_to_host(outs, wb);
    auto hi = to_host(ins);
    return staged(host_->allgather_into_tensor_coalesced(ho, hi, o), std::move(wb), outs);
  }

  c10::intrusive_ptr<c10d::Work> gather(
      TensorLists& outs, Tensors& ins, const c10d::GatherOptions& o) override {
    Writeback wb;
    auto ho = outputs_to_host(outs, wb);
    auto hi = to_host(ins);
    return staged(host_->gather(ho, hi, o), std::move(wb), flatten(outs));
  }

  c10::intrusive_ptr<c10d::Work> scatter(
      Tensors& outs, TensorLists& ins, const c10d::ScatterOptions& o) override {
    Writeback wb;
    auto ho = outputs_to_host(outs, wb);
    auto hi = to_host(ins);
    return staged(host_->scatter(ho, hi, o), std::move(wb), outs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      Tensors& outs, TensorLists& ins, const c10d::ReduceScatterOptions& o) override {
    Writeback wb;
    auto ho = outputs_to_host(outs, wb);
    auto hi = to_host(ins);
    return staged(host_->reduce_scatter(ho, hi, o), std::move(wb), outs);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    Writeback wb;
    auto ho = output_to_host(out, wb);
    auto hi = to_host(in);
    return staged(host_->_reduce_scatter_base(ho, hi, o), std::move(wb), {out});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      Tensors& outs, Tensors& ins, const c10d::ReduceScatterOptions& o) override {
    Writeback wb;
    auto ho = outputs_to_host(outs, wb);
    auto hi = to_host(ins);
    return staged(host_->reduce_scatter_tensor_coalesced(ho, hi, o), std::move(wb), outs);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& out,
      at::Tensor& in,
      std::vector<int64_t>& out_splits,
      std::vector<int64_t>& in_splits,
      const c10d::AllToAllOptions& o) override {
    Writeback wb;
    auto ho = output_to_host(out, wb);
    auto hi = to_host(in);
    return staged(
        host_->alltoall_base(ho, hi, out_splits, in_splits, o), std::move(wb), {out});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(
      Tensors& outs, Tensors& ins, const c10d::AllToAllOptions& o) override {
    Writeback wb;
    auto ho = outputs_to_host(outs, wb);
    auto hi = to_host(ins);
    return staged(host_->alltoall(ho, hi, o), std::move(wb), outs);
  }

  c10::intrusive_ptr<c10d::Work> send(Tensors& ts, int dst, int tag) override {
    auto h = to_host(ts);
    return staged(host_->send(h, dst, tag), {}, ts);
  }

  c10::intrusive_ptr<c10d::Work> recv(Tensors& ts, int src, int tag) override {
    Writeback wb;
    auto h = outputs_to_host(ts, wb);
    return staged(host_->recv(h, src, tag), std::move(wb), ts);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(Tensors& ts, int tag) override {
    Writeback wb;
    auto h = outputs_to_host(ts, wb);
    return staged(host_->recvAnysource(h, tag), std::move(wb), ts);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override {
    return host_->barrier(o);
  }

  void monitoredBarrier(const c10d::BarrierOptions& o, bool wait_all_ranks) override {
    host_->monitoredBarrier(o, wait_all_ranks);
  }

  void setSequenceNumberForGroup() override {
    host_->setSequenceNumberForGroup();
  }

  uint64_t getSequenceNumberForGroup() override {
    return host_->getSequenceNumberForGroup();
  }

  void setTimeout(std::chrono::milliseconds timeout) override {
    host_->setTimeout(timeout);
  }

 private:
  c10::intrusive_ptr<c10d::Backend> host_;
};

} // namespace
} // namespace trainready_emu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def(
      "wrap_gloo",
      [](const c10::intrusive_ptr<c10d::Backend>& gloo) -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<trainready_emu::EmuGlooBackend>(gloo);
      },
      "An emugloo backend that runs its collectives on `gloo` through host copies.");
}
