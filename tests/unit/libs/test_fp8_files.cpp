// The community's fp8 checkpoints (wan/fp8_files.hpp): each layout read as it is stored, weight =
// values x scale, and a layout that is none of them refused naming the tensor.

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "temp_dir.hpp"
#include "wan/fp8_files.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;

const std::string kWeight = "blocks.0.self_attn.q.weight";

/// Values [8, 128] in e4m3, as a quantizer would have left them.
torch::Tensor fp8_values() {
  torch::manual_seed(4);
  return (torch::randn({8, 128}) * 100).clamp(-448, 448).to(at::kFloat8_e4m3fn);
}

/// JSON text as the uint8 tensor ComfyUI stores it.
torch::Tensor json_bytes(const std::string& text) {
  return torch::from_blob(const_cast<char*>(text.data()), {static_cast<std::int64_t>(text.size())}, torch::kUInt8)
      .clone();
}

/// Writes `tensors` and reads kWeight back.
std::optional<wan::Fp8Weight> read(const wanfw::testing::TempDir& dir, const Tensors& tensors) {
  wanfw::write_safetensors(dir / "model.safetensors", tensors);
  return wan::read_fp8_weight(wanfw::SafetensorsCheckpoint::open(dir / "model.safetensors"), kWeight);
}

/// The weight the layout means: values x scale, broadcast as `expanded` says.
void check_weight(const std::optional<wan::Fp8Weight>& read, const torch::Tensor& values, const torch::Tensor& expanded,
                  wan::Fp8Scaling scaling) {
  REQUIRE(read.has_value());
  CHECK((read->scaling == scaling));
  CHECK(torch::equal(read->values.view(torch::kUInt8), values.view(torch::kUInt8)));  // never re-quantized
  CHECK(torch::equal(wan::dequantize_fp8(*read, torch::kFloat32), values.to(torch::kFloat32) * expanded));
}

}  // namespace

TEST_CASE("ComfyUI's scaled fp8 and Kijai's files read as one scale per tensor") {
  wanfw::testing::TempDir dir;
  const torch::Tensor values = fp8_values();
  for (const auto& scale : {torch::tensor(0.0125f), torch::tensor({0.0125f})}) {  // [] and [1]
    CAPTURE(scale.dim());
    const auto weight = read(dir, {{"scaled_fp8", torch::zeros({2}, at::kFloat8_e4m3fn)},
                                   {kWeight, values},
                                   {"blocks.0.self_attn.q.scale_weight", scale},
                                   {"blocks.0.self_attn.q.scale_input", torch::tensor(1.0f)}});
    check_weight(weight, values, torch::full({8, 128}, 0.0125f), wan::Fp8Scaling::PerTensor);
  }
}

TEST_CASE("ComfyUI's comfy_quant files read their weight_scale, and a format other than fp8 is refused") {
  wanfw::testing::TempDir dir;
  const torch::Tensor values = fp8_values();
  const auto weight = read(dir, {{kWeight, values},
                                 {"blocks.0.self_attn.q.weight_scale", torch::tensor(0.5f)},
                                 {"blocks.0.self_attn.q.comfy_quant", json_bytes(R"({"format": "float8_e4m3fn"})")}});
  check_weight(weight, values, torch::full({8, 128}, 0.5f), wan::Fp8Scaling::PerTensor);
  CHECK_THROWS_WITH_AS(read(dir, {{kWeight, values},
                                  {"blocks.0.self_attn.q.weight_scale", torch::tensor(0.5f)},
                                  {"blocks.0.self_attn.q.comfy_quant", json_bytes(R"({"format": "nvfp4"})")}}),
                       doctest::Contains("tensor 'blocks.0.self_attn.q.comfy_quant' uses ComfyUI's quantization "
                                         "format 'nvfp4', which wanfw does not read"),
                       wanfw::FileError);
}

TEST_CASE("musubi-tuner's bf16 scales read by block of 64 inputs or by channel") {
  wanfw::testing::TempDir dir;
  const torch::Tensor values = fp8_values();
  torch::manual_seed(6);
  const torch::Tensor blocks = (torch::rand({8, 2, 1}) + 0.01).to(torch::kBFloat16);
  check_weight(read(dir, {{kWeight, values}, {"blocks.0.self_attn.q.scale_weight", blocks}}), values,
               blocks.to(torch::kFloat32).expand({8, 2, 64}).reshape({8, 128}), wan::Fp8Scaling::Block64);
  const torch::Tensor channels = (torch::rand({8, 1}) + 0.01).to(torch::kBFloat16);
  check_weight(read(dir, {{kWeight, values}, {"blocks.0.self_attn.q.scale_weight", channels}}), values,
               channels.to(torch::kFloat32).expand({8, 128}), wan::Fp8Scaling::PerChannel);
}

TEST_CASE("an unscaled fp8 weight reads with scale 1 and a bf16 weight is not an fp8 one") {
  wanfw::testing::TempDir dir;
  const torch::Tensor values = fp8_values();
  check_weight(read(dir, {{kWeight, values}}), values, torch::ones({8, 128}), wan::Fp8Scaling::PerTensor);
  CHECK_FALSE(read(dir, {{kWeight, values.to(torch::kBFloat16)}}).has_value());
}

TEST_CASE("an fp8 weight whose scale fits no layout is refused naming the tensor") {
  wanfw::testing::TempDir dir;
  const torch::Tensor values = fp8_values();
  CHECK_THROWS_WITH_AS(read(dir, {{kWeight, values}, {"blocks.0.self_attn.q.scale_weight", torch::ones({3, 5})}}),
                       doctest::Contains("tensor 'blocks.0.self_attn.q.scale_weight' has shape [3, 5], which scales "
                                         "weight [8, 128] by no layout wanfw knows"),
                       wanfw::FileError);
  CHECK_THROWS_WITH_AS(read(dir, {{kWeight, values}, {"blocks.0.self_attn.q.scale_weight", torch::tensor(-1.0f)}}),
                       doctest::Contains("holds a scale that is not a finite positive number"), wanfw::FileError);
}
