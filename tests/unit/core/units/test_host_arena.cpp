// Host memory that crosses to a GPU (wanfw/parallel/host_arena.hpp): an arena of exactly its bytes,
// cut into tensors on whole lines, and copies into it, made at once from the CPU.
#include <ATen/ATen.h>

#include "wanfw/parallel/host_arena.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

TEST_CASE("an arena for the CPU holds exactly its bytes, and its tensors start on whole lines") {
  const std::int64_t first = arena_slot_bytes(10, at::kFloat), second = arena_slot_bytes(3, at::kBFloat16);
  CHECK(first == 64);  // 40 bytes, a line
  CHECK(second == 64);
  CHECK(arena_slot_bytes(17, at::kFloat) == 128);
  const HostArena arena = allocate_host_arena(first + second, HostMemory::Auto, c10::kCPU, {"a test", ""});
  CHECK(arena.bytes.numel() == first + second);
  CHECK_FALSE(arena.pinned);
  const at::Tensor a = arena_tensor(arena, 0, {2, 5}, at::kFloat), b = arena_tensor(arena, first, {3}, at::kBFloat16);
  a.fill_(1.5);
  b.fill_(-2);
  CHECK(static_cast<std::uint8_t*>(b.data_ptr()) - static_cast<std::uint8_t*>(a.data_ptr()) == first);
  CHECK(a.sum().item<float>() == 15.0f);  // b's bytes did not reach a's
  CHECK(b.sum().item<float>() == -6.0f);
}

TEST_CASE("host copies from the CPU are made at once, converting to the target's dtype") {
  const HostArena arena = allocate_host_arena(64, HostMemory::Auto, c10::kCPU, {"a test", ""});
  const at::Tensor target = arena_tensor(arena, 0, {4}, at::kFloat);
  const at::Tensor source = at::arange(4, at::kBFloat16) + 0.5;
  HostCopies copies;
  copies.copy(target, source);
  CHECK(at::equal(target, source.to(at::kFloat)));  // before any wait
  copies.wait();
  CHECK(copies.queued() == 0);  // no copy stream on the CPU
}
