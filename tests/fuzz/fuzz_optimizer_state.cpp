// Fuzz target: a checkpoint's optimizer.safetensors as a resume and `wanfw export --ema` read it:
// each trained parameter's AdamW moments, its step count and its average (the ema section's
// "<parameter>.ema", which expert and DMD runs write per network). The input is the file, in a
// folder of its own. Every read either fails with wanfw's FileError naming the file, or gives
// back a tensor of the parameter's shape and a step count of at least 0.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint/state_piece_files.hpp"
#include "fuzz_folder.hpp"
#include "fuzz_target.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/state_pieces.hpp"

namespace {

/// The model's trained parameters: a matrix, a vector and a scalar.
const std::vector<std::pair<std::string, std::vector<std::int64_t>>> kParameters = {
    {"blocks.0.ffn.0.weight", {3, 2}}, {"blocks.0.ffn.0.bias", {3}}, {"scale", {}}};

/// A parameter's state as Strategy::load_optimizer_state and the averages' readers take it.
void read_state(const wanfw::TensorRowSource& rows, const std::string& name, const std::vector<std::int64_t>& shape) {
  for (const auto& [suffix, role] : {std::pair{".exp_avg", wanfw::TensorRole::first_moment()},
                                     std::pair{".exp_avg_sq", wanfw::TensorRole::second_moment()},
                                     std::pair{".ema", wanfw::TensorRole::weight()}}) {
    if (!rows.contains(name + suffix)) continue;
    wanfw::require_shape(rows, name + suffix, shape);
    const at::Tensor read = rows.rows(name + suffix, 0, shape.empty() ? 1 : shape[0], role);
    std::int64_t elements = 1;
    for (const std::int64_t d : shape) elements *= d;
    if (read.numel() != elements) std::abort();  // the rows asked, all of them
  }
  if (rows.contains(name + ".step") && wanfw::read_step_count(rows, name + ".step") < 0) std::abort();
}

}  // namespace

WANFW_FUZZ_TARGET(optimizer_state) {
  static const FuzzFolder folder("wanfw-fuzz-optimizer");
  {
    std::ofstream out(folder.path / "optimizer.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto rows = wanfw::open_checkpoint_rows(folder.path, "optimizer");
    for (const auto& [name, shape] : kParameters) {
      try {
        read_state(*rows, name, shape);
      } catch (const wanfw::FileError& e) {  // each refusal names the file a user must look at
        if (std::string(e.what()).find("optimizer.safetensors") == std::string::npos) std::abort();
      }
    }
  } catch (const wanfw::FileError&) {  // not a safetensors file
  }
  return 0;
}
