#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "wan/wan_dit.hpp"

namespace wan {

namespace {

/// Saves a block's inputs instead of its activations, and recomputes the block in backward.
struct BlockCheckpoint : torch::autograd::Function<BlockCheckpoint> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& e0,
                               const torch::Tensor& context, at::TensorList parameters, WanBlockImpl* block,
                               const RopeTables* rope, LoraDropoutStreams* dropout, AdapterSelection* selection,
                               bool offload) {
    // The recomputation adds the adapters this forward adds (a DMD critic's on a shared base),
    // whichever the DiT selects when backward runs.
    ctx->saved_data["selection"] = reinterpret_cast<std::int64_t>(selection);
    if (selection != nullptr) {
      ctx->saved_data["first"] = selection->first;
      ctx->saved_data["second"] = selection->second;
    }
    if (offload) {
      // The block's input waits in host memory (pinned on a GPU, copied asynchronously on the
      // compute stream, so backward's copy back is ordered after it); e0 and the context are the
      // same tensors for every block, kept once on the device.
      at::Tensor host = at::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(x.is_cuda()));
      host.copy_(x, /*non_blocking=*/x.is_cuda());
      ctx->saved_data["x_host"] = host;
      ctx->saved_data["x_requires_grad"] = x.requires_grad();
      ctx->save_for_backward({torch::Tensor(), e0, context});
    } else {
      ctx->save_for_backward({x, e0, context});
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
    ctx->saved_data["parameters"] = static_cast<std::int64_t>(parameters.size());
    const auto device_type = x.device().type();
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(device_type);
    ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(device_type);
    return block->forward(x, e0, context, *rope);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* block = reinterpret_cast<WanBlockImpl*>(ctx->saved_data["block"].toInt());
    const RopeTables rope{ctx->saved_data["rope"].toTensor(),
                          reinterpret_cast<const wanfw::SequenceSplit*>(ctx->saved_data["sequence"].toInt())};
    const auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;
    for (const auto& t : saved) inputs.push_back(t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t);
    if (ctx->saved_data.count("x_host"))
      inputs[0] = ctx->saved_data["x_host"].toTensor().to(inputs[1].device(), /*non_blocking=*/true)
                      .requires_grad_(ctx->saved_data["x_requires_grad"].toBool());

    // Recompute under the forward's grad and autocast state.
    torch::Tensor output;
    {
      torch::AutoGradMode grad(true);
      const auto device_type = inputs[0].device().type();
      const bool autocast_before = at::autocast::is_autocast_enabled(device_type);
      const auto dtype_before = at::autocast::get_autocast_dtype(device_type);
      at::autocast::set_autocast_enabled(device_type, ctx->saved_data["autocast"].toBool());
      at::autocast::set_autocast_dtype(device_type, ctx->saved_data["autocast_dtype"].toScalarType());
      auto* dropout = reinterpret_cast<LoraDropoutStreams*>(ctx->saved_data["dropout"].toInt());
      std::optional<LoraDropoutStreams::Samples> samples_before;
      if (dropout != nullptr) {
        samples_before = dropout->samples();
        std::optional<LoraDropoutStreams::Samples> samples;
        if (ctx->saved_data.count("dropout_ids")) {
          const torch::Tensor ids = ctx->saved_data["dropout_ids"].toTensor();
          samples = LoraDropoutStreams::Samples{std::vector<std::int64_t>(ids.data_ptr<std::int64_t>(),
                                                                          ids.data_ptr<std::int64_t>() + ids.numel()),
                                                ctx->saved_data["dropout_epoch"].toInt(),
                                                static_cast<std::uint64_t>(ctx->saved_data["dropout_seed"].toInt()),
                                                inputs[0].device()};
        }
        dropout->set(samples);
      }
      auto* selection = reinterpret_cast<AdapterSelection*>(ctx->saved_data["selection"].toInt());
      const AdapterSelection selection_before = selection != nullptr ? *selection : AdapterSelection{};
      if (selection != nullptr) *selection = {ctx->saved_data["first"].toBool(), ctx->saved_data["second"].toBool()};
      output = block->forward(inputs[0], inputs[1], inputs[2], rope);
      if (selection != nullptr) *selection = selection_before;
      if (dropout != nullptr) dropout->set(samples_before);
      at::autocast::set_autocast_enabled(device_type, autocast_before);
      at::autocast::set_autocast_dtype(device_type, dtype_before);
    }

    // Differentiate with respect to whatever requires grad: the inputs, then the parameters.
    std::vector<torch::Tensor> wrt;
    std::vector<std::size_t> slot;  // position of each differentiated tensor in the result
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].requires_grad()) wrt.push_back(inputs[i]), slot.push_back(i);
    const auto parameters = block->parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i)
      if (parameters[i].requires_grad()) wrt.push_back(parameters[i]), slot.push_back(inputs.size() + i);
    // One gradient per forward argument: x, e0, context, each parameter, block, rope, dropout,
    // selection, offload.
    torch::autograd::variable_list result(inputs.size() + parameters.size() + 5);
    if (!wrt.empty()) {
      const auto grads = torch::autograd::grad({output}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                               /*create_graph=*/false, /*allow_unused=*/true);
      for (std::size_t i = 0; i < grads.size(); ++i) result[slot[i]] = grads[i];
    }
    return result;
  }
};

}  // namespace

torch::Tensor checkpointed_block(WanBlockImpl& block, const torch::Tensor& x, const torch::Tensor& e0,
                                 const torch::Tensor& context, const RopeTables& rope, LoraDropoutStreams* dropout,
                                 AdapterSelection* selection, bool offload) {
  const std::vector<torch::Tensor> parameters = block.parameters();
  return BlockCheckpoint::apply(x, e0, context, at::TensorList(parameters), &block, &rope, dropout, selection,
                                offload);
}

}  // namespace wan
