#pragma once
// Internal: what `wanfw decode` reads and writes, checked before anything is decoded: the latents
// a user gives against what the decoder takes, and the place the video goes.

#include <filesystem>

#include <ATen/core/Tensor.h>

#include "wanfw/decoder.hpp"
#include "wanfw/io/safetensors.hpp"

namespace wanfw {

/// The tensor `latents` of `file` (opened from `path`), refused unless it is what `layout`
/// decodes: [B, C, T, h, w] with C the decoder's channels and every size at least 1, a video of
/// at most the machine's memory, real floating-point and finite (the tensor gate). Throws
/// FileError naming the file, the tensor, its shape and the shape expected.
at::Tensor read_latents(const SafetensorsFile& file, const std::filesystem::path& path, const LatentLayout& layout);

/// Refuses an output that cannot be written, before decoding: `out` ending in .safetensors is a
/// file whose folder can be made and written to (and not a folder itself); any other `out`, a
/// folder of mp4 files, is made here and must be writable. Throws FileError naming `out`.
void prepare_decode_output(const std::filesystem::path& out);

}  // namespace wanfw
