#pragma once
// The DMD model assembled from its parts: the generator, the critic and the teacher.

#include <memory>

#include "distill_settings.hpp"
#include "dmd/dmd_model.hpp"
#include "dmd/dmd_settings.hpp"
#include "networks/frozen_teacher.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/model.hpp"
#include "wanfw/options.hpp"

namespace wan_distill {

/// The generator (`student`: one DiT or both experts, prepared: prepare_student) and the critic (a
/// copy of the teacher, or adapters on the generator's base), with the teacher (dropped when the
/// base is shared).
std::unique_ptr<DmdModel> make_dmd_model(const wanfw::Options& o, wan::WanDenoiser student,
                                             std::shared_ptr<FrozenTeacher> teacher, DistillSettings common,
                                             DmdSettings dmd, const wan::WanPlacement& placement);

}  // namespace wan_distill
