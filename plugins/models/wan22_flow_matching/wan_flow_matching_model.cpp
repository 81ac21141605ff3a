// Model `wan22_flow_matching`: the Wan DiT trained with the flow-matching objective.
//
//   x_t = (1 - s) x0 + s eps,  t = 1000 s,  target v = eps - x0,  loss = mean w(t) (v_pred - v)^2
//
// Tasks: t2v (latents + text context); ti2v (the first latent frame stays clean, its tokens get
// t = 0 and are left out of the loss); i2v (the noisy latents are concatenated with a 4-channel
// first-frame mask and the first-frame latent, zeros after it: in_dim = 2 out_dim + 4).

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wan/wan_dit.hpp"
#include "wan/wan_weights.hpp"
#include "wanfw/error.hpp"
#include "wanfw/plugin.hpp"

namespace {

using wanfw::option;
using T = wanfw::OptionType;

struct FlowMatchingSettings {
  std::string task;      ///< t2v | ti2v | i2v
  std::string sampling;  ///< uniform | logit_normal | shift
  double shift = 5.0;
  double logit_mean = 0.0;
  double logit_std = 1.0;
  double min_sigma = 0.0;  ///< min_timestep / 1000
  double max_sigma = 1.0;
  bool bell_weighting = false;
  std::int64_t frames = 0, height = 0, width = 0, text_len = 0;
};

class WanFlowMatchingModel final : public wanfw::Model {
 public:
  WanFlowMatchingModel(wan::WanConfig config, FlowMatchingSettings settings)
      : dit_(std::move(config)), settings_(std::move(settings)) {}

  wan::WanDiT& dit() { return dit_; }
  std::shared_ptr<torch::nn::Module> module() override { return dit_.ptr(); }

  std::vector<wanfw::FieldSpec> batch_fields() const override {
    const auto& c = dit_->config();
    return {{"latents", {c.out_dim, settings_.frames, settings_.height, settings_.width}, at::kFloat},
            {"context", {settings_.text_len, c.text_dim}, at::kFloat}};
  }

  wanfw::StepOutput training_step(const wanfw::Batch& batch) override {
    const torch::Tensor x0 = batch.at("latents");
    const torch::Tensor noise = torch::randn_like(x0);
    const torch::Tensor sigma = sample_sigma(x0.size(0), x0.device());
    const Objective out = objective(x0, noise, sigma, batch.at("context"));
    return {out.loss, {{"sigma_mean", sigma.mean().detach()}}};
  }

  std::map<std::string, at::Tensor> predict(const std::map<std::string, at::Tensor>& inputs) override {
    torch::NoGradGuard no_grad;
    dit_->eval();
    const torch::Device device = dit_->parameters().front().device();
    auto input = [&](const char* name, bool required = true) -> torch::Tensor {
      auto it = inputs.find(name);
      if (it == inputs.end()) {
        if (required)
          throw wanfw::Error(fmt::format("predict: the inputs have no tensor '{}'", name),
                             "give x [B,C,F,H,W], t [B] or [B,tokens], context [B,L,text_dim] (and y for "
                             "image conditioning); or x0, noise, sigma and context to evaluate the loss");
        return {};
      }
      return it->second.to(device);
    };
    if (inputs.count("x0")) {  // the training objective for given draws
      const Objective out = objective(input("x0"), input("noise"), input("sigma"), input("context"));
      return {{"loss", out.loss.cpu()}, {"v", out.prediction.cpu()}, {"target", out.target.cpu()}};
    }
    return {{"v", dit_->forward(input("x"), input("t"), input("context"), input("y", false)).cpu()}};
  }

 private:
  struct Objective {
    torch::Tensor loss, prediction, target;
  };

  /// s in [min_sigma, max_sigma], drawn as configured.
  torch::Tensor sample_sigma(std::int64_t batch, const torch::Device& device) const {
    const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    torch::Tensor u;
    if (settings_.sampling == "logit_normal") {
      u = torch::sigmoid(torch::randn({batch}, options) * settings_.logit_std + settings_.logit_mean);
    } else {
      u = torch::rand({batch}, options);
      if (settings_.sampling == "shift") u = settings_.shift * u / (1 + (settings_.shift - 1) * u);
    }
    return settings_.min_sigma + (settings_.max_sigma - settings_.min_sigma) * u;
  }

