#pragma once
// What a replica of a distillation model (data_parallel: one per device) is made of: its trained
// networks cloned onto the device, and the teacher it asks.

#include <memory>

#include "networks/frozen_teacher.hpp"
#include "wan/wan_dit.hpp"

namespace wan_distill {

/// `dit` cloned onto `device`, its adapters (both sets) live in the copy.
wan::WanDiT replica_dit(const wan::WanDiT& dit, const c10::Device& device);

/// The teacher of a replica on `device`: a teacher beside its model (on `beside`) goes along to the
/// replica's device; one placed apart on purpose (teacher_device) serves every replica, one call
/// at a time. Null stays null (a shared base is its own teacher).
std::shared_ptr<FrozenTeacher> replica_teacher(const std::shared_ptr<FrozenTeacher>& teacher, const c10::Device& beside,
                                               const c10::Device& device);

}  // namespace wan_distill
