#include "wanfw/options.hpp"

#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "config/options_impl.hpp"

namespace wanfw {

const char* option_type_name(OptionType type) {
  switch (type) {
    case OptionType::Integer: return "integer";
    case OptionType::Number: return "number";
    case OptionType::Boolean: return "boolean";
    case OptionType::String: return "string";
    case OptionType::Choice: return "choice";
    case OptionType::IntegerList: return "list of integers";
    case OptionType::NumberList: return "list of numbers";
    case OptionType::StringList: return "list of strings";
    case OptionType::EntryList: return "list of mappings";
  }
  return "unknown";
}

OptionBuilder::OptionBuilder(std::string name, OptionType type) {
  spec_.name = std::move(name);
  spec_.type = type;
}
OptionBuilder& OptionBuilder::value(std::string default_yaml) {
  spec_.default_yaml = std::move(default_yaml);
  return *this;
}
OptionBuilder& OptionBuilder::doc(std::string text) {
  spec_.doc = std::move(text);
  return *this;
}
OptionBuilder& OptionBuilder::choices(std::vector<std::string> allowed) {
  spec_.choices = std::move(allowed);
  return *this;
}
OptionBuilder& OptionBuilder::required() {
  spec_.required = true;
  return *this;
}
OptionBuilder& OptionBuilder::entries(std::vector<OptionSpec> schema) {
  spec_.entries = std::move(schema);
  return *this;
}

SourceLocation location_of(const YAML::Node& node, const std::string& source) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return {source, 0, 0};
  return {source, mark.line + 1, mark.column + 1};
}

Options::Options() : impl_(std::make_shared<Impl>()) {}
Options::~Options() = default;
Options::Options(const Options&) = default;
Options& Options::operator=(const Options&) = default;
Options::Options(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

const std::string& Options::section() const { return impl_->section; }

bool Options::has(std::string_view name) const { return impl_->values.count(name) != 0; }

bool Options::given(std::string_view name) const { return impl_->locations.count(name) != 0; }

SourceLocation Options::where(std::string_view name) const {
  auto it = impl_->locations.find(name);
  return it == impl_->locations.end() ? impl_->section_location : it->second;
}

void Options::fail(std::string_view name, const std::string& problem, const std::string& hint) const {
  throw ConfigError(where(name), fmt::format("{}.{}: {}", impl_->section, name, problem), hint);
}

namespace {

const YAML::Node& value_of(const Options& options, const Options::Impl& impl, std::string_view name) {
  auto it = impl.values.find(name);
  if (it == impl.values.end())
    throw Error(fmt::format("internal: option '{}.{}' was read but is neither set nor declared with a default",
                            impl.section, name),
                "declare the option with a default, or check `has()` before reading it");
  return it->second;
}

template <typename T>
T scalar_as(const Options& options, const YAML::Node& node, std::string_view name, const char* what) {
  T value;
  try {
    value = node.as<T>();
  } catch (const YAML::Exception&) {
    options.fail(name, fmt::format("expected {}, got '{}'", what, shortened(YAML::Dump(node))));
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value))
      options.fail(name, fmt::format("expected a finite number, got '{}'", shortened(YAML::Dump(node))));
  }
  if constexpr (std::is_same_v<T, std::string>) {  // paths and names end at a NUL byte
    if (value.find('\0') != std::string::npos) options.fail(name, "contains a NUL byte");
  }
  return value;
}

template <typename T>
std::vector<T> list_as(const Options& options, const YAML::Node& node, std::string_view name, const char* what) {
  if (!node.IsSequence()) options.fail(name, fmt::format("expected a list of {}", what));
  std::vector<T> out;
  for (const auto& item : node) out.push_back(scalar_as<T>(options, item, name, what));
  return out;
}

}  // namespace

std::int64_t Options::integer(std::string_view name) const {
  return scalar_as<std::int64_t>(*this, value_of(*this, *impl_, name), name, "an integer");
}
double Options::number(std::string_view name) const {
  return scalar_as<double>(*this, value_of(*this, *impl_, name), name, "a number");
}
bool Options::boolean(std::string_view name) const {
  return scalar_as<bool>(*this, value_of(*this, *impl_, name), name, "true or false");
}
at::ScalarType dtype_named(std::string_view name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float64") return at::kDouble;
  throw Error(fmt::format("'{}' names no dtype", name), "float32, bfloat16, float16 or float64");
}

at::ScalarType Options::dtype(std::string_view name) const {
  const std::string text = string(name);
  try {
    return dtype_named(text);
  } catch (const Error& e) {
    fail(name, e.what(), "float32, bfloat16, float16 or float64");
  }
}

std::string Options::string(std::string_view name) const {
  return scalar_as<std::string>(*this, value_of(*this, *impl_, name), name, "a string");
}
std::vector<std::int64_t> Options::integers(std::string_view name) const {
  return list_as<std::int64_t>(*this, value_of(*this, *impl_, name), name, "integers");
}
std::vector<double> Options::numbers(std::string_view name) const {
  return list_as<double>(*this, value_of(*this, *impl_, name), name, "numbers");
}
std::vector<std::string> Options::strings(std::string_view name) const {
  return list_as<std::string>(*this, value_of(*this, *impl_, name), name, "strings");
}
std::vector<Options> Options::entries(std::string_view name) const {
  (void)value_of(*this, *impl_, name);  // declared and set
  auto it = impl_->entry_lists.find(name);
  return it == impl_->entry_lists.end() ? std::vector<Options>() : it->second;
}

}  // namespace wanfw
