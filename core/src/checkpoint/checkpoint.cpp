#include "checkpoint/checkpoint.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_store.hpp"
#include "checkpoint/state_piece_files.hpp"
#include "numerics/generators.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/io/tensor_check.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

enum FileBit : unsigned { kStateBit = 1, kModelBit = 2, kOptimizerBit = 4, kGeneratorBit = 8 };

/// Copies the whole of `name` from `source` into `destination` once it passed the gate for `role`.
void copy_rows_into(const at::Tensor& destination, const CheckpointRows& source, const std::string& name,
                    const TensorRole& role) {
  const std::vector<std::int64_t> shape = source.shape(name);
  if (destination.sizes() != at::IntArrayRef(shape))
    throw FileError(fmt::format("{}: tensor '{}' has shape {} but the model expects {}", source.path().string(), name,
                                c10::str(at::IntArrayRef(shape)), c10::str(destination.sizes())),
                    "the checkpoint belongs to a model of another configuration");
  source.copy_rows(destination, name, 0, shape.empty() ? 1 : shape[0], role);
}

/// A model's tensor: a weight where it is floating point, a count (buffers such as step counters) otherwise.
TensorRole model_tensor_role(const at::Tensor& destination) {
  if (at::isFloatingType(destination.scalar_type())) return TensorRole::weight();
  TensorRole count = TensorRole::step_count();
  count.what = "an integer buffer";
  count.nonnegative = false;
  return count;
}

}  // namespace

std::shared_ptr<const Checkpoint> Checkpoint::open(const fs::path& folder) {
  auto checkpoint = std::shared_ptr<Checkpoint>(new Checkpoint(folder));
  const fs::path path = checkpoint->take(CheckpointStore::kStateFile, kStateBit);
  checkpoint->state_ = read_trainer_state(path);
  // The folder's name is the step the store sorts and resumes by: a state of another step would
  // resume at a step the folder does not hold (a copied or renamed checkpoint).
  const std::int64_t state_step = checkpoint->state_.step;
  if (CheckpointStore::is_checkpoint(folder) && CheckpointStore::step_of(folder) != state_step)
    throw FileError(fmt::format("{}: the trainer state is at step {}, but its folder {} names step {}", path.string(),
                                state_step, folder.filename().string(), CheckpointStore::step_of(folder)),
                    fmt::format("a checkpoint folder keeps the name its run wrote: if the state is right, name the "
                                "folder step-{:08d}; else resume from another checkpoint",
                                state_step));
  return checkpoint;
}

fs::path Checkpoint::take(const char* file, unsigned bit) const {
  if ((read_ & bit) != 0)
    throw std::logic_error(fmt::format("{}: read twice through one checkpoint handle", (folder_ / file).string()));
  read_ |= bit;
  return folder_ / file;
}

void Checkpoint::load_weights(Model& model) const {
  // Every parameter and buffer must be present with the right shape.
  take(CheckpointStore::kModelFile, kModelBit);
  const auto weights = open_checkpoint_rows(folder_, "model");
  std::set<std::string> expected;
  for (const auto& [name, tensor] : model.checkpoint_tensors()) {
    expected.insert(name);
    if (!weights->contains(name))
      throw FileError(fmt::format("{}: tensor '{}' is missing", weights->path().string(), name),
                      "the checkpoint belongs to another model");
    copy_rows_into(tensor, *weights, name, model_tensor_role(tensor));
  }
  // Under networks on rank groups a rank holds one network: the others' tensors are for other ranks.
  std::vector<std::string> elsewhere;
  for (const PlaceableNetwork& network : model.networks())
    if (std::none_of(expected.begin(), expected.end(),
                     [&](const std::string& name) { return name.rfind(network.checkpoint_prefix, 0) == 0; }))
      elsewhere.push_back(network.checkpoint_prefix);
  for (const auto& name : weights->names())
    if (!expected.count(name) && std::none_of(elsewhere.begin(), elsewhere.end(), [&](const std::string& prefix) {
          return name.rfind(prefix, 0) == 0;
        }))
      throw FileError(
          fmt::format("{}: unexpected tensor '{}' (the model has no such parameter)", weights->path().string(), name),
          "the checkpoint belongs to another model");
}

void Checkpoint::load_training_state(Model& model, torch::optim::AdamW& optimizer, Strategy& strategy) const {
  load_optimizer(model, optimizer, strategy);
  load_generators();  // last, so that nothing above consumes random numbers after the restore
}

void Checkpoint::load_optimizer(Model& model, torch::optim::AdamW& optimizer, Strategy& strategy) const {
  take(CheckpointStore::kOptimizerFile, kOptimizerBit);
  // Whatever layout wrote it (whole, or in pieces), each strategy restores what its rank holds.
  strategy.load_optimizer_state(model, optimizer, *open_checkpoint_rows(folder_, "optimizer"));
}

void Checkpoint::load_generators() const {
  const fs::path rng_file = take(CheckpointStore::kGeneratorFile, kGeneratorBit);
  const SafetensorsFile generators = SafetensorsFile::open(rng_file);
  for (auto& [name, generator] : default_generators()) {
    if (!generators.contains(name)) {
      spdlog::warn("{}: no state for generator {}; it continues unrestored", rng_file.string(), name);
      continue;
    }
    // The state's size is the generator's own (5056 bytes for the CPU's, 16 for a GPU's).
    const at::Tensor saved = generators.tensor(name);
    const std::vector<std::int64_t> own_size{generator.get_state().numel()};
    check_tensor(saved, TensorRole::generator_state(), rng_file, name, own_size);
    try {
      generator.set_state(saved.clone());
    } catch (const c10::Error&) {  // LibTorch's own check of the bytes, said in our words
      throw FileError(
          fmt::format("{}: tensor '{}' is not a state the {} generator accepts", rng_file.string(), name, name),
          "the file was edited or damaged: resume from an earlier checkpoint");
    }
  }
}

}  // namespace wanfw
