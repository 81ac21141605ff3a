#include "config/core_sections.hpp"

#include <fmt/format.h>

#include "config/core_limits.hpp"
#include "wanfw/data.hpp"

namespace wanfw {

using namespace limits;

const std::vector<std::string>& top_level_sections() {
  static const std::vector<std::string> sections = {"run",  "trainer", "optimizer", "ema", "scheduler", "data",
                                                    "validation", "precision", "checkpoint", "block_swap", "model", "strategy", "loggers", "plugin_path"};
  return sections;
}

const std::vector<std::pair<std::string, OptionSchema>>& core_schemas() {
  using T = OptionType;
  static const std::vector<std::pair<std::string, OptionSchema>> schemas = {
      {"run",
       {option("name", T::String).doc("Run name; outputs go to <output_dir>/<name>/version_<N>. Default: the "
                                      "config file's name without extension."),
        option("output_dir", T::String).value("runs").doc("Folder that holds every run."),
        option("seed", T::Integer).value("42").doc("Seed for weights, data order and every random draw."),
        option("log_level", T::Choice)
            .value("info")
            .choices({"trace", "debug", "info", "warn", "error"})
            .doc("Console log level.")}},
      {"trainer",
       {option("max_steps", T::Integer).value("0").doc("Optimizer steps to run; 0 runs `epochs` full epochs."),
        option("epochs", T::Integer).value("1").doc(fmt::format("Epochs to run when max_steps is 0 (at most {}); each ends with an optimizer step over its "
                                                       "leftover micro-batches.", kMaxEpochs)),
        option("log_every", T::Integer).value("10").doc("Log metrics every N optimizer steps."),
        option("grad_clip", T::Number).value("1.0").doc("Clip the global gradient L2 norm to this; 0 disables."),
        option("nan_guard", T::Boolean)
            .value("true")
            .doc("Stop with an error when the loss or gradient norm is NaN or infinite, before the "
                 "optimizer applies it."),
        option("progress", T::Choice)
            .value("auto")
            .choices({"auto", "bar", "lines", "off"})
            .doc("Progress display: a bar on terminals and plain lines otherwise (auto), or forced."),
        option("histogram_every", T::Integer)
            .value("0")
            .doc("Log histograms of every trainable parameter and its gradient every N steps (loggers that "
                 "draw them: tensorboard); 0 disables."),
        option("cpu_memory_cache_mb", T::Integer)
            .value("512")
            .doc("Training on the CPU: MiB of freed tensor memory (blocks of 64 KiB or more) kept for reuse by "
                 "the next allocation of the same size, so each step does not fault its activations' pages in "
                 "again; 0 returns every block to the system. GPU runs keep the C library's allocator."),
        option("profile_steps", T::Integer)
            .value("0")
            .doc("Record this many optimizer steps with the torch profiler (CPU operators, and CUDA kernels on "
                 "GPUs) into profile/trace-rankN.json in the run folder (Perfetto and chrome://tracing open it), and "
                 "log the kernels (or operators) that took the most time; 0 disables."),
        option("profile_from", T::Integer)
            .value("5")
            .doc("The first step profile_steps records: later than the first steps, whose allocations, "
                 "kernel choices and compilation are not a step's cost.")}},
      {"optimizer",
       {option("name", T::Choice).value("adamw").choices({"adamw"}).doc("Optimizer."),
        option("lr", T::Number).value("1e-4").doc("Peak learning rate (before lr_scaling)."),
        option("lr_scaling", T::Choice)
            .value("none")
            .choices({"none", "linear", "sqrt"})
            .doc("Scale lr with the global batch (world size x batch_size x accumulation) relative to "
                 "lr_reference_batch: linearly, by the square root, or not at all."),
        option("lr_reference_batch", T::Integer)
            .value("0")
            .doc("The global batch `lr` was tuned for; 0 means data.batch_size (one device, no accumulation)."),
        option("betas", T::NumberList).value("[0.9, 0.999]").doc("AdamW beta1 and beta2."),
        option("eps", T::Number).value("1e-8").doc("AdamW epsilon."),
        option("weight_decay", T::Number).value("0.01").doc("Decoupled weight decay."),
        option("implementation", T::Choice)
            .value("auto")
            .choices({"auto", "fused", "per_tensor"})
            .doc("fused: ATen's fused multi-tensor AdamW kernel (one pass over each parameter, its gradient and moments); "
                 "per_tensor: torch::optim::AdamW's loop over tensors (the reference); auto: fused where the device "
                 "has the kernel (CPU, CUDA), else per_tensor. Both keep the same state: checkpoints resume under "
                 "either."),
        option("state", T::Choice)
            .value("device")
            .choices({"device", "host"})
            .doc("Where the fp32 master weights, AdamW's moments and the ema averages live. device: beside the "
                 "weights. host: in host memory (the masters and their gradients in one pinned arena); the device "
                 "keeps only the weights it computes with, each gradient moves to the host as soon as it is whole "
                 "(under ddp and data_parallel when backward is over), the host's cores run the step (ATen's fused "
                 "CPU AdamW) and the updated weights go back. The device saves AdamW's moments (8 bytes a trained "
                 "parameter) and the averages; with precision.mode bf16_weights the fp32 masters and their "
                 "gradients too (16 bytes in all). fsdp keeps each rank's shards there; with block_swap the "
                 "streamed blocks' trained weights stream from the host too. Checkpoints are the same either way, "
                 "so a run may resume with the other setting (docs/low-memory.md).")}},
      {"ema",
       {option("decay", T::Number)
            .value("0")
            .doc("Keep an exponential moving average of the trained parameters: after each optimizer step that "
                 "updates a parameter, average = decay x average + (1 - decay) x weight, in float32 (0.99 to "
                 "0.9999 are usual; DMD2 students 0.99). Checkpointed beside the AdamW state and resumed bitwise; "
                 "`wanfw sample --ema` and `wanfw export --ema` use it in place of the weights. 0 keeps none."),
        option("start_step", T::Integer)
            .value("0")
            .doc("Up to this optimizer step the average follows the weights themselves (an average of the "
                 "early, fast-moving weights is of little use)."),
        option("groups", T::StringList)
            .value("[]")
            .doc("The parameter groups averaged (the model's: `generator` under dmd, `high_noise` / "
                 "`low_noise` for two experts, ...); empty: every group.")}},
      {"scheduler",
       {option("warmup_steps", T::Integer).value("0").doc("Linear warm-up from 0 to lr over this many steps."),
        option("decay", T::Choice)
            .value("cosine")
            .choices({"cosine", "constant"})
            .doc("After warm-up: cosine decay to min_lr_ratio * lr at the last step, or constant."),
        option("min_lr_ratio", T::Number).value("0.0").doc("Final learning rate as a fraction of lr (cosine).")}},
      {"data",
       {option("name", T::String)
            .doc("Data set plugin (`wanfw plugins` lists them): latent_shards when `path` is set, else synthetic. The "
                 "plugin's own options (path, num_samples, ...) go in this section too."),
        option("batch_size", T::Integer).value("8").doc("Samples per micro-batch on each device."),
        option("bucket_batch_size", T::StringList)
            .value("[]")
            .doc("Per-bucket batch sizes as \"FxHxW=N\" (latent frames x height x width), e.g. [\"21x60x104=1\", "
                 "\"1x60x104=8\"]; other buckets use batch_size."),
        option("shuffle", T::Boolean)
            .value("true")
            .doc("Reshuffle every epoch, within and across buckets (seeded by run.seed and epoch)."),
        option("drop_last", T::Boolean)
            .value("true")
            .doc("A bucket's samples that do not fill one optimizer step are skipped for the epoch (a different tail "
                 "each epoch); false completes that step with repeated samples. Printed at start either way."),
        option("caption_dropout", T::Number)
            .value("0.0")
            .doc("Probability that a sample trains on the empty prompt's embedding instead of its caption "
                 "(classifier-free guidance), decided by the sample's own random stream."),
        option("on_bad_sample", T::Choice)
            .value("error")
            .choices({"error", "skip"})
            .doc("A sample that cannot be read or does not fit the model (corrupt shard, wrong shape, NaN): stop with "
                 "an error naming it, or skip it (each skip logged, the count in the summary)."),
        option("sample_log", T::Boolean)
            .value("false")
            .doc("Write the sample ids of every micro-batch to <run>/samples/rank_<R>.csv (step, micro-batch, epoch, "
                 "bucket, ids)."),
        option("workers", T::Integer).value("2").doc(fmt::format("Loader threads (at most {}); 0 loads on the training thread.", kMaxWorkers)),
        option("prefetch", T::Integer).value("2").doc(fmt::format("Batches each worker prepares ahead (1 to {}).", kMaxPrefetch))}},
      {"validation",
       {option("every", T::Integer)
            .value("0")
            .doc("Score the held-out set every N optimizer steps and at the last step; 0 disables. Logged as "
                 "val/<metric>."),
        option("num_samples", T::Integer)
            .value("16")
            .doc(fmt::format("Held-out samples scored at each validation (at most {}): the synthetic set draws them apart "
                             "from the training set; a folder data set takes them from its validation_path.", kMaxSamples)),
        option("batch_size", T::Integer).value("0").doc("Samples per validation batch; 0 uses data.batch_size."),
        option("preview", T::Boolean)
            .value("true")
            .doc("At each validation, also show what the model generates: with a decoder (the Wan models: "
                 "model.vae) each preview sample as a video (an animated GIF and a strip of frames to the "
                 "loggers, <run>/previews/step-NNNNNNNN/sample-N.mp4), else the model's preview images (the Wan "
                 "models: latent channels 0-2 in false colour)."),
        option("preview_samples", T::Integer)
            .value("1")
            .doc("Samples previewed at each validation, 1 to 16: the first held-out samples (their text and shape), "
                 "or the first prompts of preview_prompts."),
        option("preview_prompts", T::String)
            .value("\"\"")
            .doc("A data set folder of prompts (tools/encode_dataset.py --prompts: text embeddings alone) whose first "
                 "preview_samples prompts are previewed instead of held-out samples, as prompt-N; the video's shape "
                 "comes from the model (the Wan models: model.sample_size). The data set plugin latent_shards reads it; "
                 "relative paths are taken from where wanfw runs."),
        option("at_start", T::Boolean)
            .value("false")
            .doc("Also validate and preview before a new run's first step (logged at step 0): the scores and previews of "
                 "the weights training starts from, what the later ones are measured against. A resumed run does not "
                 "repeat it.")}},
      {"precision",
       {option("mode", T::Choice)
            .value("fp32")
            .choices({"fp32", "bf16", "bf16_weights", "fp16"})
            .doc("fp32; bf16 autocast over float32 weights; bf16_weights: autocast over bf16 trainable weights (no "
                 "cast per use, bf16 gradients reduced in bf16) with fp32 master weights and AdamW state in the "
                 "optimizer, which checkpoints keep; fp16 autocast with dynamic loss scaling (steps whose "
                 "gradients overflow are skipped and the scale backs off; its state is checkpointed)."),
        option("init_scale", T::Number).value("65536").doc("fp16: the first loss scale."),
        option("growth_factor", T::Number).value("2.0").doc("fp16: scale multiplier after growth_interval clean steps."),
        option("backoff_factor", T::Number).value("0.5").doc("fp16: scale multiplier after an overflow."),
        option("growth_interval", T::Integer).value("2000").doc("fp16: clean steps before the scale grows.")}},
      {"checkpoint",
       {option("every", T::Integer).value("0").doc("Write a checkpoint every N steps; 0 only at the end."),
        option("keep_last", T::Integer).value("3").doc("Keep the newest K checkpoints; 0 keeps all.")}},
      {"block_swap",
       {option("blocks", T::Integer)
            .value("0")
            .doc("Units (the model's blocks) whose frozen weights live in host memory and stream to the device "
                 "ahead of use, in forward and backward, spread evenly between the resident ones; 0: none. At most "
                 "the block count minus one. Needs the model's gradient checkpointing (docs/low-memory.md)."),
        option("ring", T::Integer)
            .value("2")
            .doc("Device slots the streamed blocks take turns in: the device holds the resident blocks and this "
                 "many streamed ones; 2 lets a copy run while the block before it computes. At most blocks: a "
                 "larger ring shrinks to it (with a warning when the config wrote it)."),
        option("host_memory", T::Choice)
            .value("auto")
            .choices({"auto", "pinned", "pageable"})
            .doc("Where the streamed weights wait on a GPU run: pinned host memory, one allocation (auto falls back "
                 "to pageable memory, said in the log, where pinning fails: WSL and Windows cap it); pageable "
                 "copies through the driver's staging, slower.")}},
  };
  return schemas;
}

std::vector<std::string> core_option_names(const std::string& section) {
  std::vector<std::string> names;
  for (const auto& [name, schema] : core_schemas())
    if (name == section)
      for (const auto& spec : schema) names.push_back(spec.name);
  return names;
}

}  // namespace wanfw
