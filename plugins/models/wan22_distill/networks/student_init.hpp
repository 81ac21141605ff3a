#pragma once
// A student initialised from its teacher: every tensor whose shape matches is copied; a shallower
// student takes evenly spaced teacher blocks.

#include <cstdint>
#include <string>
#include <vector>

#include "networks/frozen_teacher.hpp"
#include "wan/lora.hpp"
#include "wan/wan_dit.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// The teacher block each of `student_layers` blocks starts from: evenly spaced over
/// `teacher_layers`, first and last included (round(i (T - 1) / (S - 1))); the same blocks when
/// the depths agree. A student deeper than its teacher repeats blocks.
std::vector<std::int64_t> block_mapping(std::int64_t student_layers, std::int64_t teacher_layers);

/// What init_from_teacher did, for the log.
struct StudentInit {
  std::vector<std::int64_t> blocks;  ///< student block i <- teacher block blocks[i]
  std::int64_t copied = 0;           ///< tensors copied
  std::vector<std::string> kept;     ///< student tensors left at their initialisation (no match)
};

/// Copies into `student` every parameter and buffer of `teacher` whose (block-mapped) name and
/// shape match, converting dtypes; the rest keep the student's own initialisation.
StudentInit init_from_teacher(wan::WanDiTImpl& student, const wan::WanDiTImpl& teacher);

/// How the config's `student_init` starts `student`: from `teacher`'s DiT at `index` (logged; the
/// expert of the same name when both are held), from student_weights, or left at its random
/// initialisation.
void initialise_student(const wanfw::Options& o, wan::WanDiTImpl& student, const FrozenTeacher& teacher,
                        std::size_t index = 0);

/// A student (the velocity objective's, or dmd's generator) ready to train: initialised
/// (initialise_student), its adapters attached or loaded (`lora`), and gradient_checkpointing set.
void prepare_student(const wanfw::Options& o, wan::WanDiTImpl& student, const FrozenTeacher& teacher,
                     const wan::LoraSettings& lora);

/// prepare_student for every DiT of `student` (dmd's generator of both experts: each from the
/// teacher's expert of its name, its adapters drawn as wan::WanDenoiser::apply_lora draws them).
void prepare_student(const wanfw::Options& o, wan::WanDenoiser& student, const FrozenTeacher& teacher,
                     const wan::LoraSettings& lora);

/// dmd's generator on a shared base: the teacher's weights (teacher_weights) loaded into `student`
/// itself, so that no separate copy of them is ever built, then its adapters and memory options
/// as prepare_student sets them.
void prepare_shared_base(const wanfw::Options& o, wan::WanDenoiser& student, const wan::LoraSettings& lora);

/// For its life, the default generators draw from a stream of the run seed and `what` (the
/// initial values of a set of adapters), whatever was drawn before: so adapters start the same
/// whichever networks were built first. Afterwards they are seeded with the run seed again.
class SeededDraws {
 public:
  explicit SeededDraws(const char* what);
  ~SeededDraws();
  SeededDraws(const SeededDraws&) = delete;
  SeededDraws& operator=(const SeededDraws&) = delete;

 private:
  std::uint64_t run_seed_;
};

}  // namespace wan_distill
