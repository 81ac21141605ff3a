#include "block_ops_cuda.hpp"

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "block_kernels_cuda.hpp"
#include "wan/block_ops.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"

namespace wan::cuda_ops {

namespace {

namespace k = wan::kernels::cuda;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool supported(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16;
}
k::Dtype dtype_of(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat32 ? k::Dtype::Float32 : k::Dtype::BFloat16;
}
void* stream_of(const torch::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }
float* floats(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

void launched(int code, const char* kernel) {
  if (code != 0)
    throw wanfw::Error(fmt::format("the fused CUDA kernel {} failed to launch (CUDA error {})", kernel, code),
                       "a CUDA error here usually follows an earlier one; CUDA_LAUNCH_BLOCKING=1 pins it down");
}

/// The gradient as a kernel reads it: contiguous, float32 or bfloat16.
torch::Tensor readable(const torch::Tensor& g) {
  return supported(g) ? g.contiguous() : g.to(torch::kFloat32).contiguous();
}

std::int64_t row_blocks(std::int64_t rows) { return (rows + 255) / 256; }

struct RmsNorm : torch::autograd::Function<RmsNorm> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& w_in, double eps) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const torch::Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const std::int64_t dim = x.size(-1), rows = x.numel() / dim;
    torch::Tensor y = torch::empty(x.sizes(), x.options().dtype(torch::promote_types(x.scalar_type(), w.scalar_type())));
    torch::Tensor rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
    launched(k::rms_norm_forward(dtype_of(x), x.data_ptr(), dtype_of(w), w.data_ptr(), dtype_of(y), y.data_ptr(),
                                 floats(rstd), rows, dim, static_cast<float>(eps), stream_of(x)),
             "rms_norm");
    ctx->save_for_backward({x, w, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor g = readable(grads[0]);
    const std::int64_t dim = x.size(-1), rows = x.numel() / dim;
    torch::Tensor dx = torch::empty_like(x), weight_grad, partials;
    if (ctx->needs_input_grad(1)) {
      weight_grad = torch::empty({dim}, x.options().dtype(torch::kFloat32));
      partials = torch::empty({row_blocks(rows), dim}, weight_grad.options());
    }
    launched(k::rms_norm_backward(dtype_of(g), g.data_ptr(), dtype_of(x), x.data_ptr(), dtype_of(w), w.data_ptr(),
                                  floats(rstd), dx.data_ptr(), floats(weight_grad), floats(partials), rows, dim,
                                  stream_of(x)),
             "rms_norm backward");
    return {dx, weight_grad.defined() ? weight_grad.to(w.scalar_type()) : torch::Tensor(), torch::Tensor()};
  }
};

struct ModulatedLayerNorm : torch::autograd::Function<ModulatedLayerNorm> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& scale_in,
                               const torch::Tensor& shift_in, double eps) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const torch::Tensor x = x_in.contiguous(), scale = scale_in.contiguous(), shift = shift_in.contiguous();
    const std::int64_t samples = x.size(0), tokens = x.size(1), dim = x.size(2);
    const bool per_token = scale.size(1) != 1;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor mean = torch::empty({samples * tokens}, x.options().dtype(torch::kFloat32));
    torch::Tensor rstd = torch::empty_like(mean);
    launched(k::modulated_layer_norm_forward(dtype_of(x), x.data_ptr(), floats(scale), floats(shift), y.data_ptr(),
                                             floats(mean), floats(rstd), samples, tokens, dim, per_token,
                                             static_cast<float>(eps), stream_of(x)),
             "modulated_layer_norm");
    ctx->save_for_backward({x, scale, mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &scale = saved[1], &mean = saved[2], &rstd = saved[3];
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor g = readable(grads[0]);
    const std::int64_t samples = x.size(0), tokens = x.size(1), dim = x.size(2);
    const bool per_token = scale.size(1) != 1;
    torch::Tensor dx = torch::empty_like(x), scale_grad = torch::empty_like(scale), shift_grad = torch::empty_like(scale);
    torch::Tensor partials;
    if (!per_token) partials = torch::empty({2, samples, row_blocks(tokens), dim}, scale.options());
    launched(k::modulated_layer_norm_backward(dtype_of(g), g.data_ptr(), dtype_of(x), x.data_ptr(), floats(scale),
                                              floats(mean), floats(rstd), dx.data_ptr(), floats(scale_grad),
                                              floats(shift_grad), floats(partials), samples, tokens, dim, per_token,
                                              stream_of(x)),
             "modulated_layer_norm backward");
    return {dx, scale_grad, shift_grad, torch::Tensor()};
  }
};

struct GatedResidual : torch::autograd::Function<GatedResidual> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& y_in,
                               const torch::Tensor& gate_in) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const torch::Tensor x = x_in.contiguous(), y = y_in.contiguous(), gate = gate_in.contiguous();
    const std::int64_t samples = x.size(0), tokens = x.size(1), dim = x.size(2);
    torch::Tensor out = torch::empty_like(x);
    launched(k::gated_residual_forward(dtype_of(x), x.data_ptr(), dtype_of(y), y.data_ptr(), floats(gate),
                                       dtype_of(out), out.data_ptr(), samples, tokens, dim, gate.size(1) != 1,
                                       stream_of(x)),
             "gated_residual");
    ctx->save_for_backward({y, gate});
    ctx->saved_data["x_dtype"] = static_cast<std::int64_t>(x.scalar_type());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &y = saved[0], &gate = saved[1];
    const c10::cuda::CUDAGuard guard(y.device());
    const torch::Tensor g = readable(grads[0]);
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const std::int64_t samples = y.size(0), tokens = y.size(1), dim = y.size(2);
    const bool per_token = gate.size(1) != 1;
    torch::Tensor dx = torch::empty(y.sizes(), y.options().dtype(x_dtype)), dy = torch::empty_like(y);
    torch::Tensor gate_grad = torch::empty_like(gate), partials;
    if (!per_token) partials = torch::empty({samples, row_blocks(tokens), dim}, gate.options());
    launched(k::gated_residual_backward(dtype_of(g), g.data_ptr(), dtype_of(y), y.data_ptr(), floats(gate),
                                        dtype_of(dx), dx.data_ptr(), dy.data_ptr(), floats(gate_grad), floats(partials),
                                        samples, tokens, dim, per_token, stream_of(y)),
             "gated_residual backward");
    return {dx, dy, gate_grad};
  }
};

