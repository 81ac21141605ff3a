// The checks every reader of a checkpoint's optimizer rows makes (wanfw/parallel/state_pieces.hpp): a
// moment or an average has its parameter's shape, a step count is one integer.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"
#include "wanfw/parallel/state_pieces.hpp"

namespace wanfw {

void require_shape(const TensorRowSource& source, const std::string& name, const std::vector<std::int64_t>& expected) {
  const std::vector<std::int64_t> shape = source.shape(name);
  if (shape != expected)
    throw FileError(fmt::format("{}: tensor '{}' has shape [{}]; the model's parameter is [{}]",
                                source.path().string(), name, fmt::join(shape, ", "), fmt::join(expected, ", ")),
                    "the checkpoint belongs to a model of another configuration: resume or evaluate it with the "
                    "config that wrote it");
}

std::int64_t read_step_count(const TensorRowSource& source, const std::string& name) {
  const std::vector<std::int64_t> shape = source.shape(name);
  if (!shape.empty() && !(shape.size() == 1 && shape[0] == 1))
    throw FileError(fmt::format("{}: optimizer state '{}' has shape [{}], not one integer", source.path().string(),
                                name, fmt::join(shape, ", ")),
                    "the checkpoint is damaged; resume from an earlier one");
  return source.rows(name, 0, 1, TensorRole::step_count()).item<std::int64_t>();
}

}  // namespace wanfw
