#include "checkpoint/checkpoint_store.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "numerics/generators.hpp"
#include "wanfw/bounded_input.hpp"
#include "wanfw/error.hpp"
#include "wanfw/file_io.hpp"
#include "wanfw/safetensors.hpp"
#include "wanfw/tensor_check.hpp"
#include "wanfw/version.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wanfw {

namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr std::uintmax_t kMaxStateBytes = 64 << 20;  // a state with its config is a few KB

/// trainer_state.json of `checkpoint`, parsed (bounded: the file may have been edited or damaged).
json read_state(const fs::path& checkpoint) {
  const fs::path path = checkpoint / kStateFile;
  const auto fail = [&](const std::string& problem) {
    throw FileError(fmt::format("{}: {}", path.string(), problem),
                    "the trainer state was edited or damaged; resume from an earlier checkpoint");
  };
  return parse_bounded_json(read_bounded_file(path, "trainer state", kMaxStateBytes, fail), 8, fail);
}

std::vector<std::pair<std::string, at::Tensor>> optimizer_tensors(Model& model, torch::optim::AdamW& optimizer) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  auto& state = optimizer.state();
  for (const auto& [name, param] : model.trainable_parameters()) {
    auto it = state.find(param.unsafeGetTensorImpl());
    if (it == state.end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    tensors.emplace_back(name + ".step", at::scalar_tensor(s.step(), at::kLong));
    tensors.emplace_back(name + ".exp_avg", s.exp_avg());
    tensors.emplace_back(name + ".exp_avg_sq", s.exp_avg_sq());
    if (s.max_exp_avg_sq().defined()) tensors.emplace_back(name + ".max_exp_avg_sq", s.max_exp_avg_sq());
  }
  return tensors;
}

std::vector<std::pair<std::string, at::Tensor>> generator_states() {
  std::vector<std::pair<std::string, at::Tensor>> states;
  for (auto& [name, generator] : default_generators()) states.emplace_back(name, generator.get_state());
  return states;
}

/// Copies `source` into `destination` once it passed the gate for `role`.
void copy_into(const at::Tensor& destination, const at::Tensor& source, const fs::path& file, const std::string& name,
               const TensorRole& role) {
  if (destination.sizes() != source.sizes())
    throw FileError(fmt::format("{}: tensor '{}' has shape {} but the model expects {}", file.string(), name,
                                c10::str(source.sizes()), c10::str(destination.sizes())),
                    "the checkpoint belongs to a model of another configuration");
  copy_checked(destination, source, role, file, name);
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

CheckpointStore::CheckpointStore(fs::path run_dir) : folder_(std::move(run_dir) / "checkpoints") {}

bool CheckpointStore::is_checkpoint(const fs::path& folder) {
  std::error_code ec;
  const std::string name = folder.filename().string();
  // step-<at most 18 digits>: any step a run can reach, and a number that converts.
  return name.size() > 5 && name.size() <= 5 + 18 && name.rfind("step-", 0) == 0 &&
         name.find_first_not_of("0123456789", 5) == std::string::npos && fs::is_regular_file(folder / kStateFile, ec);
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
  auto step_of = [](const fs::path& p) { return std::stoll(p.filename().string().substr(5)); };
  std::sort(out.begin(), out.end(), [&](const fs::path& a, const fs::path& b) { return step_of(a) < step_of(b); });
  return out;
}

std::optional<fs::path> CheckpointStore::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

fs::path CheckpointStore::save(const TrainerState& state, Model& model, torch::optim::AdamW& optimizer,
                               std::int64_t keep_last) {
  const std::string name = fmt::format("step-{:08d}", state.step);
  const fs::path final_path = folder_ / name;
  const fs::path temp = folder_ / fmt::format(".{}.partial", name);
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec)
    throw FileError(fmt::format("{}: cannot create the checkpoint folder: {}", folder_.string(), ec.message()));
  fs::remove_all(temp, ec);
  fs::create_directories(temp, ec);
  try {
    write_safetensors(temp / "model.safetensors", model.checkpoint_tensors(), {{"format", "pt"}});
    write_safetensors(temp / "optimizer.safetensors", optimizer_tensors(model, optimizer),
                      {{"optimizer", "adamw"}});
    write_safetensors(temp / "rng.safetensors", generator_states());
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
    fs::remove_all(final_path, ec);
    fs::rename(temp, final_path);
    sync_directory(folder_);
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
  if (keep_last > 0) {
    auto all = list();
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last) < all.size(); ++i) fs::remove_all(all[i], ec);
  }
  return final_path;
}

std::int64_t CheckpointStore::load_step(const fs::path& checkpoint) {
  const json state = read_state(checkpoint);
  try {
    return state.at("step").get<std::int64_t>();
  } catch (const json::exception& e) {
    throw FileError(fmt::format("{}: malformed trainer state: {}", (checkpoint / kStateFile).string(),
                                shortened(e.what())),
                    "resume from an earlier checkpoint");
  }
}

