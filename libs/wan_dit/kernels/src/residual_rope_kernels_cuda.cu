// The gated residual and RoPE as CUDA kernels (block_kernels_cuda.hpp says what each computes):
// elementwise, a thread an element (a channel pair for RoPE); the gate's gradient per sample goes
// through per-block partials added in block order.
#include "block_kernels_cuda_common.cuh"

namespace wan::kernels::cuda {

namespace {

__global__ void gated_residual_forward_kernel(Dtype xt, const void* x, Dtype yt, const void* y, const float* gate,
                                              Dtype ot, void* out, std::int64_t n, std::int64_t tokens,
                                              std::int64_t dim, bool per_token) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::int64_t row = i / dim, c = i % dim;
  const float gv = gate[modulation_row(row, tokens, per_token) * dim + c];
  store(out, ot, i, load(x, xt, i) + load(y, yt, i) * gv);
}

__global__ void gated_residual_backward_kernel(Dtype gt, const void* g, Dtype yt, const void* y, const float* gate,
                                               Dtype xt, void* dx, void* dy, float* gate_grad, std::int64_t n,
                                               std::int64_t tokens, std::int64_t dim, bool per_token) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::int64_t row = i / dim, c = i % dim;
  const float gi = load(g, gt, i);
  store(dx, xt, i, gi);
  store(dy, yt, i, gi * gate[modulation_row(row, tokens, per_token) * dim + c]);
  if (per_token) gate_grad[i] = gi * load(y, yt, i);
}

__global__ void gate_partials_kernel(Dtype gt, const void* g, Dtype yt, const void* y, float* partials,
                                     std::int64_t tokens, std::int64_t dim) {
  const TokenBlock t = token_block(tokens);
  if (t.column >= dim) return;
  float acc = 0.0f;
  for (std::int64_t r = t.first; r < t.last; ++r)
    acc += load(g, gt, r * dim + t.column) * load(y, yt, r * dim + t.column);
  partials[(t.sample * t.blocks + t.block) * dim + t.column] = acc;
}

__global__ void rope_kernel(Dtype xt, const void* x, const float* rotations, Dtype ot, void* out, std::int64_t n,
                            std::int64_t tokens, std::int64_t heads, std::int64_t pairs, bool conjugate) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;  // a pair
  if (i >= n) return;
  const std::int64_t j = i % pairs, token = (i / (pairs * heads)) % tokens;
  const float c = rotations[2 * (token * pairs + j)];
  const float s = conjugate ? -rotations[2 * (token * pairs + j) + 1] : rotations[2 * (token * pairs + j) + 1];
  const float a = load(x, xt, 2 * i), b = load(x, xt, 2 * i + 1);
  store(out, ot, 2 * i, a * c - b * s);
  store(out, ot, 2 * i + 1, a * s + b * c);
}

}  // namespace

int gated_residual_forward(Dtype xt, const void* x, Dtype yt, const void* y, const float* gate, Dtype ot, void* out,
                           std::int64_t samples, std::int64_t tokens, std::int64_t dim, bool per_token, void* stream) {
  const std::int64_t n = samples * tokens * dim;
  if (n == 0) return 0;
  gated_residual_forward_kernel<<<blocks_of(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      xt, x, yt, y, gate, ot, out, n, tokens, dim, per_token);
  return launched();
}

int gated_residual_backward(Dtype gt, const void* g, Dtype yt, const void* y, const float* gate, Dtype xt, void* dx,
                            void* dy, float* gate_grad, float* partials, std::int64_t samples, std::int64_t tokens,
                            std::int64_t dim, bool per_token, void* stream) {
  const std::int64_t n = samples * tokens * dim;
  if (n == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  gated_residual_backward_kernel<<<blocks_of(n), kThreads, 0, s>>>(gt, g, yt, y, gate, xt, dx, dy, gate_grad, n,
                                                                  tokens, dim, per_token);
  if (!per_token) {
    const std::int64_t blocks = blocks_of(tokens);
    const dim3 grid(static_cast<unsigned>(samples * blocks), static_cast<unsigned>(blocks_of(dim)));
    gate_partials_kernel<<<grid, kThreads, 0, s>>>(gt, g, yt, y, partials, tokens, dim);
    const dim3 sums(static_cast<unsigned>(blocks_of(dim)), static_cast<unsigned>(samples));
    sum_partials_kernel<<<sums, kThreads, 0, s>>>(partials, gate_grad, blocks, dim);
  }
  return launched();
}

int rope(Dtype xt, const void* x, const float* rotations, Dtype ot, void* out, std::int64_t batch, std::int64_t tokens,
         std::int64_t heads, std::int64_t pairs, bool conjugate, void* stream) {
  const std::int64_t n = batch * tokens * heads * pairs;
  if (n == 0) return 0;
  rope_kernel<<<blocks_of(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(xt, x, rotations, ot, out, n, tokens,
                                                                                heads, pairs, conjugate);
  return launched();
}

}  // namespace wan::kernels::cuda
