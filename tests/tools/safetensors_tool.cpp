// Test helper: lets the Python tests check that our safetensors files and Python's agree.
//   wanfw_test_tools safetensors copy IN OUT    read every tensor of IN with wanfw's reader, write OUT
//   wanfw_test_tools safetensors write OUT      write one tensor of each dtype with known contents

#include <cstdio>
#include <string>

#include <ATen/ATen.h>

#include "tools.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

int safetensors_tool(int argc, char** argv) {
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "copy" && argc == 4) {
      const auto file = wanfw::SafetensorsFile::open(argv[2]);
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (const auto& record : file.records()) tensors.emplace_back(record.name, file.load(record.name));
      wanfw::write_safetensors(argv[3], tensors, file.metadata());
      return 0;
    }
    if (command == "write" && argc == 3) {
      const at::Tensor base = at::arange(24, at::kDouble).reshape({2, 3, 4}) * 1.5;
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (auto dtype : {at::kBool, at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kHalf, at::kBFloat16,
                         at::kFloat, at::kDouble})
        tensors.emplace_back(c10::toString(dtype), base.to(dtype));
      tensors.emplace_back("scalar", at::scalar_tensor(2.5, at::kFloat));
      wanfw::write_safetensors(argv[2], tensors, {{"written_by", "wanfw"}});
      return 0;
    }
    std::fprintf(stderr, "usage: wanfw_test_tools safetensors copy IN OUT | write OUT\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
