#pragma once
// The argument parsing the `wanfw` subcommands share: help flags, usage errors (exit 2, with the
// command's help), CONFIG with --set/--resume, --plugin-path folders, and the flags of the
// commands that evaluate a model (predict, sample, export).

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "run/evaluation.hpp"

namespace wanfw::cli {

/// True when `args` ask for help (--help, -h).
bool wants_help(const std::vector<std::string>& args);

/// Throws the ConfigError of a bad command line: `problem`, then the command's `help`.
[[noreturn]] void usage_error(const std::string& problem, const char* help);

/// CONFIG, --set overrides and (when allowed) --resume; flags listed in `named` take a value into it.
RunRequest parse_run_request(const std::vector<std::string>& args, bool allow_resume, const char* help,
                             std::map<std::string, std::string>* named = nullptr);

/// Splits `--plugin-path DIR` flags from the other arguments (into `rest`).
std::vector<std::filesystem::path> plugin_path_flags(const std::vector<std::string>& args,
                                                     std::vector<std::string>* rest, const char* help);

/// auto, cpu, cuda or cuda:N: what --device takes.
bool is_device_name(const std::string& text);

/// The flags `predict`, `sample` and `export` share (--inputs, --out, --checkpoint, and those in
/// `named`: --seed, --count, --max-shard-size, --device: a device name), parsed into an EvaluateRequest; `values`, when
/// given, receives every named flag's value (its default when absent).
/// `wanfw sample --dataset`: the first request.count samples of the data set sampled `batch` at a time
/// and written with their conditioning as a data set folder at request.outputs (sample_dataset.cpp).
int sample_dataset(const EvaluateRequest& request, std::int64_t batch);

EvaluateRequest parse_evaluate_request(const std::vector<std::string>& args, const char* help,
                                       std::map<std::string, std::string> named,
                                       std::map<std::string, std::string>* values = nullptr);

}  // namespace wanfw::cli
