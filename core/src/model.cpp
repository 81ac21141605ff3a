#include "wanfw/model.hpp"

namespace wanfw {

std::vector<std::pair<std::string, at::Tensor>> Model::trainable_parameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : module()->named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace wanfw
