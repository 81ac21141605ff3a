#include "checkpoint/checkpoint.hpp"

#include <set>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_store.hpp"
#include "checkpoint/state_piece_files.hpp"
#include "numerics/generators.hpp"
#include "wanfw/error.hpp"
#include "wanfw/safetensors.hpp"
#include "wanfw/tensor_check.hpp"

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
  for (const auto& name : weights->names())
    if (!expected.count(name))
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
  const auto moments = open_checkpoint_rows(folder_, "optimizer");
  if (strategy.shards_state()) {
    strategy.load_optimizer_state(model, optimizer, *moments);
    return;
  }
  auto& optimizer_state = optimizer.state();
  for (const auto& [name, param] : model.trainable_parameters()) {
    if (!moments->contains(name + ".step")) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    const at::Tensor step = moments->rows(name + ".step", 0, 1, TensorRole::step_count());
    if (step.numel() != 1)
      throw FileError(fmt::format("{}: tensor '{}.step' is {} of {} elements, not one integer",
                                  moments->path().string(), name, c10::toString(step.scalar_type()), step.numel()),
                      "the checkpoint is damaged; resume from an earlier one");
    s->step(step.item<std::int64_t>());
    for (const char* field : {".exp_avg", ".exp_avg_sq"})
      if (!moments->contains(name + field))
        throw FileError(fmt::format("{}: tensor '{}{}' is missing", moments->path().string(), name, field));
    at::Tensor exp_avg = at::empty_like(param), exp_avg_sq = at::empty_like(param);
    copy_rows_into(exp_avg, *moments, name + ".exp_avg", TensorRole::first_moment());
    copy_rows_into(exp_avg_sq, *moments, name + ".exp_avg_sq", TensorRole::second_moment());
    s->exp_avg(exp_avg);
    s->exp_avg_sq(exp_avg_sq);
    if (moments->contains(name + ".max_exp_avg_sq")) {
      at::Tensor m = at::empty_like(param);
      copy_rows_into(m, *moments, name + ".max_exp_avg_sq", TensorRole::second_moment());
      s->max_exp_avg_sq(m);
    }
    optimizer_state[param.unsafeGetTensorImpl()] = std::move(s);
  }
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
