#pragma once
// Internal: what an Options object holds.

#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

#include "wanfw/options.hpp"

namespace wanfw {

struct Options::Impl {
  std::string section;           ///< "model", "loggers[0]"
  std::string source;            ///< config file name, for locations
  SourceLocation section_location;
  OptionSchema schema;
  std::map<std::string, YAML::Node, std::less<>> values;  ///< validated values, defaults filled
  std::map<std::string, SourceLocation, std::less<>> locations;
  std::map<std::string, std::vector<Options>, std::less<>> entry_lists;  ///< EntryList options, validated
};

/// 1-based location of a YAML node from `source`.
SourceLocation location_of(const YAML::Node& node, const std::string& source);

}  // namespace wanfw
