#include <torch/torch.h>

#include "checkpoint/state_piece_files.hpp"
#include "temp_dir.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"
#include "wanfw/parallel/shard_layout.hpp"

#include <doctest/doctest.h>

using namespace wanfw;
namespace fs = std::filesystem;

namespace {

/// Writes `tensors` as `world` ranks would (each its RowShard rows), then the index.
void write_in_pieces(const fs::path& folder, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     int world) {
  for (int rank = 0; rank < world; ++rank) {
    std::vector<TensorRows> pieces;
    for (const auto& [name, t] : tensors) {
      const RowShard s = RowShard::of(t.sizes().vec(), world);
      if (s.end(rank) <= s.begin(rank)) continue;
      pieces.push_back({name, s.shape, s.begin(rank), s.end(rank),
                        t.dim() == 0 ? t : t.narrow(0, s.begin(rank), s.end(rank) - s.begin(rank))});
    }
    write_piece_file(folder, "model", rank, world, pieces);
  }
  write_piece_index(folder, "model", world);
}

std::vector<std::pair<std::string, at::Tensor>> sample_tensors() {
  torch::manual_seed(3);
  return {{"w", torch::randn({7, 3})}, {"b", torch::randn({2})}, {"s", torch::tensor(5.0)}};
}

}  // namespace

TEST_CASE("rows written in pieces by 3 ranks read back for any range, as a 2-rank or whole layout asks") {
  testing::TempDir dir;
  const auto tensors = sample_tensors();
  write_in_pieces(dir.path(), tensors, 3);
  const auto rows = open_checkpoint_rows(dir.path(), "model");
  CHECK(rows->names() == std::vector<std::string>{"b", "s", "w"});
  const at::Tensor& w = tensors[0].second;
  CHECK(torch::equal(rows->rows("w", 0, 7, TensorRole::weight()), w));
  // 3 ranks wrote rows [0,3) [3,6) [6,7); a 2-rank layout reads [0,4) and [4,7) across them.
  CHECK(torch::equal(rows->rows("w", 0, 4, TensorRole::weight()), w.narrow(0, 0, 4)));
  CHECK(torch::equal(rows->rows("w", 4, 7, TensorRole::weight()), w.narrow(0, 4, 3)));
  CHECK(torch::equal(rows->rows("b", 1, 2, TensorRole::weight()), tensors[1].second.narrow(0, 1, 1)));
  CHECK(rows->rows("s", 0, 1, TensorRole::weight()).item<float>() == 5.0f);
  CHECK(rows->shape("w") == std::vector<std::int64_t>{7, 3});
}

/// An index for w [7, 3] in two pieces: rows [0, 4) of rank 0's file and `second` of `file`.
static std::string index_of_w(const std::string& file, const std::string& second) {
  return R"({"world_size": 2, "tensors": {"w": {"shape": [7, 3], "dtype": "F32", "pieces": [)"
         R"({"file": "model-00000-of-00002.safetensors", "rows": [0, 4]}, {"file": ")" +
         file + R"(", "rows": )" + second + "}]}}}";
}

TEST_CASE("a piece index whose pieces overlap is refused naming the tensor and the rows") {
  testing::TempDir dir;
  write_in_pieces(dir.path(), sample_tensors(), 2);
  write_file_atomically(dir.path() / piece_index_name("model"),
                        index_of_w(piece_file_name("model", 1, 2), "[3, 7]"));
  CHECK_THROWS_WITH_AS(open_checkpoint_rows(dir.path(), "model"),
                       doctest::Contains("the pieces of tensor 'w' do not cover its 7 rows once (rows [3, 7) where "
                                         "row 4 was due)"),
                       FileError);
}

TEST_CASE("a piece index naming a file outside its folder is refused before anything is read") {
  testing::TempDir dir;
  write_in_pieces(dir.path(), sample_tensors(), 2);
  write_file_atomically(dir.path() / piece_index_name("model"), index_of_w("../elsewhere.safetensors", "[4, 7]"));
  CHECK_THROWS_WITH_AS(open_checkpoint_rows(dir.path(), "model"), doctest::Contains("leaves"), FileError);
}

TEST_CASE("a piece file whose tensor is not the rows its index lists is refused naming both") {
  testing::TempDir dir;
  write_in_pieces(dir.path(), sample_tensors(), 2);
  // Rank 1's file rewritten with w's rows of another shape.
  write_piece_file(dir.path(), "model", 1, 2, {{"w", {7, 3}, 4, 7, torch::zeros({3, 2})}});
  const auto rows = open_checkpoint_rows(dir.path(), "model");
  CHECK_THROWS_WITH_AS(rows->rows("w", 0, 7, TensorRole::weight()),
                       doctest::Contains("tensor 'w' is not the piece of rows [4, 7) of F32 [7, 3]"), FileError);
}

TEST_CASE("a non-finite value in a piece is refused by the tensor gate, naming the piece file") {
  testing::TempDir dir;
  auto tensors = sample_tensors();
  tensors[0].second[5][1] = std::numeric_limits<float>::quiet_NaN();
  write_in_pieces(dir.path(), tensors, 2);
  const auto rows = open_checkpoint_rows(dir.path(), "model");
  CHECK(torch::equal(rows->rows("w", 0, 4, TensorRole::weight()), tensors[0].second.narrow(0, 0, 4)));
  CHECK_THROWS_WITH_AS(rows->rows("w", 0, 7, TensorRole::weight()),
                       doctest::Contains(piece_file_name("model", 1, 2).c_str()), FileError);
}
