// Plugin `wan22_flow_matching`: its options, checked against each other, and the factory of
// the model (flow_matching_model.hpp).

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "causal_student.hpp"
#include "flow_matching_model.hpp"
#include "flow_matching_settings.hpp"
#include "wan/attention_backend.hpp"
#include "wan/causal_options.hpp"
#include "wan/memory_options.hpp"
#include "wan/memory_plan.hpp"
#include "wan/vae/vae_decoding.hpp"
#include "wan/wan_options.hpp"
#include "wan/wan_weights.hpp"
#include "wanfw/error.hpp"
#include "wanfw/log.hpp"
#include "wanfw/plugin.hpp"

namespace {

using wan::Expert;
using wan_fm::FlowMatchingSettings;
using wanfw::option;
using T = wanfw::OptionType;

wan::WanConfig config_from(const wanfw::Options& o) { return wan::config_from_options(o, ""); }

using wan_fm::settings_from;

/// Network groups (wanfw/parallel/network_groups.hpp) of `groups` sizes hold the two experts of expert: both
/// only; a refusal at `expert` otherwise.
void check_network_groups(const wanfw::Options& o, const std::vector<int>& groups, Expert expert) {
  if (!groups.empty() && o.integer("causal.frames_per_chunk") > 0)
    o.fail("causal.frames_per_chunk",
           "a causal expert pair on network groups is not supported yet: each sample's chunks and its streamed "
           "samples run through both experts' caches",
           "train the pair with both experts on every rank (remove strategy.network_groups; fsdp shards them)");
  if (groups.empty() || (expert == Expert::Both && groups.size() == 2)) return;
  o.fail("expert",
         fmt::format("the strategy places {} network group(s); this model has {} (expert: {})", groups.size(),
                     expert == Expert::Both ? "two experts" : "one network", o.string("expert")),
         "set model.expert: both with strategy.network_groups: [high_noise ranks, low_noise ranks], or remove "
         "strategy.network_groups");
}

/// The official initialisation zeroes the output head, which adapters never reach: adapters on a
/// DiT without weights get no gradient, and a run learns nothing. Said by `validate` and `run`.
void warn_if_adapters_cannot_learn(const wanfw::Options& o, const FlowMatchingSettings& s, const wan::WanConfig& c) {
  if (!s.lora.enabled() || !o.string("weights").empty() || c.has_vace()) return;
  wanfw::log::warn(o.where("weights").str(),
                   ": model.weights is empty, so the DiT starts from the random "
                   "initialisation, whose output head is all zeros: its adapters (lora.rank ",
                   s.lora.rank,
                   ") get no gradient and the run cannot learn: set model.weights to the base model's checkpoint; "
                   "for a first try without it, train the model whole (lora.rank: 0), export it, and use the export "
                   "as model.weights (docs/lora.md)");
}

/// Under network groups, the expert this rank holds; -1 when every rank holds the whole model.
int held_expert(const wanfw::Options& o, const wanfw::PluginContext& ctx, Expert expert) {
  if (ctx.network_groups.sizes.empty()) return -1;
  check_network_groups(o, ctx.network_groups.sizes, expert);
  return ctx.network_groups.group;
}

std::unique_ptr<wanfw::Model> make_model(const wanfw::Options& o, const wanfw::PluginContext& ctx) {
  const wan::WanConfig config = config_from(o);
  wan::check_vae_option(o, config.out_dim, true);  // before the weights: a wrong VAE costs no load
  wan::check_block_swap_needs(o, ctx.layout);
  wan::use_attention_backend(wan::parse_attention_backend(o.string("attention")));
  // Built where it will train, in the weights' dtype, part by part: the checkpoint is then copied
  // straight into the final parameters, never held whole in fp32 on the CPU.
  FlowMatchingSettings settings = settings_from(o, config);
  (void)wan_fm::causal_training_layout(o, settings, ctx.layout);  // a causal student's chunks cut the largest bucket
  wan::warn_chunks_beyond_tokens(o, ctx.layout, config.patch);
  // A VACE model trains its branch (whole, or through adapters); the base stays frozen.
  const bool vace_whole = config.has_vace() && !settings.lora.enabled();
  const wan::WanPlacement placement{ctx.device, o.dtype("dtype"), settings.fp8_base, vace_whole};
  const int held = held_expert(o, ctx, settings.expert);
  auto model = std::make_unique<wan_fm::WanFlowMatchingModel>(config, std::move(settings), placement, held);
  const FlowMatchingSettings& s = model->settings();
  wan::WanDenoiser& denoiser = model->denoiser();
  const std::string weights = o.string("weights");
  if (!weights.empty()) denoiser.load_weights(weights, o.string("weights_subfolder"), s.new_vace_branch);
  if (ctx.trains)
    warn_if_adapters_cannot_learn(o, s, config);
  else if (config.has_vace())
    wanfw::log::warn(
        "the VACE model starts from the official random initialisation, whose zero head passes the "
        "control branch no gradient: set model.weights to a VACE checkpoint (Wan2.1-VACE, "
        "Wan2.2-VACE-Fun), or to a base model's with model.vace_branch: new");
  denoiser.apply_lora(s.lora);
  if (vace_whole) denoiser.train_vace_branch();
  if (s.lora.enabled() && !ctx.layout.sharded) {
    const wan::PlannedRun run{config, s.lora, o.string("dtype"), static_cast<int>(denoiser.dits().size()), s.task};
    const wanfw::TrainingLayout planned = wan_fm::causal_training_layout(o, s, ctx.layout);
    model->set_planned_device_bytes(wan::estimate_memory(run, wan::configured_memory(o, planned), planned).device);
  }
  for (auto& dit : denoiser.dits()) {
    dit->set_gradient_checkpointing(o.boolean("gradient_checkpointing"));
    dit->set_activation_offload(s.activation_offload);
    dit->set_recompute_chunks(s.recompute_chunks);
  }
  wan::log_memory_options(o, ctx.layout);
  return model;
}

/// model-info's words for a VACE model: its context in the batches, and what trains.
std::string vace_summary(const wan::WanConfig& c, const wan::LoraSettings& lora) {
  if (!c.has_vace()) return "";
  return fmt::format(
      ", vace_context [{}, frames, height, width]\nVACE: hints after blocks {} ({} VACE blocks, "
      "{} parameters in the branch); {}",
      c.vace_in_dim, fmt::join(c.vace_layers, ", "), c.vace_layers.size(),
      wan::with_thousands(c.vace_parameter_count()),
      lora.enabled() ? "adapters train, the base and the branch frozen" : "the branch trains whole, the base frozen");
}

std::string weights_summary(const wanfw::Options& o, const wan::WanConfig& c, Expert expert) {
  const std::string weights = o.string("weights");
  if (weights.empty()) return "weights: none (the official random initialisation)\n";
  return wan::describe_weights("weights", c, weights, o.string("weights_subfolder"), expert,
                               c.has_vace() && o.string("vace_branch") == "new");
}

/// The memory plan of each network group's ranks (strategy.network_groups): one expert a rank,
/// data-parallel or sharded over its group.
std::string placed_plan(const wanfw::Options& o, const wan::WanConfig& c, const FlowMatchingSettings& s,
                        const wanfw::TrainingLayout& layout) {
  const std::vector<int>& sizes = layout.network_groups;  // two: check_network_groups refused others
  int world = 0;
  for (const int size : sizes) world += size;
  std::string out;
  const auto& names = wan::kExpertNames;
  for (std::size_t g = 0; g < 2; ++g) {
    const int first = g == 0 ? 0 : sizes[0];
    if (g == 1 && sizes[1] == sizes[0]) {  // the experts have one shape: the same plan
      out += fmt::format(
          "network group {} (ranks {}-{}) holds the {} expert alone: the same plan as group 0 (the experts have one "
          "shape)\n",
          g, first, first + sizes[g] - 1, names[g]);
      break;
    }
    wanfw::TrainingLayout group = layout;
    group.gpus = sizes[g];  // each expert replicated (ddp) or sharded (fsdp) over its own group
    group.network_groups.clear();
    out += fmt::format("network group {} (ranks {}-{} of {}) holds the {} expert alone:\n", g, first,
                       first + sizes[g] - 1, world, names[g]);
    out += wan::memory_plan({c, s.lora, o.string("dtype"), 1, s.task}, wan::configured_memory(o, group), group);
  }
  return out;
}

std::string inspect(const wanfw::Options& o, const wanfw::TrainingLayout& layout) {
  const wan::WanConfig c = config_from(o);
  wan::check_vae_option(o, c.out_dim, false);  // `wanfw validate`: the VAE's headers, not its values
  wan::check_block_swap_needs(o, layout);
  const FlowMatchingSettings s = settings_from(o, c);
  wan::warn_chunks_beyond_tokens(o, layout, c.patch);
  check_network_groups(o, layout.network_groups, s.expert);
  warn_if_adapters_cannot_learn(o, s, c);
  const int models = s.expert == Expert::Both ? 2 : 1;
  const bool placed = !layout.network_groups.empty();  // each rank group holds one expert
  const double n = static_cast<double>(c.parameter_count() * models);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const auto control = [](const char* name, const wan_fm::ExpertControl& c) {
    return fmt::format("{}: lr x{:g}, t in [{:g}, {:g}]", name, c.lr_scale, c.min_sigma * 1000, c.max_sigma * 1000);
  };
  const std::string experts =
      s.expert == Expert::None
          ? std::string()
          : fmt::format("experts: {} (boundary t = {}; high noise at or above it){}\n", o.string("expert"),
                        s.boundary * 1000,
                        models == 2 ? fmt::format(", two DiTs; {}; {}", control("high noise", s.experts.high),
                                                  control("low noise", s.experts.low))
                                    : "");
  const auto split = c.rope_split();
  const std::string memory = wan::adapter_summary(c, s.lora, models);
  const wanfw::TrainingLayout planned = wan_fm::causal_training_layout(o, s, layout);
  const std::string plan = placed ? placed_plan(o, c, s, layout)
                                  : wan::memory_plan({c, s.lora, o.string("dtype"), models, s.task},
                                                     wan::configured_memory(o, planned), planned);
  return fmt::format(
             "Wan DiT, preset {}: dim {}, ffn_dim {}, {} heads (head dim {}, RoPE {}/{}/{}), {} layers, in {}, out "
             "{}, text_dim {} (contexts padded to {} tokens)\n"
             "{}parameters: {}\n"
             "size of the weights: {:.2f} GiB in float32, {:.2f} GiB in bfloat16\n"
             "{}"
             "task {}; batches: latents [{}, frames, height, width], text [tokens <= {}, {}]{}\n{}",
             c.preset, c.dim, c.ffn_dim, c.num_heads, c.head_dim(), split[0], split[1], split[2], c.num_layers,
             c.in_dim, c.out_dim, c.text_dim, c.text_len, experts, wan::with_thousands(c.parameter_count() * models),
             n * 4 / kGiB, n * 2 / kGiB, memory, wan::task_name(s.task), c.out_dim, c.text_len, c.text_dim,
             vace_summary(c, s.lora), weights_summary(o, c, s.expert)) +
         plan;
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_model("wan22_flow_matching", "0.1.0",
                                              "Wan2.1/2.2 DiT trained with flow matching (t2v, ti2v, i2v).");
  d.options = wan::dimension_options("", "tiny");
  const std::vector<wanfw::OptionSpec> rest = {
      option("task", T::Choice)
          .value("t2v")
          .choices({"t2v", "ti2v", "i2v"})
          .doc("t2v text-to-video; ti2v clean first frame (Wan2.2 5B); i2v image channels concatenated (A14B I2V: "
               "each sample also carries image_condition, the VAE latents of its first frame followed by zero "
               "frames: tools/encode_dataset.py --image-condition)."),
      option("sample_vace_scale", T::NumberList)
          .value("[]")
          .doc("A VACE model's hints' scale when sampling and previewing: one value, or one a hint; [] is 1 (training "
               "always adds them at 1)."),
      option("last_frame", T::Boolean)
          .value("false")
          .doc("i2v: each sample's image_condition encodes its first and its last frame (first–last-frame video: "
               "tools/encode_dataset.py --image-condition --last-frame), and the mask marks both, as diffusers' "
               "Wan I2V pipeline with last_image builds them."),
      option("weights", T::String)
          .value("\"\"")
          .doc("Checkpoint to start from (official or diffusers layout); "
               "empty: the official random initialisation."),
      option("weights_subfolder", T::String).value("transformer").doc("Subfolder of a diffusers pipeline folder."),
      option("vace_branch", T::Choice)
          .value("checkpoint")
          .choices({"checkpoint", "new"})
          .doc("A VACE model: checkpoint, its branch from `weights` (a VACE checkpoint); new, `weights` hold a base "
               "model and the branch starts as the official VaceWanModel builds it (its hints zero): a control "
               "branch for a model without a VACE release."),
      option("loss_weighting", T::Choice)
          .value("none")
          .choices({"none", "bell"})
          .doc("none, or bell: exp(-2((t-500)/1000)^2) normalised to mean 1."),
      option("expert", T::Choice)
          .value("none")
          .choices({"none", "high_noise", "low_noise", "both"})
          .doc("Two-expert presets (A14B): train the high-noise expert (t >= boundary), the low-noise one, or "
               "both, each sample routed to its expert by t. Required for A14B presets."),
      option("boundary", T::Number)
          .value("0")
          .doc("Timestep (0..1000) splitting the experts; 0 takes the preset's (875 T2V-A14B, 900 I2V-A14B)."),
      option("dtype", T::Choice)
          .value("float32")
          .choices({"float32", "bfloat16"})
          .doc("Dtype of the DiT's weights and activations (modulation, norms and RoPE stay float32)."),
      wan::base_dtype_option("", "every weight but the adapters"),
      option("gradient_checkpointing", T::Boolean)
          .value("false")
          .doc("Recompute each block in backward instead of storing its activations."),
      wan::activation_offload_option(),
      wan::recompute_chunks_option(),
      wan::attention_option(),
  };
  d.options.insert(d.options.end(), rest.begin(), rest.end());
  const auto lora = wan::lora_options("the DiT (each expert its own)");
  d.options.insert(d.options.end(), lora.begin(), lora.end());
  const auto timesteps = wan::timestep_options(/*fixed=*/false);
  d.options.insert(d.options.end(), timesteps.begin(), timesteps.end());
  const auto experts = wan_fm::expert_control_options();
  d.options.insert(d.options.end(), experts.begin(), experts.end());
  const auto sampler = wan::sampler_options(
      5.0, "Classifier-free guidance scale; 1 disables.",
      "Latent frames x height x width (\"21x60x104\") `wanfw sample` draws when its inputs hold neither noise nor "
      "latents to take the shape from, and the size of the previews of validation.preview_prompts.");
  d.options.insert(d.options.end(), sampler.begin(), sampler.end());
  const auto causal = wan::causal_options(
      "training runs the teacher-forcing objective (each chunk noised at its own level, attending to the clean "
      "chunks before it)");
  d.options.insert(d.options.end(), causal.begin(), causal.end());
  const auto causal_training = wan_fm::causal_training_options();
  d.options.insert(d.options.end(), causal_training.begin(), causal_training.end());
  const auto vae = wan::vae_options();
  d.options.insert(d.options.end(), vae.begin(), vae.end());
  const char* moved =
      "the data set holds the shapes now: data.buckets: [\"FxHxW\"] (latent frames x height x width) "
      "for the synthetic set; a data set folder's manifest for your own data (docs/data.md)";
  d.removed_options = {{"latent_frames", moved}, {"latent_height", moved}, {"latent_width", moved}};
  d.model_capabilities.replicates = true;
  d.make_model = make_model;
  d.inspect_model = inspect;
  d.make_decoder = wan::make_vae_decoder;
  return d;
}

}  // namespace

WANFW_PLUGIN(Model, describe)