/// Rotates `x` [B, L, H, D] by `rotations` (float32 [L, D/2, 2]) into a new tensor of x's dtype.
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& rotations, bool conjugate) {
  torch::Tensor out = torch::empty_like(x);
  launched(k::rope(dtype_of(x), x.data_ptr(), floats(rotations), dtype_of(out), out.data_ptr(), x.size(0), x.size(1),
                   x.size(2), x.size(3) / 2, conjugate, stream_of(x)),
           conjugate ? "rope backward" : "rope");
  return out;
}

struct Rope : torch::autograd::Function<Rope> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& rotations_in) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const torch::Tensor rotations = torch::view_as_real(rotations_in).contiguous();
    ctx->save_for_backward({rotations});
    return rotate(x_in.contiguous(), rotations, false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor rotations = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(rotations.device());
    return {rotate(readable(grads[0]), rotations, true), torch::Tensor()};
  }
};

// --- the check before first use ---------------------------------------------------------------

/// Random inputs of `shape` on `device` in `dtype`, from a generator of their own (the run's
/// generators draw nothing for the check).
torch::Tensor random(at::IntArrayRef shape, torch::ScalarType dtype, const c10::Device& device, std::uint64_t seed,
                     bool grad = true) {
  const auto generator = at::detail::createCPUGenerator(seed);
  return at::randn(shape, generator).to(device, dtype).requires_grad_(grad);
}

/// The fused op and its reference agree on `inputs`: outputs, and the gradients of every input
/// that requires one, within `tolerance` of the reference's largest magnitude.
template <class Fused, class Reference>
bool agrees(const std::vector<torch::Tensor>& inputs, Fused fused, Reference reference, double tolerance,
            std::string& worst) {
  const torch::Tensor got = fused(inputs), want = reference(inputs);
  const torch::Tensor upstream = random(want.sizes(), want.scalar_type(), want.device(), 99, false);
  std::vector<torch::Tensor> differentiable;
  for (const auto& t : inputs)
    if (t.requires_grad()) differentiable.push_back(t);
  const auto got_grads = torch::autograd::grad({got}, differentiable, {upstream.to(got.scalar_type())});
  const auto want_grads = torch::autograd::grad({want}, differentiable, {upstream});
  std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs{{got, want}};
  for (std::size_t i = 0; i < got_grads.size(); ++i) pairs.emplace_back(got_grads[i], want_grads[i]);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const torch::Tensor a = pairs[i].first.to(torch::kFloat32), b = pairs[i].second.to(torch::kFloat32);
    const double error = (a - b).abs().max().item<double>(), scale = b.abs().max().item<double>();
    if (a.sizes() != b.sizes() || !(error <= tolerance * scale + 1e-6)) {
      worst = fmt::format("{} differs by {:.3g} of {:.3g}", i == 0 ? std::string("the output")
                                                                     : fmt::format("gradient {}", i - 1),
                          error, scale);
      return false;
    }
  }
  return true;
}

