// SafetensorsCheckpoint: one .safetensors file, or the shards a .safetensors.index.json lists.
// The index is input like any other: bounded in size and nesting, and it may only name files in
// its own folder.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wanfw/io/bounded_input.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

constexpr std::uintmax_t kMaxIndexBytes = 100'000'000;
constexpr int kMaxIndexDepth = 8;           // an index needs 2: the index, weight_map

const char* const kIndexHint = "a sharded checkpoint index maps every tensor name to a shard file in its own folder";

/// A folder holding one checkpoint: the single index in it, else the single .safetensors file.
fs::path checkpoint_in_folder(const fs::path& folder) {
  std::vector<fs::path> indexes, singles;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 20 && name.ends_with(".safetensors.index.json"))
      indexes.push_back(it->path());
    else if (name.ends_with(".safetensors"))
      singles.push_back(it->path());
  }
  if (ec) throw FileError(fmt::format("{}: cannot list the folder: {}", folder.string(), ec.message()));
  if (indexes.size() == 1) return indexes.front();
  if (indexes.empty() && singles.size() == 1) return singles.front();
  throw FileError(fmt::format("{}: expected one .safetensors file or one .safetensors.index.json, found {} "
                              "index files and {} safetensors files",
                              folder.string(), indexes.size(), singles.size()),
                  "point at the file to load");
}

/// Where the shard `shard` named by `index` for tensor `name` lies: a relative path below the
/// index's folder with no `..`, every component a valid file name.
fs::path shard_path(const fs::path& index, const std::string& name, const std::string& shard) {
  auto refuse = [&](const std::string& why) {
    throw FileError(
        fmt::format("{}: weight_map entry '{}' names '{}', {}", index.string(), shortened(name), shortened(shard), why),
        kIndexHint);
  };
  return confined_path(index.parent_path(), shard, "the index's folder", refuse);
}

}  // namespace

SafetensorsCheckpoint SafetensorsCheckpoint::open(const fs::path& given) {
  std::error_code ec;
  const fs::path path = fs::is_directory(given, ec) ? checkpoint_in_folder(given) : given;
  SafetensorsCheckpoint checkpoint;
  checkpoint.files_ = std::make_shared<std::map<fs::path, SafetensorsFile>>();
  if (!path.string().ends_with(".index.json")) {
    const SafetensorsFile& file = (*checkpoint.files_)[path] = SafetensorsFile::open(path);
    for (const auto& record : file.records()) checkpoint.weight_map_[record.name] = path;
    return checkpoint;
  }

  const auto fail = [&](const std::string& problem) {
    throw FileError(fmt::format("{}: {}", path.string(), problem), kIndexHint);
  };
  const json index = parse_bounded_json(read_bounded_file(path, "index", kMaxIndexBytes, fail), kMaxIndexDepth, fail);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw FileError(fmt::format("{}: has no 'weight_map' object", path.string()), kIndexHint);
  std::map<std::string, fs::path> checked;  // shard name -> path, each checked once
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw FileError(fmt::format("{}: weight_map entry '{}' is {}, not a file name", path.string(), shortened(name),
                                  describe_json(shard)),
                      kIndexHint);
    const std::string& shard_name = shard.get_ref<const std::string&>();
    auto known = checked.find(shard_name);
    if (known == checked.end()) {
      const fs::path file = shard_path(path, name, shard_name);
      if (!fs::exists(file, ec))
        throw FileError(fmt::format("{}: shard {} (holding '{}') is {}", path.string(), file.string(), shortened(name),
                                    ec ? "unreadable: " + ec.message() : "missing"),
                        "download every shard the index lists");
      known = checked.emplace(shard_name, file).first;
    }
    checkpoint.weight_map_[name] = known->second;
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
  if (it == weight_map_.end()) throw FileError(fmt::format("the checkpoint has no tensor '{}'", shortened(name)));
  return it->second;
}
const TensorRecord& SafetensorsCheckpoint::record(const std::string& name) const {
  const fs::path shard = file_of(name);
  const SafetensorsFile& f = file(shard);
  if (!f.contains(name))
    throw FileError(fmt::format("{}: the index says it holds '{}', but it does not", shard.string(), shortened(name)));
  return f.record(name);
}
at::Tensor SafetensorsCheckpoint::tensor(const std::string& name) const {
  (void)record(name);
  return file(file_of(name)).tensor(name);
}

}  // namespace wanfw
