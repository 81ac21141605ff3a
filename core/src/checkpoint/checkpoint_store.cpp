#include "checkpoint/checkpoint_store.hpp"

#include <algorithm>
#include <exception>
#include <functional>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "checkpoint/state_piece_files.hpp"
#include "host/fault_point.hpp"
#include "numerics/generators.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/version.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

/// The tensor files of a checkpoint: whole (piece_world 0) or a file a rank, with their indexes.
std::vector<std::string> tensor_files(int piece_world, bool with_indexes) {
  if (piece_world == 0) return {CheckpointStore::kModelFile, CheckpointStore::kOptimizerFile};
  std::vector<std::string> files;
  for (const char* kind : {"model", "optimizer"}) {
    for (int rank = 0; rank < piece_world; ++rank) files.push_back(piece_file_name(kind, rank, piece_world));
    if (with_indexes) files.push_back(piece_index_name(kind));
  }
  return files;
}

/// Checks that `files` are still in `temp`, whole: one removed or cut short since it was written
/// (a cleaner, a quota, another job on the same run folder) must not end up in a folder that
/// looks like a complete checkpoint.
void check_files(const fs::path& temp, const std::vector<std::string>& files, const std::string& name) {
  const char* hint = "something removed or changed it while the checkpoint was written (a cleaner, a quota, another "
                     "job writing this run folder); the previous checkpoint is intact: resume with --resume auto";
  for (const std::string& file : files) {
    const fs::path path = temp / file;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw FileError(fmt::format("checkpoint {}: {} vanished before the checkpoint was complete{}", name,
                                  path.string(), free_space_note(temp)),
                      hint);
    if (path.extension() != ".safetensors") continue;
    try {
      SafetensorsFile::open(path);
    } catch (const Error& e) {
      throw FileError(fmt::format("checkpoint {}: {} was damaged before the checkpoint was complete{}: {}", name,
                                  path.string(), free_space_note(temp), e.what()),
                      hint);
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> optimizer_tensors(Model& model, torch::optim::AdamW& optimizer) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& [name, param] : model.trainable_parameters())
    for (auto& tensor : optimizer_state_tensors(name, param, optimizer)) tensors.push_back(std::move(tensor));
  return tensors;
}

std::vector<std::pair<std::string, at::Tensor>> generator_states() {
  std::vector<std::pair<std::string, at::Tensor>> states;
  for (auto& [name, generator] : default_generators()) states.emplace_back(name, generator.get_state());
  return states;
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path run_dir) : folder_(std::move(run_dir) / "checkpoints") {}

bool CheckpointStore::is_checkpoint(const fs::path& folder) {
  std::error_code ec;
  const std::string name = folder.filename().string();
  // step-<at most 18 digits>: any step a run can reach, and a number that converts.
  return name.size() > 5 && name.size() <= 5 + 18 && name.rfind("step-", 0) == 0 &&
         name.find_first_not_of("0123456789", 5) == std::string::npos && fs::is_regular_file(folder / kStateFile, ec);
}

std::int64_t CheckpointStore::step_of(const fs::path& checkpoint) {
  return std::stoll(checkpoint.filename().string().substr(5));
}

std::vector<fs::path> CheckpointStore::list() const {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(folder_, ec)) return out;
  for (fs::directory_iterator it(folder_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code entry_error;  // a symlink loop or dangling link: skipped, named, the scan goes on
    if (it->is_directory(entry_error) && is_checkpoint(it->path())) out.push_back(it->path());
    else if (entry_error) spdlog::warn("skipped {}: {}", it->path().string(), entry_error.message());
  }
  if (ec) spdlog::warn("{}: listing stopped early: {}", folder_.string(), ec.message());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) { return step_of(a) < step_of(b); });
  return out;
}

std::optional<fs::path> CheckpointStore::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

void CheckpointStore::prepare(const fs::path& temp) const {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec)
    throw FileError(fmt::format("{}: cannot create the checkpoint folder: {}", folder_.string(), ec.message()));
  fs::remove_all(temp, ec);
  // What a kill left behind: folders half deleted or moved aside (never a checkpoint's name).
  for (fs::directory_iterator it(folder_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(".step-") && (name.ends_with(".deleting") || name.ends_with(".replaced"))) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }
  ec.clear();
  fs::create_directories(temp, ec);
  if (ec) throw FileError(fmt::format("{}: cannot create the folder: {}", temp.string(), ec.message()));
}

