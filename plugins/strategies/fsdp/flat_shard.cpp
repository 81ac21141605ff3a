#include "flat_shard.hpp"

#include <algorithm>

#include <ATen/ATen.h>

#include "wanfw/error.hpp"

namespace wanfw_fsdp {

namespace {

std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes_of(
    const std::vector<std::pair<std::string, at::Tensor>>& members) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes;
  for (const auto& [name, tensor] : members) shapes.emplace_back(name, tensor.sizes().vec());
  return shapes;
}

/// `full`'s memory returned to its allocator; its views keep their shapes and storage object.
void free_storage(const at::Tensor& full) {
  c10::Storage storage = full.storage();
  storage.set_data_ptr_noswap(at::DataPtr(nullptr, full.device()));
  storage.set_nbytes(0);
}

/// Memory for `full` again, in the same storage object, so every view of it sees the new bytes.
void refill_storage(const at::Tensor& full) {
  c10::Storage storage = full.storage();
  const std::size_t bytes = static_cast<std::size_t>(full.numel()) * full.element_size();
  if (storage.nbytes() == bytes) return;
  storage.set_data_ptr_noswap(storage.allocator()->allocate(bytes));
  storage.set_nbytes(bytes);
}

}  // namespace

FlatShard::FlatShard(std::string name, std::vector<std::pair<std::string, at::Tensor>> members, bool trainable,
                     const wanfw::DistributedSession& session)
    : name_(std::move(name)),
      trainable_(trainable),
      session_(session),
      layout_(shapes_of(members), session.world_size()) {
  if (members.empty()) throw wanfw::Error("fsdp: flat shard '" + name_ + "' has no parameters");
  const at::ScalarType dtype = members.front().second.scalar_type();
  for (auto& [member, tensor] : members) {
    if (tensor.scalar_type() != dtype)
      throw wanfw::Error("fsdp: flat shard '" + name_ + "' mixes dtypes (" + member + ")");
    names_.push_back(member);
    parameters_.push_back(tensor);
  }
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> values;
  for (const at::Tensor& p : parameters_) values.push_back(p.detach());
  shard_ = layout_.pack(values, session.rank(), dtype).requires_grad_(trainable_);
  state_ = State::Gathered;  // the parameters still hold the values the shard was cut from
}

void FlatShard::start_gather(std::optional<at::ScalarType> wanted) {
  if (state_ != State::Released) return;
  const at::ScalarType compute = wanted.value_or(shard_.scalar_type());
  const at::Tensor& local = this->local();
  at::NoGradGuard no_grad;
  if (!full_.defined() || full_.scalar_type() != compute) {
    std::int64_t total = 0;
    for (std::size_t i = 0; i < layout_.size(); ++i) total += layout_.shard(i).rows * layout_.shard(i).row_numel;
    full_ = at::empty({total}, local.options().dtype(compute).requires_grad(false));
    views_.clear();
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < layout_.size(); ++i) {
      const auto& s = layout_.shard(i);
      views_.push_back(full_.narrow(0, offset, s.rows * s.row_numel).view(s.shape));
      offset += s.rows * s.row_numel;
    }
  } else {
    refill_storage(full_);
  }
  sent_ = local.detach().to(compute).contiguous();
  gathered_buffer_ = at::empty({layout_.world() * layout_.shard_numel()}, sent_.options());
  pending_ = session_.start_all_gather(gathered_buffer_, sent_);
  state_ = State::Gathering;
}

void FlatShard::finish_gather() {
  if (state_ == State::Gathered) return;
  if (state_ != State::Gathering)
    throw wanfw::Error("fsdp: flat shard '" + name_ + "' finished a gather it never started");
  at::NoGradGuard no_grad;
  pending_.wait();
  layout_.unpack_into(gathered_buffer_, views_);
  gathered_buffer_.reset();
  sent_.reset();
  for (std::size_t i = 0; i < parameters_.size(); ++i) parameters_[i].set_data(views_[i]);
  state_ = State::Gathered;
}

void FlatShard::release() {
  if (state_ == State::Gathering) finish_gather();
  if (state_ != State::Gathered) return;
  const at::Tensor empty = at::empty({0}, local().options().requires_grad(false));
  for (at::Tensor& p : parameters_) p.set_data(empty);
  if (full_.defined()) free_storage(full_);
  state_ = State::Released;
}

at::Tensor FlatShard::reduce_gradient(const std::vector<at::Tensor>& gradients, at::ScalarType reduce) const {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> full = gradients;
  if (std::all_of(full.begin(), full.end(), [](const at::Tensor& g) { return !g.defined(); }) && !full.empty())
    full.front() = at::zeros(layout_.shard(0).shape, local().options().dtype(reduce).requires_grad(false));
  const at::Tensor whole = layout_.pack_all(full, reduce);
  at::Tensor piece = at::empty({layout_.shard_numel()}, whole.options());
  session_.reduce_scatter(piece, whole, wanfw::Reduce::Mean);
  return piece.to(shard_.scalar_type());
}

std::int64_t FlatShard::shard_bytes() const {
  return shard_.numel() * static_cast<std::int64_t>(shard_.element_size());
}

std::int64_t FlatShard::device_bytes() const {
  return local().numel() * static_cast<std::int64_t>(local().element_size());
}

void FlatShard::keep_on_host(at::Tensor master, at::Tensor gradient, at::ScalarType device_dtype) {
  at::NoGradGuard no_grad;
  master.copy_(shard_.detach());
  device_copy_ = shard_.detach().to(device_dtype, /*non_blocking=*/false, /*copy=*/true);
  shard_ = std::move(master).requires_grad_(trainable_);
  host_gradient_ = std::move(gradient);
}

void FlatShard::add_gradient(const at::Tensor& piece, wanfw::HostCopies* to_host) {
  at::Tensor& sum = on_host() ? device_gradient_ : shard_.mutable_grad();
  if (sum.defined())
    sum.add_(piece);
  else
    sum = piece;
  if (to_host != nullptr) move_gradient(*to_host);
}

void FlatShard::move_gradient(wanfw::HostCopies& copies) {
  if (!on_host() || !device_gradient_.defined()) return;
  copies.copy(host_gradient_, device_gradient_);  // on a GPU, while the compute goes on
  shard_.mutable_grad() = host_gradient_;
  device_gradient_.reset();
}

void FlatShard::publish() {
  if (!on_host()) return;
  at::NoGradGuard no_grad;
  device_copy_.copy_(shard_.detach(), /*non_blocking=*/shard_.is_pinned());
}

}  // namespace wanfw_fsdp
