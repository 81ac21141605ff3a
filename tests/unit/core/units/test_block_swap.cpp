// Block swap's schedule on the CPU (units/block_swap.hpp behind the UnitRuntime): the tiny Wan DiT
// with adapters and checkpointed blocks, its frozen block weights streamed through a ring of slots by
// the thread copier with random delays. At every use the unit's weights are its host copy, bound to a
// slot; no more than N - S + ring blocks are on the "device"; a step copies exactly what the schedule
// says; and the gradients are those of the model without block swap, bit for bit.

#include <chrono>
#include <random>
#include <thread>

#include <torch/torch.h>

#include "tiny_dit.hpp"
#include "units/block_swap.hpp"
#include "wan/lora.hpp"
#include "wan/wan_dit.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/unit_runtime.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

using Inputs = wanfw::testing::TinyInputs;
using wanfw::testing::tiny_inputs;

/// The tiny DiT with `layers` blocks, every weight random, adapters of rank 4 (B random too, so
/// they change the output), checkpointing on.
wan::WanDiT adapted_dit(std::int64_t layers) {
  wan::WanConfig config = wan::wan_preset("tiny");
  config.num_layers = layers;
  torch::manual_seed(3);
  wan::WanDiT dit(config);
  wan::LoraSettings lora;
  lora.rank = 4;
  lora.alpha = 4;
  lora.targets = {"blocks.*"};
  wan::attach_adapters(*dit, lora);
  torch::NoGradGuard no_grad;
  for (auto& p : dit->parameters()) p.normal_(0.0, 0.2);
  dit->set_gradient_checkpointing(true);
  dit->train();
  return dit;
}

/// Random sleeps of up to 2 ms before each copy: a copy the compute did not wait for shows.
std::function<void()> random_delays(std::uint32_t seed) {
  auto engine = std::make_shared<std::mt19937>(seed);
  return [engine] { std::this_thread::sleep_for(std::chrono::microseconds((*engine)() % 2000)); };
}

/// Loss of one forward and backward, and every adapter's gradient.
std::pair<double, std::vector<torch::Tensor>> step(wan::WanDiT& dit, const Inputs& in) {
  dit->zero_grad();
  const torch::Tensor loss = dit->forward(in.x, in.t, in.context).pow(2).mean();
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : dit->parameters())
    if (p.requires_grad()) grads.push_back(p.grad().clone());
  return {loss.item<double>(), grads};
}

struct Swapped {
  std::shared_ptr<wanfw::BlockSwap> swap;
  std::shared_ptr<wanfw::UnitRuntime> runtime;
};

Swapped swap_blocks(wan::WanDiT& dit, std::int64_t streamed, std::int64_t ring, std::uint32_t seed) {
  const auto units = dit->units("");
  Swapped s;
  s.swap = std::make_shared<wanfw::BlockSwap>(*dit, units, wanfw::BlockSwapSettings{streamed, ring}, torch::kCPU);
  s.swap->start(torch::kCPU, wanfw::make_thread_copier(static_cast<std::size_t>(ring), random_delays(seed)));
  s.runtime = std::make_shared<wanfw::UnitRuntime>(units, s.swap);
  dit->set_unit_runner(s.runtime.get(), 0);
  return s;
}

/// Blocks whose frozen weights are bound to memory (resident, or streamed and in a slot).
std::int64_t blocks_on_device(const wanfw::BlockSwap& swap, std::size_t count) {
  std::int64_t on = 0;
  for (std::size_t u = 0; u < count; ++u)
    on += !swap.is_streamed(u) || swap.streamed_parameters(u).front().numel() > 0 ? 1 : 0;
  return on;
}

}  // namespace

