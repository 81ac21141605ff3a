#pragma once
// Option schemas (what a section of the config may hold) and resolved option values.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <c10/core/ScalarType.h>

#include "wanfw/error.hpp"

namespace wanfw {

enum class OptionType {
  Integer, Number, Boolean, String, Choice, IntegerList, NumberList, StringList,
  EntryList,  ///< a list of mappings, each validated against OptionSpec::entries
};

/// "integer", "number", ... as written in docs and `wanfw plugins show`.
const char* option_type_name(OptionType type);

/// The floating-point dtype a config names: "float32", "bfloat16", "float16" or "float64" (the one
/// reading of those names); throws wanfw::Error for another.
at::ScalarType dtype_named(std::string_view name);

/// One option a plugin or a core section accepts. A dotted name ("lora.rank") is an option of a
/// nested mapping (`lora: {rank: 16}`); `--set model.lora.rank=16` reaches it the same way.
struct OptionSpec {
  std::string name;
  OptionType type = OptionType::String;
  /// The default as YAML text ("1e-4", "[0.9, 0.999]", "cosine"). Empty: the option is
  /// required when `required` is true, otherwise simply absent unless given.
  std::string default_yaml;
  std::string doc;
  std::vector<std::string> choices;  ///< allowed values of a Choice option
  bool required = false;
  std::vector<OptionSpec> entries;   ///< what each mapping of an EntryList option may hold
};

using OptionSchema = std::vector<OptionSpec>;

/// Chained construction of schemas: `option("lr", OptionType::Number).value("1e-4").doc("...")`.
class OptionBuilder {
 public:
  OptionBuilder(std::string name, OptionType type);
  OptionBuilder& value(std::string default_yaml);
  OptionBuilder& doc(std::string text);
  OptionBuilder& choices(std::vector<std::string> allowed);
  OptionBuilder& required();
  /// An EntryList option's entry schema.
  OptionBuilder& entries(std::vector<OptionSpec> schema);
  operator OptionSpec() const { return spec_; }  // NOLINT(google-explicit-constructor)

 private:
  OptionSpec spec_;
};
inline OptionBuilder option(std::string name, OptionType type) { return {std::move(name), type}; }

/// The validated options of one config section (defaults filled in). Every accessor knows
/// where its value came from, so a plugin that rejects a value can point at it.
class Options {
 public:
  Options();
  ~Options();
  Options(const Options&);
  Options& operator=(const Options&);

  /// The section's path in the config ("model", "loggers[1]").
  const std::string& section() const;
  bool has(std::string_view name) const;
  /// Whether the config (or a `--set`) wrote option `name`; false where its default stands.
  bool given(std::string_view name) const;

  std::int64_t integer(std::string_view name) const;
  double number(std::string_view name) const;
  bool boolean(std::string_view name) const;
  std::string string(std::string_view name) const;
  std::vector<std::int64_t> integers(std::string_view name) const;
  std::vector<double> numbers(std::string_view name) const;
  std::vector<std::string> strings(std::string_view name) const;
  /// An option naming a floating-point dtype (dtype_named), as that type; another name is refused
  /// at the option.
  at::ScalarType dtype(std::string_view name) const;
  /// An EntryList option: one Options per mapping of the list, validated against its entry schema
  /// and named by its place ("model.lora.load[1]"), so a plugin can point at a bad entry.
  std::vector<Options> entries(std::string_view name) const;

  /// Where the option's value was written (the section itself for a default).
  SourceLocation where(std::string_view name) const;
  /// Throws a ConfigError pointing at option `name`.
  [[noreturn]] void fail(std::string_view name, const std::string& problem,
                         const std::string& hint = "") const;

  struct Impl;
  explicit Options(std::shared_ptr<const Impl> impl);
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace wanfw
