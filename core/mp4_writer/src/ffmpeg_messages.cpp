#include "ffmpeg_messages.hpp"

#include <algorithm>
#include <cstdarg>
#include <mutex>
#include <regex>
#include <vector>

extern "C" {
#include <libavutil/log.h>
}

namespace wanfw_mp4 {

namespace {

std::mutex one_collector;  // held by the collector for its life
std::mutex state_lock;     // guards what follows: encoders log from their own threads
bool collecting = false;
std::vector<std::string> messages;  // each once, in the order FFmpeg said them
std::string partial;  // a message FFmpeg has not ended with a newline yet
int print_prefix = 1;

/// Keeps `message` unless it is empty or kept already.
void keep(const std::string& message) {
  if (!message.empty() && std::find(messages.begin(), messages.end(), message) == messages.end())
    messages.push_back(message);
}

/// "[libx264 @ 0x5581c7e0] non-strictly-monotonic PTS" -> "libx264: non-strictly-monotonic PTS".
std::string tidy(const std::string& line) {
  static const std::regex prefix(R"(^\[([^\] @]+)(?: @ 0x[0-9a-fA-F]+)?\] )");
  std::smatch m;
  if (std::regex_search(line, m, prefix)) return m[1].str() + ": " + m.suffix().str();
  return line;
}

void callback(void* context, int level, const char* format, va_list arguments) {
  if (level > AV_LOG_WARNING) return;
  const std::lock_guard<std::mutex> guard(state_lock);
  if (!collecting) return;
  char line[1024];
  av_log_format_line2(context, level, format, arguments, line, sizeof(line), &print_prefix);
  partial += line;
  for (std::size_t end; (end = partial.find('\n')) != std::string::npos; partial.erase(0, end + 1))
    keep(tidy(partial.substr(0, end)));
}

}  // namespace

FfmpegMessages::FfmpegMessages() {
  one_collector.lock();
  static std::once_flag installed;
  std::call_once(installed, [] { av_log_set_callback(callback); });
  const std::lock_guard<std::mutex> guard(state_lock);
  messages.clear();
  partial.clear();
  print_prefix = 1;
  collecting = true;
}

FfmpegMessages::~FfmpegMessages() {
  {
    const std::lock_guard<std::mutex> guard(state_lock);
    collecting = false;
  }
  one_collector.unlock();
}

std::string FfmpegMessages::text() const {
  const std::lock_guard<std::mutex> guard(state_lock);
  std::string out;
  for (const std::string& m : messages) out += m + "\n";
  const std::string unended = tidy(partial);  // a last message FFmpeg did not end with a newline
  if (!unended.empty() && std::find(messages.begin(), messages.end(), unended) == messages.end()) out += unended + "\n";
  return out;
}

}  // namespace wanfw_mp4
