#include "command_line.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw::cli {

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

[[noreturn]] void usage_error(const std::string& problem, const char* help) {
  throw ConfigError({"command line", 0, 0}, problem, std::string("\n") + help);
}

RunRequest parse_run_request(const std::vector<std::string>& args, bool allow_resume, const char* help,
                             std::map<std::string, std::string>* named) {
  RunRequest request;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (named != nullptr && named->count(args[i])) {
      if (i + 1 >= args.size()) usage_error(fmt::format("{} needs a value", args[i]), help);
      (*named)[args[i]] = args[i + 1];
      ++i;
      continue;
    }
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= args.size()) usage_error(fmt::format("{} needs a value", flag), help);
      return args[++i];
    };
    if (a == "--set")
      request.overrides.push_back(value("--set"));
    else if (a.rfind("--set=", 0) == 0)
      request.overrides.push_back(a.substr(6));
    else if (allow_resume && a == "--resume")
      request.resume = value("--resume");
    else if (allow_resume && a.rfind("--resume=", 0) == 0) {
      request.resume = a.substr(9);
      if (request.resume.empty()) usage_error("--resume needs auto or a path", help);
    } else if (!a.empty() && a[0] == '-')
      usage_error(fmt::format("unknown option '{}'", a), help);
    else if (request.config.empty())
      request.config = a;
    else
      usage_error(fmt::format("unexpected argument '{}'", a), help);
  }
  if (request.config.empty()) usage_error("missing CONFIG", help);
  return request;
}

std::vector<std::filesystem::path> plugin_path_flags(const std::vector<std::string>& args,
                                                     std::vector<std::string>* rest, const char* help) {
  std::vector<std::filesystem::path> extra;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plugin-path") {
      if (i + 1 >= args.size()) usage_error("--plugin-path needs a folder", help);
      extra.emplace_back(args[++i]);
    } else if (!args[i].empty() && args[i][0] == '-') {
      usage_error(fmt::format("unknown option '{}'", args[i]), help);
    } else {
      rest->push_back(args[i]);
    }
  }
  return extra;
}

bool is_device_name(const std::string& text) {
  if (text == "auto" || text == "cpu" || text == "cuda") return true;
  if (text.rfind("cuda:", 0) != 0 || text.size() == 5 || text.size() > 8) return false;
  return std::all_of(text.begin() + 5, text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

EvaluateRequest parse_evaluate_request(const std::vector<std::string>& args, const char* help,
                                       std::map<std::string, std::string> named,
                                       std::map<std::string, std::string>* values) {
  for (const char* flag : {"--inputs", "--out", "--checkpoint"}) named.emplace(flag, "");
  EvaluateRequest request;
  request.run = parse_run_request(args, false, help, &named);
  request.inputs = named["--inputs"];
  request.outputs = named["--out"];
  request.checkpoint = named["--checkpoint"];
  if (request.outputs.empty()) usage_error("--out is required", help);
  auto integer = [&](const char* flag) -> std::optional<std::int64_t> {
    auto it = named.find(flag);
    if (it == named.end() || it->second.empty()) return std::nullopt;
    try {
      std::size_t used = 0;
      const long long value = std::stoll(it->second, &used);
      if (used == it->second.size() && value >= 0) return value;
    } catch (const std::exception&) {
    }
    usage_error(fmt::format("{} needs a non-negative integer, got '{}'", flag, it->second), help);
  };
  if (auto seed = integer("--seed")) request.seed = static_cast<std::uint64_t>(*seed);
  if (auto count = integer("--count")) request.count = *count;
  if (auto bytes = integer("--max-shard-size")) {
    if (*bytes < 1) usage_error("--max-shard-size needs a positive number of bytes", help);
    request.max_shard_bytes = *bytes;
  }
  if (const auto device = named.find("--device"); device != named.end() && !is_device_name(device->second))
    usage_error(fmt::format("--device '{}' is not a device: use auto, cpu, cuda or cuda:N", device->second), help);
  if (values != nullptr) *values = named;
  return request;
}

}  // namespace wanfw::cli
