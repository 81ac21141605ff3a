#include "networks/replicas.hpp"

#include "wan/lora.hpp"

namespace wan_distill {

wan::WanDiT replica_dit(const wan::WanDiT& dit, const c10::Device& device) {
  wan::WanDiT copy(std::dynamic_pointer_cast<wan::WanDiTImpl>(dit->clone(device)));
  wan::refresh_adapters(*copy);
  return copy;
}

std::shared_ptr<FrozenTeacher> replica_teacher(const std::shared_ptr<FrozenTeacher>& teacher, const c10::Device& beside,
                                               const c10::Device& device) {
  return teacher && teacher->placement().device == beside ? teacher->on(device) : teacher;
}

}  // namespace wan_distill
