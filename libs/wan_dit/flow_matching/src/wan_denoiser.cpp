#include "wan/wan_denoiser.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/lora_files.hpp"
#include "wan/wan_weights.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace fs = std::filesystem;

namespace wan {

namespace {

/// Seeds the default generators for expert `index`'s draws of kind `what`.
void seed_expert(std::uint64_t base, int index, std::string_view what) {
  torch::manual_seed(wanfw::mix_seed(wanfw::sample_stream_seed(base, index, 0, what)));
}

}  // namespace

Expert parse_expert(const std::string& name) {
  if (name == "none") return Expert::None;
  if (name == "high_noise") return Expert::HighNoise;
  if (name == "low_noise") return Expert::LowNoise;
  if (name == "both") return Expert::Both;
  throw wanfw::Error(fmt::format("unknown expert '{}'", name), "use none, high_noise, low_noise or both");
}

int expert_index(std::string_view name) {
  for (int i = 0; i < 2; ++i)
    if (name == kExpertNames[i]) return i;
  return -1;
}

WanExpertPairImpl::WanExpertPairImpl(WanConfig config, WanPlacement placement, int held)
    : config_(std::move(config)), placement_(placement), held_(held) {
  reset();
}

void WanExpertPairImpl::reset() {
  // Each expert's initial weights from a seed of its own: the same whether this process builds
  // both experts or one (the experts on rank groups).
  const std::uint64_t base = at::detail::getDefaultCPUGenerator().current_seed();
  if (held_ != 1) {
    seed_expert(base, 0, "weights");
    high_noise_model = register_module("high_noise_model", WanDiT(config_, placement_));
  }
  if (held_ != 0) {
    seed_expert(base, 1, "weights");
    low_noise_model = register_module("low_noise_model", WanDiT(config_, placement_));
  }
  torch::manual_seed(base);
}

std::vector<ExpertWeights> expert_weights(const fs::path& weights, const std::string& subfolder, Expert expert) {
  if (expert == Expert::None) return {{"", weights, subfolder}};
  struct Side {
    Expert expert;
    const char* official;
    const char* diffusers;
  };
  const Side sides[] = {{Expert::HighNoise, "high_noise_model", "transformer"},
                        {Expert::LowNoise, "low_noise_model", "transformer_2"}};
  const bool official = fs::is_directory(weights / "high_noise_model") || fs::is_directory(weights / "low_noise_model");
  const bool diffusers = fs::is_directory(weights / "transformer_2");
  std::vector<ExpertWeights> out;
  for (const Side& side : sides) {
    if (expert != Expert::Both && expert != side.expert) continue;
    if (official || diffusers) {
      const fs::path path = weights / (official ? side.official : side.diffusers);
      if (!fs::exists(path))
        throw wanfw::FileError(
            fmt::format("Wan weights: {} holds expert folders but not {}", weights.string(), path.filename().string()),
            "point model.weights at the complete Wan2.2 A14B download");
      out.push_back({side.official, path, ""});
    } else if (expert == Expert::Both) {
      throw wanfw::FileError(
          fmt::format("Wan weights: {} holds one model, but expert: both trains two", weights.string()),
          "point model.weights at a folder with high_noise_model/ and low_noise_model/ (official) or transformer/ "
          "and transformer_2/ (diffusers), or train one expert (expert: high_noise or low_noise)");
    } else {
      out.push_back({side.official, weights, subfolder});  // the expert's own folder or file
    }
  }
  return out;
}

std::string describe_weights(const std::string& label, const WanConfig& config, const fs::path& weights,
                             const std::string& subfolder, Expert expert, bool new_vace_branch) {
  if (!fs::exists(weights))
    return fmt::format("{}: {} is not on this machine; it is checked when a run starts\n", label, weights.string());
  std::string out;
  for (const auto& source : expert_weights(weights, subfolder, expert)) {
    const WeightLayout layout = check_wan_weights(config, source.path, source.subfolder, nullptr, new_vace_branch);
    out += fmt::format("{}{}: {} ({} layout): every tensor present with the model's shape{}\n", label,
                       source.expert.empty() ? "" : " of " + source.expert, source.path.string(),
                       layout == WeightLayout::Diffusers ? "diffusers" : "official",
                       new_vace_branch ? " (a base model: the VACE branch starts new)" : "");
  }
  return out;
}

WanDenoiser::WanDenoiser(const WanConfig& config, Expert expert, double boundary, WanPlacement placement,
                         int held_expert)
    : config_(config), expert_(expert), boundary_(boundary), held_(expert == Expert::Both ? held_expert : -1) {
  if (expert_ == Expert::Both)
    pair_ = WanExpertPair(config_, placement, held_);
  else
    single_ = WanDiT(config_, placement);
}

WanDenoiser::WanDenoiser(const WanDenoiser& other, const c10::Device& device)
    : config_(other.config_),
      expert_(other.expert_),
      boundary_(other.boundary_),
      held_(other.held_),
      lora_(other.lora_) {
  if (other.pair_)
    pair_ = WanExpertPair(std::dynamic_pointer_cast<WanExpertPairImpl>(other.pair_->clone(device)));
  else
    single_ = WanDiT(std::dynamic_pointer_cast<WanDiTImpl>(other.single_->clone(device)));
  for (auto& dit : dits()) refresh_adapters(*dit);
  if (other.vace_branch_) train_vace_branch();  // cloning re-enables every parameter's gradient
}

void WanDenoiser::train_vace_branch() {
  vace_branch_ = true;
  for (auto& dit : dits())
    for (auto& item : dit->named_parameters(/*recurse=*/true))
      item.value().requires_grad_(item.key().starts_with("vace_") && !item.key().ends_with("weight_scale"));
}

void WanDenoiser::apply_lora(const LoraSettings& settings) {
  auto all = dits();
  const std::uint64_t base = at::detail::getDefaultCPUGenerator().current_seed();
  for (std::size_t i = 0; i < all.size(); ++i) {
    // The experts' adapters drawn from seeds of their own, as their weights (WanExpertPairImpl).
    if (pair_) seed_expert(base, expert_index(expert_name(i)), "adapters");
    wan::apply_lora(*all[i], settings, expert_name(i));
  }
  if (pair_) torch::manual_seed(base);
  lora_ = settings.enabled();
}

void WanDenoiser::attach_second_adapters(const LoraSettings& settings) {
  auto all = dits();
  const std::uint64_t base = at::detail::getDefaultCPUGenerator().current_seed();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (pair_) seed_expert(base, expert_index(expert_name(i)), "second_adapters");
    wan::attach_second_adapters(*all[i], settings);
  }
  if (pair_) torch::manual_seed(base);
}