  Objective objective(const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& sigma,
                      const torch::Tensor& context) {
    const torch::Tensor s = sigma.to(torch::kFloat32).view({-1, 1, 1, 1, 1});
    torch::Tensor xt = (1 - s) * x0 + s * noise;
    const torch::Tensor target = noise - x0;
    torch::Tensor t = sigma.to(torch::kFloat32) * 1000.0;  // [B]
    const bool ti2v = settings_.task == "ti2v";
    if (ti2v) {
      // The first latent frame is the clean image latent; its tokens are at t = 0.
      xt = torch::cat({x0.slice(2, 0, 1), xt.slice(2, 1)}, 2);
      const auto grid = dit_->token_grid(x0.size(2), x0.size(3), x0.size(4));
      const std::int64_t first_frame_tokens = grid[1] * grid[2];
      t = t.unsqueeze(1).repeat({1, grid[0] * first_frame_tokens});
      t.slice(1, 0, first_frame_tokens).zero_();
    }
    const torch::Tensor prediction = dit_->forward(xt, t, context, settings_.task == "i2v" ? i2v_condition(x0) : torch::Tensor());
    torch::Tensor error = (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).pow(2);
    if (ti2v) error = error.slice(2, 1);  // frames after the first
    torch::Tensor per_sample = error.flatten(1).mean(1);
    if (settings_.bell_weighting) {
      // exp(-2 ((t - 500) / 1000)^2), normalised to mean 1 over t in [0, 1000).
      static const double norm = [] {
        double total = 0;
        for (int i = 0; i < 1000; ++i) total += std::exp(-2 * std::pow((i - 500) / 1000.0, 2));
        return total / 1000;
      }();
      per_sample = per_sample * torch::exp(-2 * ((sigma * 1000 - 500) / 1000).pow(2)) / norm;
    }
    return {per_sample.mean(), prediction, target};
  }

  /// The I2V conditioning: a 4-channel mask (1 on the first latent frame) and the first-frame
  /// latent followed by zeros, [B, 4 + C, F, H, W].
  static torch::Tensor i2v_condition(const torch::Tensor& x0) {
    auto sizes = x0.sizes().vec();
    sizes[1] = 4;
    torch::Tensor mask = torch::zeros(sizes, x0.options());
    mask.select(2, 0).fill_(1.0);
    torch::Tensor image = torch::zeros_like(x0);
    image.select(2, 0).copy_(x0.select(2, 0));
    return torch::cat({mask, image}, 1);
  }

