#include "units/block_swap.hpp"

#include <algorithm>
#include <limits>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "wanfw/error.hpp"

namespace wanfw {

namespace {

constexpr std::int64_t kAlign = 256;
constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();

std::size_t next_use(std::size_t unit, const std::vector<UnitUse>& upcoming) {
  for (std::size_t i = 0; i < upcoming.size(); ++i)
    if (upcoming[i].unit == unit) return i;
  return kNever;
}

/// `bytes` viewed as a tensor of `piece`'s dtype and shape.
at::Tensor view_of(const at::Tensor& bytes, std::int64_t base, const auto& piece) {
  return bytes.narrow(0, base + piece.offset, piece.bytes).view(piece.dtype).view(piece.shape);
}

}  // namespace

std::vector<std::size_t> streamed_units(std::size_t count, std::size_t streamed) {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < streamed; ++k) out.push_back((2 * k + 1) * count / (2 * streamed));
  return out;
}

BlockSwap::BlockSwap(torch::nn::Module& module, const std::vector<Unit>& units, const BlockSwapSettings& settings,
                     c10::Device device)
    : plans_(units.size()), ring_(settings.ring) {
  const auto count = static_cast<std::int64_t>(units.size());
  if (count == 0)
    throw Error("block_swap: the model declares no units to stream",
                "block swap streams the blocks a model declares (Model::units); remove block_swap");
  if (settings.blocks < 1 || settings.blocks > count - 1)
    throw Error(fmt::format("block_swap.blocks is {}, but the model has {} units (blocks): at least 1 and at most {} "
                            "can stream",
                            settings.blocks, count, count - 1),
                "set block_swap.blocks between 1 and the number of blocks minus one (one stays on the device)");
  if (settings.ring < 1)
    throw Error(fmt::format("block_swap.ring is {}; it needs at least one slot", settings.ring),
                "set block_swap.ring to 1 or more (2 lets a copy run while the previous block computes)");
  streamed_ = streamed_units(units.size(), static_cast<std::size_t>(settings.blocks));
  for (const auto& unit : units) names_.push_back(unit.name);
  std::map<std::string, at::Tensor> parameters;
  for (const auto& item : module.named_parameters()) parameters.emplace(item.key(), item.value());
  for (const auto& unit : units) {
    bool trains = false;
    for (const std::string& name : unit.parameters)
      if (auto it = parameters.find(name); it != parameters.end()) trains |= it->second.requires_grad();
    trains_.push_back(trains);
  }
  std::int64_t total = 0;
  for (const std::size_t u : streamed_) {
    UnitPlan plan;
    plan.offset = total;
    for (const std::string& name : units[u].parameters) {
      const auto it = parameters.find(name);
      if (it == parameters.end())
        throw Error(fmt::format("block_swap: unit '{}' lists parameter '{}', which the model does not have",
                                units[u].name, name));
      const at::Tensor& p = it->second;
      if (p.requires_grad() && !settings.trained) continue;  // trainable: stays on the device
      streamed_at_[p.unsafeGetTensorImpl()] = {u, plan.parameters.size()};
      plan.pieces.push_back({plan.bytes, static_cast<std::int64_t>(p.nbytes()), p.scalar_type(), p.sizes().vec()});
      plan.bytes += round_up(static_cast<std::int64_t>(p.nbytes()), kAlign);
      plan.parameters.push_back(p);
    }
    total += plan.bytes;
    slot_bytes_ = std::max(slot_bytes_, plan.bytes);
    plans_[u] = std::move(plan);
  }
  if (total == 0)
    throw Error(fmt::format("block swap streams frozen weights, but every weight of the {} streamed blocks trains",
                            streamed_.size()),
                "train adapters on a frozen base (model.lora.rank); or with optimizer.state host under single or "
                "grad_accum, where block swap streams trained weights too; or remove block_swap");
  arena_ = allocate_host_arena(total, settings.host_memory, device, {"block swap", "block_swap.host_memory: pageable"});
  torch::NoGradGuard no_grad;
  for (const std::size_t u : streamed_) {
    UnitPlan& plan = *plans_[u];
    for (std::size_t i = 0; i < plan.parameters.size(); ++i) {
      view_of(arena_.bytes, plan.offset, plan.pieces[i]).copy_(plan.parameters[i].detach());
    }
    bind(plan, std::nullopt);  // the module's own copy goes
  }
}

