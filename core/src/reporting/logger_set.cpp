#include "reporting/logger_set.hpp"

#include <functional>

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

namespace wanfw {

std::map<std::string, std::string> flatten_yaml(const std::string& yaml) {
  std::map<std::string, std::string> out;
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& node,
                                                                         const std::string& prefix) {
    if (node.IsScalar()) out[prefix] = node.Scalar();
    else if (node.IsMap())
      for (const auto& item : node) walk(item.second, prefix.empty() ? item.first.Scalar() : prefix + "." + item.first.Scalar());
    else if (node.IsSequence()) {
      bool scalars = true;
      for (const auto& item : node) scalars = scalars && item.IsScalar();
      if (scalars) {  // a list of values reads better as one entry: [0.9, 0.999]
        std::string joined;
        for (const auto& item : node) joined += (joined.empty() ? "" : ", ") + item.Scalar();
        out[prefix] = "[" + joined + "]";
      } else {
        std::size_t i = 0;
        for (const auto& item : node) walk(item, prefix + "." + std::to_string(i++));
      }
    }
  };
  walk(YAML::Load(yaml), "");
  return out;
}

LoggerSet::LoggerSet(std::vector<std::shared_ptr<Logger>> loggers, bool main, const std::filesystem::path& run_dir,
                     std::int64_t resume_step, const std::string& resolved_yaml) {
  if (!main) return;
  const auto hparams = flatten_yaml(resolved_yaml);
  for (auto& logger : loggers) {
    logger->open({run_dir, resume_step});
    loggers_.push_back(logger);  // from here on, close() closes it
    logger->log_text(resume_step, "config", "```yaml\n" + resolved_yaml + "\n```");
    logger->log_hparams(hparams);
  }
}

LoggerSet::~LoggerSet() {
  try {
    close();
  } catch (const std::exception& e) {
    spdlog::error("closing the loggers: {}", e.what());
  }
}

void LoggerSet::scalars(std::int64_t step, const std::map<std::string, double>& values) {
  if (values.empty()) return;
  for (auto& logger : loggers_) logger->log_scalars(step, values);
}

void LoggerSet::image(std::int64_t step, const std::string& tag, const at::Tensor& image) {
  for (auto& logger : loggers_) logger->log_image(step, tag, image);
}

void LoggerSet::video(std::int64_t step, const std::string& tag, const at::Tensor& frames, double fps) {
  for (auto& logger : loggers_) logger->log_video(step, tag, frames, fps);
}

void LoggerSet::parameter_histograms(std::int64_t step, Model& model) {
  if (loggers_.empty()) return;
  for (const auto& [name, parameter] : model.trainable_parameters()) {
    const at::Tensor weights = parameter.detach().cpu();
    for (auto& logger : loggers_) logger->log_histogram(step, "weights/" + name, weights);
    if (parameter.grad().defined()) {
      const at::Tensor grads = parameter.grad().detach().cpu();
      for (auto& logger : loggers_) logger->log_histogram(step, "grads/" + name, grads);
    }
  }
}

void LoggerSet::flush() {
  for (auto& logger : loggers_) logger->flush();
}

void LoggerSet::close() {
  auto loggers = std::move(loggers_);
  loggers_.clear();
  for (auto& logger : loggers) logger->close();
}

}  // namespace wanfw
