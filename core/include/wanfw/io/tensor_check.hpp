#pragma once
// The one gate for tensors read from a user's file (weights, adapters, latents, side tensors,
// optimizer state, generator states): before a tensor is used, its dtype must be one its role
// allows, its shape the one the role needs, and its values finite where the role says so. A
// tensor that fails stops the run with a FileError naming the file, the tensor, what was wrong
// (the first bad element's index and value) and what to do.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

namespace wanfw {

/// What a tensor is for, and so what it may hold.
struct TensorRole {
  enum class Values { RealFloating, Integer, RealOrInteger, Bytes };
  std::string what;                      ///< for messages: "a weight", "an optimizer moment"
  Values values = Values::RealFloating;  ///< the dtypes it may have
  bool finite = true;                    ///< RealFloating: no NaN or infinity
  bool nonnegative = false;              ///< every value >= 0 (second moments, step counts)
  std::string hint;                      ///< what to do when it fails

  static TensorRole weight();           ///< model, teacher or student weights; adapter matrices
  static TensorRole data();             ///< latents, text embeddings, first frames, negative prompts
  static TensorRole first_moment();     ///< AdamW's exp_avg
  static TensorRole second_moment();    ///< AdamW's exp_avg_sq, max_exp_avg_sq: finite and >= 0
  static TensorRole step_count();       ///< an optimizer's step: one integer >= 0
  static TensorRole generator_state();  ///< a random generator's state: bytes
  static TensorRole input();            ///< `wanfw predict|sample --inputs`: real numbers, finite, or integers
};

/// Checks `tensor` (named `name` in `file`) against `role` and, when given, `shape`. Throws
/// FileError on the first failure. The value check reads the tensor's bytes once (vectorised, no
/// temporaries); only a failing tensor pays for locating its first bad element.
void check_tensor(const at::Tensor& tensor, const TensorRole& role, const std::filesystem::path& file,
                  std::string_view name, std::optional<std::vector<std::int64_t>> shape = std::nullopt);

/// Copies `source` (named `name` in `file`) into `destination` (same shape; any device and
/// dtype) after the checks of check_tensor, reading the source's bytes once where it can: a
/// contiguous CPU destination is filled and checked for finite values in one pass.
void copy_checked(const at::Tensor& destination, const at::Tensor& source, const TensorRole& role,
                  const std::filesystem::path& file, std::string_view name);

/// A new contiguous CPU tensor holding `source` (named `name` in `file`) in `dtype` (default: its
/// own), made by copy_checked: the checks and the copy in one pass over the source's bytes.
at::Tensor read_checked(const at::Tensor& source, const TensorRole& role, const std::filesystem::path& file,
                        std::string_view name, std::optional<at::ScalarType> dtype = std::nullopt);

}  // namespace wanfw