BlockSwap::~BlockSwap() = default;

void BlockSwap::start(c10::Device device, std::unique_ptr<UnitCopier> copier) {
  device_ = device;
  const auto ring = static_cast<std::size_t>(ring_);
  slots_.clear();
  for (std::size_t s = 0; s < ring; ++s)
    slots_.push_back(at::empty({slot_bytes_}, at::TensorOptions().dtype(at::kByte).device(device)));
  slot_unit_.assign(ring, std::nullopt);
  copier_ = copier ? std::move(copier)
                   : device.is_cuda() ? make_cuda_copier(ring, device, arena_.pinned, slot_bytes_)
                                      : make_thread_copier(ring);
  torch::NoGradGuard no_grad;
  for (const std::size_t u : streamed_) bind(*plans_[u], std::nullopt);  // placeholders on the device
}

void BlockSwap::bind(UnitPlan& plan, std::optional<std::size_t> slot) {
  for (std::size_t i = 0; i < plan.parameters.size(); ++i) {
    const Piece& piece = plan.pieces[i];
    plan.parameters[i].set_data(slot ? view_of(slots_[*slot], 0, piece)
                                     : at::empty({0}, at::TensorOptions().dtype(piece.dtype).device(device_)));
  }
}

std::optional<std::size_t> BlockSwap::slot_for(const std::vector<UnitUse>& upcoming,
                                               std::optional<std::size_t> not_before, bool needed_now) const {
  std::optional<std::size_t> best;
  std::size_t best_use = 0;
  for (std::size_t s = 0; s < slot_unit_.size(); ++s) {
    if (!slot_unit_[s]) return s;
    const UnitState holder = state(*slot_unit_[s]);
    if (holder == UnitState::InUse || (holder != UnitState::Ready && !needed_now)) continue;  // busy, or not yet used
    const std::size_t use = next_use(*slot_unit_[s], upcoming);
    if ((!not_before || use > *not_before) && (!best || use > best_use)) best = s, best_use = use;
  }
  return best;
}

void BlockSwap::load(std::size_t unit, std::size_t slot) {
  if (const auto& holder = slot_unit_[slot]) {
    UnitPlan& leaving = *plans_[*holder];
    if (state(*holder) == UnitState::Fetching) copier_->wait(slot);  // a prefetch the compute did not use
    bind(leaving, std::nullopt);
    leaving.slot.reset();
    evicted(*holder);
  }
  UnitPlan& plan = *plans_[unit];
  copier_->copy(slot, arena_.bytes.narrow(0, plan.offset, plan.bytes), slots_[slot].narrow(0, 0, plan.bytes));
  ++copies_;
  slot_unit_[slot] = unit;
  plan.slot = slot;
}

bool BlockSwap::prefetch(std::size_t unit, const std::vector<UnitUse>& upcoming) {
  auto& plan = plans_.at(unit);
  if (!plan || plan->slot) return true;  // resident, or in a slot already
  const std::optional<std::size_t> slot = slot_for(upcoming, next_use(unit, upcoming));
  if (!slot) return false;
  load(unit, *slot);
  return true;
}

