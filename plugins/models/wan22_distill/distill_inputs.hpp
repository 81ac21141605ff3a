#pragma once
// What both distillation objectives (velocity matching, DMD) read from a batch: its fields, each
// sample's noise, and a preview's conditioning.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "wan/task.hpp"
#include "wan/wan_config.hpp"
#include "wanfw/data.hpp"

namespace wan_distill {

/// The task's fields of `student`, the context at most `text_len` tokens (every network must read
/// it); without latents when the inputs are not data (prompts only, and the i2v image).
std::vector<wanfw::FieldSpec> distill_fields(const wan::WanConfig& student, wan::Task task, std::int64_t text_len,
                                             bool data);

/// Each sample's noise from its "noise" stream: in the shape of its latents, of its image
/// condition, or (data-free t2v) `channels` x `latent_size`.
torch::Tensor distill_noise(const wanfw::Batch& batch, const std::optional<wanfw::Bucket>& latent_size,
                            std::int64_t channels);

/// A preview's conditioning: the batch's first sample, or (data-free) its context with `noise`'s
/// first sample (and the i2v image).
std::map<std::string, at::Tensor> preview_conditioning(const wanfw::Batch& batch, wan::Task task,
                                                       const torch::Tensor& noise);

/// What `wanfw predict` gives a distillation model, on `device`: x, t ([B] or [B, tokens]) and
/// context (required; else wanfw::Error naming the missing one), y and noise (optional), and the
/// levels sigma [B] float32 that t implies (per token: the largest, the noisy frames').
struct PredictInputs {
  torch::Tensor x, t, context, y, noise, sigma;
};
PredictInputs predict_inputs(const std::map<std::string, at::Tensor>& inputs, const torch::Device& device);

}  // namespace wan_distill
