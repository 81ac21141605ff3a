#include "wanfw/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/file_io.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the format's own bound

struct DtypeEntry {
  const char* name;
  at::ScalarType type;
};

// Every safetensors dtype LibTorch can hold.
const DtypeEntry kDtypes[] = {
    {"BOOL", at::kBool},       {"U8", at::kByte},          {"I8", at::kChar},
    {"I16", at::kShort},       {"U16", at::kUInt16},       {"I32", at::kInt},
    {"U32", at::kUInt32},      {"I64", at::kLong},         {"U64", at::kUInt64},
    {"F16", at::kHalf},        {"BF16", at::kBFloat16},    {"F32", at::kFloat},
    {"F64", at::kDouble},      {"C64", at::kComplexFloat}, {"F8_E5M2", at::kFloat8_e5m2},
    {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E8M0", at::kFloat8_e8m0fnu},
};

bool dtype_from_name(const std::string& name, at::ScalarType* out) {
  for (const auto& entry : kDtypes)
    if (name == entry.name) {
      *out = entry.type;
      return true;
    }
  return false;
}

[[noreturn]] void malformed(const fs::path& path, const std::string& what, const std::string& tensor = "") {
  const std::string where = tensor.empty() ? path.string() : fmt::format("{} (tensor '{}')", path.string(), tensor);
  throw FileError(fmt::format("{}: not a valid safetensors file: {}", where, what),
                  "the file is truncated or corrupt; re-download or re-create it (for a checkpoint, resume from "
                  "an earlier one)");
}

std::uint64_t as_u64(const json& value, const fs::path& path, const std::string& tensor, const char* field) {
  if (!value.is_number_unsigned()) {
    if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return value.get<std::uint64_t>();
    malformed(path, fmt::format("'{}' holds {}, not a non-negative integer", field, value.dump()), tensor);
  }
  return value.get<std::uint64_t>();
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType dtype) {
  for (const auto& entry : kDtypes)
    if (entry.type == dtype) return entry.name;
  throw Error(fmt::format("safetensors cannot store tensors of dtype {}", c10::toString(dtype)),
              "convert the tensor to a supported dtype first");
}

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
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw FileError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)),
                    "check the path; for a sharded checkpoint give the .safetensors.index.json");
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    throw FileError(fmt::format("{}: cannot stat: {}", path.string(), std::strerror(errno)));
  }
  const auto file_size = static_cast<std::uint64_t>(info.st_size);
  if (file_size < 8) {
    ::close(fd);
    malformed(path, fmt::format("the file has {} bytes, fewer than the 8-byte header length", file_size));
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
    malformed(path, fmt::format("the header claims {} bytes; the limit is {}", header_size, kMaxHeaderBytes));
  if (header_size > file_size - 8)
    malformed(path, fmt::format("the header claims {} bytes but only {} follow the length", header_size,
                                file_size - 8));
  const std::string header(reinterpret_cast<const char*>(bytes + 8), header_size);
  if (header.empty() || header.front() != '{') malformed(path, "the header does not start with '{'");

  std::set<std::string> seen;
  std::string duplicate;
  json document;
  try {
    document = json::parse(header, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key) {
        const auto key = parsed.get<std::string>();
        if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
      }
      return true;
    });
  } catch (const json::exception& e) {
    malformed(path, fmt::format("the header is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty()) malformed(path, "the header names this tensor twice", duplicate);
  if (!document.is_object()) malformed(path, "the header is not a JSON object");

  const std::uint64_t data_size = file_size - 8 - header_size;
  mapping->data = bytes + 8 + header_size;
  for (const auto& [name, entry] : document.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) malformed(path, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) malformed(path, fmt::format("__metadata__ value of '{}' is not a string", key));
        mapping->metadata[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) malformed(path, "its entry is not an object", name);
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) malformed(path, fmt::format("its entry has no '{}'", field), name);
    TensorRecord record;
    record.name = name;
    if (!entry["dtype"].is_string()) malformed(path, "'dtype' is not a string", name);
    record.dtype_name = entry["dtype"].get<std::string>();
    if (!dtype_from_name(record.dtype_name, &record.dtype))
      malformed(path, fmt::format("unknown dtype '{}'", record.dtype_name), name);
    if (!entry["shape"].is_array()) malformed(path, "'shape' is not a list", name);
    std::uint64_t numel = 1;
    for (const auto& dim : entry["shape"]) {
      const std::uint64_t d = as_u64(dim, path, name, "shape");
      if (d > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, d, &numel))
        malformed(path, "the shape's element count overflows", name);
      record.shape.push_back(static_cast<std::int64_t>(d));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) malformed(path, "'data_offsets' is not a pair", name);
    record.begin = as_u64(offsets[0], path, name, "data_offsets");
    record.end = as_u64(offsets[1], path, name, "data_offsets");
    if (record.begin > record.end || record.end > data_size)
      malformed(path,
                fmt::format("data_offsets [{}, {}] lie outside the {}-byte data area", record.begin, record.end,
                            data_size),
                name);
    std::uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, c10::elementSize(record.dtype), &nbytes) || nbytes != record.end - record.begin)
      malformed(path,
                fmt::format("data_offsets span {} bytes but shape {} of {} needs {}", record.end - record.begin,
                            entry["shape"].dump(), record.dtype_name, nbytes),
                name);
    mapping->records.push_back(std::move(record));
  }
  // The data area must be covered exactly: no holes, no overlaps, nothing left over.
  std::vector<const TensorRecord*> order;
  for (const auto& r : mapping->records) order.push_back(&r);
  std::sort(order.begin(), order.end(), [](const TensorRecord* a, const TensorRecord* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t cursor = 0;
  for (const TensorRecord* r : order) {
    if (r->begin != cursor)
      malformed(path,
                r->begin < cursor ? fmt::format("its bytes overlap the previous tensor's (offset {})", r->begin)
                                  : fmt::format("there is a gap in the data area before offset {}", r->begin),
                r->name);
    cursor = r->end;
  }
  if (cursor != data_size)
    malformed(path, fmt::format("the tensors cover {} of the {} data bytes (truncated or trailing data)", cursor,
                                data_size));
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
    throw FileError(fmt::format("{}: has no tensor '{}'", mapping_->path.string(), name));
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
  return at::from_blob(const_cast<std::uint8_t*>(start), r.shape, [keep_alive](void*) {}, options);
}

at::Tensor SafetensorsFile::load(const std::string& name) const { return tensor(name).clone(); }

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

SafetensorsCheckpoint SafetensorsCheckpoint::open(const fs::path& given) {
  fs::path path = given;
  if (fs::is_directory(path)) {
    std::vector<fs::path> indexes, singles;
    for (const auto& entry : fs::directory_iterator(path)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 20 && name.ends_with(".safetensors.index.json")) indexes.push_back(entry.path());
      else if (name.ends_with(".safetensors")) singles.push_back(entry.path());
    }
    if (indexes.size() == 1) path = indexes.front();
    else if (indexes.empty() && singles.size() == 1) path = singles.front();
    else
      throw FileError(fmt::format("{}: expected one .safetensors file or one .safetensors.index.json, found {} "
                                  "index files and {} safetensors files",
                                  given.string(), indexes.size(), singles.size()),
                      "point at the file to load");
  }
  SafetensorsCheckpoint checkpoint;
  checkpoint.files_ = std::make_shared<std::map<fs::path, SafetensorsFile>>();
  if (path.string().ends_with(".index.json")) {
    std::ifstream in(path);
    if (!in) throw FileError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception& e) {
      throw FileError(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw FileError(fmt::format("{}: has no 'weight_map' object", path.string()),
                      "a sharded checkpoint index maps every tensor name to its shard file");
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string())
        throw FileError(fmt::format("{}: weight_map entry '{}' is not a file name", path.string(), name));
      const fs::path shard_path = path.parent_path() / shard.get<std::string>();
      if (!fs::exists(shard_path))
        throw FileError(fmt::format("{}: shard {} (holding '{}') is missing", path.string(), shard_path.string(), name),
                        "download every shard the index lists");
      checkpoint.weight_map_[name] = shard_path;
    }
  } else {
    const SafetensorsFile& file = (*checkpoint.files_)[path] = SafetensorsFile::open(path);
    for (const auto& record : file.records()) checkpoint.weight_map_[record.name] = path;
  }
  return checkpoint;
}

const SafetensorsFile& SafetensorsCheckpoint::file(const fs::path& path) const {
  auto it = files_->find(path);
  if (it == files_->end()) it = files_->emplace(path, SafetensorsFile::open(path)).first;
  return it->second;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : weight_map_) out.push_back(name);
  return out;
}
bool SafetensorsCheckpoint::contains(const std::string& name) const { return weight_map_.count(name) != 0; }

fs::path SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) throw FileError(fmt::format("the checkpoint has no tensor '{}'", name));
  return it->second;
}
const TensorRecord& SafetensorsCheckpoint::record(const std::string& name) const {
  const fs::path shard = file_of(name);
  const SafetensorsFile& f = file(shard);
  if (!f.contains(name))
    throw FileError(fmt::format("{}: the index says it holds '{}', but it does not", shard.string(), name));
  return f.record(name);
}
at::Tensor SafetensorsCheckpoint::tensor(const std::string& name) const {
  (void)record(name);
  return file(file_of(name)).tensor(name);
}

}  // namespace wanfw
