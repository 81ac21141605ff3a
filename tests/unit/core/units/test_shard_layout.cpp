#include <ATen/ATen.h>

#include "wanfw/error.hpp"
#include "wanfw/parallel/shard_layout.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

/// Shapes a model has: matrices, vectors, a scalar, a 3-d kernel, and an empty tensor.
UnitLayout mixed_unit(int world) {
  return UnitLayout({{"w", {10, 4}}, {"b", {10}}, {"scale", {}}, {"k", {3, 2, 2}}, {"none", {0, 5}}}, world);
}

std::vector<at::Tensor> random_tensors(const UnitLayout& layout, std::uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> tensors;
  for (std::size_t i = 0; i < layout.size(); ++i) tensors.push_back(at::randn(layout.shard(i).shape));
  return tensors;
}

at::Tensor gather_all(const UnitLayout& layout, const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> pieces;
  for (int r = 0; r < layout.world(); ++r) pieces.push_back(layout.pack(tensors, r, at::kFloat));
  return at::cat(pieces);
}

}  // namespace

TEST_CASE(
    "rank r holds the rows from r*c to min((r+1)*c, rows) with c = ceil(rows / world), the last ranks maybe none") {
  const RowShard four = RowShard::of({10, 3}, 4);
  CHECK(four.rows_per_rank == 3);
  CHECK(four.piece_numel() == 9);
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected = {{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  for (int r = 0; r < 4; ++r) {
    CHECK(four.begin(r) == expected[r].first);
    CHECK(four.end(r) == expected[r].second);
  }
  const RowShard many = RowShard::of({10}, 16);
  CHECK(many.rows_per_rank == 1);
  CHECK(many.begin(12) == many.end(12));  // ranks 10..15 hold only padding
  const RowShard scalar = RowShard::of({}, 3);
  CHECK(scalar.rows == 1);
  CHECK(scalar.end(0) - scalar.begin(0) == 1);
  CHECK(scalar.end(1) == scalar.begin(1));
}

TEST_CASE("every rank's packed shard, gathered and unpacked, gives back each tensor exactly") {
  for (int world : {1, 2, 3, 4, 16}) {
    CAPTURE(world);
    const UnitLayout layout = mixed_unit(world);
    const std::vector<at::Tensor> tensors = random_tensors(layout, 7);
    const std::vector<at::Tensor> full = layout.unpack(gather_all(layout, tensors));
    REQUIRE(full.size() == tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) CHECK(at::equal(full[i], tensors[i]));
  }
}

TEST_CASE("a rank's flat shard holds its real rows and zero padding after them") {
  const UnitLayout layout = mixed_unit(4);  // w: c = 3 rows; rank 3 holds row 9 and two padding rows
  const std::vector<at::Tensor> tensors = random_tensors(layout, 3);
  const at::Tensor last = layout.pack(tensors, 3, at::kFloat);
  CHECK(last.numel() == layout.shard_numel());
  CHECK(at::equal(layout.rows(last, 0, 3), tensors[0].narrow(0, 9, 1)));
  const at::Tensor w_piece = last.narrow(0, layout.offset(0), layout.shard(0).piece_numel());
  CHECK(w_piece.narrow(0, 4, 8).abs().sum().item<float>() == 0.0f);
  CHECK(layout.rows(last, 2, 3).numel() == 0);  // the scalar lives on rank 0
  CHECK(at::equal(layout.rows(layout.pack(tensors, 0, at::kFloat), 2, 0), tensors[2]));
  CHECK((layout.pack(tensors, 1, at::kBFloat16).scalar_type() == at::kBFloat16));
}

TEST_CASE("the gradient of unpack hands each rank its own rows of every tensor's gradient") {
  const UnitLayout layout = mixed_unit(3);
  const std::vector<at::Tensor> tensors = random_tensors(layout, 1);
  const std::vector<at::Tensor> weights = random_tensors(layout, 2);  // d loss / d tensor
  const at::Tensor gathered = gather_all(layout, tensors).requires_grad_(true);
  const std::vector<at::Tensor> full = layout.unpack(gathered);
  at::Tensor loss = at::zeros({});
  for (std::size_t i = 0; i < full.size(); ++i) loss = loss + (full[i] * weights[i]).sum();
  loss.backward();
  const at::Tensor grad = gathered.grad().view({3, layout.shard_numel()});
  for (int r = 0; r < 3; ++r) CHECK(at::equal(grad[r], layout.pack(weights, r, at::kFloat)));
}

TEST_CASE("a unit refuses a tensor whose shape is not its layout's, naming it") {
  const UnitLayout layout = mixed_unit(2);
  std::vector<at::Tensor> tensors = random_tensors(layout, 1);
  tensors[1] = at::zeros({11});
  CHECK_THROWS_WITH_AS(layout.pack(tensors, 0, at::kFloat),
                       doctest::Contains("tensor 'b' is [11], its layout says [10]"), Error);
  CHECK_THROWS_WITH_AS(UnitLayout({{"w", {2}}}, 0), doctest::Contains("over 0 ranks"), Error);
  CHECK_THROWS_WITH_AS(layout.unpack(at::zeros({5})), doctest::Contains("a gathered unit holds 5 values"), Error);
}
