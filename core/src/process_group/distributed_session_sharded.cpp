// DistributedSession's collectives of sharded training: all-gather into one flat tensor, reduce-scatter from one,
// and all-to-all of equal chunks. Each checks its sizes on the calling rank first, so a mismatch
// is named there instead of hanging the others in the backend.

#include <utility>

#include <fmt/format.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "process_group/distributed_session_impl.hpp"
#include "wanfw/error.hpp"

// The backends' flat collectives have new names from mid-2026 (all_gather_single,
// reduce_scatter_single, all_to_all_single); the old ones, called here, forward to them and build
// against every LibTorch wanfw supports, the GPU machines' older ones included.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace wanfw {

namespace {

void require(bool ok, const char* collective, const std::string& problem) {
  if (!ok) throw Error(fmt::format("{}: {}", collective, problem), "a strategy passed tensors of the wrong size");
}

void require_flat(const at::Tensor& tensor, const c10::Device& device, const char* collective, const char* role) {
  require(tensor.defined() && tensor.is_contiguous(), collective, fmt::format("the {} must be contiguous", role));
  require(tensor.device() == device, collective,
          fmt::format("the {} is on {}, the process group on {}", role, tensor.device().str(), device.str()));
}

/// `whole` (world x piece.numel() values, one dtype) and `piece`, both flat on `device`.
void require_pieces(const at::Tensor& whole, const at::Tensor& piece, std::int64_t world, const c10::Device& device,
                    const char* collective, const char* whole_role, const char* piece_role) {
  require_flat(whole, device, collective, whole_role);
  require_flat(piece, device, collective, piece_role);
  require(whole.numel() == world * piece.numel() && whole.scalar_type() == piece.scalar_type(), collective,
          fmt::format("the {} holds {} {} values; {} ranks x {} {} values of {} need {}", whole_role, whole.numel(),
                      c10::toString(whole.scalar_type()), world, piece.numel(), piece_role,
                      c10::toString(piece.scalar_type()), world * piece.numel()));
}

}  // namespace

struct DistributedSession::PendingGather::Work {
  c10::intrusive_ptr<c10d::Work> work;
};

DistributedSession::PendingGather DistributedSession::start_all_gather(const at::Tensor& output,
                                                                       const at::Tensor& input) const {
  const char* what = "an all-gather";
  const std::int64_t world = impl_->env.world_size;
  require_pieces(output, input, world, impl_->device, what, "output", "input");
  at::NoGradGuard no_grad;
  if (world == 1) {
    output.view(-1).copy_(input.view(-1));
    return {};
  }
  auto work = std::make_unique<PendingGather::Work>();
  guarded(what, [&] {
    at::Tensor out = output.view(-1), in = input.view(-1);
    work->work = impl_->pg->_allgather_base(out, in);
  });
  return {this, std::move(work)};
}

DistributedSession::PendingGather::PendingGather() = default;

DistributedSession::PendingGather::PendingGather(const DistributedSession* session, std::unique_ptr<Work> work)
    : session_(session), work_(std::move(work)) {}

DistributedSession::PendingGather::~PendingGather() {
  if (session_ == nullptr) return;
  try {  // dropped unfinished (an exception unwinding): finish it, so its buffers outlive the transfer
    work_->work->wait();
  } catch (...) {
  }
}

DistributedSession::PendingGather::PendingGather(PendingGather&& other) noexcept
    : session_(std::exchange(other.session_, nullptr)), work_(std::move(other.work_)) {}

DistributedSession::PendingGather& DistributedSession::PendingGather::operator=(PendingGather&& other) noexcept {
  if (this != &other) {
    PendingGather finished = std::move(*this);  // waits for what this held
    session_ = std::exchange(other.session_, nullptr);
    work_ = std::move(other.work_);
  }
  return *this;
}

void DistributedSession::all_gather(const at::Tensor& output, const at::Tensor& input) const {
  start_all_gather(output, input).wait();
}

void DistributedSession::PendingGather::wait() {
  if (session_ == nullptr) return;
  const DistributedSession* session = std::exchange(session_, nullptr);
  session->guarded("an all-gather", [&] { work_->work->wait(); });
  work_.reset();
}

void DistributedSession::reduce_scatter(const at::Tensor& output, const at::Tensor& input, Reduce op) const {
  const char* what = "a reduce-scatter";
  const std::int64_t world = impl_->env.world_size;
  require_pieces(input, output, world, impl_->device, what, "input", "output");
  at::NoGradGuard no_grad;
  if (world == 1) {
    output.view(-1).copy_(input.view(-1));
    return;
  }
  if (impl_->backend == "gloo") {
    // Gloo reduce-scatters by all-reducing the whole input (twice the bytes). An all-to-all hands
    // each rank every rank's chunk for it, (N - 1) / N of the input as NCCL's ring does, and the
    // rank reduces them itself, in rank order.
    const at::Tensor received = at::empty_like(input);
    guarded(what, [&] {
      at::Tensor out = received.view({world, -1}), in = input.view({world, -1});
      std::vector<std::int64_t> equal;
      impl_->pg->alltoall_base(out, in, equal, equal)->wait();
    });
    const at::Tensor chunks = received.view({world, -1});
    const at::Tensor reduced = op == Reduce::Max ? chunks.amax(0) : op == Reduce::Min ? chunks.amin(0) : chunks.sum(0);
    output.view(-1).copy_(reduced);
  } else {
    c10d::ReduceScatterOptions options;
    options.reduceOp = op == Reduce::Max   ? c10d::ReduceOp::MAX
                       : op == Reduce::Min ? c10d::ReduceOp::MIN
                                           : c10d::ReduceOp::SUM;
    guarded(what, [&] {
      at::Tensor out = output.view(-1), in = input.view(-1);
      impl_->pg->_reduce_scatter_base(out, in, options)->wait();
    });
  }
  if (op == Reduce::Mean) output.div_(world);  // no AVG on Gloo: one rule for both backends
}

void DistributedSession::all_to_all(const at::Tensor& output, const at::Tensor& input) const {
  const char* what = "an all-to-all";
  require_flat(output, impl_->device, what, "output");
  require_flat(input, impl_->device, what, "input");
  const std::int64_t world = impl_->env.world_size;
  require(
      output.sizes() == input.sizes() && output.scalar_type() == input.scalar_type(), what,
      fmt::format("the output is {} of {}, the input {} of {}: they must match", c10::str(output.sizes()),
                  c10::toString(output.scalar_type()), c10::str(input.sizes()), c10::toString(input.scalar_type())));
  require(input.dim() >= 1 && input.size(0) % world == 0, what,
          fmt::format("dim 0 of {} does not split into {} equal chunks", c10::str(input.sizes()), world));
  at::NoGradGuard no_grad;
  if (world == 1) {
    output.copy_(input);
    return;
  }
  guarded(what, [&] {
    at::Tensor out = output, in = input;
    std::vector<std::int64_t> equal;  // empty: equal chunks of dim 0
    impl_->pg->alltoall_base(out, in, equal, equal)->wait();
  });
}

}  // namespace wanfw
