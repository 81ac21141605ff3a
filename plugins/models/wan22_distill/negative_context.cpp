#include "negative_context.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace wan_distill {

torch::Tensor negative_context(const wanfw::Options& o, const wan::WanConfig& teacher) {
  const std::string path = o.string("negative_context");
  if (path.empty()) return {};
  torch::Tensor negative;
  try {
    const wanfw::SafetensorsFile file = wanfw::SafetensorsFile::open(path);
    if (file.records().size() != 1)
      o.fail("negative_context", fmt::format("{} holds {} tensors; it should hold one, [L, {}]", path,
                                             file.records().size(), teacher.text_dim));
    const std::string& name = file.records().front().name;
    wanfw::TensorRole role = wanfw::TensorRole::data();
    role.what = "a negative prompt's text embedding";
    role.hint = "encode the negative prompt again with the teacher's text encoder";
    negative = wanfw::read_checked(file.tensor(name), role, path, name, torch::kFloat32);
  } catch (const wanfw::FileError& e) {
    o.fail("negative_context", e.what());
  }
  if (negative.dim() == 3 && negative.size(0) == 1) negative = negative[0];
  if (negative.dim() != 2 || negative.size(1) != teacher.text_dim || negative.size(0) > teacher.text_len)
    o.fail("negative_context", fmt::format("{} holds a tensor of shape {}; expected [L <= {}, {}]", path,
                                           c10::str(negative.sizes()), teacher.text_len, teacher.text_dim),
           "encode the negative prompt with the teacher's text encoder (UMT5), at its real length");
  return negative;
}

torch::Tensor batch_negative(const torch::Tensor& negative, const torch::Tensor& context) {
  if (!negative.defined()) return torch::zeros_like(context);
  return negative.to(context.device(), context.scalar_type()).unsqueeze(0).expand({context.size(0), -1, -1});
}

}  // namespace wan_distill
