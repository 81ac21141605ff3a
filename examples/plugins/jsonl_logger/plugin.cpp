// Logger `jsonl`: one JSON object per line, appended and flushed as it is logged, so a killed run
// keeps every line it wrote. A resumed run first drops the lines past the step it resumes from.
//
//   {"step": 10, "time": 1763800000.123, "scalars": {"loss": 0.52, "lr": 0.0001}}
//   {"step": 0, "time": 1763799990.001, "text": {"tag": "config", "value": "..."}}
//   {"time": 1763799990.002, "hparams": {"optimizer.lr": "1e-4", ...}}
//
// Numbers are written with 17 significant digits (they read back as the same double); NaN and
// infinities as NaN / Infinity / -Infinity, as Python's json module reads and writes them.
//
// Built out of tree against the installed SDK (examples/plugins/CMakeLists.txt).

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <wanfw/error.hpp>
#include <wanfw/io/file_io.hpp>
#include <wanfw/log.hpp>
#include <wanfw/plugin.hpp>

namespace {

namespace fs = std::filesystem;

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// The value of `"step": N` at the start of a line this logger wrote, or -1.
long long step_of(const std::string& line) {
  const std::string key = "{\"step\": ";
  if (line.rfind(key, 0) != 0) return -1;
  return std::atoll(line.c_str() + key.size());
}

class JsonLinesLogger final : public wanfw::Logger {
 public:
  explicit JsonLinesLogger(std::string file_name) : file_name_(std::move(file_name)) {}
  ~JsonLinesLogger() override { close(); }

  void open(const wanfw::LoggerContext& context) override {
    path_ = context.run_dir / file_name_;
    if (context.resume_step > 0 && fs::exists(path_)) {
      // Keep what was logged up to the resumed step; hparams lines (no step) are kept once.
      std::ifstream in(path_);
      std::string kept, line;
      while (std::getline(in, line))
        if (step_of(line) <= context.resume_step) kept += line + "\n";
      wanfw::write_file_atomically(path_, kept);
    }
    file_ = std::fopen(path_.c_str(), "a");
    if (file_ == nullptr)
      throw wanfw::FileError(wanfw::str(path_.string(), ": cannot open for appending"),
                             "check that the run folder is writable");
  }

  void log_scalars(std::int64_t step, const std::map<std::string, double>& scalars) override {
    std::string values;
    for (const auto& [name, value] : scalars)
      values += (values.empty() ? "" : ", ") + json_string(name) + ": " + json_number(value);
    write(wanfw::str("{\"step\": ", step, ", \"time\": ", json_number(now()), ", \"scalars\": {", values, "}}"));
  }

  void log_text(std::int64_t step, const std::string& tag, const std::string& text) override {
    write(wanfw::str("{\"step\": ", step, ", \"time\": ", json_number(now()), ", \"text\": {\"tag\": ",
                     json_string(tag), ", \"value\": ", json_string(text), "}}"));
  }

  void log_hparams(const std::map<std::string, std::string>& hparams) override {
    std::string values;
    for (const auto& [name, value] : hparams)
      values += (values.empty() ? "" : ", ") + json_string(name) + ": " + json_string(value);
    write(wanfw::str("{\"time\": ", json_number(now()), ", \"hparams\": {", values, "}}"));
  }

  void flush() override {
    if (file_ != nullptr) std::fflush(file_);
  }

  void close() override {
    if (file_ == nullptr) return;
    std::fclose(file_);
    file_ = nullptr;
  }

 private:
  /// One line, flushed to the kernel at once: a killed process loses nothing it logged.
  void write(const std::string& object) {
    const std::string line = object + "\n";
    if (file_ == nullptr || std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
      throw wanfw::FileError(wanfw::str(path_.string(), ": cannot write (is the disk full?)"),
                             "free space and resume with --resume auto");
  }

  std::string file_name_;
  fs::path path_;
  std::FILE* file_ = nullptr;
};

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_logger("jsonl", "0.1.0",
                                               "Metrics as JSON lines, one object per logged step, flushed per line.");
  d.options = {wanfw::option("file", wanfw::OptionType::String).value("metrics.jsonl").doc(
      "File name inside the run folder.")};
  d.make_logger = [](const wanfw::Options& o, const wanfw::PluginContext&) -> std::unique_ptr<wanfw::Logger> {
    const std::string file = o.string("file");
    if (file.empty() || file.find('/') != std::string::npos) o.fail("file", "must be a plain file name");
    return std::make_unique<JsonLinesLogger>(file);
  };
  return d;
}

}  // namespace

WANFW_PLUGIN(Logger, describe)
