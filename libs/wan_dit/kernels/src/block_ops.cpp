#include "wan/block_ops.hpp"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "block_kernels_cpu.hpp"
#include "wanfw/error.hpp"
#ifdef WANFW_CUDA_KERNELS
#include "block_ops_cuda.hpp"
#endif

namespace wan {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Rows a thread takes at once: about 32k elements, as LibTorch's own elementwise kernels split.
std::int64_t row_grain(std::int64_t dim) { return std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(dim, 1)); }

/// Backward passes reduce over rows in blocks of this many rows, each into its own partial sum,
/// and add the partial sums in block order: the result does not depend on the thread count.
constexpr std::int64_t kRowsPerBlock = 64;

/// Adds rows [0, count) of `partials` [count, dim] in order into `out` [dim] (zeroed first).
void add_rows_in_order(const float* partials, std::int64_t count, std::int64_t dim, float* out) {
  std::fill(out, out + dim, 0.0f);
  for (std::int64_t b = 0; b < count; ++b)
    for (std::int64_t i = 0; i < dim; ++i) out[i] += partials[b * dim + i];
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& weight_in,
                               double eps) {
    const torch::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
    const std::int64_t dim = x.size(-1), rows = x.numel() / dim;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor rstd = torch::empty({rows}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    float* sp = rstd.data_ptr<float>();
    at::parallel_for(0, rows, row_grain(dim), [&](std::int64_t begin, std::int64_t end) {
      kernels::rms_norm_rows(xp, wp, yp, sp, begin, end, dim, static_cast<float>(eps));
    });
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const torch::Tensor g = grads[0].contiguous();
    const std::int64_t dim = x.size(-1), rows = x.numel() / dim;
    const std::int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    torch::Tensor dx = torch::empty_like(x);
    torch::Tensor partials = torch::zeros({blocks, dim}, x.options());
    const float *gp = g.data_ptr<float>(), *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>(),
                *sp = rstd.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *pp = partials.data_ptr<float>();
    at::parallel_for(0, blocks, std::max<std::int64_t>(1, row_grain(dim) / kRowsPerBlock),
                     [&](std::int64_t first, std::int64_t last) {
                       for (std::int64_t b = first; b < last; ++b)
                         kernels::rms_norm_backward_rows(gp, xp, wp, sp, dxp, pp + b * dim, b * kRowsPerBlock,
                                                         std::min(rows, (b + 1) * kRowsPerBlock), dim);
                     });
    torch::Tensor weight_grad;
    if (ctx->needs_input_grad(1)) {
      weight_grad = torch::empty({dim}, x.options());
      add_rows_in_order(pp, blocks, dim, weight_grad.data_ptr<float>());
    }
    return {dx, weight_grad, torch::Tensor()};
  }
};

struct GeluTanhFunction : torch::autograd::Function<GeluTanhFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in) {
    const torch::Tensor x = x_in.contiguous();
    torch::Tensor y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, x.numel(), 32768, [&](std::int64_t begin, std::int64_t end) {
      kernels::gelu_tanh(xp + begin, yp + begin, end - begin);
    });
    ctx->save_for_backward({x});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor dx = torch::empty_like(x);
    const float *gp = g.data_ptr<float>(), *xp = x.data_ptr<float>();
    float* dxp = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), 32768, [&](std::int64_t begin, std::int64_t end) {
      kernels::gelu_tanh_backward(gp + begin, xp + begin, dxp + begin, end - begin);
    });
    return {dx};
  }
};

