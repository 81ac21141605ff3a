#include "wan/causal_attention.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"

namespace wan {

void CausalLayout::validate() const {
  if (frames_per_chunk < 1)
    throw wanfw::Error(
        fmt::format("causal: frames_per_chunk is {}; a chunk holds at least one latent frame", frames_per_chunk),
        "set frames_per_chunk to 1 or more (3 is the Self-Forcing chunk of 4,680 tokens at 480p)");
  if (window_frames < 0 || sink_frames < 0)
    throw wanfw::Error("causal: window_frames and sink_frames are counts of latent frames, 0 or more");
  if (window_frames == 0 && sink_frames > 0)
    throw wanfw::Error(
        fmt::format("causal: {} sink frame(s) without a window: every earlier frame is seen anyway", sink_frames),
        "set window_frames, or sink_frames: 0");
  if (window_frames > 0 && window_frames - sink_frames < frames_per_chunk)
    throw wanfw::Error(
        fmt::format("causal: a window of {} frames with {} sink(s) leaves {} for the rolling part, "
                    "fewer than a chunk's {}: a chunk would not see itself",
                    window_frames, sink_frames, window_frames - sink_frames, frames_per_chunk),
        fmt::format("set window_frames to at least {} (sinks plus a chunk)", sink_frames + frames_per_chunk));
}

std::int64_t CausalLayout::chunk_index(std::int64_t q) const {
  if (!independent_first_frame) return q / frames_per_chunk;
  return q == 0 ? 0 : 1 + (q - 1) / frames_per_chunk;
}

std::int64_t CausalLayout::chunk_first(std::int64_t k) const {
  if (!independent_first_frame) return k * frames_per_chunk;
  return k == 0 ? 0 : 1 + (k - 1) * frames_per_chunk;
}

std::int64_t CausalLayout::chunk_frames(std::int64_t k) const {
  return independent_first_frame && k == 0 ? 1 : frames_per_chunk;
}

std::int64_t CausalLayout::chunks(std::int64_t frames) const {
  const std::int64_t lead = independent_first_frame ? 1 : 0;
  if (frames < 1 || (frames - lead) % frames_per_chunk != 0) return 0;
  return lead + (frames - lead) / frames_per_chunk;
}

std::string CausalLayout::describe() const {
  return independent_first_frame ? fmt::format("frame 0, then chunks of {} latent frames", frames_per_chunk)
                                 : fmt::format("chunks of {} latent frames", frames_per_chunk);
}

torch::Tensor CausalLayout::per_frame(const torch::Tensor& per_chunk) const {
  if (!independent_first_frame) return per_chunk.repeat_interleave(frames_per_chunk, 1);
  // Frame 0's own value, then the later chunks' N frames each.
  return torch::cat(
      {per_chunk.narrow(1, 0, 1), per_chunk.narrow(1, 1, per_chunk.size(1) - 1).repeat_interleave(frames_per_chunk, 1)},
      1);
}

bool CausalLayout::sees(std::int64_t q, std::int64_t k) const {
  const std::int64_t end = chunk_end(q);
  if (k >= end) return false;
  return window_frames == 0 || k < sink_frames || k >= end - (window_frames - sink_frames);
}

bool CausalLayout::sees(const FrameTag& q, const FrameTag& k) const {
  if (!q.noisy) return !k.noisy && sees(q.frame, k.frame);
  if (k.noisy) return chunk_end(k.frame) == chunk_end(q.frame);     // a noisy chunk: itself
  return k.frame < chunk_start(q.frame) && sees(q.frame, k.frame);  // earlier chunks, clean
}

torch::Tensor CausalLayout::mask(const std::vector<FrameTag>& queries, const std::vector<FrameTag>& keys,
                                 std::int64_t tokens_per_frame, const torch::Device& device) const {
  torch::Tensor cells = torch::empty({std::ssize(queries), std::ssize(keys)}, torch::kBool);
  auto cell = cells.accessor<bool, 2>();
  for (std::size_t i = 0; i < queries.size(); ++i)
    for (std::size_t j = 0; j < keys.size(); ++j)
      cell[static_cast<std::int64_t>(i)][static_cast<std::int64_t>(j)] = sees(queries[i], keys[j]);
  // Each frame's tokens in a row: a frame's cell covers tokens_per_frame x tokens_per_frame.
  return cells.repeat_interleave(tokens_per_frame, 0).repeat_interleave(tokens_per_frame, 1).to(device);
}

std::vector<FrameTag> frame_range(std::int64_t first, std::int64_t count) {
  std::vector<FrameTag> out;
  for (std::int64_t i = 0; i < count; ++i) out.push_back({first + i, false});
  return out;
}

std::vector<FrameTag> teacher_forcing_frames(std::int64_t frames) {
  std::vector<FrameTag> out = frame_range(0, frames);
  for (std::int64_t i = 0; i < frames; ++i) out.push_back({i, true});
  return out;
}

namespace {

/// The tokens of the key frames at `positions` (sorted): a slice where they follow each other.
torch::Tensor tokens_of(const torch::Tensor& t, const std::vector<std::int64_t>& positions, std::int64_t per_frame) {
  const std::int64_t first = positions.front(), count = std::ssize(positions);
  if (positions.back() - first + 1 == count) return t.narrow(1, first * per_frame, count * per_frame);
  std::vector<torch::Tensor> pieces;
  for (const std::int64_t p : positions) pieces.push_back(t.narrow(1, p * per_frame, per_frame));
  return torch::cat(pieces, 1);
}

}  // namespace

torch::Tensor causal_attention(const CausalLayout& layout, const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const std::vector<FrameTag>& queries,
                               const std::vector<FrameTag>& keys, std::int64_t tokens_per_frame, const Attend& attend) {
  // Runs of query frames that see the same keys (a chunk's frames do): one attention each.
  std::vector<torch::Tensor> out;
  std::size_t run = 0;
  while (run < queries.size()) {
    std::vector<std::int64_t> seen;
    for (std::size_t j = 0; j < keys.size(); ++j)
      if (layout.sees(queries[run], keys[j])) seen.push_back(static_cast<std::int64_t>(j));
    std::size_t end = run + 1;
    for (; end < queries.size(); ++end) {
      bool same = true;
      for (std::size_t j = 0; j < keys.size() && same; ++j)
        same = layout.sees(queries[end], keys[j]) == layout.sees(queries[run], keys[j]);
      if (!same) break;
    }
    if (seen.empty())
      throw wanfw::Error(fmt::format("causal attention: the queries of frame {} see no key", queries[run].frame));
    const std::int64_t first = static_cast<std::int64_t>(run) * tokens_per_frame;
    const std::int64_t count = static_cast<std::int64_t>(end - run) * tokens_per_frame;
    out.push_back(attend(query.narrow(1, first, count), tokens_of(key, seen, tokens_per_frame),
                         tokens_of(value, seen, tokens_per_frame)));
    run = end;
  }
  return out.size() == 1 ? out.front() : torch::cat(out, 1);
}

torch::Tensor frame_timesteps(const torch::Tensor& t, const std::array<std::int64_t, 3>& grid) {
  if (t.dim() == 2 && t.size(1) == grid[0] && grid[1] * grid[2] > 1) return t.repeat_interleave(grid[1] * grid[2], 1);
  return t;
}

std::vector<CausalAttention> causal_blocks(const CausalPass& causal, const std::array<std::int64_t, 3>& grid,
                                           std::size_t blocks, bool vace) {
  if (causal.layout == nullptr) return {};
  causal.layout->validate();
  if (vace)
    throw wanfw::Error("a causal forward with a VACE branch is not supported yet",
                       "train the causal student without VACE");
  const std::int64_t tokens_per_frame = grid[1] * grid[2];
  if (causal.cache != nullptr) {
    if (causal.cache->tokens_per_frame() != tokens_per_frame)
      throw wanfw::Error(fmt::format("KV cache of {} tokens a frame, but the latents have {} ({}x{})",
                                     causal.cache->tokens_per_frame(), tokens_per_frame, grid[1], grid[2]));
  }
  if (causal.teacher_forcing && (causal.cache != nullptr || grid[0] % 2 != 0 || causal.first_frame != 0))
    throw wanfw::Error(
        fmt::format("teacher forcing takes [a clean copy | a noisy copy] of the same frames from frame "
                    "0, with no cache: an even frame count (got {}, first frame {})",
                    grid[0], causal.first_frame));
  const std::vector<FrameTag> tags =
      causal.teacher_forcing ? teacher_forcing_frames(grid[0] / 2) : frame_range(causal.first_frame, grid[0]);
  std::vector<CausalAttention> out;
  for (std::size_t i = 0; i < blocks; ++i)
    out.push_back(
        {causal.layout, causal.cache, causal.first_frame, grid[0], causal.expert * blocks + i, tags, nullptr});
  return out;
}

KvCache::KvCache(CausalLayout layout, std::int64_t layers, std::int64_t tokens_per_frame)
    : layout_(layout), tokens_per_frame_(tokens_per_frame), layers_(static_cast<std::size_t>(layers)) {
  layout_.validate();
}

void KvCache::check(std::size_t layer, std::int64_t count, const torch::Tensor& key) const {
  if (layer >= layers_.size())
    throw wanfw::Error(fmt::format("KV cache: block {} of a cache for {} blocks", layer, layers_.size()));
  if (key.size(1) != count * tokens_per_frame_)
    throw wanfw::Error(
        fmt::format("KV cache: {} frames of {} tokens, but {} keys", count, tokens_per_frame_, key.size(1)));
}

HeldFrames KvCache::held(std::size_t layer, std::int64_t first) const {
  if (layer >= layers_.size())
    throw wanfw::Error(fmt::format("KV cache: block {} of a cache for {} blocks", layer, layers_.size()));
  HeldFrames out;
  for (const Frame& f : layers_[layer])
    if (f.index < first) {
      out.frames.push_back({f.index, false});
      out.keys.push_back(f.key);
      out.values.push_back(f.value);
    }
  return out;
}

KvCache::Attended KvCache::attended(const HeldFrames& held, std::int64_t first, std::int64_t count,
                                    const torch::Tensor& key, const torch::Tensor& value) {
  Attended out;
  out.frames = held.frames;
  for (const FrameTag& own : frame_range(first, count)) out.frames.push_back(own);
  std::vector<torch::Tensor> keys = held.keys, values = held.values;
  keys.push_back(key);
  values.push_back(value);
  out.key = keys.size() == 1 ? key : torch::cat(keys, 1);
  out.value = values.size() == 1 ? value : torch::cat(values, 1);
  return out;
}

void KvCache::store(std::size_t layer, std::int64_t first, std::int64_t count, const torch::Tensor& key,
                    const torch::Tensor& value) {
  check(layer, count, key);
  std::deque<Frame>& held = layers_[layer];
  // Its frames replace those it covers; frames no later query sees go (later passes start here or
  // after: the window's start only moves on).
  std::erase_if(held, [&](const Frame& f) { return f.index >= first && f.index < first + count; });
  for (std::int64_t i = 0; i < count; ++i) {
    const Frame frame{first + i, key.narrow(1, i * tokens_per_frame_, tokens_per_frame_).detach(),
                      value.narrow(1, i * tokens_per_frame_, tokens_per_frame_).detach()};
    held.insert(std::upper_bound(held.begin(), held.end(), frame.index,
                                 [](std::int64_t index, const Frame& f) { return index < f.index; }),
                frame);
  }
  std::erase_if(held, [&](const Frame& f) { return !layout_.sees(first, f.index) && f.index < first; });
  end_frame_ = std::max(end_frame_, first + count);
}

KvCache::Attended KvCache::pass(std::size_t layer, std::int64_t first, std::int64_t count, const torch::Tensor& key,
                                const torch::Tensor& value) {
  check(layer, count, key);
  // What the pass attends over: the held frames before it (values only), then its own.
  Attended out = attended(held(layer, first), first, count, key, value);
  store(layer, first, count, key, value);
  return out;
}

std::pair<torch::Tensor, torch::Tensor> KvCache::context_keys_values(
    std::size_t layer, const torch::Tensor& context,
    const std::function<std::pair<torch::Tensor, torch::Tensor>()>& make) {
  if (torch::GradMode::is_enabled()) return make();
  if (context_.size() != layers_.size()) context_.resize(layers_.size());
  ContextKeys& held = context_.at(layer);
  // The same text, by value: each pass embeds it anew (a read of it costs far less than its projections).
  if (!held.context.defined() || !held.context.sizes().equals(context.sizes()) ||
      !torch::equal(held.context, context)) {
    auto [key, value] = make();
    held = {context, key, value};
  }
  return {held.key, held.value};
}

std::vector<std::int64_t> KvCache::frames(std::size_t layer) const {
  std::vector<std::int64_t> out;
  for (const Frame& f : layers_.at(layer)) out.push_back(f.index);
  return out;
}

void KvCache::clear() {
  for (auto& layer : layers_) layer.clear();
  context_.clear();
  end_frame_ = 0;
}

}  // namespace wan
