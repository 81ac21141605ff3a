#pragma once
// The Wan distillation model (the plugin's wanfw::Model): a student DiT trained to predict what
// a frozen teacher predicts.
//
//   x_s (from data: (1 - s) x0 + s eps; data-free: the teacher's own Euler trajectory from eps)
//   target = v_T(x_s, s, c)                       velocity matching
//          = v_T(x_s, s, n) + g (v_T(x_s, s, c) - v_T(x_s, s, n))   guidance distillation (g != 1)
//   loss   = w_v mean (v_S(x_s, s, c) - target)^2 + w_fm mean (v_S(x_s, s, c) - (eps - x0))^2
//
// module() is the student alone: the optimizer, the strategies and the checkpoints see only it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distill_settings.hpp"
#include "networks/frozen_teacher.hpp"
#include "wan/flow_matching.hpp"
#include "wan/lora.hpp"
#include "wan/wan_dit.hpp"
#include "wanfw/model.hpp"

namespace wan_distill {

class DistillModel final : public wanfw::Model {
 public:
  DistillModel(const wan::WanConfig& student, DistillSettings settings, std::shared_ptr<FrozenTeacher> teacher,
               wan::WanPlacement placement = {});
  /// A replica on `device`: the student cloned, the teacher copied there too.
  DistillModel(const DistillModel& other, const c10::Device& device);

  wan::WanDiT& student() { return student_; }
  FrozenTeacher& teacher() { return *teacher_; }
  std::shared_ptr<torch::nn::Module> module() override { return student_.ptr(); }
  const DistillSettings& settings() const { return settings_; }
  /// With adapters on the student: one group "lora" holding them alone.
  std::vector<wanfw::ParameterGroup> parameter_groups() override;
  /// With adapters: the adapters alone (the student's base is rebuilt from its initialisation).
  std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors() override;
  std::vector<wanfw::FieldSpec> batch_fields() const override;
  wanfw::StepOutput training_step(const wanfw::Batch& batch) override;
  /// "gap_t<T>": mean (v_S - target)^2 at each validation timestep, same noise every time;
  /// "loss": their mean.
  std::map<std::string, at::Tensor> validation_step(const wanfw::Batch& batch) override;
  /// Inputs x, t, context (y for i2v): "v" the student's velocity, "teacher_v" the target
  /// (the teacher's, guided when the config distils guidance).
  std::map<std::string, at::Tensor> predict(const std::map<std::string, at::Tensor>& inputs) override;
  /// The student's samples (one forward per step unless sample_guidance != 1).
  std::map<std::string, at::Tensor> sample(const std::map<std::string, at::Tensor>& inputs,
                                           std::uint64_t seed) override;
  /// The student in the official layout: loadable as `weights` of wan22_flow_matching.
  void export_weights(const std::filesystem::path& folder, const wanfw::ExportSettings& settings) override;
  /// The student's sample of the first sample's conditioning (`preview_steps` steps).
  at::Tensor preview(const wanfw::Batch& batch, std::uint64_t seed) override;
  std::unique_ptr<wanfw::Model> replicate(const c10::Device& device) override;
  /// The student's blocks, each a unit (fsdp); the frozen teacher stays whole on every rank.
  std::vector<wanfw::Unit> units() override { return student_->units(""); }
  void set_unit_runner(wanfw::UnitRunner* runner) override { student_->set_unit_runner(runner, 0); }
  /// The memory plan's device bytes (distill_memory.hpp), logged beside the first step's peak.
  double planned_device_bytes() const override { return planned_device_bytes_; }
  void set_planned_device_bytes(double bytes) { planned_device_bytes_ = bytes; }

 private:
  struct Point {
    torch::Tensor x0, noise, xt, t, sigma, context, negative, y;
  };
  /// The noisy latents the student learns at, for levels `sigma` [B].
  Point point(const wanfw::Batch& batch, const torch::Tensor& sigma, const torch::Tensor& noise);
  /// The batch's noise from each sample's "noise" stream, in the latents' shape.
  torch::Tensor noise_of(const wanfw::Batch& batch) const;
  /// Student error against the teacher target at `p`: per-sample mean squares [B] of each term.
  struct Terms {
    torch::Tensor velocity, flow_matching;
  };
  Terms terms(const Point& p, bool with_flow_matching);
  torch::Device device() const;
  /// The student's samples from `inputs` in `steps` Euler steps.
  std::map<std::string, at::Tensor> draw(const std::map<std::string, at::Tensor>& inputs, std::uint64_t seed,
                                         std::int64_t steps);

  wan::WanDiT student_{nullptr};
  DistillSettings settings_;
  std::shared_ptr<FrozenTeacher> teacher_;
  double planned_device_bytes_ = 0;
};

}  // namespace wan_distill