  wan::WanDiT dit_;
  FlowMatchingSettings settings_;
};

wan::WanConfig config_from(const wanfw::Options& o) {
  wan::WanConfig c;
  try {
    c = wan::wan_preset(o.string("preset"));
  } catch (const wanfw::Error& e) {
    o.fail("preset", e.what());
  }
  for (auto [name, field] : {std::pair{"dim", &c.dim}, {"ffn_dim", &c.ffn_dim}, {"num_heads", &c.num_heads},
                             {"num_layers", &c.num_layers}, {"in_dim", &c.in_dim}, {"out_dim", &c.out_dim},
                             {"text_dim", &c.text_dim}})
    if (o.integer(name) > 0) *field = o.integer(name);
  try {
    c.validate();
  } catch (const wanfw::Error& e) {
    o.fail("preset", e.what(), "adjust dim / num_heads so that the head dim splits for RoPE");
  }
  return c;
}

/// Every option besides the dimensions, checked against them.
FlowMatchingSettings settings_from(const wanfw::Options& o, const wan::WanConfig& config) {
  FlowMatchingSettings s;
  s.task = o.string("task");
  s.sampling = o.string("timestep_sampling");
  s.shift = o.number("shift");
  s.logit_mean = o.number("logit_mean");
  s.logit_std = o.number("logit_std");
  s.min_sigma = o.number("min_timestep") / 1000.0;
  s.max_sigma = o.number("max_timestep") / 1000.0;
  s.bell_weighting = o.string("loss_weighting") == "bell";
  s.frames = o.integer("latent_frames");
  s.height = o.integer("latent_height");
  s.width = o.integer("latent_width");
  s.text_len = o.integer("text_len");
  if (!(s.min_sigma >= 0 && s.min_sigma < s.max_sigma && s.max_sigma <= 1))
    o.fail("min_timestep", "need 0 <= min_timestep < max_timestep <= 1000");
  if (s.shift <= 0) o.fail("shift", "must be positive");
  const std::int64_t expected_in = s.task == "i2v" ? 2 * config.out_dim + 4 : config.out_dim;
  if (config.in_dim != expected_in)
    o.fail("task", fmt::format("the {} task feeds the model {} input channels (out_dim {}{}), but in_dim is {}", s.task,
                               expected_in, config.out_dim, s.task == "i2v" ? " x 2 + 4 mask channels" : "",
                               config.in_dim),
           s.task == "i2v" ? "use preset wan2.2-i2v-a14b, or set in_dim" : "use a t2v/ti2v preset, or set in_dim");
  for (const char* name : {"latent_frames", "latent_height", "latent_width", "text_len"})
    if (o.integer(name) < 1) o.fail(name, "must be at least 1");
  if (s.height % config.patch[1] != 0 || s.width % config.patch[2] != 0)
    o.fail("latent_height", fmt::format("latent height and width must be multiples of the patch size {}",
                                        config.patch[1]));
  if (s.task == "ti2v" && s.frames < 2) o.fail("latent_frames", "ti2v needs at least 2 latent frames");
  return s;
}

std::unique_ptr<wanfw::Model> make_model(const wanfw::Options& o, const wanfw::PluginContext&) {
  const wan::WanConfig config = config_from(o);
  const FlowMatchingSettings s = settings_from(o, config);
  auto model = std::make_unique<WanFlowMatchingModel>(config, s);
  const std::string weights = o.string("weights");
  if (!weights.empty()) wan::load_wan_weights(*model->dit(), weights, o.string("weights_subfolder"));
  return model;
}

/// 4999787712 -> "4,999,787,712"
std::string with_thousands(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string weights_summary(const wanfw::Options& o, const wan::WanConfig& c) {
  const std::string weights = o.string("weights");
  if (weights.empty()) return "weights: none (the official random initialisation)\n";
  if (!std::filesystem::exists(weights))
    return fmt::format("weights: {} is not on this machine; it is checked when a run starts\n", weights);
  const wan::WeightLayout layout = wan::check_wan_weights(c, weights, o.string("weights_subfolder"));
  return fmt::format("weights: {} ({} layout): every tensor present with the model's shape\n", weights,
                     layout == wan::WeightLayout::Diffusers ? "diffusers" : "official");
}

std::string inspect(const wanfw::Options& o) {
  const wan::WanConfig c = config_from(o);
  const FlowMatchingSettings s = settings_from(o, c);
  const double n = static_cast<double>(c.parameter_count());
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const auto split = c.rope_split();
  return fmt::format(
      "Wan DiT, preset {}: dim {}, ffn_dim {}, {} heads (head dim {}, RoPE {}/{}/{}), {} layers, in {}, out {}, "
      "text_dim {}\n"
      "parameters: {}\n"
      "size of the weights: {:.2f} GiB in float32, {:.2f} GiB in bfloat16\n"
      "training state in float32 with AdamW (weights, gradients, two moments): {:.2f} GiB, before activations\n"
      "task {}, synthetic latents [{}, {}, {}, {}], text {} x {}\n{}",
      c.preset, c.dim, c.ffn_dim, c.num_heads, c.head_dim(), split[0], split[1], split[2], c.num_layers, c.in_dim,
      c.out_dim, c.text_dim, with_thousands(c.parameter_count()), n * 4 / kGiB, n * 2 / kGiB, n * 16 / kGiB, s.task, c.out_dim,
      s.frames, s.height, s.width, s.text_len, c.text_dim, weights_summary(o, c));
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_model("wan22_flow_matching", "0.1.0",
                                              "Wan2.1/2.2 DiT trained with flow matching (t2v, ti2v, i2v).");
  std::vector<std::string> presets = wan::wan_preset_names();
  d.options = {
      option("preset", T::Choice).value("tiny").choices(presets).doc("Model dimensions from the public configs."),
      option("dim", T::Integer).value("0").doc("Hidden size; 0 keeps the preset's."),
      option("ffn_dim", T::Integer).value("0").doc("Feed-forward size; 0 keeps the preset's."),
      option("num_heads", T::Integer).value("0").doc("Attention heads; 0 keeps the preset's."),
      option("num_layers", T::Integer).value("0").doc("Blocks; 0 keeps the preset's."),
      option("in_dim", T::Integer).value("0").doc("Input latent channels; 0 keeps the preset's."),
      option("out_dim", T::Integer).value("0").doc("Output latent channels; 0 keeps the preset's."),
      option("text_dim", T::Integer).value("0").doc("Text-encoder width; 0 keeps the preset's."),
      option("task", T::Choice)
          .value("t2v")
          .choices({"t2v", "ti2v", "i2v"})
          .doc("t2v text-to-video; ti2v clean first frame (Wan2.2 5B); i2v image channels concatenated (A14B I2V)."),
      option("weights", T::String).value("\"\"").doc("Checkpoint to start from (official or diffusers layout); "
                                                     "empty: the official random initialisation."),
      option("weights_subfolder", T::String).value("transformer").doc("Subfolder of a diffusers pipeline folder."),
      option("timestep_sampling", T::Choice)
          .value("uniform")
          .choices({"uniform", "logit_normal", "shift"})
          .doc("How s (= t / 1000) is drawn: uniform, sigmoid of a normal, or uniform then shifted."),
      option("shift", T::Number).value("5.0").doc("k in s' = k s / (1 + (k - 1) s) for shift sampling."),
      option("logit_mean", T::Number).value("0.0").doc("Mean of the normal for logit_normal sampling."),
      option("logit_std", T::Number).value("1.0").doc("Standard deviation for logit_normal sampling."),
      option("min_timestep", T::Number).value("0").doc("Lowest timestep drawn (0..1000 scale)."),
      option("max_timestep", T::Number).value("1000").doc("Highest timestep drawn (0..1000 scale)."),
      option("loss_weighting", T::Choice)
          .value("none")
          .choices({"none", "bell"})
          .doc("none, or bell: exp(-2((t-500)/1000)^2) normalised to mean 1."),
      option("latent_frames", T::Integer).value("3").doc("Latent frames of the synthetic data."),
      option("latent_height", T::Integer).value("8").doc("Latent height of the synthetic data."),
      option("latent_width", T::Integer).value("8").doc("Latent width of the synthetic data."),
      option("text_len", T::Integer).value("16").doc("Text tokens of the synthetic context."),
  };
  d.make_model = make_model;
  d.inspect_model = inspect;
  return d;
}

}  // namespace

WANFW_PLUGIN(describe)
