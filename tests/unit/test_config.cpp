#include "config.hpp"
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
