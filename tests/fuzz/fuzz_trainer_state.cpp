// Fuzz target: a checkpoint's trainer_state.json, as every resume reads it (Checkpoint::open through
// read_trainer_state). Every input either reads into a position that can be resumed from (each
// field at or above its least value, a positive finite loss scale and a growth tracker that counts)
// or fails with a wanfw::Error; a crash, a sanitizer report or another exception is a finding.
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "checkpoint/trainer_state_file.hpp"
#include "fuzz_memory_file.hpp"
#include "fuzz_target.hpp"
#include "wanfw/error.hpp"

WANFW_FUZZ_TARGET(trainer_state) {
  static MemoryFile file("trainer_state.json");
  file.write(data, size);
  wanfw::TrainerState s;
  try {
    s = wanfw::read_trainer_state(file.path);
  } catch (const wanfw::Error&) {
    return 0;
  }
  if (s.step < 0 || s.epoch < 0 || s.batch_in_epoch < 0 || s.samples_in_epoch < -1 || s.world_size < 1) std::abort();
  if (s.loss_scaler && (!std::isfinite(s.loss_scaler->scale) || !(s.loss_scaler->scale > 0) ||
                        s.loss_scaler->growth_tracker < 0))
    std::abort();
  return 0;
}