std::string WanDenoiser::expert_name(std::size_t index) const {
  switch (expert_) {
    case Expert::Both:
      return kExpertNames[held_ >= 0 ? held_ : static_cast<int>(index)];
    case Expert::HighNoise:
      return kExpertNames[0];
    case Expert::LowNoise:
      return kExpertNames[1];
    default:
      return "";
  }
}

std::shared_ptr<torch::nn::Module> WanDenoiser::module() const {
  if (pair_) return pair_.ptr();
  return single_.ptr();
}

std::vector<wanfw::Unit> WanDenoiser::units(const std::string& prefix) const {
  std::vector<wanfw::Unit> units;
  auto all = dits();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string expert = pair_ ? expert_name(i) + "_model." : "";
    for (auto& unit : all[i]->units(prefix + expert)) units.push_back(std::move(unit));
  }
  return units;
}

std::size_t WanDenoiser::block_count() const {
  std::size_t count = 0;
  for (const auto& dit : dits()) count += dit->unit_count();
  return count;
}

void WanDenoiser::set_unit_runner(wanfw::UnitRunner* runner) {
  if (runner != nullptr && runner->collective() && pair_ && held_ < 0)
    throw wanfw::Error(
        "fsdp cannot train both experts in one run: each rank's samples pick which expert's blocks run, "
        "so the ranks would gather different units",
        "put each expert on its own ranks (strategy.network_groups: [high_noise ranks, low_noise "
        "ranks]; fsdp then shards each over its group), or use ddp with find_unused_parameters");
  std::size_t first = 0;
  for (auto& dit : dits()) {
    dit->set_unit_runner(runner, first);
    first += dit->unit_count();
  }
}

