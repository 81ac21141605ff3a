// The manifest of a data set folder: read with every field checked, written atomically.

#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "latent_shards/latent_dataset.hpp"
#include "wanfw/io/bounded_input.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

// The manifest's keys, as dataset_format.json names them.
namespace manifest_keys = dataset_format::manifest_keys;
namespace shard_keys = dataset_format::shard_keys;
namespace sample_keys = dataset_format::sample_keys;
namespace tensor_keys = dataset_format::tensor_keys;
constexpr const char* kFormat = dataset_format::kName;
constexpr std::uintmax_t kMaxManifestBytes = 1'000'000'000;  // ~3M samples
constexpr int kMaxDepth = 8;  // root, samples, a sample, fields, a field, its shape: 6
constexpr const char* kHint = "re-create the folder with tools/encode_dataset.py or `wanfw data synth`; docs/data.md "
                              "describes the format";

/// Reads one manifest, naming the entry at fault in every error.
class ManifestReader {
 public:
  explicit ManifestReader(fs::path file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& problem) const {
    throw FileError(fmt::format("{}: {}{}", file_.string(), where.empty() ? "" : where + ": ", problem), kHint);
  }

  const json& member(const json& object, const std::string& where, const char* key, json::value_t type) const {
    const auto it = object.find(key);
    if (it == object.end()) fail(where, fmt::format("'{}' is missing", key));
    const bool ok = it->type() == type ||
                    (type == json::value_t::number_unsigned && it->type() == json::value_t::number_integer &&
                     it->get<std::int64_t>() >= 0);
    if (!ok) fail(where, fmt::format("'{}' is {}, not {}", key, describe_json(*it), type_name(type)));
    return *it;
  }
  std::string string(const json& object, const std::string& where, const char* key) const {
    return member(object, where, key, json::value_t::string).get<std::string>();
  }

  ManifestTensor tensor(const json& value, const std::string& where, const std::set<std::string>& shards) const {
    if (!value.is_object()) fail(where, fmt::format("is {}, not an object", describe_json(value)));
    ManifestTensor t;
    t.shard = string(value, where, tensor_keys::shard);
    if (!shards.count(t.shard))
      fail(where, fmt::format("names shard '{}', which '{}' does not list", shortened(t.shard), manifest_keys::shards));
    t.tensor = string(value, where, tensor_keys::tensor);
    const json& shape = member(value, where, tensor_keys::shape, json::value_t::array);
    if (shape.size() > 8) fail(where, fmt::format("a shape of {} dimensions (at most 8)", shape.size()));
    for (const auto& size : shape) {
      if (!size.is_number_unsigned() && !(size.is_number_integer() && size.get<std::int64_t>() >= 0))
        fail(where, fmt::format("shape holds {}, not a size", describe_json(size)));
      t.shape.push_back(size.get<std::int64_t>());
    }
    return t;
  }

  std::map<std::string, ManifestTensor> tensors(const json& value, const std::string& where,
                                                const std::set<std::string>& shards) const {
    if (!value.is_object()) fail(where, fmt::format("is {}, not an object of fields", describe_json(value)));
    std::map<std::string, ManifestTensor> out;
    for (const auto& [name, entry] : value.items()) out[name] = tensor(entry, where + "." + name, shards);
    return out;
  }

 private:
  static const char* type_name(json::value_t type) {
    switch (type) {
      case json::value_t::string: return "a string";
      case json::value_t::array: return "a list";
      case json::value_t::object: return "an object";
      case json::value_t::number_unsigned: return "a non-negative integer";
      default: return "of the right type";
    }
  }
  fs::path file_;
};

}  // namespace

