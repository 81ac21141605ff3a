#include <torch/torch.h>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_store.hpp"
#include "temp_dir.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/file_io.hpp"
#include "wanfw/io/safetensors.hpp"
#include "wanfw/strategy.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;
namespace fs = std::filesystem;

namespace {

struct TinyModel : Model {
  TinyModel() : net(torch::nn::Linear(3, 2)) { holder->register_module("net", net); }
  std::shared_ptr<torch::nn::Module> module() override { return holder; }
  std::vector<FieldSpec> batch_fields() const override { return {{"x", {3}}}; }
  StepOutput training_step(const Batch& batch) override { return {net(batch.at("x")).pow(2).mean(), {}}; }

  std::shared_ptr<torch::nn::Module> holder = std::make_shared<torch::nn::Module>();
  torch::nn::Linear net;
};

void train_one_step(TinyModel& model, torch::optim::AdamW& optimizer) {
  optimizer.zero_grad();
  Batch batch;
  batch.fields["x"] = torch::randn({4, 3});
  model.training_step(batch).loss.backward();
  optimizer.step();
}

/// The trainer state at `step`, `batch_in_epoch` micro-batches into epoch 0, one process.
TrainerState state_at(std::int64_t step, std::int64_t batch_in_epoch = 0, std::string config = "") {
  TrainerState state;
  state.step = step;
  state.batch_in_epoch = batch_in_epoch;
  state.config_yaml = std::move(config);
  return state;
}

/// The strategy of one process (the whole state here): what a checkpoint restores through.
struct OneProcess final : wanfw::Strategy {
  std::string describe() const override { return "one process"; }
  void setup(wanfw::Model&) override {}
  c10::Device device() const override { return c10::kCPU; }
};

/// What a resume does: open, weights, then optimizer and generators.
TrainerState restore(const fs::path& folder, TinyModel& model, torch::optim::AdamW& optimizer) {
  const auto checkpoint = Checkpoint::open(folder);
  checkpoint->load_weights(model);
  OneProcess one_process;
  checkpoint->load_training_state(model, optimizer, one_process);
  return checkpoint->state();
}

}  // namespace

TEST_CASE("a checkpoint restores the weights, the generator and the data position") {
  testing::TempDir dir;
  torch::manual_seed(1);
  TinyModel a;
  torch::optim::AdamW opt_a(a.module()->parameters(), torch::optim::AdamWOptions(0.1));
  train_one_step(a, opt_a);
  CheckpointStore store(dir.path());
  const fs::path saved = store.save(state_at(1, 4, "cfg"), a, opt_a, 0);
  const at::Tensor next_draw = torch::rand({5});

  torch::manual_seed(99);
  TinyModel b;
  torch::optim::AdamW opt_b(b.module()->parameters(), torch::optim::AdamWOptions(0.1));
  const TrainerState state = restore(saved, b, opt_b);
  CHECK(state.step == 1);
  CHECK(state.batch_in_epoch == 4);
  CHECK(torch::equal(torch::rand({5}), next_draw));  // the CPU generator continues where it was
  for (std::size_t i = 0; i < a.module()->parameters().size(); ++i)
    CHECK(torch::equal(a.module()->parameters()[i], b.module()->parameters()[i]));

}

TEST_CASE("a restored optimizer takes the same step as the original") {
  testing::TempDir dir;
  torch::manual_seed(1);
  TinyModel a;
  torch::optim::AdamW opt_a(a.module()->parameters(), torch::optim::AdamWOptions(0.1));
  train_one_step(a, opt_a);
  const fs::path saved = CheckpointStore(dir.path()).save(state_at(1), a, opt_a, 0);

  TinyModel b;
  torch::optim::AdamW opt_b(b.module()->parameters(), torch::optim::AdamWOptions(0.1));
  restore(saved, b, opt_b);
  torch::manual_seed(7);
  train_one_step(a, opt_a);
  torch::manual_seed(7);
  train_one_step(b, opt_b);
  for (std::size_t i = 0; i < a.module()->parameters().size(); ++i)
    CHECK(torch::equal(a.module()->parameters()[i], b.module()->parameters()[i]));
}

TEST_CASE("only the newest keep_last checkpoints are kept, and partial folders are never listed") {
  testing::TempDir dir;
  TinyModel model;
  torch::optim::AdamW optimizer(model.module()->parameters(), torch::optim::AdamWOptions(0.1));
  CheckpointStore store(dir.path());
  for (std::int64_t step : {1, 2, 3, 4}) store.save(state_at(step), model, optimizer, 2);
  fs::create_directories(store.folder() / ".step-00000009.partial");
  fs::create_directories(store.folder() / "step-00000010");  // no trainer state: incomplete
  const auto all = store.list();
  REQUIRE(all.size() == 2);
  CHECK(all[0].filename() == "step-00000003");
  CHECK(store.latest()->filename() == "step-00000004");
}

