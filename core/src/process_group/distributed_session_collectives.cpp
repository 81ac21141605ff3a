// DistributedSession's collectives for strategies: all-reduce (tensors packed into flat
// messages, or plain numbers), broadcast, barrier; each guarded so that a failure names the
// lost ranks.

#include <torch/csrc/utils/tensor_flatten.h>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "process_group/distributed_session_impl.hpp"

namespace wanfw {

namespace {

/// Tensors per packed message in all_reduce (elements).
constexpr std::int64_t kPackElements = 32ll << 20;

}  // namespace

void DistributedSession::all_reduce(const std::vector<at::Tensor>& tensors, Reduce op) const {
  if (tensors.empty()) return;
  const c10d::ReduceOp reduce_op = op == Reduce::Max   ? c10d::ReduceOp::MAX
                                   : op == Reduce::Min ? c10d::ReduceOp::MIN
                                                       : c10d::ReduceOp::SUM;
  guarded("an all-reduce", [&] {
    at::NoGradGuard no_grad;
    // Runs of tensors with one dtype and device travel as one flat message.
    for (std::size_t first = 0; first < tensors.size();) {
      std::size_t last = first;
      std::int64_t elements = 0;
      while (last < tensors.size() && tensors[last].scalar_type() == tensors[first].scalar_type() &&
             tensors[last].device() == tensors[first].device() &&
             (last == first || elements + tensors[last].numel() <= kPackElements))
        elements += tensors[last++].numel();
      const std::vector<at::Tensor> run(tensors.begin() + static_cast<std::ptrdiff_t>(first),
                                        tensors.begin() + static_cast<std::ptrdiff_t>(last));
      std::vector<at::Tensor> flat = {torch::utils::flatten_dense_tensors(run)};
      c10d::AllreduceOptions options;
      options.reduceOp = reduce_op;
      impl_->pg->allreduce(flat, options)->wait();
      if (op == Reduce::Mean) flat[0].div_(impl_->env.world_size);
      const auto pieces = torch::utils::unflatten_dense_tensors(flat[0], run);
      for (std::size_t i = 0; i < run.size(); ++i) run[i].copy_(pieces[i]);
      first = last;
    }
  });
}

namespace {

/// `values` as a double tensor on `device` (the backend's device: NCCL reduces on GPUs only).
at::Tensor values_tensor(const std::vector<double>& values, const c10::Device& device) {
  return at::tensor(values, at::kDouble).to(device);
}

std::vector<double> tensor_values(const at::Tensor& tensor) {
  const at::Tensor on_cpu = tensor.cpu().contiguous();
  const double* data = on_cpu.data_ptr<double>();
  return {data, data + on_cpu.numel()};
}

}  // namespace

std::vector<double> DistributedSession::all_reduce(std::vector<double> values, Reduce op) const {
  if (impl_->env.world_size == 1 || values.empty()) return values;
  const at::Tensor tensor = values_tensor(values, impl_->device);
  all_reduce({tensor}, op);
  return tensor_values(tensor);
}

std::vector<double> DistributedSession::broadcast(std::vector<double> values, int root) const {
  if (impl_->env.world_size == 1 || values.empty()) return values;
  const at::Tensor tensor = values_tensor(values, impl_->device);
  broadcast({tensor}, root);
  return tensor_values(tensor);
}

void DistributedSession::broadcast(const std::vector<at::Tensor>& tensors, int root) const {
  if (tensors.empty()) return;
  guarded("a broadcast", [&] {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> state = tensors;
    c10d::broadcast_coalesced(impl_->pg, state, 256u << 20, root);
  });
}

void DistributedSession::barrier() const {
  guarded("a barrier", [&] { impl_->pg->barrier()->wait(); });
}

}  // namespace wanfw