void WanDenoiser::set_sequence_group(const wanfw::DistributedSession* group) {
  for (auto& dit : dits()) dit->set_sequence_group(group);
}

std::vector<WanDiT> WanDenoiser::dits() const {
  if (pair_) {
    std::vector<WanDiT> held;
    for (const WanDiT& dit : {pair_->high_noise_model, pair_->low_noise_model})
      if (dit) held.push_back(dit);
    return held;
  }
  return {single_};
}

void WanDenoiser::load_weights(const fs::path& weights, const std::string& subfolder, bool new_vace_branch) {
  auto sources = expert_weights(weights, subfolder, expert_);
  if (held_ >= 0) sources = {sources.at(static_cast<std::size_t>(held_))};  // this process's expert alone
  auto targets = dits();
  for (std::size_t i = 0; i < sources.size(); ++i)
    load_wan_weights(*targets[i].ptr(), sources[i].path, sources[i].subfolder, new_vace_branch);
}

std::pair<double, double> WanDenoiser::sigma_range() const {
  switch (expert_) {
    case Expert::HighNoise:
      return {boundary_, 1.0};
    case Expert::LowNoise:
      return {0.0, boundary_};
    default:
      return {0.0, 1.0};
  }
}

torch::Tensor WanDenoiser::high_noise_samples(const torch::Tensor& sigma) const {
  return routes_high(sigma, boundary_);
}

torch::Tensor WanDenoiser::forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                                   const torch::Tensor& y, const torch::Tensor& sigma, const VaceInput& vace,
                                   const CausalPass* causal) {
  if (!pair_) return single_->forward(x, t, context, y, vace, causal);
  if (causal != nullptr && causal->cache != nullptr) return rollout_pass(x, t, context, y, sigma, vace, *causal);
  if (held_ >= 0) return dits().front()->forward(x, t, context, y, vace, causal);  // the samples were routed here
  const torch::Tensor high = high_noise_samples(sigma);
  const std::int64_t high_count = high.sum().item<std::int64_t>();
  if (high_count == x.size(0)) return pair_->high_noise_model->forward(x, t, context, y, vace, causal);
  if (high_count == 0) return pair_->low_noise_model->forward(x, t, context, y, vace, causal);
  const torch::Tensor high_index = high.nonzero().squeeze(1).to(x.device());
  const torch::Tensor low_index = (~high).nonzero().squeeze(1).to(x.device());
  auto part = [&](WanDiT& dit, const torch::Tensor& index) {
    // Adapter dropout draws for the samples this expert holds.
    std::optional<LoraDropoutStreams::Samples> all_samples;
    if (dit->lora_dropout && dit->lora_dropout->samples()) {
      all_samples = dit->lora_dropout->samples();
      LoraDropoutStreams::Samples part_samples = *all_samples;
      part_samples.ids.clear();
      const torch::Tensor rows = index.to(torch::kCPU, torch::kInt64).contiguous();
      const std::int64_t* row = rows.data_ptr<std::int64_t>();
      for (std::int64_t i = 0; i < rows.numel(); ++i) part_samples.ids.push_back(all_samples->ids.at(row[i]));
      dit->lora_dropout->set(part_samples);
    }
    const auto rows = [&](const torch::Tensor& tensor) {
      return tensor.defined() ? tensor.index_select(0, index) : torch::Tensor();
    };
    torch::Tensor out =
        dit->forward(rows(x), rows(t), rows(context), rows(y), {rows(vace.context), vace.scales}, causal);
    if (all_samples) dit->lora_dropout->set(all_samples);
    return out;
  };
  const torch::Tensor high_out = part(pair_->high_noise_model, high_index);
  const torch::Tensor low_out = part(pair_->low_noise_model, low_index);
  auto sizes = high_out.sizes().vec();
  sizes[0] = x.size(0);
  return torch::zeros(sizes, high_out.options()).index_copy(0, high_index, high_out).index_copy(0, low_index, low_out);
}

}  // namespace wan