TEST_CASE("a doctored checkpoint is refused, naming the file and the tensor") {
  testing::TempDir dir;
  TinyModel model;
  torch::optim::AdamW optimizer(model.module()->parameters(), torch::optim::AdamWOptions(0.1));
  const fs::path saved = CheckpointStore(dir.path()).save(state_at(1), model, optimizer, 0);
  write_safetensors(saved / "model.safetensors", {{"net.weight", torch::zeros({5, 5})}, {"net.bias", torch::zeros({2})}});
  CHECK_THROWS_WITH_AS(restore(saved, model, optimizer),
                       doctest::Contains("tensor 'net.weight' has shape [5, 5] but the model expects [2, 3]"), FileError);
}

TEST_CASE("a checkpoint missing a tensor is refused, naming it") {
  testing::TempDir dir;
  TinyModel model;
  torch::optim::AdamW optimizer(model.module()->parameters(), torch::optim::AdamWOptions(0.1));
  const fs::path saved = CheckpointStore(dir.path()).save(state_at(1), model, optimizer, 0);
  write_safetensors(saved / "model.safetensors", {{"net.weight", torch::zeros({2, 3})}});
  CHECK_THROWS_WITH_AS(restore(saved, model, optimizer), doctest::Contains("'net.bias' is missing"),
                       FileError);
}

TEST_CASE("the fp16 loss scaler's state round-trips through a checkpoint") {
  testing::TempDir dir;
  TinyModel model;
  torch::optim::AdamW optimizer(model.module()->parameters(), torch::optim::AdamWOptions(0.1));
  TrainerState state = state_at(3);
  state.loss_scaler = LossScalerState{1024.0, 17};
  const fs::path saved = CheckpointStore(dir.path()).save(state, model, optimizer, 0);
  const TrainerState loaded = restore(saved, model, optimizer);
  REQUIRE(loaded.loss_scaler.has_value());
  CHECK(loaded.loss_scaler->scale == 1024.0);
  CHECK(loaded.loss_scaler->growth_tracker == 17);
  CHECK_FALSE(restore(CheckpointStore(dir.path() / "other").save(state_at(1), model, optimizer, 0),
                                    model, optimizer)
                  .loss_scaler.has_value());
}

TEST_CASE("an opened checkpoint reads its trainer state once: a file changed after opening does not change it") {
  testing::TempDir dir;
  TinyModel model;
  torch::optim::AdamW optimizer(model.module()->parameters(), torch::optim::AdamWOptions(0.1));
  train_one_step(model, optimizer);
  const fs::path saved = CheckpointStore(dir.path()).save(state_at(5, 2), model, optimizer, 0);
  const auto checkpoint = Checkpoint::open(saved);
  CHECK(checkpoint->files_read() == 1);
  write_file_atomically(saved / CheckpointStore::kStateFile, "not json");
  checkpoint->load_weights(model);
  OneProcess one_process;
  checkpoint->load_training_state(model, optimizer, one_process);
  CHECK(checkpoint->state().step == 5);
  CHECK(checkpoint->state().batch_in_epoch == 2);
  CHECK(checkpoint->files_read() == 4);
  CHECK_THROWS_WITH_AS(Checkpoint::open(saved), doctest::Contains("trainer_state.json"), FileError);
}

TEST_CASE("a checkpoint handle refuses to read one of its files a second time") {
  testing::TempDir dir;
  TinyModel model;
  torch::optim::AdamW optimizer(model.module()->parameters(), torch::optim::AdamWOptions(0.1));
  const auto checkpoint = Checkpoint::open(CheckpointStore(dir.path()).save(state_at(1), model, optimizer, 0));
  checkpoint->load_weights(model);
  CHECK_THROWS_WITH_AS(checkpoint->load_weights(model), doctest::Contains("model.safetensors: read twice"),
                       std::logic_error);
  CHECK(checkpoint->files_read() == 2);
}

TEST_CASE("a trainer state out of range is refused on opening, before any tensor is read") {
  testing::TempDir dir;
  TinyModel model;
  torch::optim::AdamW optimizer(model.module()->parameters(), torch::optim::AdamWOptions(0.1));
  const fs::path saved = CheckpointStore(dir.path()).save(state_at(1), model, optimizer, 0);
  write_file_atomically(saved / CheckpointStore::kStateFile,
                        R"({"step": 1, "epoch": 0, "batch_in_epoch": -3, "world_size": 1})");
  CHECK_THROWS_WITH_AS(Checkpoint::open(saved), doctest::Contains("'batch_in_epoch' is -3, below its least value 0"),
                       FileError);
}
