#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "io/safetensors_header.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the format's own bound

}  // namespace

struct SafetensorsFile::Mapping {
  fs::path path;
  const std::uint8_t* data = nullptr;  ///< start of the data area
  void* base = nullptr;
  std::size_t length = 0;
  std::vector<TensorRecord> records;
  std::map<std::string, std::size_t> by_name;
  std::map<std::string, std::string> metadata;

  ~Mapping() {
    if (base != nullptr && length > 0) ::munmap(base, length);
  }
};

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  auto mapping = std::make_shared<Mapping>();
  mapping->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a pipe must not block the open
  if (fd < 0)
    throw FileError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)),
                    "check the path; for a sharded checkpoint give the .safetensors.index.json");
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    throw FileError(fmt::format("{}: cannot stat: {}", path.string(), std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    throw FileError(fmt::format("{}: not a regular file", path.string()),
                    "give a .safetensors file (or the folder or index of a sharded checkpoint)");
  }
  const auto file_size = static_cast<std::uint64_t>(info.st_size);
  if (file_size < 8) {
    ::close(fd);
    malformed_safetensors(path, fmt::format("the file has {} bytes, fewer than the 8-byte header length", file_size));
  }
  void* base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw FileError(fmt::format("{}: cannot map: {}", path.string(), std::strerror(errno)));
  mapping->base = base;
  mapping->length = file_size;
  const auto* bytes = static_cast<const std::uint8_t*>(base);

  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  if (header_size > kMaxHeaderBytes)
    malformed_safetensors(path,
                          fmt::format("the header claims {} bytes; the limit is {}", header_size, kMaxHeaderBytes));
  if (header_size > file_size - 8)
    malformed_safetensors(
        path, fmt::format("the header claims {} bytes but only {} follow the length", header_size, file_size - 8));
  const std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_size);
  SafetensorsHeader header = parse_safetensors_header(header_text, file_size - 8 - header_size, path);
  mapping->data = bytes + 8 + header_size;
  mapping->records = std::move(header.records);
  mapping->metadata = std::move(header.metadata);
  for (std::size_t i = 0; i < mapping->records.size(); ++i) mapping->by_name[mapping->records[i].name] = i;

  SafetensorsFile file;
  file.mapping_ = std::move(mapping);
  return file;
}

const fs::path& SafetensorsFile::path() const { return mapping_->path; }
const std::vector<TensorRecord>& SafetensorsFile::records() const { return mapping_->records; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return mapping_->metadata; }
bool SafetensorsFile::contains(const std::string& name) const { return mapping_->by_name.count(name) != 0; }

const TensorRecord& SafetensorsFile::record(const std::string& name) const {
  auto it = mapping_->by_name.find(name);
  if (it == mapping_->by_name.end())
    throw FileError(fmt::format("{}: has no tensor '{}'", mapping_->path.string(), shortened(name)));
  return mapping_->records[it->second];
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorRecord& r = record(name);
  const std::uint8_t* start = mapping_->data + r.begin;
  const auto options = at::TensorOptions().dtype(r.dtype).device(at::kCPU);
  if (reinterpret_cast<std::uintptr_t>(start) % c10::elementSize(r.dtype) != 0 || r.begin == r.end) {
    at::Tensor copy = at::empty(r.shape, options);
    if (r.end > r.begin) std::memcpy(copy.data_ptr(), start, r.end - r.begin);
    return copy;
  }
  auto keep_alive = mapping_;
  return at::from_blob(
      const_cast<std::uint8_t*>(start), r.shape, [keep_alive](void*) {}, options);
}

at::Tensor SafetensorsFile::load(const std::string& name) const { return tensor(name).clone(); }

}  // namespace wanfw
