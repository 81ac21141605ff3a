#include <torch/torch.h>

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
}  // namespace

TEST_CASE("the parameter shapes worked out without allocating are the module's own") {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.in_dim = 12;  // an I2V-like layout
  const auto analytic = config.parameter_shapes();
  CHECK(std::map<std::string, std::vector<std::int64_t>>(analytic.begin(), analytic.end()) == module_shapes(config));
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
  const auto analytic = config.parameter_shapes();
  CHECK(std::map<std::string, std::vector<std::int64_t>>(analytic.begin(), analytic.end()) == module_shapes(config));
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
