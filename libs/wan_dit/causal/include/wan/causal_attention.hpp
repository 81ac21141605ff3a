#pragma once
// Block-causal self-attention, the mode of the Wan DiT a causal (streaming) student runs in: the
// video in chunks of latent frames, attention bidirectional within a chunk and causal across, with
// an optional local window that keeps the first frames (attention sinks). A chunk-by-chunk rollout
// keeps each block's keys and values of the frames it has passed in a KvCache, so that a chunk
// attends to the chunks before it without running them again; one full-sequence forward with the
// block-causal mask computes the same.

#include <array>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace wan {

/// Which keys a query sees. A query in latent frame q sees key frame k when k lies in q's chunk or
/// an earlier one (k < chunk_end(q)) and, with a window of W frames and S sinks, k is one of the
/// S first frames or one of the W - S frames before chunk_end(q).
struct CausalLayout {
  std::int64_t frames_per_chunk = 3;
  std::int64_t window_frames = 0;  ///< W; 0: every earlier frame
  std::int64_t sink_frames = 0;    ///< S, with a window

  /// Throws wanfw::Error naming the setting that cannot work (a window too small for a chunk).
  void validate() const;
  /// The frame after the last of frame `q`'s chunk.
  std::int64_t chunk_end(std::int64_t q) const { return (q / frames_per_chunk + 1) * frames_per_chunk; }
  bool sees(std::int64_t q, std::int64_t k) const;
  /// The mask of queries in `query_frames` over keys in `key_frames` (each frame `tokens_per_frame`
  /// tokens in a row): [queries, keys], true where a query attends; undefined when every query
  /// sees every key (no mask needed).
  torch::Tensor mask(const std::vector<std::int64_t>& query_frames, const std::vector<std::int64_t>& key_frames,
                     std::int64_t tokens_per_frame, const torch::Device& device) const;
  /// The teacher-forcing layout's mask over [a clean copy of frames 0..F-1 | a noisy copy of them]
  /// (2F frames, each `tokens_per_frame` tokens): clean frames attend block-causally among
  /// themselves; a noisy chunk attends to itself and to the clean frames of the chunks before it
  /// (those it sees, with a window), as a rollout's chunk attends to its cache; no clean frame
  /// attends to a noisy one.
  torch::Tensor teacher_forcing_mask(std::int64_t frames, std::int64_t tokens_per_frame,
                                     const torch::Device& device) const;
};

/// The frames first, first + 1, ..., first + count - 1.
std::vector<std::int64_t> frame_range(std::int64_t first, std::int64_t count);

/// Each block's self-attention keys and values (RoPE applied, at their absolute frames) of the
/// frames a rollout has passed, frame by frame. A pass over frames already held replaces them (the
/// last pass over a chunk, its clean context pass, is what later chunks see); frames no later
/// query can see (outside the window, not a sink) are let go. The cache holds values, not their
/// gradient: a pass's own keys carry its gradient, earlier frames' do not.
class KvCache {
 public:
  KvCache(CausalLayout layout, std::int64_t layers, std::int64_t tokens_per_frame);

  /// Frames [first, first + count) pass through block `layer` with `key`, `value` [B, count *
  /// tokens_per_frame, heads, head_dim]: returns the keys and values they attend over (the held
  /// frames before `first`, then this pass's own, live) and the mask of the pass's queries over
  /// them (undefined: none); stores this pass's, replacing the frames it covers.
  struct Attended {
    torch::Tensor key, value, mask;
  };
  Attended pass(std::size_t layer, std::int64_t first, std::int64_t count, const torch::Tensor& key,
                const torch::Tensor& value);
  /// The frames block `layer` holds, in order.
  std::vector<std::int64_t> frames(std::size_t layer) const;
  /// One past the last frame any pass has covered (0 when empty).
  std::int64_t end_frame() const { return end_frame_; }
  const CausalLayout& layout() const { return layout_; }
  std::int64_t tokens_per_frame() const { return tokens_per_frame_; }
  /// Every frame let go: a new rollout.
  void clear();

 private:
  struct Frame {
    std::int64_t index;
    torch::Tensor key, value;  ///< [B, tokens_per_frame, heads, head_dim]
  };
  CausalLayout layout_;
  std::int64_t tokens_per_frame_;
  std::vector<std::deque<Frame>> layers_;
  std::int64_t end_frame_ = 0;
};

/// What a block's self-attention needs of a causal forward: the layout, and either the KV cache of
/// a rollout (with the pass's frames) or, for a full-sequence forward, the block-causal mask.
struct CausalAttention {
  const CausalLayout* layout = nullptr;
  KvCache* cache = nullptr;
  std::int64_t first_frame = 0;
  std::int64_t frames = 0;
  std::size_t layer = 0;
  torch::Tensor mask;  ///< full-sequence forward: [L, L], true where a query attends (undefined: none)
};

/// How the DiT runs causally (WanDiTImpl::forward): the layout; with `cache`, a rollout's pass over
/// the latents' frames, the first of them at absolute frame `first_frame` (its RoPE position).
struct CausalPass {
  const CausalLayout* layout = nullptr;
  KvCache* cache = nullptr;
  std::int64_t first_frame = 0;
  /// The latents are [a clean copy | a noisy copy] of the same F frames (2F frames, both copies at
  /// RoPE positions 0..F-1; CausalLayout::teacher_forcing_mask): the regression stage's layout. No
  /// cache.
  bool teacher_forcing = false;
};

/// Timesteps for a causal forward over a grid of F x H x W tokens: [B, F] (one a latent frame) made
/// one a token, [B, F * H * W]; [B] and [B, tokens] as they are.
torch::Tensor frame_timesteps(const torch::Tensor& t, const std::array<std::int64_t, 3>& grid);

/// Each of `blocks` blocks' self-attention for `causal` over latents of `grid` (empty when the pass
/// is not causal). Throws wanfw::Error for what a causal forward does not support yet: with
/// `checkpoint`, a rollout's cache (the recomputation would read it as later passes left it);
/// `split_or_vace`, sequence parallelism or a VACE branch.
std::vector<CausalAttention> causal_blocks(const CausalPass& causal, const std::array<std::int64_t, 3>& grid,
                                           std::size_t blocks, const torch::Device& device, bool checkpoint,
                                           bool split_or_vace);

}  // namespace wan
