// Fuzz target: a checkpoint written in pieces, read through its model.pieces.json (the index fsdp's
// checkpoints carry). The input is the index; it sits in a folder with two ranks' real piece files.
// Opening fails with wanfw's FileError, or every tensor it lists covers its rows once from files
// inside the folder, and any rows read either come back in the listed shape or fail with FileError.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <ATen/ATen.h>

#include "checkpoint/state_piece_files.hpp"
#include "fuzz_folder.hpp"
#include "fuzz_target.hpp"
#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace {

/// A fresh folder with two ranks' pieces of w [3, 2] (rows [0, 2) and [2, 3)) and s (a scalar).
struct PieceFolder : FuzzFolder {
  PieceFolder();
};

PieceFolder::PieceFolder() : FuzzFolder("wanfw-fuzz-pieces") {
  const at::Tensor w = at::arange(6, at::kFloat).reshape({3, 2});
  wanfw::write_piece_file(path, "model", 0, 2,
                          {{"w", {3, 2}, 0, 2, w.narrow(0, 0, 2)}, {"s", {}, 0, 1, at::scalar_tensor(1.0)}});
  wanfw::write_piece_file(path, "model", 1, 2, {{"w", {3, 2}, 2, 3, w.narrow(0, 2, 1)}});
}

}  // namespace

WANFW_FUZZ_TARGET(piece_index) {
  static const PieceFolder pieces;
  {
    std::ofstream out(pieces.path / wanfw::piece_index_name("model"), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto rows = wanfw::open_checkpoint_rows(pieces.path, "model");
    for (const std::string& name : rows->names()) {
      const std::vector<std::int64_t> shape = rows->shape(name);
      const std::int64_t count = shape.empty() ? 1 : shape[0];
      if (count > (1 << 20)) continue;  // an index may claim any size; reading it is the files' business
      try {
        const at::Tensor all = rows->rows(name, 0, count, wanfw::TensorRole::weight());
        if (!shape.empty() && all.size(0) != count) std::abort();  // rows that came back must be the rows asked
      } catch (const wanfw::FileError&) {  // a piece file that does not hold what the index says
      }
    }
  } catch (const wanfw::FileError&) {
  }
  return 0;
}
