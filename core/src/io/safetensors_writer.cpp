#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

void write_safetensors(const fs::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> contiguous;
  contiguous.reserve(tensors.size());
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (header.contains(name))
      throw Error(fmt::format("{}: tensor name '{}' given twice", path.string(), name));
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const std::uint64_t nbytes = t.numel() * t.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    contiguous.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data area 8-byte aligned
  std::uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  AtomicFileWriter writer(path);
  writer.write(length, sizeof length);
  writer.write(text);
  for (const auto& t : contiguous)
    if (t.numel() > 0) writer.write(t.data_ptr(), t.numel() * t.element_size());
  writer.commit();
}

}  // namespace wanfw
