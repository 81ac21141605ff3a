#include "config/config.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {
const OptionSchema kTrainerSchema = {
    option("max_steps", OptionType::Integer).value("0").doc("steps"),
    option("log_every", OptionType::Integer).value("10").doc("log"),
    option("grad_clip", OptionType::Number).value("1.0").doc("clip"),
    option("progress", OptionType::Choice).value("auto").choices({"auto", "bar", "lines", "off"}).doc("display"),
    option("betas", OptionType::NumberList).value("[0.9, 0.999]").doc("betas"),
};

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("an unknown key is rejected with file:line:column and the closest valid key") {
  const Config config = Config::parse("trainer:\n  max_step: 5\n", "exp.yaml");
  const std::string message = error_of([&] { config.section("trainer", kTrainerSchema); });
  CHECK(message.find("exp.yaml:2:3") != std::string::npos);
  CHECK(message.find("unknown key 'max_step'") != std::string::npos);
  CHECK(message.find("did you mean 'max_steps'?") != std::string::npos);
}

TEST_CASE("an unknown top-level section is rejected with a suggestion") {
  const Config config = Config::parse("trainr:\n  max_steps: 5\n", "exp.yaml");
  const std::string message = error_of([&] { config.check_top_level_keys({"trainer", "model"}); });
  CHECK(message.find("exp.yaml:1:1") != std::string::npos);
  CHECK(message.find("did you mean 'trainer'?") != std::string::npos);
}

TEST_CASE("defaults fill options the file leaves out") {
  const Config config = Config::parse("trainer:\n  max_steps: 5\n", "exp.yaml");
  const Options o = config.section("trainer", kTrainerSchema);
  CHECK(o.integer("max_steps") == 5);
  CHECK(o.integer("log_every") == 10);
  CHECK(o.numbers("betas") == std::vector<double>{0.9, 0.999});
}

TEST_CASE("a value of the wrong type is reported at its position") {
  const Config config = Config::parse("trainer:\n  log_every: often\n", "exp.yaml");
  const std::string message = error_of([&] { config.section("trainer", kTrainerSchema); });
  CHECK(message.find("exp.yaml:2:14") != std::string::npos);
  CHECK(message.find("expected an integer") != std::string::npos);
}

TEST_CASE("a choice outside its set is rejected with the closest choice") {
  const Config config = Config::parse("trainer:\n  progress: lnes\n", "exp.yaml");
  const std::string message = error_of([&] { config.section("trainer", kTrainerSchema); });
  CHECK(message.find("did you mean 'lines'?") != std::string::npos);
}

TEST_CASE("--set overrides a nested value, creating sections as needed") {
  const Config config = Config::parse("trainer:\n  max_steps: 5\n", "exp.yaml",
                                      {"trainer.max_steps=7", "trainer.grad_clip=0.5"});
  const Options o = config.section("trainer", kTrainerSchema);
  CHECK(o.integer("max_steps") == 7);
  CHECK(o.number("grad_clip") == doctest::Approx(0.5));
  CHECK(o.where("max_steps").file == "--set trainer.max_steps=7");
}

TEST_CASE("a bad --set value is reported against the override, not the file") {
  const Config config = Config::parse("trainer: {}\n", "exp.yaml", {"trainer.log_every=never"});
  const std::string message = error_of([&] { config.section("trainer", kTrainerSchema); });
  CHECK(message.find("--set trainer.log_every=never") != std::string::npos);
}

TEST_CASE("an override without '=' is a usage error") {
  const std::string message = error_of([] { Config::parse("{}", "exp.yaml", {"trainer.max_steps"}); });
  CHECK(message.find("key.path=value") != std::string::npos);
}

TEST_CASE("a YAML syntax error names the line") {
  const std::string message = error_of([] { Config::parse("trainer:\n  max_steps: [1, 2\n", "exp.yaml"); });
  CHECK(message.find("exp.yaml:") != std::string::npos);
  CHECK(message.find("YAML syntax error") != std::string::npos);
}

TEST_CASE("a missing required option is named") {
  const OptionSchema schema = {option("path", OptionType::String).required().doc("weights")};
  const Config config = Config::parse("model:\n  name: m\n", "exp.yaml");
  const std::string message = error_of([&] { config.section("model", schema, {"name"}); });
  CHECK(message.find("needs the option 'path'") != std::string::npos);
}

TEST_CASE("the resolved config shows defaults next to the values given") {
  Config config = Config::parse("trainer:\n  max_steps: 5\nmodel:\n  name: m\n", "exp.yaml");
  config.record_resolved(config.section("trainer", kTrainerSchema));
  const std::string yaml = config.resolved_yaml();
  CHECK(yaml.find("max_steps: 5") != std::string::npos);
  CHECK(yaml.find("log_every: 10") != std::string::npos);
  CHECK(yaml.find("name: m") != std::string::npos);
}

