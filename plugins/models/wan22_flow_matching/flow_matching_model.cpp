#include "flow_matching_model.hpp"

#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "wan/wan_weights.hpp"
#include "wanfw/error.hpp"
#include "wanfw/sample_random.hpp"

namespace wan_fm {

namespace {

/// The I2V conditioning `y` [B, 4 + C, F, H, W]: a 4-channel mask that is 1 on the first latent
/// frame (the official pipeline's mask of the first pixel frame, repeated 4 times and folded by the
/// VAE's temporal stride), then `image_condition` [B, C, F, H, W]: the VAE latents of the image
/// followed by zero frames. The VAE gives those zero frames latents of their own (not zeros, and
/// shaped by the image through its causal memory), so they come from the data set, encoded.
torch::Tensor i2v_condition(const torch::Tensor& image_condition) {
  torch::Tensor mask = torch::zeros_like(image_condition.narrow(1, 0, 4));
  mask.select(2, 0).fill_(1.0);
  return torch::cat({mask, image_condition}, 1);
}

/// The mean of exp(-2 ((t - 500) / 1000)^2) over t in [0, 1000): the bell weighting's normaliser.
double bell_normaliser() {
  static const double norm = [] {
    double total = 0;
    for (int i = 0; i < 1000; ++i) total += std::exp(-2 * std::pow((i - 500) / 1000.0, 2));
    return total / 1000;
  }();
  return norm;
}

const char* kPredictInputs =
    "give x [B,C,F,H,W], t [B] or [B,tokens], context [B,L,text_dim] (and y for image conditioning); or x0, noise, "
    "sigma and context to evaluate the loss";
const char* kSampleInputs =
    "give context [B,L,text_dim] and noise [B,C,F,H,W] (or latents of that shape); optionally negative_context; "
    "for ti2v image [B,C,H,W] (the first-frame latent; default: the latents' first frame), for i2v image_condition "
    "[B,C,F,H,W] (the VAE latents of the image followed by zero frames; tools/encode_dataset.py --image-condition)";

}  // namespace

WanFlowMatchingModel::WanFlowMatchingModel(const wan::WanConfig& config, FlowMatchingSettings settings,
                                           wan::WanPlacement placement)
    : denoiser_(config, settings.expert, settings.boundary, placement), settings_(std::move(settings)) {}

WanFlowMatchingModel::WanFlowMatchingModel(const WanFlowMatchingModel& other, const c10::Device& device)
    : denoiser_(other.denoiser_, device), settings_(other.settings_) {}

std::unique_ptr<wanfw::Model> WanFlowMatchingModel::replicate(const c10::Device& device) {
  return std::make_unique<WanFlowMatchingModel>(*this, device);
}

torch::Device WanFlowMatchingModel::device() const { return denoiser_.dits().front()->parameters().front().device(); }

std::vector<wanfw::FieldSpec> WanFlowMatchingModel::batch_fields() const {
  const auto& c = denoiser_.config();
  // Latents of any bucket; text embeddings at their real length, padded to text_len in the DiT.
  wanfw::FieldSpec latents{"latents", {c.out_dim, wanfw::dim::frames, wanfw::dim::height, wanfw::dim::width}};
  wanfw::FieldSpec context{"context", {wanfw::dim::tokens, c.text_dim}};
  context.max_tokens = c.text_len;
  if (settings_.task != "i2v") return {latents, context};
  // The I2V models see the image as the VAE encodes it followed by zero frames.
  wanfw::FieldSpec image_condition{"image_condition", latents.shape};
  return {latents, context, image_condition};
}

void WanFlowMatchingModel::check_latents(const torch::Tensor& latents, const char* what) const {
  const auto& p = denoiser_.config().patch;
  if (latents.dim() != 5 || latents.size(3) % p[1] != 0 || latents.size(4) % p[2] != 0 ||
      latents.size(2) % p[0] != 0)
    throw wanfw::Error(fmt::format("{}: latents of shape {} do not fit the DiT: [B, C, F, H, W] with F a multiple of "
                                   "{} and H, W multiples of {}",
                                   what, c10::str(latents.sizes()), p[0], p[1]),
                       "encode the data at a resolution whose latents divide into patches (pixels: multiples of 16 "
                       "for the Wan2.1 VAE, 32 for the Wan2.2 VAE)");
  if (settings_.task == "ti2v" && latents.size(2) < 2)
    throw wanfw::Error(fmt::format("{}: ti2v needs at least 2 latent frames, the latents have {}", what,
                                   latents.size(2)),
                       "use buckets of at least 2 latent frames (5 video frames)");
}

torch::Tensor WanFlowMatchingModel::image_condition_of(const wanfw::Batch& batch) const {
  return settings_.task == "i2v" ? batch.at("image_condition") : torch::Tensor();
}

const torch::Tensor& WanFlowMatchingModel::checked_condition(const torch::Tensor& image_condition,
                                                             const torch::Tensor& latents, const char* what) const {
  if (!image_condition.defined() || image_condition.sizes() != latents.sizes())
    throw wanfw::Error(fmt::format("{}: i2v needs image_condition of the latents' shape {}, got {}", what,
                                   c10::str(latents.sizes()),
                                   image_condition.defined() ? c10::str(image_condition.sizes()) : "none"),
                       "image_condition is the VAE latents of the image followed by zero frames "
                       "(tools/encode_dataset.py --image-condition stores it)");
  return image_condition;
}

torch::Tensor WanFlowMatchingModel::sample_sigma(const wanfw::Batch& batch) const {
  torch::Tensor u;
  if (settings_.sampling == "logit_normal") {
    u = torch::sigmoid(wanfw::sample_randn(batch, "timestep") * settings_.logit_std + settings_.logit_mean);
  } else {
    u = wanfw::sample_rand(batch, "timestep");
    if (settings_.sampling == "shift") u = settings_.shift * u / (1 + (settings_.shift - 1) * u);
  }
  return settings_.min_sigma + (settings_.max_sigma - settings_.min_sigma) * u;
}

torch::Tensor WanFlowMatchingModel::timesteps(const torch::Tensor& sigma, const torch::Tensor& latents) const {
  torch::Tensor t = sigma.to(torch::kFloat32) * 1000.0;  // [B]
  if (settings_.task != "ti2v") return t;
  // The first latent frame is the clean image latent; its tokens are at t = 0.
  const auto& p = denoiser_.config().patch;
  const std::int64_t frame_tokens = (latents.size(3) / p[1]) * (latents.size(4) / p[2]);
  t = t.unsqueeze(1).repeat({1, (latents.size(2) / p[0]) * frame_tokens});
  t.slice(1, 0, frame_tokens).zero_();
  return t;
}

WanFlowMatchingModel::Objective WanFlowMatchingModel::objective(const torch::Tensor& x0, const torch::Tensor& noise,
                                                                const torch::Tensor& sigma,
                                                                const torch::Tensor& context,
                                                                const torch::Tensor& image_condition) {
  const torch::Tensor s = sigma.to(torch::kFloat32).view({-1, 1, 1, 1, 1});
  torch::Tensor xt = (1 - s) * x0 + s * noise;
  const torch::Tensor target = noise - x0;
  const bool ti2v = settings_.task == "ti2v";
  if (ti2v) xt = torch::cat({x0.slice(2, 0, 1), xt.slice(2, 1)}, 2);
  const torch::Tensor y = settings_.task == "i2v" ? i2v_condition(checked_condition(image_condition, x0, "training"))
                                                   : torch::Tensor();
  const torch::Tensor prediction = denoiser_.forward(xt, timesteps(sigma, x0), context, y, sigma);
  torch::Tensor error = (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).pow(2);
  if (ti2v) error = error.slice(2, 1);  // frames after the first
  torch::Tensor per_sample = error.flatten(1).mean(1);
  if (settings_.bell_weighting)
    per_sample = per_sample * torch::exp(-2 * ((sigma.to(torch::kFloat32) * 1000 - 500) / 1000).pow(2)) / bell_normaliser();
  return {per_sample.mean(), per_sample, prediction, target};
}

wanfw::StepOutput WanFlowMatchingModel::training_step(const wanfw::Batch& batch) {
  // Noise and timestep come from the sample's own streams: the same wherever the sample is trained.
  const torch::Tensor x0 = batch.at("latents");
  check_latents(x0, "training");
  const torch::Tensor noise = wanfw::sample_randn(batch, "noise", x0.sizes().slice(1), x0.scalar_type());
  const torch::Tensor sigma = sample_sigma(batch);
  const Objective out = objective(x0, noise, sigma, batch.at("context"), image_condition_of(batch));
  return {out.loss, {{"sigma_mean", sigma.mean().detach()}}};
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::validation_step(const wanfw::Batch& batch) {
  // The same noise at every fixed timestep: one curve per timestep, comparable across steps
  // (validation batches keep their seed and epoch, so each sample draws the same noise every time).
  const torch::Tensor x0 = batch.at("latents");
  check_latents(x0, "validation");
  const torch::Tensor noise = wanfw::sample_randn(batch, "noise", x0.sizes().slice(1), x0.scalar_type());
  std::map<std::string, at::Tensor> metrics;
  torch::Tensor total = torch::zeros({}, x0.options().dtype(torch::kFloat64));
  for (const double t : settings_.validation_timesteps) {
    const torch::Tensor sigma = torch::full({x0.size(0)}, t / 1000.0, x0.options().dtype(torch::kFloat32));
    const torch::Tensor loss =
        objective(x0, noise, sigma, batch.at("context"), image_condition_of(batch)).loss.to(torch::kFloat64);
    metrics[fmt::format("loss_t{:03d}", static_cast<int>(std::lround(t)))] = loss;
    total = total + loss;
  }
  metrics["loss"] = total / static_cast<double>(settings_.validation_timesteps.size());
  return metrics;
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::predict(const std::map<std::string, at::Tensor>& inputs) {
  torch::NoGradGuard no_grad;
  module()->eval();
  const torch::Device dev = device();
  auto input = [&](const char* name, bool required = true) -> torch::Tensor {
    auto it = inputs.find(name);
    if (it != inputs.end()) return it->second.to(dev);
    if (required) throw wanfw::Error(fmt::format("predict: the inputs have no tensor '{}'", name), kPredictInputs);
    return {};
  };
  if (inputs.count("x0")) {  // the training objective for given draws
    const Objective out = objective(input("x0"), input("noise"), input("sigma"), input("context"),
                                    input("image_condition", settings_.task == "i2v"));
    return {{"loss", out.loss.cpu()}, {"v", out.prediction.cpu()}, {"target", out.target.cpu()}};
  }
  const torch::Tensor t = input("t");
  // The expert of each sample follows its timestep (per-token timesteps: the noisy tokens' one).
  const torch::Tensor sigma = (t.dim() == 2 ? std::get<0>(t.max(1)) : t).to(torch::kFloat32) / 1000.0;
  return {{"v", denoiser_.forward(input("x"), t, input("context"), input("y", false), sigma).cpu()}};
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::sample(const std::map<std::string, at::Tensor>& inputs,
                                                               std::uint64_t seed) {
  return draw(inputs, seed, settings_.sample_steps);
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::preview(const wanfw::Batch& batch, std::uint64_t seed) {
  const torch::Tensor latents = batch.at("latents").narrow(0, 0, 1);
  std::map<std::string, at::Tensor> inputs = {{"context", batch.at("context").narrow(0, 0, 1)}, {"latents", latents}};
  if (settings_.task == "ti2v") inputs["image"] = latents.select(2, 0);
  if (settings_.task == "i2v") inputs["image_condition"] = batch.at("image_condition").narrow(0, 0, 1);
  const torch::Tensor video = draw(inputs, seed, settings_.preview_steps).at("latents")[0];  // [C, F, H, W]
  // Channels 0-2 (or the only one) as RGB, each stretched to 0..255; frames side by side.
  torch::Tensor rgb = video.slice(0, 0, std::min<std::int64_t>(3, video.size(0))).to(torch::kFloat32);
  if (rgb.size(0) < 3) rgb = rgb.expand({3, -1, -1, -1}).contiguous();
  const auto lo = std::get<0>(rgb.flatten(1).min(1)).view({3, 1, 1, 1});
  const auto hi = std::get<0>(rgb.flatten(1).max(1)).view({3, 1, 1, 1});
  rgb = ((rgb - lo) / (hi - lo).clamp_min(1e-6) * 255).round().clamp(0, 255);
  torch::Tensor strip = rgb.permute({2, 1, 3, 0}).reshape({rgb.size(2), rgb.size(1) * rgb.size(3), 3});  // H, F*W, 3
  const std::int64_t zoom = std::max<std::int64_t>(1, 128 / strip.size(0));  // nearest-neighbour, ~128 px high
  strip = strip.repeat_interleave(zoom, 0).repeat_interleave(zoom, 1);
  return {{"latents", strip.to(torch::kUInt8).contiguous()}};
}

std::map<std::string, at::Tensor> WanFlowMatchingModel::draw(const std::map<std::string, at::Tensor>& inputs,
                                                             std::uint64_t seed, std::int64_t steps) {
  torch::NoGradGuard no_grad;
  module()->eval();
  const torch::Device dev = device();
  const auto& c = denoiser_.config();
  auto input = [&](const char* name, bool required) -> torch::Tensor {
    auto it = inputs.find(name);
    if (it != inputs.end()) return it->second.to(dev).to(torch::kFloat32);
    if (required) throw wanfw::Error(fmt::format("sample: the inputs have no tensor '{}'", name), kSampleInputs);
    return {};
  };
  const torch::Tensor context = input("context", true);
  if (context.dim() != 3 || context.size(2) != c.text_dim)
    throw wanfw::Error(fmt::format("sample: context has shape {}; expected [B, L, {}]", c10::str(context.sizes()),
                                   c.text_dim),
                       kSampleInputs);
  const std::int64_t batch = context.size(0);
  torch::Tensor negative = input("negative_context", false);
  if (!negative.defined()) negative = torch::zeros_like(context);
  if (negative.size(0) == 1 && batch > 1) negative = negative.expand({batch, -1, -1});

  torch::Tensor noise = input("noise", false);
  const torch::Tensor latents = input("latents", false);  // data set samples: their shape, their first frame
  if (!noise.defined()) {
    std::vector<std::int64_t> shape;
    if (latents.defined()) {
      shape = latents.sizes().vec();
    } else if (settings_.sample_size) {
      const auto& size = *settings_.sample_size;
      shape = {batch, c.out_dim, size.frames, size.height, size.width};
    } else {
      throw wanfw::Error("sample: the inputs have neither 'noise' nor 'latents' to take the video's shape from, and "
                         "model.sample_size is not set",
                         kSampleInputs);
    }
    // Drawn on the CPU from the seed, so a seed gives the same samples on every device.
    torch::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    noise = torch::randn(shape, generator, torch::TensorOptions().dtype(torch::kFloat32)).to(dev);
  }
  if (noise.dim() != 5 || noise.size(0) != batch || noise.size(1) != c.out_dim)
    throw wanfw::Error(fmt::format("sample: noise has shape {}; expected [{}, {}, F, H, W]", c10::str(noise.sizes()),
                                   batch, c.out_dim));
  const bool ti2v = settings_.task == "ti2v", i2v = settings_.task == "i2v";
  torch::Tensor image = input("image", ti2v && !latents.defined());
  if (!image.defined() && latents.defined() && ti2v) image = latents.select(2, 0);
  if (image.defined() && image.dim() == 5) image = image.select(2, 0);
  if (ti2v && (image.dim() != 4 || image.size(0) != batch || image.size(1) != c.out_dim ||
               image.size(2) != noise.size(3) || image.size(3) != noise.size(4)))
    throw wanfw::Error(fmt::format("sample: image has shape {}; expected [{}, {}, {}, {}]", c10::str(image.sizes()),
                                   batch, c.out_dim, noise.size(3), noise.size(4)));
  const torch::Tensor y = i2v ? i2v_condition(checked_condition(input("image_condition", true), noise, "sample"))
                              : torch::Tensor();
  if (settings_.expert == Expert::HighNoise || settings_.expert == Expert::LowNoise)
    spdlog::warn("sampling with the {} expert alone: it denoises every step, also those the other expert takes",
                 settings_.expert == Expert::HighNoise ? "high-noise" : "low-noise");

  // The official schedule: s_i = linspace(1, 0, steps + 1) shifted by k s / (1 + (k - 1) s).
  const double k = settings_.sample_shift;
  std::vector<double> sigmas(steps + 1);
  for (std::int64_t i = 0; i <= steps; ++i) {
    const double s = 1.0 - static_cast<double>(i) / static_cast<double>(steps);
    sigmas[i] = k * s / (1 + (k - 1) * s);
  }
  const double guidance = settings_.sample_guidance;
  torch::Tensor x = noise;
  for (std::int64_t i = 0; i < steps; ++i) {
    if (ti2v) x = torch::cat({image.unsqueeze(2), x.slice(2, 1)}, 2);
    const torch::Tensor sigma = torch::full({batch}, sigmas[i], x.options());
    const torch::Tensor t = timesteps(sigma, x);
    torch::Tensor v = denoiser_.forward(x, t, context, y, sigma).to(torch::kFloat32);
    if (guidance != 1.0) {
      const torch::Tensor unconditional = denoiser_.forward(x, t, negative, y, sigma).to(torch::kFloat32);
      v = unconditional + guidance * (v - unconditional);
    }
    x = x + (sigmas[i + 1] - sigmas[i]) * v;  // Euler step of dx/ds = v
  }
  if (ti2v) x = torch::cat({image.unsqueeze(2), x.slice(2, 1)}, 2);
  return {{"latents", x.cpu()}, {"sigmas", torch::tensor(sigmas, torch::kFloat64)}};
}

void WanFlowMatchingModel::export_weights(const std::filesystem::path& folder, std::int64_t max_shard_bytes) {
  const auto dits = denoiser_.dits();
  std::vector<std::string> subfolders;
  switch (settings_.expert) {
    case Expert::None: subfolders = {""}; break;
    case Expert::HighNoise: subfolders = {"high_noise_model"}; break;
    case Expert::LowNoise: subfolders = {"low_noise_model"}; break;
    case Expert::Both: subfolders = {"high_noise_model", "low_noise_model"}; break;
  }
  for (std::size_t i = 0; i < dits.size(); ++i) {
    const std::filesystem::path target = subfolders[i].empty() ? folder : folder / subfolders[i];
    wan::save_wan_weights(*dits[i], target, settings_.task, max_shard_bytes);
    spdlog::info("wrote the official layout to {}", target.string());
  }
}

}  // namespace wan_fm