TEST_CASE("block swap streams the chosen count of blocks spread evenly between resident ones") {
  CHECK(wanfw::streamed_units(40, 20) == std::vector<std::size_t>{1,  3,  5,  7,  9,  11, 13, 15, 17, 19,
                                                                   21, 23, 25, 27, 29, 31, 33, 35, 37, 39});
  CHECK(wanfw::streamed_units(6, 3) == std::vector<std::size_t>{1, 3, 5});
  CHECK(wanfw::streamed_units(6, 5) == std::vector<std::size_t>{0, 1, 3, 4, 5});
  CHECK(wanfw::streamed_units(40, 39).size() == 39);
}

TEST_CASE("block swap gives every block its host weights at compute time, keeps at most N - S + ring blocks, and copies by the schedule") {
  for (const std::int64_t layers : {3, 6, 40}) {
    for (const std::int64_t streamed : {std::int64_t{1}, layers / 2, layers - 1}) {
      for (const std::int64_t ring : {1, 2}) {
        CAPTURE(layers);
        CAPTURE(streamed);
        CAPTURE(ring);
        wan::WanDiT dit = adapted_dit(layers);
        const Inputs in = tiny_inputs(dit->config());
        const Swapped s = swap_blocks(dit, streamed, ring, static_cast<std::uint32_t>(layers * 100 + streamed * 10 + ring));
        std::int64_t most_on_device = 0, uses = 0;
        bool weights_are_host_copies = true;
        s.runtime->set_observer([&](const wanfw::UnitUse& use) {
          ++uses;
          most_on_device = std::max(most_on_device, blocks_on_device(*s.swap, s.runtime->units().size()));
          if (!s.swap->is_streamed(use.unit)) return;
          const auto& parameters = s.swap->streamed_parameters(use.unit);
          for (std::size_t i = 0; i < parameters.size(); ++i)
            weights_are_host_copies &= torch::equal(parameters[i], s.swap->host_parameter(use.unit, i));
        });
        const std::int64_t b = std::min(streamed, ring), after_ring = std::max<std::int64_t>(streamed - ring, 0);
        step(dit, in);
        CHECK(s.swap->copies() == b + 2 * after_ring);  // a cold ring: the first uses load it
        for (int k = 0; k < 2; ++k) {
          const std::int64_t before = s.swap->copies();
          step(dit, in);
          CHECK(s.swap->copies() - before == 2 * after_ring);  // the ring ends a step as it starts
        }
        CHECK(uses == 3 * 2 * layers);  // each block's forward and backward, every step
        CHECK(weights_are_host_copies);
        CHECK(most_on_device <= layers - streamed + ring);
        if (layers == 40) break;  // the ring sizes differ only in counts, checked above on 3 and 6
      }
    }
  }
}

TEST_CASE("the runtime's record shows which blocks block swap keeps in its ring after a step") {
  for (const std::int64_t ring : {1, 2}) {
    CAPTURE(ring);
    wan::WanDiT dit = adapted_dit(6);
    const Swapped s = swap_blocks(dit, 3, ring, 4);
    step(dit, tiny_inputs(dit->config()));
    std::int64_t held = 0;
    for (std::size_t u = 0; u < 6; ++u) {
      CAPTURE(u);
      const wanfw::UnitState state = s.runtime->state(u);
      if (!s.swap->is_streamed(u)) {
        CHECK(state == wanfw::UnitState::Ready);  // resident: never leaves
        continue;
      }
      held += state != wanfw::UnitState::Released ? 1 : 0;
      // Ready: used and still bound to its slot; fetching (the next step's prefetch) or released: not bound.
      CHECK((state == wanfw::UnitState::Ready) == (s.swap->streamed_parameters(u).front().numel() > 0));
    }
    CHECK(held == ring);  // the ring ends a step full; every other streamed block was evicted
  }
}