TEST_CASE("closest_match ignores candidates that are far away") {
  CHECK(closest_match("lr", {"learning_rate", "epochs"}).empty());
  CHECK(closest_match("epoch", {"learning_rate", "epochs"}) == "epochs");
}

namespace {
const OptionSchema kAdapterSchema = {
    option("name", OptionType::String).doc("plugin"),
    option("lora.rank", OptionType::Integer).value("0").doc("rank"),
    option("lora.alpha", OptionType::Number).value("0").doc("alpha"),
    option("lora.load", OptionType::EntryList)
        .value("[]")
        .entries({option("file", OptionType::String).required().doc("file"),
                  option("scale", OptionType::Number).value("1.0").doc("scale"),
                  option("train", OptionType::Boolean).value("false").doc("train")})
        .doc("adapters"),
};
}  // namespace

TEST_CASE("a dotted option is written as a nested mapping and overridden by its dotted path") {
  const Config config = Config::parse("model:\n  name: m\n  lora:\n    rank: 8\n", "exp.yaml", {"model.lora.alpha=16"});
  const Options o = config.section("model", kAdapterSchema, {"name"});
  CHECK(o.integer("lora.rank") == 8);
  CHECK(o.number("lora.alpha") == doctest::Approx(16.0));
  CHECK(o.where("lora.rank").line == 4);
}

TEST_CASE("an unknown key inside a nested mapping is rejected at its position with the closest option") {
  const Config config = Config::parse("model:\n  name: m\n  lora:\n    rnak: 8\n", "exp.yaml");
  const std::string message = error_of([&] { config.section("model", kAdapterSchema, {"name"}); });
  CHECK(message.find("exp.yaml:4:5") != std::string::npos);
  CHECK(message.find("unknown key 'lora.rnak'") != std::string::npos);
  CHECK(message.find("did you mean 'lora.rank'?") != std::string::npos);
}

TEST_CASE("a nested mapping given a plain value says it must be a mapping") {
  const Config config = Config::parse("model:\n  name: m\n  lora: 8\n", "exp.yaml");
  const std::string message = error_of([&] { config.section("model", kAdapterSchema, {"name"}); });
  CHECK(message.find("exp.yaml:3") != std::string::npos);
  CHECK(message.find("'model.lora' must be a mapping of options") != std::string::npos);
}

TEST_CASE("an entry list gives one set of options per entry, defaults filled") {
  const Config config = Config::parse(
      "model:\n  name: m\n  lora:\n    load:\n      - {file: a.safetensors, scale: 0.5}\n      - file: b.safetensors\n"
      "        train: true\n",
      "exp.yaml");
  const std::vector<Options> entries = config.section("model", kAdapterSchema, {"name"}).entries("lora.load");
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].string("file") == "a.safetensors");
  CHECK(entries[0].number("scale") == doctest::Approx(0.5));
  CHECK_FALSE(entries[0].boolean("train"));
  CHECK(entries[1].number("scale") == doctest::Approx(1.0));
  CHECK(entries[1].boolean("train"));
  CHECK(entries[1].where("train").line == 7);
}

TEST_CASE("an entry's bad value is named by its index and position") {
  const Config config = Config::parse(
      "model:\n  name: m\n  lora:\n    load:\n      - {file: a.safetensors}\n      - {file: b.safetensors, scale: big}\n",
      "exp.yaml");
  const std::string message = error_of([&] { config.section("model", kAdapterSchema, {"name"}).entries("lora.load"); });
  CHECK(message.find("model.lora.load[1].scale") != std::string::npos);
  CHECK(message.find("exp.yaml:6:") != std::string::npos);
  CHECK(message.find("expected a number") != std::string::npos);
}

TEST_CASE("an entry without a required option, a list of plain values, or no list is refused") {
  const Config missing = Config::parse("model:\n  name: m\n  lora:\n    load:\n      - {scale: 2}\n", "exp.yaml");
  CHECK(error_of([&] { missing.section("model", kAdapterSchema, {"name"}).entries("lora.load"); })
            .find("needs the option 'file'") != std::string::npos);
  const Config plain = Config::parse("model:\n  name: m\n  lora:\n    load: [a.safetensors]\n", "exp.yaml");
  CHECK(error_of([&] { plain.section("model", kAdapterSchema, {"name"}).entries("lora.load"); })
            .find("'model.lora.load[0]' must be a mapping of options") != std::string::npos);
  const Config scalar = Config::parse("model:\n  name: m\n  lora:\n    load: a.safetensors\n", "exp.yaml");
  CHECK(error_of([&] { scalar.section("model", kAdapterSchema, {"name"}).entries("lora.load"); })
            .find("expected a list of mappings") != std::string::npos);
}
