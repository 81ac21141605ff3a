#include "checkpoint/state_piece_files.hpp"

#include <algorithm>
#include <map>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "wanfw/io/bounded_input.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"
#include "wanfw/io/safetensors.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

constexpr const char* kPiecesKey = "wanfw.pieces";
constexpr std::uintmax_t kMaxIndexBytes = 256 << 20;  // a 14B model's index is a few MB
constexpr const char* kDamaged = "the checkpoint was edited or damaged; resume from an earlier checkpoint";

std::int64_t rows_of(const std::vector<std::int64_t>& shape) { return shape.empty() ? 1 : shape[0]; }

/// The shape a piece of rows [begin, end) of `shape` has in its file.
std::vector<std::int64_t> piece_shape(std::vector<std::int64_t> shape, std::int64_t begin, std::int64_t end) {
  if (!shape.empty()) shape[0] = end - begin;
  return shape;
}

struct Piece {
  fs::path file;
  std::int64_t begin = 0, end = 0;
};

struct Entry {
  std::vector<std::int64_t> shape;
  std::string dtype;
  std::vector<Piece> pieces;  ///< in row order, covering [0, rows) once
};

/// Throws unless `pieces` (sorted here) cover [0, rows) exactly once.
void check_cover(std::vector<Piece>& pieces, std::int64_t rows, const std::string& name, const fs::path& where) {
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  std::int64_t next = 0;
  for (const Piece& p : pieces) {
    if (p.begin != next || p.end <= p.begin)
      throw FileError(fmt::format("{}: the pieces of tensor '{}' do not cover its {} rows once (rows [{}, {}) where "
                                  "row {} was due)",
                                  where.string(), name, rows, p.begin, p.end, next),
                      kDamaged);
    next = p.end;
  }
  if (next != rows && !(rows == 0 && pieces.empty()))
    throw FileError(fmt::format("{}: the pieces of tensor '{}' end at row {} of {}", where.string(), name, next, rows),
                    kDamaged);
}

/// A checkpoint file written whole.
class WholeRows final : public CheckpointRows {
 public:
  explicit WholeRows(const fs::path& path) : file_(SafetensorsFile::open(path)) {}
  bool contains(const std::string& name) const override { return file_.contains(name); }
  std::vector<std::int64_t> shape(const std::string& name) const override { return record(name).shape; }
  std::vector<std::string> names() const override {
    std::vector<std::string> all;
    for (const auto& r : file_.records()) all.push_back(r.name);
    return all;
  }
  fs::path path() const override { return file_.path(); }
  at::Tensor rows(const std::string& name, std::int64_t begin, std::int64_t end,
                  const TensorRole& role) const override {
    return read_checked(slice(name, begin, end), role, file_.path(), name);
  }
  void copy_rows(const at::Tensor& destination, const std::string& name, std::int64_t begin, std::int64_t end,
                 const TensorRole& role) const override {
    copy_checked(destination, slice(name, begin, end), role, file_.path(), name);  // one pass over the bytes
  }

 private:
  const TensorRecord& record(const std::string& name) const {
    if (!file_.contains(name))
      throw FileError(fmt::format("{}: tensor '{}' is missing", file_.path().string(), name),
                      "the checkpoint belongs to another model");
    return file_.record(name);
  }
  at::Tensor slice(const std::string& name, std::int64_t begin, std::int64_t end) const {
    const at::Tensor whole = file_.tensor(record(name).name);
    return whole.dim() == 0 ? whole : whole.narrow(0, begin, end - begin);
  }
  SafetensorsFile file_;
};

