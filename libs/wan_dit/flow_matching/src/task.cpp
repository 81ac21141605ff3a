#include "wan/task.hpp"

#include <array>
#include <utility>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wan {

namespace {
constexpr std::array<std::pair<Task, const char*>, 3> kSpellings{
    {{Task::T2V, "t2v"}, {Task::TI2V, "ti2v"}, {Task::I2V, "i2v"}}};
}  // namespace

Task parse_task(const std::string& name) {
  for (const auto& [task, spelling] : kSpellings)
    if (name == spelling) return task;
  throw wanfw::Error(fmt::format("unknown Wan task '{}'", name), "use t2v, ti2v or i2v");
}

const char* task_name(Task task) {
  for (const auto& [each, spelling] : kSpellings)
    if (each == task) return spelling;
  return "t2v";
}

}  // namespace wan
