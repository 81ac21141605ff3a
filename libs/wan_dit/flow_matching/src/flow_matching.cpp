#include "wan/flow_matching.hpp"

#include <algorithm>
#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan {

namespace {
const char* kSampleInputs =
    "give context [B,L,text_dim] and noise [B,C,F,H,W] (or latents of that shape); optionally negative_context; "
    "for ti2v image [B,C,H,W] (the first-frame latent; default: the latents' first frame), for i2v image_condition "
    "[B,C,F,H,W] (the VAE latents of the image followed by zero frames; tools/encode_dataset.py --image-condition), "
    "for a VACE model vace_context [B,C,F,H,W] (its shape the video's; reference_frames: the first R dropped)";
}  // namespace

SigmaDistribution sigma_distribution(const std::string& name) {
  if (name == "uniform") return SigmaDistribution::Uniform;
  if (name == "logit_normal") return SigmaDistribution::LogitNormal;
  if (name == "shift") return SigmaDistribution::Shift;
  if (name == "fixed") return SigmaDistribution::Fixed;
  throw wanfw::Error(fmt::format("'{}' is no timestep distribution", name), "uniform, logit_normal, shift or fixed");
}

torch::Tensor draw_sigma(const wanfw::Batch& batch, const TimestepSampling& s, std::int64_t levels) {
  const std::vector<std::int64_t> shape = levels > 0 ? std::vector<std::int64_t>{levels} : std::vector<std::int64_t>{};
  if (s.method == SigmaDistribution::Fixed) {
    if (s.fixed.empty()) throw wanfw::Error("fixed timestep sampling needs at least one level");
    const torch::Tensor u = wanfw::sample_rand(batch, "timestep", shape);
    const torch::Tensor index =
        (u * static_cast<double>(s.fixed.size())).floor().clamp_max(static_cast<double>(s.fixed.size() - 1));
    return torch::tensor(s.fixed, torch::kFloat64)
        .to(u.device())
        .index_select(0, index.flatten().to(torch::kLong))
        .view(u.sizes())
        .to(torch::kFloat32);
  }
  torch::Tensor u;
  if (s.method == SigmaDistribution::LogitNormal) {
    u = torch::sigmoid(wanfw::sample_randn(batch, "timestep", shape) * s.logit_std + s.logit_mean);
  } else {
    u = wanfw::sample_rand(batch, "timestep", shape);
    if (s.method == SigmaDistribution::Shift) u = shifted(u, s.shift);
  }
  return s.min_sigma + (s.max_sigma - s.min_sigma) * u;
}

double shifted(double s, double shift) { return shift * s / (1 + (shift - 1) * s); }

torch::Tensor shifted(const torch::Tensor& s, double shift) { return shift * s / (1 + (shift - 1) * s); }

double unshifted(double x, double shift) { return x / (shift - (shift - 1) * x); }

bool routes_high(double sigma, double boundary) { return sigma >= boundary - 1e-12; }

torch::Tensor routes_high(const torch::Tensor& sigma, double boundary) {
  return sigma.to(torch::kFloat64) >= boundary - 1e-12;
}

std::vector<double> sampling_schedule(std::int64_t steps, double shift) {
  std::vector<double> sigmas(static_cast<std::size_t>(steps + 1));
  for (std::int64_t i = 0; i <= steps; ++i)
    sigmas[static_cast<std::size_t>(i)] = shifted(1.0 - static_cast<double>(i) / static_cast<double>(steps), shift);
  return sigmas;
}

bool keeps_first_frame(Task task, const torch::Tensor& latents) { return task == Task::TI2V && latents.size(2) > 1; }

torch::Tensor with_kept_first_frame(Task task, const torch::Tensor& clean, const torch::Tensor& noised) {
  return keeps_first_frame(task, noised) ? torch::cat({clean.slice(2, 0, 1), noised.slice(2, 1)}, 2) : noised;
}

torch::Tensor predicted_frames(Task task, const torch::Tensor& error) {
  return keeps_first_frame(task, error) ? error.slice(2, 1) : error;
}

torch::Tensor predicted_mean(Task task, const torch::Tensor& error) {
  return predicted_frames(task, error).flatten(1).mean(1);
}

torch::Tensor noised_to(Task task, const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& noise,
                        const torch::Tensor& clean) {
  const torch::Tensor s = sigma.to(torch::kFloat32).view({-1, 1, 1, 1, 1});
  return with_kept_first_frame(task, clean, (1 - s) * x + s * noise);
}