bool check(const std::string& op, torch::ScalarType dtype, const c10::Device& device, std::string& worst) {
  // float32: reductions in another order (relative 1e-6 at these sizes); bfloat16: outputs and
  // gradients rounded to 8 bits at different points (a few 2^-8).
  const double tolerance = dtype == torch::kFloat32 ? 1e-4 : 3e-2;
  const auto f32 = torch::kFloat32;
  if (op == "rms_norm") {
    const std::vector<torch::Tensor> in{random({2, 37, 72}, dtype, device, 1), random({72}, dtype, device, 2)};
    return agrees(in, [](auto& t) { return RmsNorm::apply(t[0], t[1], 1e-6); },
                  [](auto& t) { return reference::rms_norm(t[0], t[1], 1e-6); }, tolerance, worst);
  }
  if (op == "modulated_layer_norm") {
    for (const std::int64_t modulations : {1, 37}) {
      const std::vector<torch::Tensor> in{random({2, 37, 72}, dtype, device, 3),
                                          random({2, modulations, 72}, f32, device, 4),
                                          random({2, modulations, 72}, f32, device, 5)};
      if (!agrees(in, [](auto& t) { return ModulatedLayerNorm::apply(t[0], t[1], t[2], 1e-6); },
                  [](auto& t) { return reference::modulated_layer_norm(t[0], t[1], t[2], 1e-6); }, tolerance, worst))
        return false;
    }
    return true;
  }
  if (op == "gated_residual") {
    for (const std::int64_t gates : {1, 37}) {
      const std::vector<torch::Tensor> in{random({2, 37, 72}, dtype, device, 6), random({2, 37, 72}, dtype, device, 7),
                                          random({2, gates, 72}, f32, device, 8)};
      if (!agrees(in, [](auto& t) { return GatedResidual::apply(t[0], t[1], t[2]); },
                  [](auto& t) { return reference::gated_residual(t[0], t[1], t[2]); }, tolerance, worst))
        return false;
    }
    return true;
  }
  const torch::Tensor angles = random({11, 8}, f32, device, 9, false);
  const torch::Tensor rotations = torch::polar(torch::ones_like(angles), angles);
  const std::vector<torch::Tensor> in{random({2, 11, 3, 16}, dtype, device, 10)};
  return agrees(in, [&](auto& t) { return Rope::apply(t[0], rotations); },
                [&](auto& t) { return reference::rope(t[0], rotations); }, tolerance, worst);
}

}  // namespace

bool serves(const char* op, const torch::Tensor& x) {
  if (!x.is_cuda() || !supported(x)) return false;
  static std::mutex mutex;
  static std::map<std::tuple<std::string, int, int>, bool> checked;
  const auto key = std::make_tuple(std::string(op), static_cast<int>(x.scalar_type()), static_cast<int>(x.get_device()));
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = checked.find(key); it != checked.end()) return it->second;
  // The check runs as written, whatever the caller's mode: with gradients, without autocast.
  const torch::AutoGradMode grad(true);
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  std::string worst;
  bool good = false;
  try {  // a kernel that cannot run here (no code for this GPU) falls back like one that disagrees
    good = check(op, x.scalar_type(), x.device(), worst);
  } catch (const std::exception& e) {
    worst = e.what();
  }
  if (good)
    wanfw::log::debug("fused CUDA kernel ", op, " agrees with its reference for ", c10::toString(x.scalar_type()),
                      " on ", x.device().str());
  else
    wanfw::log::warn("the fused CUDA kernel ", op, " disagrees with its reference for ",
                        c10::toString(x.scalar_type()), " on ", x.device().str(), " (", worst,
                        "); the block computes it through the reference instead");
  checked.emplace(key, good);
  return good;
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNorm::apply(x, weight, eps);
}
torch::Tensor modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& shift,
                                   double eps) {
  return ModulatedLayerNorm::apply(x, scale, shift, eps);
}
torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate) {
  return GatedResidual::apply(x, y, gate);
}
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& rotations) { return Rope::apply(x, rotations); }

}  // namespace wan::cuda_ops
