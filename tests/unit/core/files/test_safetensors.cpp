#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "temp_dir.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

TEST_CASE("every supported dtype survives a write and a read bit for bit") {
  testing::TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  const at::Tensor base = at::randn({3, 5});
  for (auto dtype : {at::kBool, at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kHalf, at::kBFloat16,
                     at::kFloat, at::kDouble, at::kUInt16, at::kUInt32, at::kUInt64})
    tensors.emplace_back(std::string("t_") + c10::toString(dtype), (base * 10).to(dtype));
  tensors.emplace_back("scalar", at::scalar_tensor(3.5));
  tensors.emplace_back("empty", at::empty({0, 4}));
  write_safetensors(dir / "all.safetensors", tensors, {{"format", "pt"}});

  const SafetensorsFile file = SafetensorsFile::open(dir / "all.safetensors");
  CHECK(file.metadata().at("format") == "pt");
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor loaded = file.tensor(name);
    CHECK((loaded.scalar_type() == tensor.scalar_type()));
    CHECK((loaded.sizes() == tensor.sizes()));
    CHECK(at::equal(loaded, tensor));
  }
}

TEST_CASE("a checkpoint sharded through an index json reads as one") {
  testing::TempDir dir;
  write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", at::ones({2})}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {{"b", at::zeros({3})}});
  nlohmann::json index = {{"metadata", {{"total_size", 20}}},
                          {"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  testing::write_text(dir / "model.safetensors.index.json", index.dump());
  const SafetensorsCheckpoint checkpoint = SafetensorsCheckpoint::open(dir.path());
  CHECK(checkpoint.names() == std::vector<std::string>{"a", "b"});
  CHECK(at::equal(checkpoint.tensor("b"), at::zeros({3})));
  CHECK(checkpoint.file_of("a").filename() == "model-00001-of-00002.safetensors");
}

TEST_CASE("a missing shard is named in the error") {
  testing::TempDir dir;
  testing::write_text(dir / "model.safetensors.index.json",
                      R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})");
  CHECK_THROWS_WITH_AS(SafetensorsCheckpoint::open(dir / "model.safetensors.index.json"),
                       doctest::Contains("model-00001-of-00002.safetensors (holding 'a') is missing"), FileError);
}

TEST_CASE("tensors viewing the mapping keep it alive after the file object is gone") {
  testing::TempDir dir;
  write_safetensors(dir / "w.safetensors", {{"w", at::arange(6, at::kFloat)}});
  at::Tensor view;
  {
    const SafetensorsFile file = SafetensorsFile::open(dir / "w.safetensors");
    view = file.tensor("w");
  }
  CHECK(view.sum().item<float>() == 15.0f);
}
