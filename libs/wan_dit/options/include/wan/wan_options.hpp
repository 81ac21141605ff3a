#pragma once
// The options that shape a Wan DiT (preset and dimension overrides), for every model plugin
// that builds one: the flow-matching model's own, the distillation model's teacher_ and student_.

#include <string>
#include <vector>

#include "wan/flow_matching.hpp"
#include "wan/lora.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/options.hpp"

namespace wan {

/// `<prefix>preset`, `<prefix>dim`, ffn_dim, num_heads, num_layers, in_dim, out_dim, text_dim and
/// text_len. With `inherit` the preset may be empty: the dimensions then start from another
/// config (the distillation student's from its teacher's), which `inherit` names in the docs.
std::vector<wanfw::OptionSpec> dimension_options(const std::string& prefix, const std::string& default_preset,
                                                 const std::string& inherit = "");

/// The config those options give: the preset's (or `base` when the preset option is empty), each
/// dimension option above 0 replacing the preset's; validated (an error points at the preset).
WanConfig config_from_options(const wanfw::Options& options, const std::string& prefix, const WanConfig* base = nullptr);

/// How training draws its timesteps: timestep_sampling (uniform, logit_normal, shift, and with
/// `fixed` also fixed with its `timesteps` list), shift, logit_mean, logit_std, min_timestep,
/// max_timestep; and validation_timesteps.
std::vector<wanfw::OptionSpec> timestep_options(bool fixed);

/// Those options read and checked, the range narrowed to [lo, hi] in sigma units (an expert's side
/// of its boundary: when nothing is left, the error points at `range_option`).
TimestepSampling timestep_sampling_from(const wanfw::Options& options, double lo, double hi,
                                        const std::string& range_option);

/// validation_timesteps (0..1000) that lie in the trained range; an error when none does.
std::vector<double> validation_timesteps_from(const wanfw::Options& options, const TimestepSampling& sampling);

/// sample_steps, preview_steps, sample_guidance (default `guidance`, documented by
/// `guidance_doc`), sample_shift and sample_size (`size_doc`).
std::vector<wanfw::OptionSpec> sampler_options(double guidance, const std::string& guidance_doc,
                                               const std::string& size_doc);

/// Those options read and checked.
SamplerSettings sampler_settings_from(const wanfw::Options& options);

/// `lora.rank`, alpha, dropout, targets, lr_scale, weight_decay and load (a list of adapter files:
/// file, scale, train, expert); `trained` names what the adapters attach to in the docs.
std::vector<wanfw::OptionSpec> lora_options(const std::string& trained);

/// The adapters' layers when lora.targets is empty: the attention projections and feed-forward
/// layers of every block (blocks.*), or of a VACE model's VACE blocks (vace_blocks.*).
std::vector<std::string> default_lora_targets(const WanConfig& config);

/// Those options read and checked against `config` (a target pattern that selects no layer, an
/// adapter file that is missing, an expert the model does not have: errors pointing at them).
LoraSettings lora_settings_from(const wanfw::Options& options, const WanConfig& config, Expert expert);

/// `attention`: the scaled-dot-product attention kernel the DiT runs (wan/attention_backend.hpp).
wanfw::OptionSpec attention_option();

/// Option `name` ("FxHxW") as a bucket; nothing when empty; an error pointing at it otherwise.
std::optional<wanfw::Bucket> bucket_option(const wanfw::Options& options, const char* name);

}  // namespace wan
