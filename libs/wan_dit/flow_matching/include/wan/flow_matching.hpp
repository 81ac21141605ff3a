#pragma once
// Flow-matching pieces every Wan model shares: how a sample's noise level is drawn, the sampling
// schedule, the timesteps each task feeds the DiT, the I2V conditioning and the batch fields.
//
//   x_s = (1 - s) x0 + s eps,  t = 1000 s,  velocity v = eps - x0

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "wan/task.hpp"
#include "wan/wan_config.hpp"
#include "wanfw/data.hpp"

namespace wan {

/// The distribution of training's noise levels (the option timestep_sampling), read once.
enum class SigmaDistribution { Uniform, LogitNormal, Shift, Fixed };
/// "uniform", "logit_normal", "shift" or "fixed"; throws wanfw::Error for another name.
SigmaDistribution sigma_distribution(const std::string& name);

/// How training draws each sample's noise level s (= t / 1000), from the sample's own
/// "timestep" stream (wanfw/sample_random.hpp): the same draw on any rank or micro-batch.
struct TimestepSampling {
  SigmaDistribution method = SigmaDistribution::Uniform;
  double shift = 5.0;              ///< k of `shift`
  double logit_mean = 0.0, logit_std = 1.0;
  double min_sigma = 0.0, max_sigma = 1.0;  ///< the range uniform/logit_normal/shift map into
  std::vector<double> fixed;                 ///< `fixed`: the levels, equally likely
};

/// Each sample's s: [B] float32 on the batch's device; with `levels` > 0, that many a sample (a
/// causal student's chunks, each its own level): [B, levels].
torch::Tensor draw_sigma(const wanfw::Batch& batch, const TimestepSampling& sampling, std::int64_t levels = 0);

/// k s / (1 + (k - 1) s): the official schedule's shift of a level s (the one place it is written).
double shifted(double s, double shift);
/// shifted() of every level of `s`, in its dtype.
torch::Tensor shifted(const torch::Tensor& s, double shift);
/// The inverse of shifted(): the level x / (k - (k - 1) x) that shifts to `x`.
double unshifted(double x, double shift);

/// Whether a sample at level `sigma` goes to the high-noise expert of a pair split at `boundary`
/// (t >= boundary, to 1e-12: a float32 level routes as the double it stands for): the one rule the
/// denoiser routes by and the training draws respect. [B] bool for levels [B].
bool routes_high(double sigma, double boundary);
torch::Tensor routes_high(const torch::Tensor& sigma, double boundary);

/// The official sampling schedule: shifted(linspace(1, 0, steps + 1)).
std::vector<double> sampling_schedule(std::int64_t steps, double shift);

/// Whether `latents` [B, C, F, H, W] keep their first frame clean as the image condition: ti2v
/// latents with frames after the first. A single-frame ti2v sample (an image, as the mixed image
/// and video buckets of a TI2V-5B data set hold) has nothing after its condition: it is trained
/// and sampled from the text alone, as t2v does, with every token noised and predicted.
bool keeps_first_frame(Task task, const torch::Tensor& latents);

/// `noised` [B, C, F, H, W] with its first frame taken from `clean` (its first frame, or an image
/// [B, C, 1, H, W]) where keeps_first_frame; `noised` itself otherwise.
torch::Tensor with_kept_first_frame(Task task, const torch::Tensor& clean, const torch::Tensor& noised);

/// The frames a model predicts of a per-element `error` [B, C, F, ...]: all but a kept first frame.
torch::Tensor predicted_frames(Task task, const torch::Tensor& error);

/// The per-sample mean [B] of a per-element `error` [B, C, F, ...] over the predicted frames.
torch::Tensor predicted_mean(Task task, const torch::Tensor& error);

/// `x` [B, C, F, H, W] noised to each sample's level `sigma` [B], (1 - s) x + s noise, with the
/// first frame of `clean` kept where keeps_first_frame (with_kept_first_frame).
torch::Tensor noised_to(Task task, const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& noise,
                        const torch::Tensor& clean);

/// The timesteps the DiT gets for levels `sigma` [B] on `latents` [B, C, F, H, W]: 1000 s per
/// sample, or where the first frame is kept (keeps_first_frame) per token with its tokens at 0:
/// [B] or [B, tokens].
torch::Tensor task_timesteps(const torch::Tensor& sigma, const torch::Tensor& latents, const WanConfig& config,
                             Task task);

/// The I2V conditioning `y` [B, 4 + C, F, H, W]: a 4-channel mask that is 1 on the first latent
/// frame (the official pipeline's mask of the first pixel frame, repeated 4 times and folded by
/// the VAE's temporal stride), then `image_condition` [B, C, F, H, W]: the VAE latents of the
/// image followed by zero frames (their latents are not zeros: the data set stores them).
/// With `last_frame` (first–last-frame video: `image_condition` encodes the first frame, zero
/// frames and the last frame), the mask also marks the last pixel frame: channel 3 of the last
/// latent frame (channel k of latent frame t is pixel frame 4t + k - 3), as the official FLF2V
/// pipeline and diffusers' Wan I2V pipeline with `last_image` build it.
torch::Tensor i2v_condition(const torch::Tensor& image_condition, bool last_frame = false);

/// `image_condition` when it is defined and of the latents' shape; else wanfw::Error naming `what`.
const torch::Tensor& checked_condition(const torch::Tensor& image_condition, const torch::Tensor& latents,
                                       const char* what);

/// Throws wanfw::Error naming `what` when `latents` cannot be cut into the DiT's patches.
void check_latents(const WanConfig& config, Task task, const torch::Tensor& latents, const char* what);

/// The fields a Wan model of `task` reads: latents [out_dim, frames, height, width], context
/// [tokens <= text_len, text_dim], for i2v image_condition (the latents' shape), and for a VACE
/// model vace_context [vace_in_dim, frames, height, width].
std::vector<wanfw::FieldSpec> task_fields(const WanConfig& config, Task task);

/// in_dim the task needs: out_dim, or for i2v out_dim x 2 + 4 mask channels.
std::int64_t task_in_dim(const WanConfig& config, Task task);

/// How `wanfw sample` and the validation preview draw: the options sample_steps, preview_steps,
/// sample_guidance, sample_shift and sample_size of the Wan model plugins (wan_options.hpp).
struct SamplerSettings {
  std::int64_t steps = 20;
  std::int64_t preview_steps = 10;
  double guidance = 5.0;  ///< v_u + guidance (v_c - v_u); 1: the conditional velocity alone
  double shift = 5.0;
  std::string solver = "euler";       ///< euler | renoise (euler_sample)
  std::optional<wanfw::Bucket> size;  ///< latent F x H x W when the inputs give no shape
  std::vector<double> vace_scales;    ///< a VACE model's hints' scales (empty: 1)
};

/// What `wanfw sample` conditions a Wan model on, read from its inputs and checked: context
/// [B, L, text_dim], negative context (default zeros), noise [B, C, F, H, W] (given, or drawn on
/// the CPU from `seed` in the shape of `latents` or `sample_size`), for ti2v the first-frame
/// latent `image` (default: the latents' first frame), for i2v `y` from image_condition, for a VACE
/// model its vace_context (the noise's shape when no other input gives one) and reference_frames.
struct SampleInputs {
  torch::Tensor context, negative, noise, image, y;
  /// VACE: the control context (the noise takes its shape when neither noise nor latents are given),
  /// and the reference frames at its front, which the sampled latents leave out.
  torch::Tensor vace_context;
  std::int64_t reference_frames = 0;
};
SampleInputs sample_inputs(const std::map<std::string, at::Tensor>& inputs, const WanConfig& config, Task task,
                           const std::optional<wanfw::Bucket>& sample_size, std::uint64_t seed,
                           const torch::Device& device, bool last_frame = false);

/// Classifier-free guidance in the official Wan form, v_u + scale (v_c - v_u); scale 1 is v_c.
torch::Tensor guided_velocity(const torch::Tensor& conditional, const torch::Tensor& unconditional, double scale);

/// The velocity of a network at (x, t, context) for levels sigma [B] (routing experts).
using Velocity = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& t,
                                             const torch::Tensor& context, const torch::Tensor& sigma)>;

