#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "chunked_recompute.hpp"
#include "wan/causal_attention.hpp"
#include "wan/wan_dit.hpp"

namespace wan {

namespace {

/// The state a recomputation runs under: the forward's grad mode, autocast, adapter dropout
/// samples and adapter selection, restored when it ends.
class ForwardState {
 public:
  ForwardState(torch::autograd::AutogradContext* ctx, const torch::Device& device) : device_type_(device.type()) {
    const auto device_type = device.type();
    autocast_ = at::autocast::is_autocast_enabled(device_type);
    autocast_dtype_ = at::autocast::get_autocast_dtype(device_type);
    at::autocast::set_autocast_enabled(device_type, ctx->saved_data["autocast"].toBool());
    at::autocast::set_autocast_dtype(device_type, ctx->saved_data["autocast_dtype"].toScalarType());
    dropout_ = reinterpret_cast<LoraDropoutStreams*>(ctx->saved_data["dropout"].toInt());
    if (dropout_ != nullptr) {
      samples_ = dropout_->samples();
      std::optional<LoraDropoutStreams::Samples> samples;
      if (ctx->saved_data.count("dropout_ids")) {
        const torch::Tensor ids = ctx->saved_data["dropout_ids"].toTensor();
        samples = LoraDropoutStreams::Samples{
            std::vector<std::int64_t>(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel()),
            ctx->saved_data["dropout_epoch"].toInt(),
            static_cast<std::uint64_t>(ctx->saved_data["dropout_seed"].toInt()), device};
      }
      dropout_->set(samples);
    }
    selection_ = reinterpret_cast<AdapterSelection*>(ctx->saved_data["selection"].toInt());
    if (selection_ != nullptr) {
      selection_before_ = *selection_;
      *selection_ = {ctx->saved_data["first"].toBool(), ctx->saved_data["second"].toBool()};
    }
  }
  ~ForwardState() {
    if (selection_ != nullptr) *selection_ = selection_before_;
    if (dropout_ != nullptr) dropout_->set(samples_);
    at::autocast::set_autocast_enabled(device_type_, autocast_);
    at::autocast::set_autocast_dtype(device_type_, autocast_dtype_);
  }
  ForwardState(const ForwardState&) = delete;
  ForwardState& operator=(const ForwardState&) = delete;
  LoraDropoutStreams* dropout() const { return dropout_; }