torch::Tensor task_timesteps(const torch::Tensor& sigma, const torch::Tensor& latents, const WanConfig& config,
                             Task task) {
  torch::Tensor t = sigma.to(torch::kFloat32) * 1000.0;  // [B]
  if (!keeps_first_frame(task, latents)) return t;
  // The first latent frame is the clean image latent; its tokens are at t = 0.
  const auto& p = config.patch;
  const std::int64_t frame_tokens = (latents.size(3) / p[1]) * (latents.size(4) / p[2]);
  t = t.unsqueeze(1).repeat({1, (latents.size(2) / p[0]) * frame_tokens});
  t.slice(1, 0, frame_tokens).zero_();
  return t;
}

torch::Tensor i2v_condition(const torch::Tensor& image_condition, bool last_frame) {
  torch::Tensor mask = torch::zeros_like(image_condition.narrow(1, 0, 4));
  mask.select(2, 0).fill_(1.0);
  if (last_frame) mask.select(1, 3).select(1, mask.size(2) - 1).fill_(1.0);  // [B, F, H, W] after the channel
  return torch::cat({mask, image_condition}, 1);
}

const torch::Tensor& checked_condition(const torch::Tensor& image_condition, const torch::Tensor& latents,
                                       const char* what) {
  if (!image_condition.defined() || image_condition.sizes() != latents.sizes())
    throw wanfw::Error(
        fmt::format("{}: i2v needs image_condition of the latents' shape {}, got {}", what, c10::str(latents.sizes()),
                    image_condition.defined() ? c10::str(image_condition.sizes()) : "none"),
        "image_condition is the VAE latents of the image followed by zero frames "
        "(tools/encode_dataset.py --image-condition stores it)");
  return image_condition;
}

void check_latents(const WanConfig& config, Task task, const torch::Tensor& latents, const char* what) {
  const auto& p = config.patch;
  if (latents.dim() != 5 || latents.size(3) % p[1] != 0 || latents.size(4) % p[2] != 0 || latents.size(2) % p[0] != 0)
    throw wanfw::Error(fmt::format("{}: latents of shape {} do not fit the DiT: [B, C, F, H, W] with F a multiple of "
                                   "{} and H, W multiples of {}",
                                   what, c10::str(latents.sizes()), p[0], p[1]),
                       "encode the data at a resolution whose latents divide into patches (pixels: multiples of 16 "
                       "for the Wan2.1 VAE, 32 for the Wan2.2 VAE)");
}

std::vector<wanfw::FieldSpec> task_fields(const WanConfig& c, Task task) {
  // Latents of any bucket; text embeddings at their real length, padded to text_len in the DiT.
  wanfw::FieldSpec latents{"latents", {c.out_dim, wanfw::dim::frames, wanfw::dim::height, wanfw::dim::width}};
  wanfw::FieldSpec context{"context", {wanfw::dim::tokens, c.text_dim}};
  context.max_tokens = c.text_len;
  std::vector<wanfw::FieldSpec> fields = {latents, context};
  // The I2V models see the image as the VAE encodes it followed by zero frames.
  if (task == Task::I2V) fields.push_back({"image_condition", latents.shape});
  // VACE: the control context on the latents' grid (inactive and reactive latents, the mask).
  if (c.has_vace())
    fields.push_back({"vace_context", {c.vace_in_dim, wanfw::dim::frames, wanfw::dim::height, wanfw::dim::width}});
  return fields;
}

std::int64_t task_in_dim(const WanConfig& config, Task task) {
  return task == Task::I2V ? 2 * config.out_dim + 4 : config.out_dim;
}

