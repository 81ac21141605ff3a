#pragma once
// Internal: the run's loggers, on the main process. Opens them (with the resolved config as text
// and hyper-parameters), fans every record out to each, and closes them. On other ranks it holds
// none, so callers need not ask which rank they are on.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wanfw/logger.hpp"
#include "wanfw/model.hpp"

namespace wanfw {

class LoggerSet {
 public:
  LoggerSet() = default;
  /// Opens `loggers` in `run_dir` when `main`; drops them otherwise. Loggers discard what they
  /// recorded after `resume_step`.
  LoggerSet(std::vector<std::shared_ptr<Logger>> loggers, bool main, const std::filesystem::path& run_dir,
            std::int64_t resume_step, const std::string& resolved_yaml);
  ~LoggerSet();
  LoggerSet(LoggerSet&&) = default;
  LoggerSet& operator=(LoggerSet&&) = default;

  bool empty() const { return loggers_.empty(); }
  void scalars(std::int64_t step, const std::map<std::string, double>& values);
  void image(std::int64_t step, const std::string& tag, const at::Tensor& image);
  void video(std::int64_t step, const std::string& tag, const at::Tensor& frames, double fps);
  /// Histograms of every trainable parameter ("weights/<name>") and its gradient ("grads/<name>").
  void parameter_histograms(std::int64_t step, Model& model);
  void flush();
  /// Flushes and closes every logger (also done by the destructor).
  void close();

 private:
  std::vector<std::shared_ptr<Logger>> loggers_;
};

/// The resolved config's scalar leaves as "section.key" (list items as "loggers.0.name") -> text.
std::map<std::string, std::string> flatten_yaml(const std::string& yaml);

}  // namespace wanfw
