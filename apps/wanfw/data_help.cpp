// `wanfw data --help`: the data set folder commands (data_commands.cpp) and what each does.
#include "commands.hpp"

namespace wanfw::cli {

const char* const kDataHelp = R"(usage: wanfw data synth DIR [--samples N] [--buckets FxHxW,...] [--channels C] [--text-dim D]
                         [--max-tokens L] [--seed N] [--shard-mb M] [--image-condition] [--vace C]
       wanfw data inspect DIR [--batch-size B] [--world-size N] [--accumulation K] [--keep-last]
       wanfw data verify DIR
       wanfw data throughput DIR [--workers N] [--prefetch P] [--batch-size B] [--epochs E] [--for-gpu]

Data set folders hold latents and text embeddings encoded once: safetensors shards listed by
manifest.json (docs/data.md). tools/encode_dataset.py makes them from videos and captions.

  synth    writes a synthetic data set in the real format: latents [C, F, H, W] (bf16) that are
           one of 8 smooth patterns plus noise, each pattern with its own caption and text
           embedding (of its own length), in the buckets given, and the empty prompt's
           embedding. A model can learn it: the loss falls. Defaults fit the tiny Wan preset:
           64 samples, buckets 2x8x8,3x8x12, 4 channels, text 32 wide, at most 16 tokens.
           --image-condition: each sample also carries image_condition (the i2v models' field).
           --vace C: each sample also carries vace_context (the VACE models' field) of C channels,
           those `wanfw model-info` shows for the model (tiny-vace: 72), in the official control
           mode: no inactive part, its latents as the control video, the mask's channels all ones.
  inspect  prints samples, buckets, fields with shapes and dtypes, bytes, and the bucket plan
           for a batch size / world size / accumulation (default 1 / 1 / 1; --keep-last: as
           data.drop_last: false); exits 1 on a folder that holds no sample.
  verify   checks every shard (size, CRC-32, safetensors structure) and every sample (each
           tensor present with the manifest's shape, finite values, latents in their bucket);
           lists every problem and exits 1 if there is one.
  throughput
           reads the folder through the training loader (workers, prefetch, memory-mapped
           shards, checks and conversion to float32, text padding), as a run would, and prints
           samples/s and MB/s of shard data: is the data path fast enough for the GPUs?
           --for-gpu: as for a CUDA device: fields keep their stored dtype (converted on the
           GPU after the copy) and batches are pinned when CUDA is available.
)";

}  // namespace wanfw::cli