void CheckpointStore::complete(const TrainerState& state, const fs::path& temp, const fs::path& final_path,
                               std::int64_t keep_last, int piece_world) const {
  write_safetensors(temp / kGeneratorFile, generator_states());
  json trainer_state = {{"step", state.step},
                        {"epoch", state.epoch},
                        {"batch_in_epoch", state.batch_in_epoch},
                        {"samples_in_epoch", state.samples_in_epoch},
                        {"world_size", state.world_size},
                        {"wanfw_version", version()},
                        {"torch_version", host_torch_version()},
                        {"config", state.config_yaml}};
  if (state.loss_scaler)
    trainer_state["loss_scaler"] = {{"scale", state.loss_scaler->scale},
                                    {"growth_tracker", state.loss_scaler->growth_tracker}};
  write_file_atomically(temp / kStateFile, trainer_state.dump(2) + "\n");
  fault_point("checkpoint-rename", 0, state.step);  // the main process
  std::vector<std::string> files = tensor_files(piece_world, true);
  files.insert(files.end(), {kGeneratorFile, kStateFile});
  check_files(temp, files, final_path.filename().string());
  // A checkpoint of this step already there (a resume from an earlier one) moves aside first, so
  // that a kill at any moment leaves one whole folder under the name.
  const fs::path replaced = folder_ / fmt::format(".{}.replaced", final_path.filename().string());
  std::error_code ec;
  if (fs::exists(final_path, ec)) fs::rename(final_path, replaced);
  fs::rename(temp, final_path);
  sync_directory(folder_);
  fs::remove_all(replaced, ec);
  if (keep_last > 0) {
    auto all = list();
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last) < all.size(); ++i) discard(all[i]);
  }
}

void CheckpointStore::discard(const fs::path& checkpoint) const {
  // Renamed out of the checkpoints' names first: a kill while its files go leaves no folder that
  // looks like a checkpoint with some of its files missing.
  const fs::path doomed = folder_ / fmt::format(".{}.deleting", checkpoint.filename().string());
  std::error_code ec;
  fs::rename(checkpoint, doomed, ec);
  fs::remove_all(ec ? checkpoint : doomed, ec);
}

fs::path CheckpointStore::save(const TrainerState& state, Model& model, torch::optim::AdamW& optimizer,
                               std::int64_t keep_last) {
  const std::string name = fmt::format("step-{:08d}", state.step);
  const fs::path final_path = folder_ / name, temp = folder_ / fmt::format(".{}.partial", name);
  prepare(temp);
  try {
    write_safetensors(temp / kModelFile, model.checkpoint_tensors(), {{"format", "pt"}});
    write_safetensors(temp / kOptimizerFile, optimizer_tensors(model, optimizer), {{"optimizer", "adamw"}});
    complete(state, temp, final_path, keep_last, 0);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(temp, ec);
    throw;
  }
  return final_path;
}

fs::path CheckpointStore::save_pieces(const TrainerState& state, const StatePieces& pieces, Strategy& strategy,
                                      std::int64_t keep_last) {
  const std::string name = fmt::format("step-{:08d}", state.step);
  const fs::path final_path = folder_ / name, temp = folder_ / fmt::format(".{}.partial", name);
  const int rank = strategy.rank(), world = strategy.world_size();
  // Each phase ends with every rank learning whether any failed, so none waits on a rank that gave up.
  const auto phase = [&](const char* what, const std::function<void()>& body) {
    std::exception_ptr failure;
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
    const double failed = strategy.all_reduce({failure ? static_cast<double>(world - rank) : 0.0}, Reduce::Max).at(0);
    if (failed == 0) return;
    std::error_code ec;
    if (strategy.is_main()) fs::remove_all(temp, ec);
    if (failure) std::rethrow_exception(failure);
    throw FileError(fmt::format("checkpoint {}: rank {} failed {}", name, world - static_cast<int>(failed), what),
                    "that rank's error says why; the previous checkpoint is intact");
  };
  phase("preparing the folder", [&] {
    if (strategy.is_main()) prepare(temp);
  });
  phase("writing its pieces", [&] {
    write_piece_file(temp, "model", rank, world, pieces.model);
    write_piece_file(temp, "optimizer", rank, world, pieces.optimizer);
    fault_point("checkpoint-pieces", rank, state.step);
  });
  phase("completing the checkpoint", [&] {
    if (!strategy.is_main()) return;
    check_files(temp, tensor_files(world, false), name);
    write_piece_index(temp, "model", world);
    write_piece_index(temp, "optimizer", world);
    fault_point("checkpoint-index", rank, state.step);
    complete(state, temp, final_path, keep_last, world);
  });
  return final_path;
}

}  // namespace wanfw
