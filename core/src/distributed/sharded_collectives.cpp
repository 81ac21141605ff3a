// The collectives of sharded training: all-gather into one flat tensor, reduce-scatter from one,
// and all-to-all of equal chunks. Each checks its sizes on the calling rank first, so a mismatch
// is named there instead of hanging the others in the backend.

#include <fmt/format.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "distributed/distributed_session_impl.hpp"
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

}  // namespace

void DistributedSession::all_gather(const at::Tensor& output, const at::Tensor& input) const {
  const char* what = "an all-gather";
  require_flat(output, impl_->device, what, "output");
  require_flat(input, impl_->device, what, "input");
  const std::int64_t world = impl_->env.world_size;
  require(output.numel() == world * input.numel() && output.scalar_type() == input.scalar_type(), what,
          fmt::format("the output holds {} {} values; {} ranks x {} input values of {} need {}", output.numel(),
                      c10::toString(output.scalar_type()), world, input.numel(), c10::toString(input.scalar_type()),
                      world * input.numel()));
  at::NoGradGuard no_grad;
  if (world == 1) {
    output.view(-1).copy_(input.view(-1));
    return;
  }
  guarded(what, [&] {
    at::Tensor out = output.view(-1), in = input.view(-1);
    impl_->pg->_allgather_base(out, in)->wait();
  });
}

void DistributedSession::reduce_scatter(const at::Tensor& output, const at::Tensor& input, Reduce op) const {
  const char* what = "a reduce-scatter";
  require_flat(output, impl_->device, what, "output");
  require_flat(input, impl_->device, what, "input");
  const std::int64_t world = impl_->env.world_size;
  require(input.numel() == world * output.numel() && output.scalar_type() == input.scalar_type(), what,
          fmt::format("the input holds {} {} values; {} ranks x {} output values of {} need {}", input.numel(),
                      c10::toString(input.scalar_type()), world, output.numel(), c10::toString(output.scalar_type()),
                      world * output.numel()));
  at::NoGradGuard no_grad;
  if (world == 1) {
    output.view(-1).copy_(input.view(-1));
    return;
  }
  c10d::ReduceScatterOptions options;
  options.reduceOp = op == Reduce::Max   ? c10d::ReduceOp::MAX
                     : op == Reduce::Min ? c10d::ReduceOp::MIN
                                         : c10d::ReduceOp::SUM;
  guarded(what, [&] {
    at::Tensor out = output.view(-1), in = input.view(-1);
    impl_->pg->_reduce_scatter_base(out, in, options)->wait();
  });
  if (op == Reduce::Mean) output.div_(world);  // Gloo has no AVG: one rule for both backends
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
