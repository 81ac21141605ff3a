#include "wan/task.hpp"

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wan {

Task parse_task(const std::string& name) {
  if (name == "t2v") return Task::T2V;
  if (name == "ti2v") return Task::TI2V;
  if (name == "i2v") return Task::I2V;
  throw wanfw::Error(fmt::format("unknown Wan task '{}'", name), "use t2v, ti2v or i2v");
}

const char* task_name(Task task) {
  switch (task) {
    case Task::T2V:
      return "t2v";
    case Task::TI2V:
      return "ti2v";
    case Task::I2V:
      return "i2v";
  }
  return "t2v";
}

}  // namespace wan
