#pragma once
// Low-rank adapters on a Wan DiT: which layers carry them, attaching them (the rest of the DiT
// frozen), their parameters, and folding them into the weights. The layers are wan::WanLinear;
// an adapter's tensors sit below its layer's official name ("blocks.3.self_attn.q.lora_A.weight").

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wan/wan_dit.hpp"
#include "wan/weight_names.hpp"
#include "wanfw/model.hpp"

namespace wan {

/// An adapter file applied when the model is built (`model.lora.load`).
struct AdapterLoad {
  std::filesystem::path file;
  double scale = 1.0;   ///< multiplies the file's update (its alpha / rank included)
  bool train = false;   ///< false: merged into the frozen base; true: the trained adapter starts from it
  std::string expert;   ///< two experts: "high_noise" or "low_noise"; empty: every DiT
  std::string where;    ///< the config entry, for errors ("(model.lora.load[0] at experiment.yaml:12:7)")
};

struct LoraSettings {
  std::int64_t rank = 0;  ///< 0: no adapters; every weight trains
  double alpha = 0;
  double dropout = 0;
  std::vector<std::string> targets;  ///< patterns over the layers' official names ('*' any run)
  double lr_scale = 1.0;
  std::optional<double> weight_decay;
  std::vector<AdapterLoad> load;
  bool enabled() const { return rank > 0; }
};

/// Every WanLinear below `module` (any module holding DiTs), by module name, in module order.
std::vector<std::pair<std::string, WanLinearImpl*>> linear_layers(const torch::nn::Module& module);

/// True when `name` matches `pattern` as a whole ('*' matches any run of characters, '?' one).
bool matches_pattern(const std::string& name, const std::string& pattern);

/// The adaptable layers some pattern of `targets` selects; `unmatched` receives the patterns that
/// select none.
std::vector<std::string> target_layers(const WanConfig& config, const std::vector<std::string>& targets,
                                       std::vector<std::string>* unmatched = nullptr);

/// Trainable parameters of the adapters `settings` attach to one DiT of `config`.
std::int64_t adapter_parameter_count(const WanConfig& config, const LoraSettings& settings);

/// model-info's line for the adapters of `models` DiTs of `config`: rank, layers, trainable share
/// and the adapter file's size; "" without adapters. Their memory is the plan's (wan/memory_plan.hpp).
std::string adapter_summary(const WanConfig& config, const LoraSettings& settings, int models);

/// Freezes every parameter of `dit` and attaches new float32 adapters (A random, B zero) to the
/// layers `settings.targets` select; they alone require grad. Gives the DiT dropout streams.
void attach_adapters(WanDiTImpl& dit, const LoraSettings& settings);

/// Attaches a second set of new float32 adapters (no dropout) to the layers `settings.targets`
/// select, beside the first (a DMD critic's on the generator's frozen base); they require grad.
/// The DiT's adapter_selection then says which set its forward adds (AdapterScope).
void attach_second_adapters(WanDiTImpl& dit, const LoraSettings& settings);

/// Makes the DiT's adapters draw dropout from streams of its own (a replica's) and select from a
/// selection of its own, and freezes its base again (cloning re-enables gradients); a no-op for a
/// DiT without adapters of either set (trained whole).
void refresh_adapters(WanDiTImpl& dit);

/// Removes the second set from every layer of `dit` (before exporting the first: the critic's
/// adapters are a training artefact).
void remove_second_adapters(WanDiTImpl& dit);

/// The second set's parameters below `module`, under their module names.
std::vector<std::pair<std::string, at::Tensor>> second_adapter_parameters(const torch::nn::Module& module);

/// For its life, the adapters `dit`'s forward adds (a DiT with a second set; else a no-op).
class AdapterScope {
 public:
  AdapterScope(WanDiTImpl& dit, AdapterSelection selection);
  /// The same selection for every DiT of `dits` (both experts of a denoiser).
  AdapterScope(const std::vector<WanDiT>& dits, AdapterSelection selection);
  ~AdapterScope();
  AdapterScope(const AdapterScope&) = delete;
  AdapterScope& operator=(const AdapterScope&) = delete;

 private:
  void select(WanDiTImpl& dit, AdapterSelection selection);
  std::vector<std::pair<WanDiTImpl*, AdapterSelection>> before_;  ///< each DiT with a second set, as it was
};

/// The adapters' parameters below `module` (any module holding DiTs), under their module names.
std::vector<std::pair<std::string, at::Tensor>> adapter_parameters(const torch::nn::Module& module);

/// The optimizer group of the adapters below `module`: "lora", at settings.lr_scale and
/// settings.weight_decay.
wanfw::ParameterGroup adapter_group(const torch::nn::Module& module, const LoraSettings& settings);

/// Folds every attached adapter of `dit` into its layer's weight and removes it.
void merge_adapters(WanDiTImpl& dit);

/// Sets the samples of `batch` as what the adapters of `dits` draw dropout for, for the scope's
/// life (a training forward); a no-op for DiTs without adapters.
class DropoutSamplesScope {
 public:
  DropoutSamplesScope(std::vector<WanDiT> dits, const wanfw::Batch& batch);
  ~DropoutSamplesScope();
  DropoutSamplesScope(const DropoutSamplesScope&) = delete;
  DropoutSamplesScope& operator=(const DropoutSamplesScope&) = delete;

 private:
  std::vector<WanDiT> dits_;
};

}  // namespace wan