SampleInputs sample_inputs(const std::map<std::string, at::Tensor>& inputs, const WanConfig& c, Task task,
                           const std::optional<wanfw::Bucket>& sample_size, std::uint64_t seed,
                           const torch::Device& device, bool last_frame) {
  auto input = [&](const char* name, bool required) -> torch::Tensor {
    auto it = inputs.find(name);
    if (it != inputs.end()) return it->second.to(device).to(torch::kFloat32);
    if (required) throw wanfw::Error(fmt::format("sample: the inputs have no tensor '{}'", name), kSampleInputs);
    return {};
  };
  SampleInputs out;
  out.context = input("context", true);
  if (out.context.dim() != 3 || out.context.size(2) != c.text_dim)
    throw wanfw::Error(
        fmt::format("sample: context has shape {}; expected [B, L, {}]", c10::str(out.context.sizes()), c.text_dim),
        kSampleInputs);
  const std::int64_t batch = out.context.size(0);
  out.negative = input("negative_context", false);
  if (!out.negative.defined()) out.negative = torch::zeros_like(out.context);
  if (out.negative.size(0) == 1 && batch > 1) out.negative = out.negative.expand({batch, -1, -1});

  out.noise = input("noise", false);
  const torch::Tensor latents = input("latents", false);   // data set samples: their shape, their first frame
  out.vace_context = input("vace_context", c.has_vace());  // VACE: the control, on the video's latent grid
  const torch::Tensor references = input("reference_frames", false);
  if (!out.noise.defined()) {
    std::vector<std::int64_t> shape;
    if (latents.defined()) {
      shape = latents.sizes().vec();
    } else if (out.vace_context.defined()) {
      shape = out.vace_context.sizes().vec();
      shape[1] = c.out_dim;
    } else if (sample_size) {
      shape = {batch, c.out_dim, sample_size->frames, sample_size->height, sample_size->width};
    } else {
      throw wanfw::Error(
          "sample: the inputs have neither 'noise' nor 'latents' to take the video's shape from, and "
          "model.sample_size is not set",
          kSampleInputs);
    }
    // Drawn on the CPU from the seed, so a seed gives the same samples on every device.
    torch::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    out.noise = torch::randn(shape, generator, torch::TensorOptions().dtype(torch::kFloat32)).to(device);
  }
  if (out.noise.dim() != 5 || out.noise.size(0) != batch || out.noise.size(1) != c.out_dim)
    throw wanfw::Error(fmt::format("sample: noise has shape {}; expected [{}, {}, F, H, W]",
                                   c10::str(out.noise.sizes()), batch, c.out_dim));
  if (references.defined()) {  // VACE: the first R latent frames are reference images, dropped at the end
    const double r = references.numel() == 1 ? references.item<double>() : -1;
    if (!(r >= 0 && r < static_cast<double>(out.noise.size(2)) && r == std::floor(r)))
      throw wanfw::Error(
          fmt::format("sample: reference_frames holds {} value(s){}; it is one integer R in [0, {}]: the "
                      "first R of the video's {} latent frames are reference images",
                      references.numel(), references.numel() == 1 ? fmt::format(", {}", r) : "", out.noise.size(2) - 1,
                      out.noise.size(2)),
          kSampleInputs);
    out.reference_frames = static_cast<std::int64_t>(r);
  }
  if (keeps_first_frame(task, out.noise)) {
    out.image = input("image", !latents.defined());
    if (!out.image.defined()) out.image = latents.select(2, 0);
    if (out.image.dim() == 5) out.image = out.image.select(2, 0);
    if (out.image.dim() != 4 || out.image.size(0) != batch || out.image.size(1) != c.out_dim ||
        out.image.size(2) != out.noise.size(3) || out.image.size(3) != out.noise.size(4))
      throw wanfw::Error(fmt::format("sample: image has shape {}; expected [{}, {}, {}, {}]",
                                     c10::str(out.image.sizes()), batch, c.out_dim, out.noise.size(3),
                                     out.noise.size(4)));
  }
  if (task == Task::I2V)
    out.y = i2v_condition(checked_condition(input("image_condition", true), out.noise, "sample"), last_frame);
  return out;
}

std::map<std::string, at::Tensor> preview_inputs(const wanfw::Batch& batch, Task task,
                                                 const std::optional<wanfw::Bucket>& sample_size) {
  std::map<std::string, at::Tensor> inputs = {{"context", batch.at("context").narrow(0, 0, 1)}};
  if (batch.fields.count("latents")) {  // a held-out sample: its shape (and ti2v: its first frame)
    const torch::Tensor latents = batch.at("latents").narrow(0, 0, 1);
    inputs["latents"] = latents;
    if (keeps_first_frame(task, latents)) inputs["image"] = latents.select(2, 0);
  } else if (!sample_size) {
    throw wanfw::Error(
        "previewing a prompt (validation.preview_prompts) needs the video's shape: model.sample_size "
        "is not set",
        "set model.sample_size to the latent FRAMESxHEIGHTxWIDTH of the preview videos, e.g. 21x60x104 "
        "for 81 frames of 480x832 with the Wan2.1 VAE");
  }
  if (task == Task::I2V) inputs["image_condition"] = batch.at("image_condition").narrow(0, 0, 1);
  if (batch.fields.count("vace_context")) inputs["vace_context"] = batch.at("vace_context").narrow(0, 0, 1);
  return inputs;
}

std::map<std::string, at::Tensor> per_timestep(const std::vector<double>& timesteps, const std::string& prefix,
                                               const std::function<at::Tensor(double sigma)>& metric) {
  std::map<std::string, at::Tensor> metrics;
  torch::Tensor total;
  for (const double t : timesteps) {
    const torch::Tensor value = metric(t / 1000.0).to(torch::kFloat64);
    metrics[fmt::format("{}{:03d}", prefix, static_cast<int>(std::lround(t)))] = value;
    total = total.defined() ? total + value : value;
  }
  metrics["loss"] = total / static_cast<double>(timesteps.size());
  return metrics;
}

}  // namespace wan
