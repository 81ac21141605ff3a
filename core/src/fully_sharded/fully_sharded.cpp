// The gradient norm over every rank's pieces of the gradient.

#include "wanfw/parallel/fully_sharded.hpp"

#include <cmath>

#include <ATen/ATen.h>

#include "wanfw/parallel/distributed.hpp"

namespace wanfw {

double sharded_gradient_norm(const std::vector<at::Tensor>& gradients, const DistributedSession& session) {
  std::vector<at::Tensor> norms;  // one per tensor, in its dtype, on its device: one transfer for all
  for (const at::Tensor& gradient : gradients)
    if (gradient.defined()) norms.push_back(at::linalg_vector_norm(gradient.detach(), 2).to(at::kDouble));
  const double squares = norms.empty() ? 0.0 : at::stack(norms).pow(2).sum().item<double>();
  return std::sqrt(session.all_reduce(std::vector<double>{squares}, Reduce::Sum).at(0));
}

double clip_to_norm(const std::vector<at::Tensor>& gradients, double norm, double max_norm) {
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0) {
    at::NoGradGuard no_grad;
    for (const at::Tensor& g : gradients)
      if (g.defined()) g.mul_(coefficient);
  }
  return norm;
}

}  // namespace wanfw