/// The official sampler: Euler steps x += (s_{i+1} - s_i) v along sampling_schedule(steps,
/// shift), with classifier-free guidance v = v_u + guidance (v_c - v_u) when guidance != 1; ti2v
/// keeps the image as the first frame. Returns "latents" [B, C, F, H, W] (CPU) and "sigmas".
/// `solver` "renoise" (few-step students): each step predicts x0 = x - s_i v and, before the last,
/// noises it afresh to the next level, x = (1 - s_{i+1}) x0 + s_{i+1} eps_i, eps_i drawn on the CPU
/// from renoise_generator(seed, i).
/// `record` (levels in (0, 1], each a point of the schedule): the states x at those levels as
/// "trajectory" [B, K, C, F, H, W] with "trajectory_timesteps" [B, K] (1000 s): a causal student's
/// ODE pairs with the final latents. Throws wanfw::Error naming sample_steps when the schedule
/// passes no step at a level.
std::map<std::string, at::Tensor> euler_sample(const Velocity& velocity, const SampleInputs& given,
                                               const WanConfig& config, Task task, std::int64_t steps, double shift,
                                               double guidance, const std::string& solver = "euler",
                                               std::uint64_t seed = 0, const std::vector<double>& record = {});

/// The noise of step `step` of a renoise sampler started from `seed`.
torch::Tensor renoise_noise(std::uint64_t seed, std::int64_t step, at::IntArrayRef shape);

/// Validation metrics at fixed timesteps: "<prefix><T>" (T on 0..1000, three digits) for each of
/// `timesteps` from `metric(sigma)`, and "loss", their mean (float64).
std::map<std::string, at::Tensor> per_timestep(const std::vector<double>& timesteps, const std::string& prefix,
                                               const std::function<at::Tensor(double sigma)>& metric);

/// The inputs of a preview sample from a validation batch's first sample (its shape, its text,
/// its first frame for ti2v, its image_condition for i2v, its vace_context for a VACE model). A batch without latents (a preview
/// prompt) gives its text alone, its shape then being `sample_size`; throws when that is unset.
std::map<std::string, at::Tensor> preview_inputs(const wanfw::Batch& batch, Task task,
                                                 const std::optional<wanfw::Bucket>& sample_size);

}  // namespace wan
