#include "gathering_unit_runner.hpp"

#include <fmt/format.h>
#include <torch/autograd.h>

#include "wanfw/error.hpp"

namespace wanfw_fsdp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// One run of a unit as one autograd node. Forward: the unit's forward on detached copies of the
/// inputs, its graph kept, its parameters released. Backward: the parameters gathered again, the
/// unit's graph differentiated with respect to the inputs and the parameters, the parameters'
/// gradients reduce-scattered into gradients of the unit's shards (the node's other inputs).
struct UnitCall : torch::autograd::Function<UnitCall> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, at::TensorList shards,
                               GatheringUnitRunner* runner, std::int64_t call, const wanfw::UnitRunner::Body* body) {
    std::vector<at::Tensor> inner;
    for (const at::Tensor& input : inputs) inner.push_back(input.detach().requires_grad_(input.requires_grad()));
    std::vector<at::Tensor> outputs;
    {
      torch::AutoGradMode grad(true);
      outputs = (*body)(inner);
    }
    ctx->saved_data["runner"] = reinterpret_cast<std::int64_t>(runner);
    ctx->saved_data["call"] = call;
    ctx->saved_data["inputs"] = inner;
    ctx->saved_data["outputs"] = outputs;
    ctx->saved_data["shards"] = static_cast<std::int64_t>(shards.size());
    variable_list results;
    for (const at::Tensor& output : outputs) results.push_back(output.detach());
    return results;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* runner = reinterpret_cast<GatheringUnitRunner*>(ctx->saved_data["runner"].toInt());
    const auto call = static_cast<std::size_t>(ctx->saved_data["call"].toInt());
    const std::vector<at::Tensor> inputs = ctx->saved_data["inputs"].toTensorVector();
    const std::vector<at::Tensor> outputs = ctx->saved_data["outputs"].toTensorVector();
    const auto shard_count = static_cast<std::size_t>(ctx->saved_data["shards"].toInt());
    runner->gather_for_backward(call);
    UnitShards& unit = runner->unit_of_call(call);
    const std::vector<at::Tensor> parameters = unit.trainable_parameters();

    std::vector<at::Tensor> roots, root_grads, wrt;
    for (std::size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].requires_grad())
        roots.push_back(outputs[i]),
            root_grads.push_back(grad_outputs[i].defined() ? grad_outputs[i] : at::zeros_like(outputs[i]));
    std::vector<std::size_t> input_slot;
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].requires_grad()) wrt.push_back(inputs[i]), input_slot.push_back(i);
    wrt.insert(wrt.end(), parameters.begin(), parameters.end());
    variable_list grads(wrt.size());
    if (!roots.empty() && !wrt.empty())
      grads = torch::autograd::grad(roots, wrt, root_grads, /*retain_graph=*/false, /*create_graph=*/false,
                                    /*allow_unused=*/true);
    ctx->saved_data.clear();  // the unit's graph, with what it saved, goes now
    runner->release_after_backward(call);

    // One gradient per forward argument: each input, each shard, then runner, call and body.
    variable_list result(inputs.size() + shard_count + 3);
    for (std::size_t k = 0; k < input_slot.size(); ++k) result[input_slot[k]] = grads[k];
    std::size_t next = input_slot.size(), shard = 0;
    for (const auto& flat : unit.flats) {
      if (!flat->trainable()) continue;
      const std::size_t count = flat->parameters().size();
      const std::vector<at::Tensor> flat_grads(grads.begin() + static_cast<std::ptrdiff_t>(next),
                                               grads.begin() + static_cast<std::ptrdiff_t>(next + count));
      const std::size_t slot = inputs.size() + shard++;
      if (flat->reduces_gradients()) result[slot] = flat->reduce_gradient(flat_grads, runner->reduce_dtype());
      next += count;
    }
    return result;
  }
};

}  // namespace

void GatheringUnitRunner::end_micro_step() {
  for (auto& unit : units_) unit.release();
  calls_.clear();
}

std::vector<at::Tensor> GatheringUnitRunner::run(std::size_t index, const std::vector<at::Tensor>& inputs,
                                                 const Body& body) {
  if (index >= units_.size())
    throw wanfw::Error(fmt::format("fsdp: the model ran unit {}, but declared {} units", index, units_.size()),
                       "the model plugin's shard_units() must list every unit it runs");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined())
      throw wanfw::Error(fmt::format("fsdp: unit '{}' was given an undefined input {}", units_[index].name, i),
                         "pass only defined tensors to wanfw::run_unit; capture optional ones in the body");
  if (held_) return body(inputs);
  UnitShards& unit = units_[index];
  unit.gather(settings_.compute);
  // The next unit's parameters travel while this one computes.
  if (settings_.prefetch && index + 1 < units_.size()) units_[index + 1].start_gather(settings_.compute);
  const std::vector<at::Tensor> shards = unit.trainable_shards();
  bool differentiable = false;
  for (const at::Tensor& t : inputs) differentiable |= t.requires_grad();
  differentiable = torch::GradMode::is_enabled() && (differentiable || !shards.empty());
  std::vector<at::Tensor> outputs;
  if (!differentiable) {  // evaluation: no backward will gather again
    outputs = body(inputs);
  } else {
    calls_.push_back(index);
    outputs = UnitCall::apply(at::TensorList(inputs), at::TensorList(shards), this,
                              static_cast<std::int64_t>(calls_.size() - 1), &body);
  }
  unit.release();
  return outputs;
}

void GatheringUnitRunner::gather_for_backward(std::size_t call) {
  unit_of_call(call).gather(settings_.compute);
  if (settings_.prefetch && call > 0) unit_of_call(call - 1).start_gather(settings_.compute);
}

void GatheringUnitRunner::release_after_backward(std::size_t call) {
  if (call > 0 && calls_.at(call - 1) == calls_.at(call)) return;
  unit_of_call(call).release();
}

}  // namespace wanfw_fsdp
