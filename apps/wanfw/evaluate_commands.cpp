// `wanfw predict`, `sample` and `export`: a built model (the config's weights or a checkpoint's)
// run once, sampled, or written in its family's release layout.
#include <charconv>

#include <fmt/format.h>

#include "command_line.hpp"
#include "commands.hpp"
#include "run/decoding.hpp"

namespace wanfw::cli {

const char* const kPredictHelp = R"(usage: wanfw predict CONFIG --inputs IN.safetensors --out OUT.safetensors
                     [--checkpoint PATH [--ema]] [--device DEVICE] [--set key=value]...

Builds the config's model (with its weights) and runs it once, without gradients, on the tensors
in IN; writes what the model returns to OUT. For the Wan model: x [B,C,F,H,W] (noisy latents),
t [B] or [B,tokens] (0..1000), context [B,L,text_dim] -> v.

predict, sample and export run as one process with the whole model on one device, whatever
layout the config trains on (ddp, fsdp, network groups, sequence parallelism, replicas,
accumulation): start them without torchrun or srun; a checkpoint is read whole, however many
ranks wrote its pieces.

  --checkpoint PATH   take the weights from a training checkpoint (a <run>/checkpoints/step-*
                      folder, or a run folder for its newest one) instead of the config's
  --ema               with --checkpoint: the averaged weights (the run's ema section) in place of
                      the trained ones
  --device DEVICE     where the model runs: auto (default: the first GPU, else the CPU), cpu, cuda,
                      cuda:N
)";

const char* const kSampleHelp =
    R"(usage: wanfw sample CONFIG --out OUT.safetensors [--inputs IN.safetensors] [--checkpoint PATH [--ema]]
                    [--seed N] [--count N] [--video OUT.mp4] [--device DEVICE] [--set key=value]...
       wanfw sample CONFIG --dataset --out FOLDER --count N [--batch B] [--checkpoint PATH] [--seed N] ...

Builds the config's model like `predict` (one process, one device) and draws samples with its sampler, writing them to
OUT. For the Wan model: a flow-matching Euler sampler with classifier-free guidance (options
model.sample_steps, sample_guidance, sample_shift) writes `latents` [B,C,F,H,W] and `sigmas`.
IN holds the conditioning (context [B,L,text_dim]; optionally negative_context, noise, and image
[B,C,H,W] for ti2v and i2v); without IN, the first N samples of the config's data set condition it.

  --checkpoint PATH   take the weights from a training checkpoint or run folder
  --ema               with --checkpoint: sample the averaged weights (the run's ema section)
  --seed N            seed of the initial noise (default: run.seed)
  --count N           samples drawn when there is no IN (default 1)
  --video OUT.mp4     also decode the samples with the model plugin's decoder (the Wan models:
                      model.vae) to OUT.mp4, or OUT-<i>.mp4 for several
  --device DEVICE     where the model runs: auto (default: the first GPU, else the CPU), cpu, cuda,
                      cuda:N
  --dataset           write a data set folder (docs/data.md) at OUT instead: the first N samples of the
                      data set, sampled B at a time (--batch, default 1), each with its conditioning (a
                      teacher's ODE pairs with model.sample_trajectory_steps: docs/streaming.md); each
                      batch draws from the seed of (--seed, its first sample)
)";

const char* const kExportHelp =
    R"(usage: wanfw export CONFIG --out FOLDER [--checkpoint PATH [--ema]] [--merge] [--max-shard-size BYTES]
                    [--device DEVICE] [--set key=value]...

Builds the config's model (with the weights of the config, or of --checkpoint: a training
checkpoint or a run folder's newest) as one process, like `predict`, and writes them in the model family's release layout, so
that other tools load them. For the Wan model: the official layout (official tensor names,
diffusion_pytorch_model*.safetensors shards with their index json, config.json); the A14B experts
go to high_noise_model/ and low_noise_model/. Shards hold at most BYTES (default 5000000000).

A LoRA run (model.lora.rank > 0) writes its adapters instead: wan_lora.safetensors (the Wan /
ComfyUI keys, diffusion_model.blocks.N.self_attn.q.lora_A.weight, with alpha) and
pytorch_lora_weights.safetensors (the diffusers PEFT keys), per expert for A14B.
  --ema               with --checkpoint: write the averaged weights (the run's ema section)
  --merge             fold the adapters into the weights and write the full official layout
  --device DEVICE     where the model is built (default cpu: an export computes nothing but merges,
                      and leaves the GPUs to a run that is still training); auto, cuda, cuda:N
)";

const char* const kDecodeHelp =
    R"(usage: wanfw decode LATENTS.safetensors --out OUT --vae PATH [--model NAME] [--device DEVICE]
       wanfw decode CONFIG --inputs LATENTS.safetensors --out OUT [--vae PATH] [--device DEVICE]
                    [--set key=value]...

Decodes the latents of LATENTS (its tensor `latents`, as `wanfw sample` writes it) to video with
the model plugin's decoder, without building the model: OUT/sample-<i>.mp4, one a sample (H.264,
or MPEG-4 part 2 where FFmpeg has no H.264 encoder); an OUT ending in .safetensors gets the
frames instead, `video` [B, 3, F, H, W] in [-1, 1], float32. The model plugin is the CONFIG's,
else --model, else the one `wanfw sample` recorded in LATENTS. For the Wan models: the Wan VAE
of model.vae (diffusers' vae/ folder, a pipeline folder, or a VAE safetensors file), 1 + 4 (T - 1)
frames for T latent frames, at model.vae_fps. Before anything is decoded, the latents must be
[B, C, T, h, w] with the decoder's C channels, finite, and OUT writable; else nothing is written.
  --vae PATH          the VAE (sets model.vae)
  --model NAME        the model plugin whose decoder decodes, when there is no CONFIG
  --device DEVICE     where to decode: cpu (default), auto (the first GPU, else the CPU), cuda, cuda:N
)";

