// Logger `csv`: one row per logged step in <run>/<file>. A metric that appears later widens the
// header (earlier rows keep empty cells); a resumed run drops rows past the resume step and
// appends; every row is flushed to the OS as it is written, so a killed run keeps its rows.

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"
#include "wanfw/log.hpp"
#include "wanfw/plugin.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_row(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

class CsvLogger final : public wanfw::Logger {
 public:
  explicit CsvLogger(std::string file_name) : file_name_(std::move(file_name)) {}
  ~CsvLogger() override { close(); }

  void open(const wanfw::LoggerContext& context) override {
    path_ = context.run_dir / file_name_;
    std::vector<std::vector<std::string>> kept;
    std::ifstream in(path_);
    if (in) {
      std::string line;
      if (std::getline(in, line)) columns_ = split_row(line);
      if (columns_.empty() || columns_.front() != "step")
        throw wanfw::FileError(fmt::format("{}: not a wanfw metrics file (no 'step' column)", path_.string()),
                               "move it away or choose another file name for the csv logger");
      while (std::getline(in, line)) {
        if (line.empty()) continue;
        auto cells = split_row(line);
        try {
          if (std::stoll(cells.at(0)) <= context.resume_step) kept.push_back(std::move(cells));
        } catch (const std::exception&) {
          wanfw::log::warn(
              fmt::format("{}: dropped a malformed row '{}' (a crash may have cut it short)", path_.string(), line));
        }
      }
    }
    if (columns_.empty()) columns_ = {"step"};
    rewrite(kept);
  }

  void log_scalars(std::int64_t step, const std::map<std::string, double>& scalars) override {
    bool widened = false;
    for (const auto& [name, _] : scalars)
      if (std::find(columns_.begin(), columns_.end(), name) == columns_.end()) {
        columns_.push_back(name);
        widened = true;
      }
    if (widened) rewrite(read_rows());
    std::vector<std::string> row = {std::to_string(step)};
    for (std::size_t i = 1; i < columns_.size(); ++i) {
      auto it = scalars.find(columns_[i]);
      row.push_back(it == scalars.end() ? std::string() : fmt::format("{}", it->second));
    }
    write_row(row);
    if (std::fflush(file_) != 0) fail("write");
  }

  void flush() override {
    if (file_) std::fflush(file_);
  }

  void close() override {
    if (file_) {
      std::fclose(file_);
      file_ = nullptr;
    }
  }

 private:
  [[noreturn]] void fail(const char* action) const {
    throw wanfw::FileError(fmt::format("{}: cannot {}: {}", path_.string(), action, std::strerror(errno)),
                           "check free disk space and permissions of the run folder");
  }

  std::vector<std::vector<std::string>> read_rows() {
    flush();
    std::vector<std::vector<std::string>> rows;
    std::ifstream in(path_);
    std::string line;
    std::getline(in, line);  // the old header
    while (std::getline(in, line))
      if (!line.empty()) rows.push_back(split_row(line));
    return rows;
  }

  /// Writes the header and `rows` through the SDK's atomic writer (a temporary file, fsync,
  /// rename), so a crash leaves the old file or the new one, never a mix; then reopens it for
  /// appending.
  void rewrite(const std::vector<std::vector<std::string>>& rows) {
    close();
    std::string text = format_row(columns_);
    for (auto row : rows) {
      row.resize(columns_.size());
      text += format_row(row);
    }
    wanfw::write_file_atomically(path_, text);
    file_ = std::fopen(path_.c_str(), "a");
    if (!file_) fail("open");
  }

  static std::string format_row(const std::vector<std::string>& cells) {
    return fmt::format("{}\n", fmt::join(cells, ","));
  }

  void write_row(const std::vector<std::string>& cells) {
    const std::string line = format_row(cells);
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) fail("write");
  }

  std::string file_name_;
  fs::path path_;
  std::vector<std::string> columns_;
  std::FILE* file_ = nullptr;
};

wanfw::PluginDescriptor describe() {
  auto d = wanfw::PluginDescriptor::for_logger("csv", "1.0.0", "Metrics as CSV: one row per logged step.");
  d.options = {wanfw::option("file", wanfw::OptionType::String)
                   .value("metrics.csv")
                   .doc("File name inside the run folder.")};
  d.make_logger = [](const wanfw::Options& options, const wanfw::PluginContext&) -> std::unique_ptr<wanfw::Logger> {
    const std::string file = options.string("file");
    if (file.empty() || file.find('/') != std::string::npos)
      options.fail("file", fmt::format("'{}' is not a plain file name", file));
    return std::make_unique<CsvLogger>(file);
  };
  return d;
}

}  // namespace

WANFW_PLUGIN(Logger, describe)
