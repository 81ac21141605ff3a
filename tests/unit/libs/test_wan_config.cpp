#include <torch/torch.h>

#include "wan/fp8_weight.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_dit.hpp"
#include "wanfw/error.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {
std::map<std::string, std::vector<std::int64_t>> module_shapes(const wan::WanConfig& config) {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& p : wan::WanDiT(config)->named_parameters(true)) shapes[p.key()] = p.value().sizes().vec();
  return shapes;
}
std::map<std::string, std::vector<std::int64_t>> described_shapes(const wan::WanConfig& config) {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const wan::ParameterSpec& p : config.parameters()) shapes[p.name] = p.shape;
  return shapes;
}
}  // namespace

TEST_CASE("the parameter shapes worked out without allocating are the module's own") {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.in_dim = 12;  // an I2V-like layout
  CHECK(described_shapes(config) == module_shapes(config));
}

TEST_CASE("the 5B preset has 4,999,787,712 parameters") {
  CHECK(wan::wan_preset("wan2.2-ti2v-5b").parameter_count() == 4'999'787'712LL);
}

TEST_CASE("a hidden size that does not divide over the heads is refused") {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.num_heads = 5;
  CHECK_THROWS_WITH_AS(config.validate(), doctest::Contains("not divisible by num_heads 5"), wanfw::Error);
}

TEST_CASE("a head dim too small to split for 3-D RoPE is refused") {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.dim = 8;
  config.num_heads = 2;  // head dim 4: no height/width part
  CHECK_THROWS_WITH_AS(config.validate(), doctest::Contains("cannot be split for 3-D RoPE"), wanfw::Error);
}

TEST_CASE("an unknown preset names the presets there are") {
  CHECK_THROWS_WITH_AS(wan::wan_preset("wan3"), doctest::Contains("unknown Wan preset 'wan3'"), wanfw::Error);
}

TEST_CASE("a VACE model's parameter shapes worked out without allocating are the module's own") {
  const wan::WanConfig config = wan::wan_preset("tiny-vace");
  CHECK(config.vace_layers == std::vector<std::int64_t>{0, 2});
  CHECK(config.vace_in_dim == 72);  // 4 + 4 latent channels and the 64 mask channels
  CHECK(described_shapes(config) == module_shapes(config));
}

TEST_CASE("the VACE presets add the official branches: 734,975,232 parameters to 1.3B, 3,049,101,312 to 14B") {
  const auto branch = [](const std::string& preset) {
    wan::WanConfig vace = wan::wan_preset(preset), base = vace;
    base.vace_layers.clear();
    return vace.parameter_count() - base.parameter_count();
  };
  CHECK(wan::wan_preset("wan2.1-vace-1.3b").vace_layers.size() == 15);
  CHECK(branch("wan2.1-vace-1.3b") == 734'975'232LL);
  CHECK(branch("wan2.1-vace-14b") == 3'049'101'312LL);
  CHECK(wan::wan_preset("wan2.2-vace-fun-a14b").vace_layers == wan::wan_preset("wan2.1-vace-14b").vace_layers);
  CHECK(wan::wan_preset("wan2.2-vace-fun-a14b").expert_boundary == 875);
}

TEST_CASE("VACE layers that skip block 0, repeat, or pass the last block are refused") {
  wan::WanConfig config = wan::wan_preset("tiny-vace");
  config.vace_layers = {1, 3};
  CHECK_THROWS_WITH_AS(config.validate(), doctest::Contains("does not start at block 0"), wanfw::Error);
  config.vace_layers = {0, 2, 2};
  CHECK_THROWS_WITH_AS(config.validate(), doctest::Contains("not strictly ascending"), wanfw::Error);
  config.vace_layers = {0, 4};
  CHECK_THROWS_WITH_AS(config.validate(), doctest::Contains("names block 4, but the model has 4 blocks"), wanfw::Error);
}

TEST_CASE("the network stores in fp8 exactly the parameters its description marks, at the described bytes") {
  wan::WanConfig config = wan::wan_preset("tiny-vace");
  config.dim = 128;  // 64 divides the inputs: block-64 scales beside the head's per-row ones
  config.ffn_dim = 192;
  config.num_heads = 4;
  for (const bool fp8 : {false, true})
    for (const bool trained_vace : {false, true}) {
      CAPTURE(fp8);
      CAPTURE(trained_vace);
      const wan::WanPlacement placement{torch::kCPU, torch::kBFloat16, fp8, trained_vace};
      const wan::BaseStorage storage = placement.storage();
      wan::WanDiT dit(config, placement);
      std::map<std::string, torch::Tensor> built;
      for (const auto& p : dit->named_parameters(true)) built[p.key()] = p.value();
      double described = 0, quantized = 0;
      for (const wan::ParameterSpec& p : config.parameters()) {
        CAPTURE(p.name);
        const bool in_fp8 = storage.fp8_parameter(p);
        REQUIRE(built.count(p.name) == 1);
        CHECK((built.at(p.name).scalar_type() == at::kFloat8_e4m3fn) == in_fp8);
        CHECK(built.erase(p.name + "_scale") == (in_fp8 ? 1u : 0u));  // "...q.weight_scale"
        built.erase(p.name);
        described += in_fp8 ? wan::fp8_stored_bytes(p.shape) : 2.0 * static_cast<double>(p.numel());
        quantized += in_fp8 ? 1 : 0;
      }
      CHECK(built.empty());  // nothing the description misses
      CHECK((quantized > 0) == fp8);
      double bytes = 0;
      for (const auto& p : dit->parameters()) bytes += static_cast<double>(p.nbytes());
      CHECK(described == bytes);
    }
}