namespace {

/// Removes the boolean `flag` from `args`; whether it was there.
bool take_flag(std::vector<std::string>& args, const char* flag) {
  const auto before = args.size();
  std::erase(args, std::string(flag));
  return args.size() != before;
}

}  // namespace

int predict_command(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  const bool ema = take_flag(args, "--ema");
  std::map<std::string, std::string> values;
  EvaluateRequest request = parse_evaluate_request(args, kPredictHelp, {{"--device", "auto"}}, &values);
  request.ema = ema;
  request.run.one_process_device = values["--device"];
  if (request.inputs.empty()) usage_error("--inputs is required", kPredictHelp);
  predict_experiment(request);
  return kSuccess;
}

int sample_command(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  const bool ema = take_flag(args, "--ema");
  const bool dataset = take_flag(args, "--dataset");
  std::map<std::string, std::string> values;
  EvaluateRequest request = parse_evaluate_request(
      args, kSampleHelp, {{"--seed", ""}, {"--count", ""}, {"--video", ""}, {"--device", "auto"}, {"--batch", "1"}},
      &values);
  request.ema = ema;
  request.run.one_process_device = values["--device"];
  request.video = values["--video"];
  if (dataset) {
    if (!request.inputs.empty() || !request.video.empty())
      usage_error("--dataset samples the config's data set: without --inputs and --video", kSampleHelp);
    std::int64_t batch = 0;
    const std::string& text = values["--batch"];
    if (std::from_chars(text.data(), text.data() + text.size(), batch).ptr != text.data() + text.size() || batch < 1)
      usage_error(fmt::format("--batch needs a positive integer, got '{}'", text), kSampleHelp);
    return sample_dataset(request, batch);
  }
  if (values["--batch"] != "1") usage_error("--batch belongs to --dataset", kSampleHelp);
  sample_experiment(request);
  return kSuccess;
}

int decode_command(const std::vector<std::string>& args) {
  std::map<std::string, std::string> values;
  const EvaluateRequest parsed =
      parse_evaluate_request(args, kDecodeHelp, {{"--vae", ""}, {"--device", "cpu"}, {"--model", ""}}, &values);
  DecodeRequest request;
  request.run = parsed.run;
  request.out = parsed.outputs;
  request.model = values["--model"];
  request.device = values["--device"];
  if (parsed.inputs.empty()) {  // wanfw decode LATENTS ...
    if (parsed.run.config.extension() != ".safetensors")
      usage_error("give LATENTS.safetensors, or CONFIG with --inputs LATENTS.safetensors", kDecodeHelp);
    request.latents = parsed.run.config;
    request.run.config.clear();
  } else {
    request.latents = parsed.inputs;
  }
  if (!values["--vae"].empty()) request.run.overrides.push_back("model.vae=" + values["--vae"]);
  decode_experiment(request);
  return kSuccess;
}

int export_command(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  const bool merge = take_flag(args, "--merge");
  const bool ema = take_flag(args, "--ema");
  std::map<std::string, std::string> values;
  EvaluateRequest request =
      parse_evaluate_request(args, kExportHelp, {{"--max-shard-size", ""}, {"--device", "cpu"}}, &values);
  request.run.one_process_device = values["--device"];
  request.merge_adapters = merge;
  request.ema = ema;
  export_experiment(request);
  return kSuccess;
}

}  // namespace wanfw::cli