TEST_CASE("block swap leaves the loss and gradients bitwise those of the model without it") {
  for (const std::int64_t streamed : {1, 3, 5}) {
    for (const std::int64_t ring : {1, 2}) {
      CAPTURE(streamed);
      CAPTURE(ring);
      wan::WanDiT plain = adapted_dit(6);
      wan::WanDiT swapped = adapted_dit(6);
      const Inputs in = tiny_inputs(plain->config());
      const Swapped s = swap_blocks(swapped, streamed, ring, 9);
      for (int k = 0; k < 2; ++k) {
        const auto [loss, grads] = step(plain, in);
        const auto [swapped_loss, swapped_grads] = step(swapped, in);
        CHECK(loss == swapped_loss);
        REQUIRE(grads.size() == swapped_grads.size());
        for (std::size_t i = 0; i < grads.size(); ++i) CHECK(torch::equal(grads[i], swapped_grads[i]));
      }
    }
  }
}

TEST_CASE("block swap runs two networks in turns as without it when a prefetched block goes unused") {
  // As a DMD step alternates its generator and critic: after one network's backward the runtime
  // prefetches by the last recorded pass, and the other network's first block then needs the slot
  // that prefetch took.
  for (const std::int64_t ring : {1, 2}) {
    CAPTURE(ring);
    wan::WanDiT plain_a = adapted_dit(3), plain_b = adapted_dit(3), a = adapted_dit(3), b = adapted_dit(3);
    torch::nn::Module both;
    both.register_module("a", a);
    both.register_module("b", b);
    std::vector<wanfw::Unit> units = a->units("a.");
    for (auto& unit : b->units("b.")) units.push_back(std::move(unit));
    auto swap = std::make_shared<wanfw::BlockSwap>(both, units, wanfw::BlockSwapSettings{5, ring}, torch::kCPU);
    swap->start(torch::kCPU, wanfw::make_thread_copier(static_cast<std::size_t>(ring), random_delays(5)));
    const auto runtime = std::make_shared<wanfw::UnitRuntime>(units, swap);
    a->set_unit_runner(runtime.get(), 0);
    b->set_unit_runner(runtime.get(), 3);
    const Inputs in = tiny_inputs(a->config());
    for (int k = 0; k < 4; ++k) {
      wan::WanDiT& swapped = k % 2 == 0 ? a : b;
      wan::WanDiT& plain = k % 2 == 0 ? plain_a : plain_b;
      const auto [loss, grads] = step(plain, in);
      const auto [swapped_loss, swapped_grads] = step(swapped, in);
      CHECK(loss == swapped_loss);
      REQUIRE(grads.size() == swapped_grads.size());
      for (std::size_t i = 0; i < grads.size(); ++i) CHECK(torch::equal(grads[i], swapped_grads[i]));
    }
  }
}

TEST_CASE("block swap refuses a block that keeps its streamed weights for backward (no checkpointing)") {
  wan::WanDiT dit = adapted_dit(3);
  dit->set_gradient_checkpointing(false);
  const Swapped s = swap_blocks(dit, 1, 2, 1);
  const Inputs in = tiny_inputs(dit->config());
  try {
    dit->forward(in.x, in.t, in.context);
    FAIL("the forward ran");
  } catch (const wanfw::Error& e) {
    const std::string text = e.what();
    CHECK(text.find("unit 'blocks.1' keeps its streamed weights for backward") != std::string::npos);
    CHECK(text.find("model.gradient_checkpointing: true") != std::string::npos);
  }
  torch::NoGradGuard no_grad;  // without a graph nothing is kept: evaluation streams fine
  dit->forward(in.x, in.t, in.context);
}

TEST_CASE("block swap refuses more streamed blocks than the model can spare, and blocks with nothing frozen") {
  wan::WanDiT dit = adapted_dit(3);
  const auto units = dit->units("");
  CHECK_THROWS_WITH_AS(wanfw::BlockSwap(*dit, units, {3, 2}, torch::kCPU),
                       doctest::Contains("block_swap.blocks is 3, but the model has 3 units"), wanfw::Error);
  wan::WanDiT full(wan::wan_preset("tiny"));  // every weight trains
  CHECK_THROWS_WITH_AS(wanfw::BlockSwap(*full, full->units(""), {1, 2}, torch::kCPU),
                       doctest::Contains("every weight of the 1 streamed blocks trains"), wanfw::Error);
}