void CheckpointStore::load_weights(const fs::path& checkpoint, Model& model) {
  // Every parameter and buffer must be present with the right shape.
  const fs::path model_file = checkpoint / "model.safetensors";
  const SafetensorsFile weights = SafetensorsFile::open(model_file);
  std::set<std::string> expected;
  for (const auto& [name, tensor] : model.checkpoint_tensors()) {
    expected.insert(name);
    if (!weights.contains(name))
      throw FileError(fmt::format("{}: tensor '{}' is missing", model_file.string(), name),
                      "the checkpoint belongs to another model");
    copy_into(tensor, weights.tensor(name), model_file, name, model_tensor_role(tensor));
  }
  for (const auto& record : weights.records())
    if (!expected.count(record.name))
      throw FileError(fmt::format("{}: unexpected tensor '{}' (the model has no such parameter)",
                                  model_file.string(), record.name),
                      "the checkpoint belongs to another model");

}

TrainerState CheckpointStore::load(const fs::path& checkpoint, Model& model, torch::optim::AdamW& optimizer) {
  load_weights(checkpoint, model);
  return load_training_state(checkpoint, model, optimizer);
}

TrainerState CheckpointStore::load_training_state(const fs::path& checkpoint, Model& model,
                                                  torch::optim::AdamW& optimizer) {
  const fs::path state_path = checkpoint / kStateFile;
  const json j = read_state(checkpoint);
  TrainerState state;
  try {
    state.step = j.at("step").get<std::int64_t>();
    state.epoch = j.at("epoch").get<std::int64_t>();
    state.batch_in_epoch = j.at("batch_in_epoch").get<std::int64_t>();
    state.samples_in_epoch = j.value("samples_in_epoch", std::int64_t{-1});
    state.world_size = j.at("world_size").get<std::int64_t>();
    state.config_yaml = j.value("config", "");
    for (const auto& [key, value, least] : {std::tuple{"step", state.step, 0L}, {"epoch", state.epoch, 0L},
                                            {"batch_in_epoch", state.batch_in_epoch, 0L},
                                            {"samples_in_epoch", state.samples_in_epoch, -1L},
                                            {"world_size", state.world_size, 1L}})
      if (value < least)
        throw FileError(fmt::format("{}: '{}' is {}, below its least value {}", state_path.string(), key, value, least),
                        "the trainer state was edited or damaged; resume from an earlier checkpoint");
    if (j.contains("loss_scaler")) {
      state.loss_scaler = LossScalerState{j["loss_scaler"].at("scale").get<double>(),
                                          j["loss_scaler"].at("growth_tracker").get<std::int64_t>()};
      if (!std::isfinite(state.loss_scaler->scale) || state.loss_scaler->scale <= 0)
        throw FileError(fmt::format("{}: the loss scale is {}, not a positive finite number", state_path.string(),
                                    state.loss_scaler->scale),
                        "the trainer state was edited or damaged; resume from an earlier checkpoint");
      if (state.loss_scaler->growth_tracker < 0)
        throw FileError(fmt::format("{}: the loss scaler's growth_tracker is {}; it counts steps and is never "
                                    "negative",
                                    state_path.string(), state.loss_scaler->growth_tracker),
                        "the trainer state was edited or damaged; resume from an earlier checkpoint");
    }
  } catch (const json::exception& e) {
    throw FileError(fmt::format("{}: malformed trainer state: {}", state_path.string(), shortened(e.what())),
                    "the trainer state was edited or damaged; resume from an earlier checkpoint");
  }

  // Optimizer moments.
  const fs::path optimizer_file = checkpoint / "optimizer.safetensors";
  const SafetensorsFile moments = SafetensorsFile::open(optimizer_file);
  auto& optimizer_state = optimizer.state();
  for (const auto& [name, param] : model.trainable_parameters()) {
    if (!moments.contains(name + ".step")) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    const at::Tensor step = moments.load(name + ".step");
    check_tensor(step, TensorRole::step_count(), optimizer_file, name + ".step");
    if (step.numel() != 1)
      throw FileError(fmt::format("{}: tensor '{}.step' is {} of {} elements, not one integer", optimizer_file.string(),
                                  name, c10::toString(step.scalar_type()), step.numel()),
                      "the checkpoint is damaged; resume from an earlier one");
    s->step(step.item<std::int64_t>());
    for (const char* field : {".exp_avg", ".exp_avg_sq"})
      if (!moments.contains(name + field))
        throw FileError(fmt::format("{}: tensor '{}{}' is missing", optimizer_file.string(), name, field));
    at::Tensor exp_avg = at::empty_like(param), exp_avg_sq = at::empty_like(param);
    copy_into(exp_avg, moments.tensor(name + ".exp_avg"), optimizer_file, name + ".exp_avg",
              TensorRole::first_moment());
    copy_into(exp_avg_sq, moments.tensor(name + ".exp_avg_sq"), optimizer_file, name + ".exp_avg_sq",
              TensorRole::second_moment());
    s->exp_avg(exp_avg);
    s->exp_avg_sq(exp_avg_sq);
    if (moments.contains(name + ".max_exp_avg_sq")) {
      at::Tensor m = at::empty_like(param);
      copy_into(m, moments.tensor(name + ".max_exp_avg_sq"), optimizer_file, name + ".max_exp_avg_sq",
                TensorRole::second_moment());
      s->max_exp_avg_sq(m);
    }
    optimizer_state[param.unsafeGetTensorImpl()] = std::move(s);
  }

  // Generators last, so that nothing above consumes random numbers after the restore.
  const fs::path rng_file = checkpoint / "rng.safetensors";
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
      throw FileError(fmt::format("{}: tensor '{}' is not a state the {} generator accepts", rng_file.string(), name,
                                  name),
                      "the file was edited or damaged: resume from an earlier checkpoint");
    }
  }
  return state;
}

}  // namespace wanfw
