#pragma once
// A checkpointed block run and recomputed in chunks of tokens (model.recompute_chunks): its
// per-token parts — the modulated norms, every projection with its norms and RoPE, the gated
// residuals, norm3, the cross-attention's queries, the feed-forward — one chunk at a time, and only
// the self-attention over every token at once. A recomputed block then holds the self-attention's
// queries, keys, values and output for the whole sequence, and the rest of its activations for one
// chunk: at most max(11 x dim, 8 x dim + (24 x dim + 2 x ffn_dim) / chunks) values a token instead
// of 24 x dim + 2 x ffn_dim (wan::recomputed_block_bytes; docs/low-memory.md).
//
// Every per-token value is computed by the same kernels on fewer rows, so the block's output and
// the gradient of its input are those of the unchunked block (bit for bit where a kernel's rows do
// not depend on their number, as on the CPU); a gradient summed over tokens (a weight's, the
// modulation's, the context's) is summed a chunk at a time, which changes its rounding only.

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "wan/wan_dit.hpp"

namespace wan {

/// The block's output, computed a chunk of tokens at a time (under the caller's grad mode; the
/// checkpoint runs it without a graph).
torch::Tensor chunked_block_forward(WanBlockImpl& block, const torch::Tensor& x, const torch::Tensor& e0,
                                    const torch::Tensor& context, const RopeTables& rope, std::int64_t chunks,
                                    LoraDropoutStreams* dropout);

/// The gradients of `grad_output` · block(x, e0, context) for `inputs` {x, e0, context} (leaves; a
/// gradient for each that requires grad) and then `parameters` (for each that requires grad),
/// recomputing the block a chunk of tokens at a time; undefined where none is required.
std::vector<torch::Tensor> chunked_block_backward(WanBlockImpl& block, const std::vector<torch::Tensor>& inputs,
                                                  const std::vector<torch::Tensor>& parameters, const RopeTables& rope,
                                                  std::int64_t chunks, LoraDropoutStreams* dropout,
                                                  const torch::Tensor& grad_output);

/// chunked_block_backward for VACE block `block`, `inputs` {state, e0, context, embedded latents}
/// and `grad_outputs` {its state's, its hint's}: the input projected (before_proj) and the hint
/// (after_proj) differentiated whole, the block a chunk of tokens at a time, after one more chunked
/// forward for the hint's input. Gradients for the inputs, then the parameters.
std::vector<torch::Tensor> chunked_vace_backward(WanBlockImpl& block, const std::vector<torch::Tensor>& inputs,
                                                 const std::vector<torch::Tensor>& parameters, const RopeTables& rope,
                                                 std::int64_t chunks, LoraDropoutStreams* dropout,
                                                 const std::vector<torch::Tensor>& grad_outputs);

/// Gradients of `outputs` weighted by `grads` (undefined: that output passes none) for each of
/// `wrt` that requires grad; undefined for the others, for those the outputs do not reach, and when
/// no output needs one.
std::vector<torch::Tensor> gradients_of(const std::vector<torch::Tensor>& outputs,
                                        const std::vector<torch::Tensor>& grads, const std::vector<torch::Tensor>& wrt);

}  // namespace wan