/// A checkpoint file written in pieces, through its index.
class PieceRows final : public CheckpointRows {
 public:
  PieceRows(fs::path index, std::map<std::string, Entry> entries) : index_(std::move(index)), entries_(std::move(entries)) {}
  bool contains(const std::string& name) const override { return entries_.count(name) > 0; }
  std::vector<std::int64_t> shape(const std::string& name) const override { return entry(name).shape; }
  std::vector<std::string> names() const override {
    std::vector<std::string> all;
    for (const auto& [name, e] : entries_) all.push_back(name);
    return all;
  }
  fs::path path() const override { return index_; }
  at::Tensor rows(const std::string& name, std::int64_t begin, std::int64_t end,
                  const TensorRole& role) const override {
    const Entry& e = entry(name);
    std::vector<at::Tensor> parts;
    for (const Piece& p : e.pieces) {
      const std::int64_t from = std::max(begin, p.begin), to = std::min(end, p.end);
      if (from >= to) continue;
      const SafetensorsFile& file = open(p.file);
      if (!file.contains(name) || file.record(name).shape != piece_shape(e.shape, p.begin, p.end) ||
          file.record(name).dtype_name != e.dtype)
        throw FileError(fmt::format("{}: tensor '{}' is not the piece of rows [{}, {}) of {} [{}] that {} lists",
                                    p.file.string(), name, p.begin, p.end, e.dtype, fmt::join(e.shape, ", "),
                                    index_.filename().string()),
                        kDamaged);
      const at::Tensor piece = file.tensor(name);
      parts.push_back(read_checked(piece.dim() == 0 ? piece : piece.narrow(0, from - p.begin, to - from), role,
                                   p.file, name));
    }
    if (parts.empty() && begin == end) return at::empty(piece_shape(e.shape, begin, end));
    if (parts.empty()) throw Error(fmt::format("rows [{}, {}) of '{}' asked of {}", begin, end, name, index_.string()));
    return parts.size() == 1 ? parts.front() : at::cat(parts, 0);
  }

 private:
  const Entry& entry(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end())
      throw FileError(fmt::format("{}: tensor '{}' is missing", index_.string(), name),
                      "the checkpoint belongs to another model");
    return it->second;
  }
  const SafetensorsFile& open(const fs::path& file) const {
    auto it = files_.find(file);
    if (it == files_.end()) it = files_.emplace(file, SafetensorsFile::open(file)).first;
    return it->second;
  }
  fs::path index_;
  std::map<std::string, Entry> entries_;
  mutable std::map<fs::path, SafetensorsFile> files_;
};

std::vector<std::int64_t> shape_from(const json& j, const std::function<void(const std::string&)>& fail) {
  if (!j.is_array() || j.size() > 8) fail("a shape is not an array of at most 8 sizes");
  std::vector<std::int64_t> shape;
  for (const json& d : j) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0) fail("a shape holds something other than a size");
    shape.push_back(d.get<std::int64_t>());
  }
  return shape;
}

std::map<std::string, Entry> read_index(const fs::path& index) {
  const auto fail = [&](const std::string& problem) {
    throw FileError(fmt::format("{}: {}", index.string(), problem), kDamaged);
  };
  const json j = parse_bounded_json(read_bounded_file(index, "piece index", kMaxIndexBytes, fail), 8, fail);
  if (!j.is_object() || !j.contains("tensors") || !j["tensors"].is_object()) fail("no \"tensors\" object");
  std::map<std::string, Entry> entries;
  for (const auto& [name, t] : j["tensors"].items()) {
    if (!t.is_object() || !t.contains("shape") || !t.contains("dtype") || !t["dtype"].is_string() ||
        !t.contains("pieces") || !t["pieces"].is_array())
      fail(fmt::format("tensor '{}' lacks its shape, dtype or pieces", name));
    Entry e;
    e.shape = shape_from(t["shape"], fail);
    e.dtype = t["dtype"].get<std::string>();
    for (const json& p : t["pieces"]) {
      if (!p.is_object() || !p.contains("file") || !p["file"].is_string() || !p.contains("rows") ||
          !p["rows"].is_array() || p["rows"].size() != 2 || !p["rows"][0].is_number_integer() ||
          !p["rows"][1].is_number_integer())
        fail(fmt::format("a piece of tensor '{}' is not {{\"file\": name, \"rows\": [begin, end]}}", name));
      e.pieces.push_back({confined_path(index.parent_path(), p["file"].get<std::string>(), "the checkpoint folder", fail),
                          p["rows"][0].get<std::int64_t>(), p["rows"][1].get<std::int64_t>()});
    }
    check_cover(e.pieces, rows_of(e.shape), name, index);
    entries.emplace(name, std::move(e));
  }
  return entries;
}

}  // namespace

