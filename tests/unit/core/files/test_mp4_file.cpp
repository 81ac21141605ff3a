#include <filesystem>

#include <torch/torch.h>

#include "media/mp4_file.hpp"
#include "wanfw/error.hpp"
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

std::filesystem::path fresh_folder(const char* name) {
  const auto folder = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

}  // namespace

TEST_CASE("an odd-sized video is stored one row and one column larger, and nothing but the file is left") {
  const auto folder = fresh_folder("wanfw_mp4_odd_size");
  const at::Tensor frames = torch::randint(0, 256, {3, 5, 7, 3}, torch::kUInt8);
  const Mp4Written written = write_mp4(folder / "odd.mp4", frames, 16.0);
  CHECK(written.width == 8);
  CHECK(written.height == 6);
  CHECK(written.frames == 3);
  CHECK(std::filesystem::file_size(folder / "odd.mp4") > 0);
  CHECK(std::distance(std::filesystem::directory_iterator(folder), std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("an mp4 that cannot be written is refused naming the file, and leaves no temporary file") {
  const auto folder = fresh_folder("wanfw_mp4_unwritable");
  const auto path = folder / "missing" / "clip.mp4";  // its folder does not exist
  const at::Tensor frames = torch::zeros({2, 4, 4, 3}, torch::kUInt8);
  CHECK_THROWS_WITH_AS(write_mp4(path, frames, 16.0), doctest::Contains(path.string().c_str()), FileError);
  CHECK(std::distance(std::filesystem::directory_iterator(folder), std::filesystem::directory_iterator()) == 0);
}
