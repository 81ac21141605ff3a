#include "distill_inputs.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/flow_matching.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_distill {

std::vector<wanfw::FieldSpec> distill_fields(const wan::WanConfig& student, wan::Task task, std::int64_t text_len,
                                             bool data) {
  std::vector<wanfw::FieldSpec> fields = wan::task_fields(student, task);
  for (auto& field : fields)
    if (field.name == "context") field.max_tokens = std::min(student.text_len, text_len);
  if (!data) std::erase_if(fields, [](const wanfw::FieldSpec& f) { return f.name == "latents"; });
  return fields;
}

torch::Tensor distill_noise(const wanfw::Batch& batch, const std::optional<wanfw::Bucket>& latent_size,
                            std::int64_t channels) {
  std::vector<std::int64_t> shape;
  if (batch.fields.count("latents")) {
    shape = batch.at("latents").sizes().slice(1).vec();
  } else if (batch.fields.count("image_condition")) {
    shape = batch.at("image_condition").sizes().slice(1).vec();
  } else if (latent_size) {
    shape = {channels, latent_size->frames, latent_size->height, latent_size->width};
  } else {  // a preview prompt of a run that trains on data
    throw wanfw::Error("the batch has no latents to take the video's shape from (a preview prompt, "
                       "validation.preview_prompts), and model.latent_size is not set",
                       "set model.latent_size to the latent FRAMESxHEIGHTxWIDTH of the preview videos");
  }
  return wanfw::sample_randn(batch, "noise", shape, torch::kFloat32);
}

std::map<std::string, at::Tensor> preview_conditioning(const wanfw::Batch& batch, wan::Task task,
                                                       const torch::Tensor& noise) {
  if (batch.fields.count("latents")) return wan::preview_inputs(batch, task, std::nullopt);
  std::map<std::string, at::Tensor> inputs = {{"context", batch.at("context").narrow(0, 0, 1)},
                                              {"noise", noise.narrow(0, 0, 1)}};
  if (task == wan::Task::I2V) inputs["image_condition"] = batch.at("image_condition").narrow(0, 0, 1);
  return inputs;
}

PredictInputs predict_inputs(const std::map<std::string, at::Tensor>& inputs, const torch::Device& device) {
  const auto input = [&](const char* name, bool required) -> torch::Tensor {
    if (auto it = inputs.find(name); it != inputs.end()) return it->second.to(device);
    if (required)
      throw wanfw::Error(fmt::format("predict: the inputs have no tensor '{}'", name),
                         "give x [B,C,F,H,W], t [B] or [B,tokens] and context [B,L,text_dim] (and y for i2v)");
    return {};
  };
  PredictInputs in;
  in.x = input("x", true);
  in.t = input("t", true);
  in.context = input("context", true);
  in.y = input("y", false);
  in.noise = input("noise", false);
  in.sigma = (in.t.dim() == 2 ? std::get<0>(in.t.max(1)) : in.t).to(torch::kFloat32) / 1000.0;
  return in;
}

}  // namespace wan_distill