std::string piece_file_name(const std::string& kind, int rank, int world) {
  return fmt::format("{}-{:05d}-of-{:05d}.safetensors", kind, rank, world);
}

std::string piece_index_name(const std::string& kind) { return kind + ".pieces.json"; }

void write_piece_file(const fs::path& folder, const std::string& kind, int rank, int world,
                      const std::vector<TensorRows>& pieces) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  json rows = json::object();
  for (const TensorRows& piece : pieces) {
    if (piece.end <= piece.begin) continue;
    tensors.emplace_back(piece.name, piece.rows.contiguous());
    rows[piece.name] = {{"rows", {piece.begin, piece.end}}, {"shape", piece.shape}};
  }
  write_safetensors(folder / piece_file_name(kind, rank, world), tensors, {{kPiecesKey, rows.dump()}});
}

void write_piece_index(const fs::path& folder, const std::string& kind, int world) {
  std::map<std::string, Entry> entries;
  for (int rank = 0; rank < world; ++rank) {
    const fs::path path = folder / piece_file_name(kind, rank, world);
    const SafetensorsFile file = SafetensorsFile::open(path);
    const auto fail = [&](const std::string& problem) {
      throw FileError(fmt::format("{}: {}", path.string(), problem), kDamaged);
    };
    auto it = file.metadata().find(kPiecesKey);
    if (it == file.metadata().end()) fail(fmt::format("no \"{}\" metadata", kPiecesKey));
    const json rows = parse_bounded_json(it->second, 8, fail);
    for (const TensorRecord& record : file.records()) {
      if (!rows.contains(record.name)) fail(fmt::format("tensor '{}' has no rows in the metadata", record.name));
      try {
        const json& r = rows[record.name];
        Entry& e = entries[record.name];
        e.shape = shape_from(r.at("shape"), fail);
        e.dtype = record.dtype_name;
        e.pieces.push_back(
            {path.filename(), r.at("rows").at(0).get<std::int64_t>(), r.at("rows").at(1).get<std::int64_t>()});
      } catch (const json::exception&) {
        fail(fmt::format("the rows of tensor '{}' are not {{\"rows\": [begin, end], \"shape\": [...]}}", record.name));
      }
    }
  }
  json index = {{"world_size", world}, {"tensors", json::object()}};
  for (auto& [name, e] : entries) {
    check_cover(e.pieces, rows_of(e.shape), name, folder);
    json pieces = json::array();
    for (const Piece& p : e.pieces) pieces.push_back({{"file", p.file.string()}, {"rows", {p.begin, p.end}}});
    index["tensors"][name] = {{"shape", e.shape}, {"dtype", e.dtype}, {"pieces", pieces}};
  }
  write_file_atomically(folder / piece_index_name(kind), index.dump(1) + "\n");
}

void CheckpointRows::copy_rows(const at::Tensor& destination, const std::string& name, std::int64_t begin,
                               std::int64_t end, const TensorRole& role) const {
  at::NoGradGuard no_grad;  // a parameter's value, not an operation on it
  destination.copy_(rows(name, begin, end, role).view(destination.sizes()));
}

std::unique_ptr<CheckpointRows> open_checkpoint_rows(const fs::path& folder, const std::string& kind) {
  std::error_code ec;
  const fs::path whole = folder / (kind + ".safetensors"), index = folder / piece_index_name(kind);
  if (fs::exists(whole, ec)) return std::make_unique<WholeRows>(whole);
  if (fs::exists(index, ec)) return std::make_unique<PieceRows>(index, read_index(index));
  throw FileError(fmt::format("{}: neither {} nor {} is there", folder.string(), whole.filename().string(),
                              index.filename().string()),
                  "the checkpoint is incomplete; resume from another one");
}

}  // namespace wanfw
