#include "networks/frozen_teacher.hpp"

#include <torch/torch.h>

#include "wan/flow_matching.hpp"

namespace wan_distill {

namespace {
wan::WanPlacement build_at(const TeacherPlacement& p) {
  return {p.offload ? torch::Device(torch::kCPU) : p.device, p.dtype, p.fp8_base};
}
}  // namespace

FrozenTeacher::FrozenTeacher(const wan::WanConfig& config, wan::Expert expert, double boundary,
                             TeacherPlacement placement)
    : denoiser_(config, expert, boundary, build_at(placement)), placement_(placement) {
  freeze();
}

FrozenTeacher::FrozenTeacher(const FrozenTeacher& other, const torch::Device& device)
    : denoiser_(other.denoiser_, other.placement_.offload ? torch::Device(torch::kCPU) : device),
      placement_(other.placement_) {
  placement_.device = device;
  freeze();
}

std::shared_ptr<FrozenTeacher> FrozenTeacher::on(const torch::Device& device) const {
  return std::shared_ptr<FrozenTeacher>(new FrozenTeacher(*this, device));
}

void FrozenTeacher::freeze() {
  denoiser_.module()->eval();
  for (auto& parameter : denoiser_.module()->parameters()) parameter.set_requires_grad(false);
}

void FrozenTeacher::load_weights(const std::string& weights, const std::string& subfolder) {
  torch::NoGradGuard no_grad;
  denoiser_.load_weights(weights, subfolder);
}

FrozenTeacher::Use::Use(FrozenTeacher& teacher) : teacher_(teacher), lock_(teacher.mutex_) {
  if (teacher_.placement_.offload) teacher_.denoiser_.module()->to(teacher_.placement_.device);
}

FrozenTeacher::Use::~Use() {
  if (teacher_.placement_.offload) teacher_.denoiser_.module()->to(torch::kCPU);
}

torch::Tensor FrozenTeacher::velocity(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                                      const torch::Tensor& negative, const torch::Tensor& y,
                                      const torch::Tensor& sigma, double guidance) {
  torch::NoGradGuard no_grad;
  const auto& p = placement_;
  auto in = [&](const torch::Tensor& v, bool cast) {
    if (!v.defined()) return v;
    return cast ? v.to(p.device, p.dtype) : v.to(p.device);
  };
  const torch::Tensor tx = in(x, true), tt = in(t, false), ty = in(y, true), ts = in(sigma, false);
  torch::Tensor v = denoiser_.forward(tx, tt, in(context, true), ty, ts).to(torch::kFloat32);
  if (negative.defined() && guidance != 1.0) {
    const torch::Tensor unconditional = denoiser_.forward(tx, tt, in(negative, true), ty, ts).to(torch::kFloat32);
    v = wan::guided_velocity(v, unconditional, guidance);
  }
  return v.to(x.device());
}

}  // namespace wan_distill