struct ModulatedLayerNormFunction : torch::autograd::Function<ModulatedLayerNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& scale_in,
                               const torch::Tensor& shift_in, double eps) {
    const torch::Tensor x = x_in.contiguous(), scale = scale_in.contiguous(), shift = shift_in.contiguous();
    const std::int64_t dim = x.size(2), rows = x.size(0) * x.size(1);
    const std::int64_t per_modulation = scale.size(1) == 1 ? x.size(1) : 1;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor mean = torch::empty({rows}, x.options()), rstd = torch::empty({rows}, x.options());
    const float *xp = x.data_ptr<float>(), *cp = scale.data_ptr<float>(), *hp = shift.data_ptr<float>();
    float *yp = y.data_ptr<float>(), *mp = mean.data_ptr<float>(), *sp = rstd.data_ptr<float>();
    at::parallel_for(0, rows, row_grain(dim), [&](std::int64_t begin, std::int64_t end) {
      kernels::modulated_layer_norm_rows(xp, cp, hp, yp, mp, sp, begin, end, dim, per_modulation,
                                         static_cast<float>(eps));
    });
    ctx->save_for_backward({x, scale, mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &scale = saved[1], &mean = saved[2], &rstd = saved[3];
    const torch::Tensor g = grads[0].contiguous();
    const std::int64_t batch = x.size(0), tokens = x.size(1), dim = x.size(2);
    const bool per_token = scale.size(1) != 1;
    const std::int64_t per_modulation = per_token ? 1 : tokens;
    // Blocks of rows that never straddle two samples; per token, each row's sums are its own.
    const std::int64_t blocks_per_sample = (tokens + kRowsPerBlock - 1) / kRowsPerBlock;
    const std::int64_t blocks = batch * blocks_per_sample;
    torch::Tensor dx = torch::empty_like(x);
    torch::Tensor scale_partials = torch::zeros({per_token ? batch * tokens : blocks, dim}, x.options());
    torch::Tensor shift_partials = torch::zeros_like(scale_partials);
    const float *gp = g.data_ptr<float>(), *xp = x.data_ptr<float>(), *cp = scale.data_ptr<float>(),
                *mp = mean.data_ptr<float>(), *sp = rstd.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *scp = scale_partials.data_ptr<float>(), *shp = shift_partials.data_ptr<float>();
    at::parallel_for(0, blocks, std::max<std::int64_t>(1, row_grain(dim) / kRowsPerBlock),
                     [&](std::int64_t first, std::int64_t last) {
                       for (std::int64_t b = first; b < last; ++b) {
                         const std::int64_t sample = b / blocks_per_sample, within = b % blocks_per_sample;
                         const std::int64_t begin = sample * tokens + within * kRowsPerBlock;
                         const std::int64_t end = std::min(sample * tokens + tokens, begin + kRowsPerBlock);
                         const std::int64_t out = per_token ? begin : b;
                         kernels::modulated_layer_norm_backward_rows(gp, xp, cp, mp, sp, dxp, scp + out * dim,
                                                                     shp + out * dim, begin, end, dim, per_modulation);
                       }
                     });
    if (per_token) return {dx, scale_partials.view_as(x), shift_partials.view_as(x), torch::Tensor()};
    torch::Tensor scale_grad = torch::empty({batch, 1, dim}, x.options()), shift_grad = torch::empty_like(scale_grad);
    for (std::int64_t s = 0; s < batch; ++s) {
      const std::int64_t first = s * blocks_per_sample * dim;
      add_rows_in_order(scp + first, blocks_per_sample, dim, scale_grad.data_ptr<float>() + s * dim);
      add_rows_in_order(shp + first, blocks_per_sample, dim, shift_grad.data_ptr<float>() + s * dim);
    }
    return {dx, scale_grad, shift_grad, torch::Tensor()};
  }
};

}  // namespace

std::vector<torch::Tensor> modulation_chunks(const torch::Tensor& table, const torch::Tensor& e, int count) {
  if (e.dim() == 3) return (table + e.to(torch::kFloat32)).chunk(count, 1);  // [B, count, dim] -> [B, 1, dim]
  std::vector<torch::Tensor> chunks = (table.unsqueeze(0) + e.to(torch::kFloat32)).chunk(count, 2);
  for (auto& c : chunks) c = c.squeeze(2);  // [B, L, 1, dim] -> [B, L, dim]
  return chunks;
}

bool fused_block_ops(const torch::Tensor& x) { return x.device().is_cpu() && x.scalar_type() == torch::kFloat32; }

