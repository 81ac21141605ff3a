// The `synthetic` data set: deterministic random samples with exactly the fields the model
// declares, in the buckets the options name. For quick starts, tests and benchmarks; its
// validation set is drawn apart from the training set.

#include <fmt/format.h>

#include "synthetic/synthetic_dataset.hpp"
#include "wanfw/error.hpp"
#include "wanfw/plugin.hpp"

namespace {

constexpr std::int64_t kMaxSamples = 100'000'000;  // an epoch's order is held in memory

/// The `buckets` option's shapes, each parsed (a bad one refused at the key).
std::vector<wanfw::Bucket> buckets_of(const wanfw::Options& options) {
  std::vector<wanfw::Bucket> buckets;
  for (const auto& text : options.strings("buckets")) {
    try {
      buckets.push_back(wanfw::Bucket::parse(text));
    } catch (const wanfw::Error& e) {
      options.fail("buckets", e.what());
    }
  }
  if (buckets.empty()) options.fail("buckets", "needs at least one bucket", "for example [\"3x8x8\"]");
  return buckets;
}

std::unique_ptr<wanfw::Dataset> make(const wanfw::Options& options, const wanfw::PluginContext& context) {
  wanfw::SyntheticDataset::Options o;
  o.size = options.integer("num_samples");
  if (o.size < 1 || o.size > kMaxSamples)
    options.fail("num_samples", fmt::format("must lie in [1, {}], got {}", kMaxSamples, o.size),
                 "an epoch's shuffled order is held in memory, 8 bytes a sample");
  o.seed = context.seed;
  o.buckets = buckets_of(options);
  o.tokens = options.integer("text_tokens");
  if (o.tokens < 0 || o.tokens > 1'000'000) options.fail("text_tokens", "must lie in [0, 1000000]");
  for (const auto& field : context.fields)
    if (o.tokens > field.max_tokens && field.max_tokens > 0 &&
        std::find(field.shape.begin(), field.shape.end(), wanfw::dim::tokens) != field.shape.end())
      options.fail("text_tokens", fmt::format("{} is more than the model's field '{}' takes ({} tokens)", o.tokens,
                                              field.name, field.max_tokens));
  o.patterns = options.string("content") == "patterns";
  o.captions = options.integer("captions");
  if (o.captions < 1 || o.captions > wanfw::SyntheticDataset::kPatterns)
    options.fail("captions", fmt::format("must lie in [1, {}]", wanfw::SyntheticDataset::kPatterns));
  return std::make_unique<wanfw::SyntheticDataset>(context.fields, o);
}

wanfw::PluginDescriptor describe() {
  using T = wanfw::OptionType;
  auto d = wanfw::PluginDescriptor::for_dataset(
      "synthetic", "1.0.0", "Deterministic random samples with the fields the model declares, in the buckets named.");
  d.options = {
      wanfw::option("num_samples", T::Integer).value("1024").doc(fmt::format("Samples per epoch (at most {}).", kMaxSamples)),
      wanfw::option("buckets", T::StringList)
          .value("[\"3x8x8\"]")
          .doc("Latent frames x height x width of each bucket; sample i is in bucket i mod the count."),
      wanfw::option("text_tokens", T::Integer)
          .value("0")
          .doc("Tokens of each text embedding; 0 uses the model's text length."),
      wanfw::option("content", T::Choice)
          .value("noise")
          .choices({"noise", "patterns"})
          .doc("noise: every field standard normal; patterns: latents are one of 8 smooth patterns plus noise, "
               "each with its own caption embedding, so a model can learn them (the loss falls further)."),
      wanfw::option("captions", T::Integer)
          .value("8")
          .doc("patterns: distinct captions; pattern p carries caption p mod captions (fewer than 8: a caption "
               "stands for several patterns, a multimodal distribution few-step samplers blur)."),
  };
  d.make_dataset = make;
  d.data_buckets = buckets_of;
  return d;
}

}  // namespace

WANFW_PLUGIN(Dataset, describe)