void BlockSwap::acquire(std::size_t unit, const std::vector<UnitUse>& upcoming) {
  auto& plan = plans_.at(unit);
  if (!plan) return;
  const UnitState before = state(unit);  // Fetching: copied (or on its way), not yet bound
  if (!plan->slot) {
    const std::optional<std::size_t> slot = slot_for(upcoming, std::nullopt, /*needed_now=*/true);
    if (!slot)
      throw Error(fmt::format("block swap: no slot is free for unit '{}' (ring {})", names_[unit], ring_),
                  "a unit's body ran another unit inside it; run units one after another");
    load(unit, *slot);
  }
  copier_->wait(*plan->slot);
  if (before != UnitState::Ready) bind(*plan, plan->slot);
  // A forward that builds a graph must not keep the streamed weights for backward: their slot is
  // overwritten before then (activations must be checkpointed). Counted by who holds them.
  plan->check_kept = torch::GradMode::is_enabled();
  plan->use_counts.clear();
  for (const at::Tensor& p : plan->parameters) plan->use_counts.push_back(p.use_count());
}

void BlockSwap::release(std::size_t unit) {
  auto& plan = plans_.at(unit);
  if (!plan) return;
  copier_->release(*plan->slot);
  if (!plan->check_kept) return;
  for (std::size_t i = 0; i < plan->parameters.size(); ++i)
    if (plan->parameters[i].use_count() > plan->use_counts[i])
      throw Error(fmt::format("block swap: unit '{}' keeps its streamed weights for backward, where its slot will hold "
                              "another unit's",
                              names_[unit]),
                  "turn on the model's gradient checkpointing (model.gradient_checkpointing: true): a checkpointed "
                  "block keeps its inputs and recomputes");
}

at::Tensor BlockSwap::host_copy(const at::Tensor& parameter) const {
  const auto it = streamed_at_.find(parameter.unsafeGetTensorImpl());
  return it == streamed_at_.end() ? at::Tensor() : host_parameter(it->second.first, it->second.second);
}

void BlockSwap::invalidate() {
  if (!copier_) return;  // not started: no slot holds anything
  torch::NoGradGuard no_grad;
  copier_->finish();  // a copy into a slot (a prefetch for the next step) may still read the host copies
  for (std::size_t s = 0; s < slot_unit_.size(); ++s) {
    if (!slot_unit_[s]) continue;
    const std::size_t unit = *slot_unit_[s];
    if (state(unit) == UnitState::InUse)
      throw Error(fmt::format("block swap: unit '{}' is in use while its host copy changes", names_[unit]));
    bind(*plans_[unit], std::nullopt);
    plans_[unit]->slot.reset();
    slot_unit_[s].reset();
    evicted(unit);
  }
}

at::Tensor BlockSwap::host_parameter(std::size_t unit, std::size_t index) const {
  const UnitPlan& plan = *plans_.at(unit);
  return view_of(arena_.bytes, plan.offset, plan.pieces.at(index));
}

const std::vector<at::Tensor>& BlockSwap::streamed_parameters(std::size_t unit) const {
  return plans_.at(unit)->parameters;
}

std::string BlockSwap::summary(std::int64_t steps) {
  const double per_step = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  return fmt::format("block swap: {} unit copies ({:.1f} a step, {:.1f} MiB each), the compute waited {:.2f} ms a "
                     "step for them",
                     copies_, static_cast<double>(copies_) * per_step, static_cast<double>(slot_bytes_) / (1 << 20),
                     take_stall_seconds() * 1000.0 * per_step);
}

std::string BlockSwap::describe() const {
  std::vector<std::string> names;
  for (const std::size_t u : streamed_) names.push_back(std::to_string(u));
  const std::string copies = copier_ ? copier_->describe() : std::string();
  return fmt::format("block swap: {} of {} blocks stream from {} ({:.1f} MiB each) through {} device slot(s){}; "
                     "streamed: {}",
                     streamed_.size(), plans_.size(), arena_.note, static_cast<double>(slot_bytes_) / (1 << 20), ring_,
                     copies.empty() ? "" : ", " + copies, fmt::format("{}", fmt::join(names, " ")));
}

}  // namespace wanfw
