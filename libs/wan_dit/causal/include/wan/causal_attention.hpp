#pragma once
// Block-causal self-attention, the mode of the Wan DiT a causal (streaming) student runs in: the
// video in chunks of latent frames, attention bidirectional within a chunk and causal across, with
// an optional local window that keeps the first frames (attention sinks). A chunk-by-chunk rollout
// keeps each block's keys and values of the frames it has passed in a KvCache, so that a chunk
// attends to the chunks before it without running them again; one full-sequence forward computes
// the same. Attention runs a query chunk at a time over exactly the keys it sees (every query of a
// chunk sees the same ones): no mask, whatever the length, so the fused kernels serve it.

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace wan {

/// A latent frame in an attention's sequence: its index in the video, and for the teacher-forcing
/// layout which copy it is (clean or noisy).
struct FrameTag {
  std::int64_t frame = 0;
  bool noisy = false;
  bool operator==(const FrameTag&) const = default;
};

/// Which keys a query sees. A query in latent frame q sees key frame k when k lies in q's chunk or
/// an earlier one (k < chunk_end(q)) and, with a window of W frames and S sinks, k is one of the
/// S first frames or one of the W - S frames before chunk_end(q). In the teacher-forcing layout a
/// clean frame sees the clean frames so, and a noisy frame its own chunk's noisy frames and the
/// clean frames it sees of the chunks before its own.
struct CausalLayout {
  std::int64_t frames_per_chunk = 3;
  std::int64_t window_frames = 0;  ///< W; 0: every earlier frame
  std::int64_t sink_frames = 0;    ///< S, with a window
  /// Frame 0 a chunk of its own, then chunks of frames_per_chunk (1 + k N frames): the layout of
  /// i2v, whose first frame is the image (a Wan VAE's first latent frame is one pixel frame).
  bool independent_first_frame = false;

  /// Throws wanfw::Error naming the setting that cannot work (a window too small for a chunk).
  void validate() const;
  /// The chunk latent frame `q` lies in, that chunk's first frame, and the frame after its last.
  std::int64_t chunk_index(std::int64_t q) const;
  std::int64_t chunk_start(std::int64_t q) const { return chunk_first(chunk_index(q)); }
  std::int64_t chunk_end(std::int64_t q) const { return chunk_start(q) + chunk_frames(chunk_index(q)); }
  /// Chunk k's first latent frame, and its frame count.
  std::int64_t chunk_first(std::int64_t k) const;
  std::int64_t chunk_frames(std::int64_t k) const;
  /// Whether `frames` latent frames cut into whole chunks, and into how many (0 when they do not).
  bool cuts(std::int64_t frames) const { return frames > 0 && chunks(frames) > 0; }
  std::int64_t chunks(std::int64_t frames) const;
  /// The chunks in words ("chunks of 3 latent frames", "frame 0, then chunks of 4"), for messages.
  std::string describe() const;
  /// A value per chunk [B, chunks] made one per latent frame [B, frames].
  torch::Tensor per_frame(const torch::Tensor& per_chunk) const;
  bool sees(std::int64_t q, std::int64_t k) const;
  bool sees(const FrameTag& q, const FrameTag& k) const;
  /// The dense mask of queries over keys (each frame `tokens_per_frame` tokens in a row): [queries,
  /// keys], true where a query attends. What causal_attention computes without it (tests compare).
  torch::Tensor mask(const std::vector<FrameTag>& queries, const std::vector<FrameTag>& keys,
                     std::int64_t tokens_per_frame, const torch::Device& device) const;
};

/// Clean frames first, first + 1, ..., first + count - 1.
std::vector<FrameTag> frame_range(std::int64_t first, std::int64_t count);
/// The teacher-forcing layout of F frames: a clean copy of frames 0..F-1, then a noisy copy.
std::vector<FrameTag> teacher_forcing_frames(std::int64_t frames);

/// The attention of `query` [B, Lq, heads, head_dim] (frames `queries`, `tokens_per_frame` tokens
/// each) over `key`, `value` [B, Lk, heads, head_dim] (frames `keys`) as `layout` says: each run of
/// query frames that sees the same keys attends over those alone through `attend` (q, k, v) ->
/// [B, L, ...], and the runs' results are joined along the tokens.
using Attend = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;
torch::Tensor causal_attention(const CausalLayout& layout, const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const std::vector<FrameTag>& queries,
                               const std::vector<FrameTag>& keys, std::int64_t tokens_per_frame,
                               const Attend& attend);

/// Each block's self-attention keys and values (RoPE applied, at their absolute frames) of the
/// frames a rollout has passed, frame by frame. A pass over frames already held replaces them (the
/// last pass over a chunk, its clean context pass, is what later chunks see); frames no later
/// query can see (outside the window, not a sink) are let go. The cache holds values, not their
/// gradient: a pass's own keys carry its gradient, earlier frames' do not.
/// The frames a pass finds in one block of a KV cache before its own: values, in order.
struct HeldFrames {
  std::vector<FrameTag> frames;
  std::vector<torch::Tensor> keys, values;  ///< [B, tokens_per_frame, heads, head_dim] each
};

class KvCache {
 public:
  KvCache(CausalLayout layout, std::int64_t layers, std::int64_t tokens_per_frame);

  /// Frames [first, first + count) pass through block `layer` with `key`, `value` [B, count *
  /// tokens_per_frame, heads, head_dim]: returns the keys and values they attend over (the held
  /// frames before `first`, then this pass's own, live) with their frames; stores this pass's,
  /// replacing the frames it covers. held(), then store(), then attended().
  struct Attended {
    torch::Tensor key, value;
    std::vector<FrameTag> frames;
  };
  Attended pass(std::size_t layer, std::int64_t first, std::int64_t count, const torch::Tensor& key,
                const torch::Tensor& value);
  /// The frames block `layer` holds before frame `first`: what a pass from `first` attends over
  /// before its own. A checkpointed pass keeps them for its recomputation, which must not read
  /// the cache as later passes leave it.
  HeldFrames held(std::size_t layer, std::int64_t first) const;
  /// Stores a pass's keys and values (detached), replacing the frames they cover and letting go of
  /// those no later pass sees.
  void store(std::size_t layer, std::int64_t first, std::int64_t count, const torch::Tensor& key,
             const torch::Tensor& value);
  /// `held` followed by the pass's own keys and values over frames [first, first + count).
  static Attended attended(const HeldFrames& held, std::int64_t first, std::int64_t count, const torch::Tensor& key,
                           const torch::Tensor& value);
  /// The frames block `layer` holds, in order.
  std::vector<std::int64_t> frames(std::size_t layer) const;
  /// Block `layer`'s cross-attention keys and values of `context` (its text), made by `make` on
  /// a rollout's first pass without autograd and reused by its later ones; a pass with autograd
  /// makes its own (the gradient reaches the projections), as does another context (compared by
  /// value: each pass embeds the text anew).
  std::pair<torch::Tensor, torch::Tensor> context_keys_values(
      std::size_t layer, const torch::Tensor& context,
      const std::function<std::pair<torch::Tensor, torch::Tensor>()>& make);
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
  struct ContextKeys {
    torch::Tensor context, key, value;  ///< the text they were made from, and its keys and values
  };
  void check(std::size_t layer, std::int64_t count, const torch::Tensor& key) const;
  CausalLayout layout_;
  std::int64_t tokens_per_frame_;
  std::vector<std::deque<Frame>> layers_;
  std::vector<ContextKeys> context_;
  std::int64_t end_frame_ = 0;
};

/// What a block's self-attention needs of a causal forward: the layout, the frames of its tokens,
/// and for a rollout's pass the KV cache (with the pass's first frame and count).
struct CausalAttention {
  const CausalLayout* layout = nullptr;
  KvCache* cache = nullptr;
  std::int64_t first_frame = 0;
  std::int64_t frames = 0;
  std::size_t layer = 0;
  std::vector<FrameTag> tags;  ///< the frames of the block's tokens, in order
  /// A checkpointed rollout pass's recomputation (no cache): the frames its pass found in the
  /// cache, attended over before its own frames [first_frame, first_frame + frames).
  std::shared_ptr<const HeldFrames> held;
};

/// How the DiT runs causally (WanDiTImpl::forward): the layout; with `cache`, a rollout's pass over
/// the latents' frames, the first of them at absolute frame `first_frame` (its RoPE position).
struct CausalPass {
  const CausalLayout* layout = nullptr;
  KvCache* cache = nullptr;
  std::int64_t first_frame = 0;
  /// The latents are [a clean copy | a noisy copy] of the same F frames (2F frames, both copies at
  /// RoPE positions 0..F-1; teacher_forcing_frames): the regression stage's layout. No cache.
  bool teacher_forcing = false;
  /// A rollout's context pass (a made chunk into the cache; its output unused): an expert pair runs
  /// it through both experts, each into its own part of the cache.
  bool context = false;
  /// Which DiT of an expert pair runs the pass (0 high noise, 1 low noise): its blocks use cache
  /// layers expert x blocks onward (a pair's cache holds both experts' blocks). Set by the pair.
  std::size_t expert = 0;
};

/// Timesteps for a causal forward over a grid of F x H x W tokens: [B, F] (one a latent frame) made
/// one a token, [B, F * H * W]; [B] and [B, tokens] as they are.
torch::Tensor frame_timesteps(const torch::Tensor& t, const std::array<std::int64_t, 3>& grid);

/// Each of `blocks` blocks' self-attention for `causal` over latents of `grid` (empty when the pass
/// is not causal). Throws wanfw::Error for what a causal forward does not support yet: a VACE
/// branch (`vace`). A checkpointed rollout pass keeps the frames it found in the cache
/// (KvCache::held) for its recomputation. Under sequence parallelism each rank's cache holds its
/// heads of every token (the attention runs after the exchange, over the whole sequence).
std::vector<CausalAttention> causal_blocks(const CausalPass& causal, const std::array<std::int64_t, 3>& grid,
                                           std::size_t blocks, bool vace);

}  // namespace wan
