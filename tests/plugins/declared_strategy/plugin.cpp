// A strategy the host has never heard of, built twice with other declarations: one that says it
// shards the training state, one that says it replicates the module. The host must treat each by
// what it declares (fsdp's and data_parallel's treatment), never by its name; the built strategy's
// shards_state() is the declaration, set by the host. It trains on the CPU as one device does: the
// tests ask only what the host decides before training. Its rank layout comes from an option of
// its own name (`sp_ranks`), which the host learns through strategy_layout alone.

#include <fmt/format.h>

#include "wanfw/plugin.hpp"

#ifndef DECLARED_NAME
#error "DECLARED_NAME, DECLARES_SHARDING and DECLARES_REPLICAS are set by tests/plugins/CMakeLists.txt"
#endif

namespace {

class DeclaredStrategy final : public wanfw::Strategy {
 public:
  std::string describe() const override { return fmt::format("{} on the CPU", DECLARED_NAME); }
  void setup(wanfw::Model& model) override { model.module()->to(c10::kCPU); }
  c10::Device device() const override { return c10::kCPU; }
};

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_strategy(DECLARED_NAME, "0.1.0",
                                                 "A test strategy known to the host only by its declarations.");
  d.capabilities.shards_state = DECLARES_SHARDING;
  d.capabilities.replicates_module = DECLARES_REPLICAS;
  // Its layout under an option name no built-in strategy uses: the host must ask, not read keys.
  d.options = {wanfw::option("sp_ranks", wanfw::OptionType::Integer)
                   .value("1")
                   .doc("Ranks that share each sample's tokens, as the host plans them (model-info).")};
  d.strategy_layout = [](const wanfw::Options& o) {
    if (o.integer("sp_ranks") < 1) o.fail("sp_ranks", "must be at least 1");
    wanfw::StrategyLayout layout;
    layout.sequence_parallel = static_cast<int>(o.integer("sp_ranks"));
    return layout;
  };
  d.make_strategy = [](const wanfw::Options&, const wanfw::PluginContext&) -> std::unique_ptr<wanfw::Strategy> {
    return std::make_unique<DeclaredStrategy>();
  };
  return d;
}

}  // namespace

WANFW_PLUGIN(Strategy, describe)
