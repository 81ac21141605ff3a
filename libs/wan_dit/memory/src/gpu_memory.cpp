#include "wan/gpu_memory.hpp"

#include <fmt/format.h>

namespace wan {

namespace {

double bytes_of(at::ScalarType dtype) { return dtype == at::kFloat ? 4.0 : 2.0; }

struct PerParameter {
  double total;
  std::string parts;
};

/// What one trained parameter costs between steps: its weight, gradient and AdamW moments (in the
/// weight's dtype), or under bf16_weights a bf16 weight and gradient beside an fp32 master and moments.
PerParameter per_trained_parameter(double weight_bytes, bool master_weights) {
  if (master_weights)
    return {16, "bf16 weight 2 + bf16 gradient 2 + fp32 master weight 4 + fp32 AdamW moments 8"};
  const char* type = weight_bytes == 4 ? "fp32" : "bf16";
  return {4 * weight_bytes,
          fmt::format("{} weight {:g} + gradient {:g} + AdamW moments {:g}", type, weight_bytes, weight_bytes,
                      2 * weight_bytes)};
}

}  // namespace

ActivationEstimate estimate_activations(const WanConfig& config, bool gradient_checkpointing,
                                        const wanfw::TrainingLayout& layout) {
  ActivationEstimate out;
  if (layout.latent.size() != 3) {
    out.text = " + activations (data.buckets names none to estimate them for)";
    return out;
  }
  const auto& p = config.patch;
  const double tokens =
      static_cast<double>((layout.latent[0] / p[0]) * (layout.latent[1] / p[1]) * (layout.latent[2] / p[2]));
  const double per_gpu = tokens * static_cast<double>(layout.batch_size) / layout.sequence_parallel;
  const double a = bytes_of(layout.dtype);
  const double inputs = per_gpu * static_cast<double>(config.dim) * a * config.num_layers;
  const double one_block = per_gpu * static_cast<double>(24 * config.dim + 2 * config.ffn_dim) * a;
  out.bytes = gradient_checkpointing ? inputs + one_block : one_block * config.num_layers;
  out.text = fmt::format(" + activations {:.2f} GiB (latents {}x{}x{}: {} tokens x batch {}{}; {})", out.bytes / kGiB,
                         layout.latent[0], layout.latent[1], layout.latent[2],
                         with_thousands(static_cast<std::int64_t>(tokens)), layout.batch_size,
                         layout.sequence_parallel > 1 ? fmt::format(", 1/{} a GPU", layout.sequence_parallel) : "",
                         gradient_checkpointing ? fmt::format("checkpointed: {} block inputs {:.2f} GiB, one block "
                                                              "recomputed {:.2f} GiB",
                                                              config.num_layers, inputs / kGiB, one_block / kGiB)
                                                : "every block's kept for backward");
  return out;
}

std::string gpu_fit(double bytes) {
  const auto room = [&](double gb) {
    const double left = (gb * 1e9 - bytes) / kGiB;
    return left > 0 ? fmt::format("fits a{} {:g} GB GPU ({:.1f} GiB left)", gb == 80 ? "n" : "", gb, left)
                    : fmt::format("does not fit a{} {:g} GB GPU", gb == 80 ? "n" : "", gb);
  };
  return fmt::format("{}; {}", room(24), room(80));
}

std::string gpu_memory(const WanConfig& config, const LoraSettings& settings, const std::string& dtype, int models,
                       bool gradient_checkpointing, const wanfw::TrainingLayout& layout) {
  // Parameters of one block, and of the rest (embeddings, head).
  double block = 0, all = 0;
  for (const auto& [name, shape] : config.parameter_shapes()) {
    double numel = 1;
    for (const std::int64_t d : shape) numel *= static_cast<double>(d);
    all += numel;
    if (name.rfind("blocks.0.", 0) == 0) block += numel;
  }
  const double rest = all - block * static_cast<double>(config.num_layers);
  const double weight_bytes = bytes_per_value(dtype);
  const double adapters = static_cast<double>(adapter_parameter_count(config, settings));
  // Training state of every DiT: weights, and for what trains its gradient and two AdamW moments
  // (bf16_weights: bf16 weight and gradient, fp32 master and moments, whatever the weights' dtype).
  const PerParameter trained = per_trained_parameter(settings.enabled() ? 4 : weight_bytes, layout.master_weights);
  const double state = models * (settings.enabled() ? all * weight_bytes + adapters * trained.total
                                                    : all * trained.total);
  const double share = layout.sharded ? 1.0 / layout.gpus : 1.0;
  const double compute = layout.dtype == at::kFloat ? weight_bytes : bytes_of(layout.dtype);
  // fsdp holds two blocks gathered (the current one and the prefetched next), the rest of the
  // model for the whole step, and a block's full gradient until it is reduce-scattered.
  const double gathered =
      layout.sharded ? (2 * block + rest) * compute + (settings.enabled() ? 0.0 : (block + rest) * compute) : 0.0;

  std::string out = fmt::format("per GPU, {} on {} GPU{}", layout.strategy, layout.gpus, layout.gpus == 1 ? "" : "s");
  if (layout.sequence_parallel > 1) out += fmt::format(" (sequence parallel {})", layout.sequence_parallel);
  out += fmt::format(": training state {:.2f} GiB{}", state * share / kGiB,
                     layout.sharded ? fmt::format(" (1/{} of {:.2f})", layout.gpus, state / kGiB) : std::string());
  if (gathered > 0) out += fmt::format(" + gathered parameters {:.2f} GiB", gathered / kGiB);
  const ActivationEstimate act = estimate_activations(config, gradient_checkpointing, layout);
  out += act.text;
  const double total = state * share + gathered + act.bytes;
  out += fmt::format(" = {:.2f} GiB: {}\n", total / kGiB, gpu_fit(total));
  out += fmt::format("training state per trained parameter: {:g} bytes ({})\n", trained.total, trained.parts);
  return out;
}

}  // namespace wan