 private:
  torch::AutoGradMode grad_{true};
  torch::DeviceType device_type_;
  bool autocast_ = false;
  at::ScalarType autocast_dtype_ = at::kFloat;
  LoraDropoutStreams* dropout_ = nullptr;
  std::optional<LoraDropoutStreams::Samples> samples_;
  AdapterSelection* selection_ = nullptr;
  AdapterSelection selection_before_;
};

/// The `embedded` input of a block that adds no embedded latents: an empty tensor (a custom
/// function's inputs must be defined).
torch::Tensor no_embedded(const torch::Tensor& like) { return torch::empty({0}, like.options()); }

/// A block's outputs from its inputs: a main block's output; a VACE block's state and hint (its
/// input first projected and added to the embedded latents where it has before_proj).
std::vector<torch::Tensor> block_outputs(WanBlockImpl& block, const torch::Tensor& x, const torch::Tensor& embedded,
                                         const torch::Tensor& e0, const torch::Tensor& context, const RopeTables& rope,
                                         std::int64_t chunks, LoraDropoutStreams* dropout) {
  const torch::Tensor in = block.before_proj ? block.before_proj(x) + embedded : x;
  torch::Tensor out = chunks > 1 ? chunked_block_forward(block, in, e0, context, rope, chunks, dropout)
                                 : block.forward(in, e0, context, rope);
  if (!block.after_proj) return {out};
  torch::Tensor hint = block.after_proj(out);
  return {out, hint};
}

/// Saves a block's inputs instead of its activations, and recomputes the block in backward.
struct BlockCheckpoint : torch::autograd::Function<BlockCheckpoint> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& e0, const torch::Tensor& context,
                                                const torch::Tensor& embedded, at::TensorList parameters,
                                                WanBlockImpl* block, const RopeTables* rope,
                                                LoraDropoutStreams* dropout, AdapterSelection* selection, bool offload,
                                                std::int64_t chunks) {
    // The recomputation adds the adapters this forward adds (a DMD critic's on a shared base),
    // whichever the DiT selects when backward runs.
    ctx->saved_data["selection"] = reinterpret_cast<std::int64_t>(selection);
    if (selection != nullptr) {
      ctx->saved_data["first"] = selection->first;
      ctx->saved_data["second"] = selection->second;
    }
    if (offload) {
      // The block's input (and a VACE block's embedded latents) wait in host memory (pinned on a
      // GPU, copied asynchronously on the compute stream, so backward's copy back is ordered after
      // it); e0 and the context are the same tensors for every block, kept once on the device.
      const auto to_host = [&](const torch::Tensor& t, const char* name) {
        if (t.numel() == 0) return;  // no embedded latents
        at::Tensor host = at::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(t.is_cuda()));
        host.copy_(t, /*non_blocking=*/t.is_cuda());
        ctx->saved_data[std::string(name) + "_host"] = host;
        ctx->saved_data[std::string(name) + "_requires_grad"] = t.requires_grad();
      };
      to_host(x, "x");
      to_host(embedded, "embedded");
      ctx->save_for_backward({torch::Tensor(), e0, context, torch::Tensor()});
    } else {
      ctx->save_for_backward({x, e0, context, embedded});
    }
    ctx->saved_data["dropout"] = reinterpret_cast<std::int64_t>(dropout);
    if (dropout != nullptr && dropout->samples()) {  // the recomputation draws the same masks
      const auto& samples = *dropout->samples();
      ctx->saved_data["dropout_ids"] = torch::tensor(samples.ids, torch::kInt64);
      ctx->saved_data["dropout_epoch"] = samples.epoch;
      ctx->saved_data["dropout_seed"] = static_cast<std::int64_t>(samples.seed);
    }
    ctx->saved_data["block"] = reinterpret_cast<std::int64_t>(block);
    ctx->saved_data["rope"] = rope->rotations;
    ctx->saved_data["sequence"] = reinterpret_cast<std::int64_t>(rope->sequence);
    // A causal block recomputes under its mask; a rollout's pass over the frames it found in the
    // cache, which later passes change.
    ctx->saved_data["causal"] = rope->causal != nullptr;
    if (const CausalAttention* causal = rope->causal) {
      // By value: a rollout's layout (its cache's) may be gone by the time backward runs.
      ctx->saved_data["causal_layout"] = std::vector<std::int64_t>{
          causal->layout->frames_per_chunk, causal->layout->window_frames, causal->layout->sink_frames,
          causal->layout->independent_first_frame ? 1 : 0};
      std::vector<std::int64_t> tags;  // frame, noisy
      for (const FrameTag& tag : causal->tags) tags.insert(tags.end(), {tag.frame, tag.noisy ? 1 : 0});
      ctx->saved_data["causal_tags"] = tags;
      if (causal->cache != nullptr) {
        const HeldFrames held = causal->cache->held(causal->layer, causal->first_frame);
        std::vector<std::int64_t> frames;
        for (const FrameTag& tag : held.frames) frames.push_back(tag.frame);
        ctx->saved_data["causal_held_frames"] = frames;
        ctx->saved_data["causal_held_keys"] = held.keys;
        ctx->saved_data["causal_held_values"] = held.values;
        ctx->saved_data["causal_span"] = std::vector<std::int64_t>{causal->first_frame, causal->frames};
      }
    }
    ctx->saved_data["parameters"] = static_cast<std::int64_t>(parameters.size());
    ctx->saved_data["chunks"] = chunks;
    const auto device_type = x.device().type();
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(device_type);
    ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(device_type);
    return block_outputs(*block, x, embedded, e0, context, *rope, chunks, dropout);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* block = reinterpret_cast<WanBlockImpl*>(ctx->saved_data["block"].toInt());
    RopeTables rope{ctx->saved_data["rope"].toTensor(),
                    reinterpret_cast<const wanfw::SequenceSplit*>(ctx->saved_data["sequence"].toInt())};
    CausalAttention causal;
    CausalLayout layout;
    if (ctx->saved_data["causal"].toBool()) {
      const std::vector<std::int64_t> shape = ctx->saved_data["causal_layout"].toIntVector();
      layout = {shape[0], shape[1], shape[2], shape[3] != 0};
      causal.layout = &layout;
      const std::vector<std::int64_t> tags = ctx->saved_data["causal_tags"].toIntVector();
      for (std::size_t i = 0; i + 1 < tags.size(); i += 2) causal.tags.push_back({tags[i], tags[i + 1] != 0});
      if (ctx->saved_data.count("causal_held_frames")) {
        auto held = std::make_shared<HeldFrames>();
        for (const std::int64_t frame : ctx->saved_data["causal_held_frames"].toIntVector())
          held->frames.push_back({frame, false});
        held->keys = ctx->saved_data["causal_held_keys"].toTensorVector();
        held->values = ctx->saved_data["causal_held_values"].toTensorVector();
        const std::vector<std::int64_t> span = ctx->saved_data["causal_span"].toIntVector();
        causal.first_frame = span[0];
        causal.frames = span[1];
        causal.held = std::move(held);
      }
      rope.causal = &causal;
    }
    const auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;  // x, e0, context, embedded
    for (const auto& t : saved) inputs.push_back(t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t);
    for (const auto& [name, index] : {std::pair{"x", 0}, {"embedded", 3}})
      if (ctx->saved_data.count(std::string(name) + "_host"))
        inputs[index] = ctx->saved_data[std::string(name) + "_host"]
                            .toTensor()
                            .to(inputs[1].device(), /*non_blocking=*/true)
                            .requires_grad_(ctx->saved_data[std::string(name) + "_requires_grad"].toBool());
    const auto parameters = block->parameters();
    // One gradient per forward argument: x, e0, context, embedded, each parameter, block, rope,
    // dropout, selection, offload, chunks.
    torch::autograd::variable_list result(inputs.size() + parameters.size() + 6);
    const ForwardState state(ctx, inputs[0].device());
    const std::int64_t chunks = ctx->saved_data["chunks"].toInt();
    std::vector<torch::Tensor> grads;
    if (chunks > 1 && block->after_proj) {
      grads = chunked_vace_backward(*block, inputs, parameters, rope, chunks, state.dropout(), grad_outputs);
    } else if (chunks > 1) {
      grads = chunked_block_backward(*block, {inputs[0], inputs[1], inputs[2]}, parameters, rope, chunks,
                                     state.dropout(), grad_outputs[0]);
      grads.insert(grads.begin() + 3, torch::Tensor());  // no embedded latents
    } else {
      // Recompute the whole block, then differentiate with respect to whatever requires grad: the
      // inputs, then the parameters.
      const auto outputs = block_outputs(*block, inputs[0], inputs[3], inputs[1], inputs[2], rope, 1, nullptr);
      std::vector<torch::Tensor> wrt = inputs;
      wrt.insert(wrt.end(), parameters.begin(), parameters.end());
      grads = gradients_of(outputs, grad_outputs, wrt);
    }
    for (std::size_t i = 0; i < grads.size(); ++i) result[i] = grads[i];
    return result;
  }
};

}  // namespace

torch::Tensor checkpointed_block(WanBlockImpl& block, const BlockInputs& in, const Recomputation& how) {
  const std::vector<torch::Tensor> parameters = block.parameters();
  return BlockCheckpoint::apply(in.x, in.e0, in.context, no_embedded(in.x), at::TensorList(parameters), &block,
                                &in.rope, how.dropout, how.selection, how.offload, how.chunks)
      .at(0);
}

std::array<torch::Tensor, 2> checkpointed_vace_block(WanBlockImpl& block, const BlockInputs& in,
                                                     const torch::Tensor& embedded, const Recomputation& how) {
  const std::vector<torch::Tensor> parameters = block.parameters();
  const auto out = BlockCheckpoint::apply(in.x, in.e0, in.context, embedded.defined() ? embedded : no_embedded(in.x),
                                          at::TensorList(parameters), &block, &in.rope, how.dropout, how.selection,
                                          how.offload, how.chunks);
  return {out.at(0), out.at(1)};
}

}  // namespace wan
