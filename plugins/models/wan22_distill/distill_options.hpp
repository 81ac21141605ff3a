#pragma once
// The options of `wan22_distill` both objectives share: their schema, and the networks and
// settings read from them, checked against each other. DMD's own are in dmd/dmd_schema.hpp.

#include <string>
#include <vector>

#include <torch/types.h>

#include "distill_settings.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// The plugin's whole schema: the teacher's and the student's dimensions, the shared options,
/// DMD's, the student's adapters, the timesteps and the sampler.
std::vector<wanfw::OptionSpec> distill_options();

/// The two networks: the teacher's and the student's configs, and the teacher's expert.
struct Networks {
  wan::WanConfig teacher, student;
  wan::Expert expert = wan::Expert::None;
  double boundary = 0;  ///< sigma units
};
Networks networks_from(const wanfw::Options& o);

/// The shared settings, with `objective`, `task` and `inputs` parsed once. Refuses, naming it, an
/// option the objective does not read (the velocity target's under dmd). `read_files`: false for
/// validate / model-info, which check options without reading the negative prompt's file (it may
/// live on the training machine only).
DistillSettings settings_from(const wanfw::Options& o, const Networks& n, bool read_files);

/// The teacher's device: teacher_device, or beside the student.
torch::Device teacher_device(const wanfw::Options& o, const c10::Device& student);

}  // namespace wan_distill