DatasetManifest DatasetManifest::read(const fs::path& folder) {
  const fs::path file = folder / kFileName;
  const ManifestReader r(file);
  std::error_code ec;
  if (!fs::exists(file, ec))
    throw FileError(fmt::format("{}: no data set here ({} is missing)", folder.string(), kFileName),
                    "point data.path at a folder made by tools/encode_dataset.py or `wanfw data synth`");
  const std::string text = read_bounded_file(file, "manifest", kMaxManifestBytes,
                                             [&](const std::string& problem) { r.fail("", problem); });
  const json root = parse_bounded_json(text, kMaxDepth, [&](const std::string& problem) { r.fail("", problem); });
  if (!root.is_object()) r.fail("", "is not a JSON object");
  if (r.string(root, "", manifest_keys::format) != kFormat)
    r.fail("", fmt::format("'{}' is '{}', not '{}'", manifest_keys::format,
                           shortened(root[manifest_keys::format].get<std::string>()), kFormat));
  DatasetManifest m;
  const json& version = r.member(root, "", manifest_keys::version, json::value_t::number_unsigned);
  if (version.get<std::uint64_t>() != kVersion)
    r.fail("", fmt::format("is version {}; this wanfw reads version {}", describe_json(version), kVersion));
  if (root.contains(manifest_keys::encoders)) {
    const json& encoders = r.member(root, "", manifest_keys::encoders, json::value_t::object);
    for (const auto& [key, value] : encoders.items())
      m.encoders[key] = value.is_string() ? value.get<std::string>() : describe_json(value);
  }
  if (root.contains(manifest_keys::encoding_fingerprint))
    m.encoding_fingerprint = r.string(root, "", manifest_keys::encoding_fingerprint);

  std::set<std::string> shard_files;
  const json& shards = r.member(root, "", manifest_keys::shards, json::value_t::array);
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string where = fmt::format("{}[{}]", manifest_keys::shards, i);
    if (!shards[i].is_object()) r.fail(where, "is not an object");
    ManifestShard shard;
    shard.file = r.string(shards[i], where, shard_keys::file);
    confined_path(folder, shard.file, "the data set's folder",
                  [&](const std::string& why) { r.fail(where, fmt::format("'{}' is {}", shortened(shard.file), why)); });
    if (!shard_files.insert(shard.file).second) r.fail(where, fmt::format("'{}' is listed twice", shortened(shard.file)));
    shard.bytes = r.member(shards[i], where, shard_keys::bytes, json::value_t::number_unsigned).get<std::uint64_t>();
    const std::string crc = r.string(shards[i], where, shard_keys::crc32);
    std::size_t used = 0;
    try {
      const unsigned long value = std::stoul(crc, &used, 16);
      if (used != crc.size() || crc.size() > 8) throw std::invalid_argument(crc);
      shard.crc32 = static_cast<std::uint32_t>(value);
    } catch (const std::exception&) {
      r.fail(where, fmt::format("{} '{}' is not 8 hex digits", shard_keys::crc32, shortened(crc)));
    }
    m.shards.push_back(std::move(shard));
  }
  if (root.contains(manifest_keys::empty_caption))
    m.empty_caption = r.tensors(root[manifest_keys::empty_caption], manifest_keys::empty_caption, shard_files);

  std::set<std::string> ids;
  const json& samples = r.member(root, "", manifest_keys::samples, json::value_t::array);
  m.samples.reserve(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const std::string where = fmt::format("{}[{}]", manifest_keys::samples, i);
    const json& entry = samples[i];
    if (!entry.is_object()) r.fail(where, "is not an object");
    ManifestSample s;
    s.id = r.string(entry, where, sample_keys::id);
    if (s.id.empty()) r.fail(where, "the id is empty");
    if (!ids.insert(s.id).second) r.fail(where, fmt::format("id '{}' appears twice", shortened(s.id)));
    try {
      s.bucket = Bucket::parse(r.string(entry, where, sample_keys::bucket));
    } catch (const Error& e) {
      r.fail(where, e.what());
    }
    if (entry.contains(sample_keys::caption_hash)) s.caption_hash = r.string(entry, where, sample_keys::caption_hash);
    if (entry.contains(sample_keys::source_fingerprint))
      s.source_fingerprint = r.string(entry, where, sample_keys::source_fingerprint);
    s.fields = r.tensors(r.member(entry, where, sample_keys::fields, json::value_t::object),
                         where + "." + sample_keys::fields, shard_files);
    if (entry.contains(sample_keys::reference_frames)) {
      const auto frames =
          r.member(entry, where, sample_keys::reference_frames, json::value_t::number_unsigned).get<std::uint64_t>();
      if (frames >= static_cast<std::uint64_t>(s.bucket.frames))
        r.fail(where, fmt::format("'{}' is {}, but its bucket {} has {} latent frames in all",
                                  sample_keys::reference_frames, frames, s.bucket.name(), s.bucket.frames));
      s.reference_frames = static_cast<std::int64_t>(frames);
    }
    m.samples.push_back(std::move(s));
  }
  return m;
}

void DatasetManifest::write(const fs::path& folder) const {
  auto tensor_json = [](const ManifestTensor& t) {
    return json{{tensor_keys::shard, t.shard}, {tensor_keys::tensor, t.tensor}, {tensor_keys::shape, t.shape}};
  };
  json root;
  root[manifest_keys::format] = kFormat;
  root[manifest_keys::version] = version;
  root[manifest_keys::encoders] = encoders;
  root[manifest_keys::encoding_fingerprint] = encoding_fingerprint;
  json empty = json::object();
  for (const auto& [name, t] : empty_caption) empty[name] = tensor_json(t);
  root[manifest_keys::empty_caption] = empty;
  json shard_list = json::array();
  for (const auto& s : shards)
    shard_list.push_back({{shard_keys::file, s.file},
                          {shard_keys::bytes, s.bytes},
                          {shard_keys::crc32, fmt::format("{:08x}", s.crc32)}});
  root[manifest_keys::shards] = shard_list;
  json sample_list = json::array();
  for (const auto& s : samples) {
    json fields = json::object();
    for (const auto& [name, t] : s.fields) fields[name] = tensor_json(t);
    sample_list.push_back({{sample_keys::id, s.id},
                           {sample_keys::bucket, s.bucket.name()},
                           {sample_keys::caption_hash, s.caption_hash},
                           {sample_keys::source_fingerprint, s.source_fingerprint},
                           {sample_keys::fields, fields}});
    if (s.reference_frames > 0) sample_list.back()[sample_keys::reference_frames] = s.reference_frames;
  }
  root[manifest_keys::samples] = sample_list;
  write_file_atomically(folder / kFileName, root.dump(1) + "\n");
}

}  // namespace wanfw
