// A data set the host has never heard of, whose shapes are an option of its own name (`shapes`,
// not `buckets`): the host must learn them through PluginDescriptor::data_buckets to plan the
// largest sample (model-info), never by reading a key. Its samples are the synthetic set's.

#include "synthetic/synthetic_dataset.hpp"
#include "wanfw/error.hpp"
#include "wanfw/plugin.hpp"

namespace {

std::vector<wanfw::Bucket> shapes_of(const wanfw::Options& options) {
  std::vector<wanfw::Bucket> shapes;
  for (const auto& text : options.strings("shapes")) {
    try {
      shapes.push_back(wanfw::Bucket::parse(text));
    } catch (const wanfw::Error& e) {
      options.fail("shapes", e.what());
    }
  }
  if (shapes.empty()) options.fail("shapes", "needs at least one shape");
  return shapes;
}

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_dataset("test_shaped_dataset", "0.1.0",
                                                "A test data set known to the host only by what it declares.");
  d.options = {wanfw::option("shapes", wanfw::OptionType::StringList)
                   .value("[\"2x4x4\"]")
                   .doc("Latent frames x height x width of each sample's bucket.")};
  d.data_buckets = shapes_of;
  d.make_dataset = [](const wanfw::Options& o, const wanfw::PluginContext& context) -> std::unique_ptr<wanfw::Dataset> {
    wanfw::SyntheticDataset::Options options;
    options.size = 16;
    options.seed = context.seed;
    options.buckets = shapes_of(o);
    return std::make_unique<wanfw::SyntheticDataset>(context.fields, options);
  };
  return d;
}

}  // namespace

WANFW_PLUGIN(Dataset, describe)
