#pragma once
// The teacher of a distillation: a Wan DiT (or one A14B expert) that only ever runs forward.
//
// It is not part of the model's module(): the optimizer never sees its parameters, strategies
// never wrap or synchronise it, checkpoints never hold it. Its parameters do not require
// gradients and every call runs without autograd. It lives on its own device and dtype (bf16
// halves its memory), or on the CPU between uses (offload), and answers in float32 on the
// caller's device.

#include <memory>
#include <mutex>
#include <string>

#include <torch/types.h>

#include "wan/wan_denoiser.hpp"

namespace wan_distill {

struct TeacherPlacement {
  torch::Device device = torch::kCPU;  ///< where it computes
  torch::Dtype dtype = torch::kFloat32;
  bool offload = false;  ///< kept on the CPU between uses, moved to `device` for each step
  bool fp8_base = false;  ///< the blocks' Linear weights in fp8 (wan::WanPlacement::fp8_base)
};

class FrozenTeacher {
 public:
  /// Built part by part where it will live (the CPU when offloaded), frozen.
  FrozenTeacher(const wan::WanConfig& config, wan::Expert expert, double boundary, TeacherPlacement placement);
  /// Loads official or diffusers weights (wan::WanDenoiser::load_weights).
  void load_weights(const std::string& weights, const std::string& subfolder);
  /// A copy of this teacher computing on `device` (data_parallel replicas each get their own).
  std::shared_ptr<FrozenTeacher> on(const torch::Device& device) const;

  /// While a Use lives, an offloaded teacher sits on its device (one move per training step, not
  /// per forward); calls from several threads are serialised.
  class Use {
   public:
    explicit Use(FrozenTeacher& teacher);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    FrozenTeacher& teacher_;
    std::unique_lock<std::mutex> lock_;
  };

  /// The teacher's velocity, without gradients: inputs moved to its device and dtype, the answer
  /// float32 on `x`'s device. `negative` defined and `guidance` != 1: classifier-free guidance,
  /// v_u + guidance (v_c - v_u) (the official Wan convention). Call inside a Use.
  torch::Tensor velocity(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context,
                         const torch::Tensor& negative, const torch::Tensor& y, const torch::Tensor& sigma,
                         double guidance);

  /// Splits each sample's tokens over `group` (sequence parallelism; null: whole sequences).
  void set_sequence_group(const wanfw::DistributedSession* group) { denoiser_.set_sequence_group(group); }
  const wan::WanConfig& config() const { return denoiser_.config(); }
  /// The DiT(s), for initialising a student from them.
  std::vector<wan::WanDiT> dits() const { return denoiser_.dits(); }
  const TeacherPlacement& placement() const { return placement_; }
  /// The sigma range the teacher covers: [0, 1], or one expert's side of its boundary.
  std::pair<double, double> sigma_range() const { return denoiser_.sigma_range(); }

 private:
  FrozenTeacher(const FrozenTeacher& other, const torch::Device& device);
  void freeze();
  wan::WanDenoiser denoiser_;
  TeacherPlacement placement_;
  std::mutex mutex_;
};

}  // namespace wan_distill