bool built_with_cuda_kernels() {
#ifdef WANFW_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

BlockOpsPath block_ops_path(const torch::Tensor& x) {
  if (fused_block_ops(x)) return BlockOpsPath::FusedCpu;
  const bool cuda_dtype = x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16;
  if (built_with_cuda_kernels() && x.is_cuda() && cuda_dtype) return BlockOpsPath::FusedCuda;
  return BlockOpsPath::Composite;
}

bool cuda_kernel_serves([[maybe_unused]] const char* op, const torch::Tensor& x) {
#ifdef WANFW_CUDA_KERNELS
  return block_ops_path(x) == BlockOpsPath::FusedCuda && cuda_ops::serves(op, x);
#else
  (void)x;
  return false;
#endif
}

#ifdef WANFW_CUDA_KERNELS
namespace {

/// Whether the fused CUDA kernel `op` takes `x` (and checked out on its device), with every
/// other tensor on x's device and of a dtype it reads (float32 only, where the flag says so).
bool cuda_serves(const char* op, const torch::Tensor& x,
                 std::initializer_list<std::pair<const torch::Tensor*, bool>> others) {
  if (block_ops_path(x) != BlockOpsPath::FusedCuda) return false;
  for (const auto& [t, float32_only] : others)
    if (t->device() != x.device() ||
        !(t->scalar_type() == torch::kFloat32 || (!float32_only && t->scalar_type() == torch::kBFloat16)))
      return false;
  return cuda_kernel_serves(op, x);
}

}  // namespace
#endif

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const bool weight_fits = weight.dim() == 1 && weight.size(0) == x.size(-1);
  if (fused_block_ops(x) && weight.scalar_type() == torch::kFloat32 && weight.device().is_cpu() && weight_fits)
    return RmsNormFunction::apply(x, weight, eps);
#ifdef WANFW_CUDA_KERNELS
  if (weight_fits && cuda_serves("rms_norm", x, {{&weight, false}})) return cuda_ops::rms_norm(x, weight, eps);
#endif
  return reference::rms_norm(x, weight, eps);
}

torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate) {
#ifdef WANFW_CUDA_KERNELS
  const bool shapes = x.dim() == 3 && y.sizes() == x.sizes() && gate.dim() == 3 && gate.size(0) == x.size(0) &&
                      gate.size(2) == x.size(2) && (gate.size(1) == 1 || gate.size(1) == x.size(1));
  if (shapes && cuda_serves("gated_residual", x, {{&y, false}, {&gate, true}}))
    return cuda_ops::gated_residual(x, y, gate);
#endif
  return reference::gated_residual(x, y, gate);
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& rotations) {
#ifdef WANFW_CUDA_KERNELS
  const bool shapes = x.dim() == 4 && x.size(3) % 2 == 0 && rotations.dim() == 2 && rotations.size(0) == x.size(1) &&
                      rotations.size(1) == x.size(3) / 2 && rotations.scalar_type() == torch::kComplexFloat &&
                      rotations.device() == x.device();
  if (shapes && cuda_serves("rope", x, {})) return cuda_ops::rope(x, rotations);
#endif
  return reference::rope(x, rotations);
}

torch::Tensor gelu_tanh(const torch::Tensor& x) {
  return fused_block_ops(x) ? GeluTanhFunction::apply(x) : reference::gelu_tanh(x);
}

torch::Tensor modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& shift,
                                   double eps) {
  if (x.dim() != 3 || scale.sizes() != shift.sizes() || scale.dim() != 3 || scale.size(0) != x.size(0) ||
      scale.size(2) != x.size(2) || (scale.size(1) != 1 && scale.size(1) != x.size(1)))
    throw wanfw::Error(
        fmt::format("modulated layer norm: x {} takes scale and shift [B, 1, dim] or [B, L, dim], "
                    "got {} and {}",
                    c10::str(x.sizes()), c10::str(scale.sizes()), c10::str(shift.sizes())));
  if (fused_block_ops(x) && fused_block_ops(scale) && fused_block_ops(shift))
    return ModulatedLayerNormFunction::apply(x, scale, shift, eps);
#ifdef WANFW_CUDA_KERNELS
  if (cuda_serves("modulated_layer_norm", x, {{&scale, true}, {&shift, true}}))
    return cuda_ops::modulated_layer_norm(x, scale, shift, eps);
#endif
  return reference::modulated_layer_norm(x, scale, shift, eps);
}

namespace reference {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const torch::Tensor xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps)).to(x.scalar_type()) * weight;
}

torch::Tensor gelu_tanh(const torch::Tensor& x) { return torch::gelu(x, "tanh"); }

torch::Tensor modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& shift,
                                   double eps) {
  const torch::Tensor normed = torch::layer_norm(x.to(torch::kFloat32), {x.size(-1)}, {}, {}, eps);
  return (normed * (1 + scale) + shift).to(x.scalar_type());
}

torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate) {
  return (x.to(torch::kFloat32) + y * gate).to(x.scalar_type());
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& rotations) {
  const auto sizes = x.sizes();
  const torch::Tensor pairs = torch::view_as_complex(
      x.to(torch::kFloat32).reshape({sizes[0], sizes[1], sizes[2], sizes[3] / 2, 2}).contiguous());
  return torch::view_as_real(pairs * rotations.unsqueeze(1)).reshape(sizes).to(x.scalar_type());
}

}  // namespace reference

}  // namespace wan
