#include <cmath>
#include <cstdlib>

#include <torch/torch.h>

#include "tiny_dit.hpp"
#include "wan/lora.hpp"
#include "wan/wan_config.hpp"
#include "wan/wan_dit.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

namespace {

/// One block's inputs: 151 tokens (a prime, so no chunk count divides them), two samples,
/// timesteps one a sample or one a token, a 5-token context, random RoPE rotations.
struct BlockInputs {
  torch::Tensor x, e0, context;
  wan::RopeTables rope;
};

BlockInputs block_inputs(const wan::WanConfig& c, bool per_token) {
  torch::manual_seed(11);
  const std::int64_t tokens = 151;
  BlockInputs in;
  in.x = torch::randn({2, tokens, c.dim});
  in.e0 = per_token ? torch::randn({2, tokens, 6, c.dim}) * 0.3 : torch::randn({2, 6, c.dim}) * 0.3;
  in.context = torch::randn({2, 5, c.dim});
  const torch::Tensor angles = torch::rand({tokens, c.head_dim() / 2}) * 6.3;
  in.rope.rotations = torch::polar(torch::ones_like(angles), angles);
  return in;
}

/// A block of the tiny DiT with every weight random (the official initialisation zeroes nothing
/// here, but random weights exercise every path).
wan::WanBlock random_block(const wan::WanConfig& c) {
  torch::manual_seed(5);
  wan::WanBlock block(c);
  torch::NoGradGuard no_grad;
  for (auto& p : block->parameters()) p.normal_(0.0, 0.2);
  return block;
}

struct Gradients {
  torch::Tensor output, x, e0, context;
  std::vector<torch::Tensor> parameters;
};

/// The checkpointed block's output and the gradients of (output * weights).sum(), `chunks` chunks.
Gradients run(wan::WanBlockImpl& block, const BlockInputs& in, std::int64_t chunks) {
  block.zero_grad();
  const torch::Tensor x = in.x.clone().requires_grad_(true), e0 = in.e0.clone().requires_grad_(true);
  const torch::Tensor context = in.context.clone().requires_grad_(true);
  const torch::Tensor out = wan::checkpointed_block(block, {x, e0, context, in.rope}, {.chunks = chunks});
  torch::manual_seed(13);
  (out * torch::randn_like(out)).sum().backward();
  Gradients g{out.detach(), x.grad(), e0.grad(), context.grad(), {}};
  for (const auto& p : block.parameters())
    g.parameters.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return g;
}

bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && torch::equal(a.contiguous().view(torch::kInt32), b.contiguous().view(torch::kInt32));
}

/// A sum over n terms taken in another grouping: within 6 sqrt(n depth) u of its terms' scale
/// (tests/integration/harness/equivalence.py derives it); `depth` the reductions behind each term.
double rounding(double terms, double depth) { return 6.0 * std::ldexp(1.0, -24) * std::sqrt(terms * depth); }

/// Whether this process may expect a chunk's rows to keep their bits: on the CPU's own vector unit
/// (no ATEN_CPU_CAPABILITY override), where the products and attention kernels gave every row the
/// bits it gets among all rows on each machine probed (AVX2 and AVX-512 cores), and where a probe of
/// the block's product shapes agrees. Under another unit's kernels (tests/vector_units.txt) an
/// AVX-512 core gave 128 to 152 rows of a [rows, 48] x [48, 48] product other bits, and chunked
/// outputs differed from the whole block's by up to 2e-7 of their scale: there, rounding is the claim.
bool rows_keep_their_bits(const wan::WanConfig& c, std::int64_t chunks) {
  if (std::getenv("ATEN_CPU_CAPABILITY") != nullptr) return false;
  torch::manual_seed(17);
  const std::int64_t tokens = 151, length = (tokens + chunks - 1) / chunks;
  for (const auto& [in, out] : {std::pair{c.dim, c.dim}, {c.dim, c.ffn_dim}, {c.ffn_dim, c.dim}}) {
    const torch::Tensor x = torch::randn({2, tokens, in}), w = torch::randn({out, in});
    const torch::Tensor whole = torch::nn::functional::linear(x, w);
    for (std::int64_t start = 0; start < tokens; start += length) {
      const std::int64_t n = std::min(length, tokens - start);
      if (!same_bits(torch::nn::functional::linear(x.narrow(1, start, n).contiguous(), w), whole.narrow(1, start, n)))
        return false;
    }
  }
  return true;
}

/// `chunked` equal to `whole` bit for bit where rows keep their bits, else within the rounding of
/// the block's 16 reductions of up to ffn_dim terms.
bool as_whole(const torch::Tensor& chunked, const torch::Tensor& whole, bool bitwise, const wan::WanConfig& c) {
  if (bitwise) return same_bits(chunked, whole);
  return (chunked - whole).abs().max().item<double>() <= rounding(c.ffn_dim, 16) * whole.abs().max().item<double>();
}

}  // namespace

TEST_CASE("a block run in chunks of tokens gives the whole block's output: bit for bit natively, to rounding elsewhere") {
  const wan::WanConfig c = wan::wan_preset("tiny");
  wan::WanBlock block = random_block(c);
  for (const bool per_token : {false, true}) {
    const BlockInputs in = block_inputs(c, per_token);
    torch::NoGradGuard no_grad;
    const torch::Tensor whole = block->forward(in.x, in.e0, in.context, in.rope);
    // Chunks of 50 to 76 tokens (100 to 152 rows of two samples): the CPU's matrix products give
    // each row the bits they give it among all rows (a few rows, 1 to 11 here, take other kernels).
    for (const std::int64_t chunks : {2, 3}) {
      INFO("per-token timesteps ", per_token, ", chunks ", chunks);
      const bool bitwise = rows_keep_their_bits(c, chunks);
      if (!bitwise) MESSAGE("another vector unit's kernels: a chunk's rows held to rounding");
      CHECK(as_whole(wan::checkpointed_block(*block, {in.x, in.e0, in.context, in.rope}, {.chunks = chunks}),
                     whole, bitwise, c));
    }
    // 64 chunks: 2 or 3 tokens each (4 to 6 rows). Products of so few rows take other kernels, which
    // round otherwise: within the rounding of the block's 16 reductions of up to ffn_dim terms.
    const torch::Tensor small = wan::checkpointed_block(*block, {in.x, in.e0, in.context, in.rope}, {.chunks = 64});
    CHECK((small - whole).abs().max().item<double>() <= rounding(c.ffn_dim, 16) * whole.abs().max().item<double>());
    // More chunks than tokens: one token each.
    const torch::Tensor single = wan::checkpointed_block(*block, {in.x, in.e0, in.context, in.rope}, {.chunks = 1000});
    CHECK((single - whole).abs().max().item<double>() <= rounding(c.ffn_dim, 16) * whole.abs().max().item<double>());
  }
}

TEST_CASE("a block recomputed in chunks gives its input's gradient as whole and summed gradients to rounding") {
  const wan::WanConfig c = wan::wan_preset("tiny");
  wan::WanBlock block = random_block(c);
  for (const bool per_token : {false, true}) {
    const BlockInputs in = block_inputs(c, per_token);
    const Gradients whole = run(*block, in, 1);
    for (const std::int64_t chunks : {2, 3}) {
      INFO("per-token timesteps ", per_token, ", chunks ", chunks);
      const Gradients chunked = run(*block, in, chunks);
      const bool bitwise = rows_keep_their_bits(c, chunks);
      if (!bitwise) MESSAGE("another vector unit's kernels: a chunk's rows held to rounding");
      CHECK(as_whole(chunked.output, whole.output, bitwise, c));
      CHECK(as_whole(chunked.x, whole.x, bitwise, c));
      // Per-token timesteps: each token's own rows, bit for bit; one a sample: summed over tokens.
      if (per_token) CHECK(as_whole(chunked.e0, whole.e0, bitwise, c));
      // Sums over the tokens (the weights', the modulation's, the context's through the
      // cross-attention's keys and values): another grouping of 2 x 151 terms, each behind the
      // block's 16 reductions.
      const double bound = rounding(2 * 151, 16);
      const auto close = [&](const torch::Tensor& a, const torch::Tensor& b) {
        return (a - b).abs().max().item<double>() <= bound * b.abs().max().item<double>();
      };
      if (!per_token) CHECK(close(chunked.e0, whole.e0));
      CHECK(close(chunked.context, whole.context));
      REQUIRE(chunked.parameters.size() == whole.parameters.size());
      for (std::size_t i = 0; i < whole.parameters.size(); ++i) {
        INFO("parameter ", i);
        CHECK(close(chunked.parameters[i], whole.parameters[i]));
      }
    }
  }
}

TEST_CASE("adapter dropout draws the whole sequence's masks in every chunk") {
  const wan::WanConfig c = wan::wan_preset("tiny");
  wan::WanDiT dit = wanfw::testing::random_tiny_dit(c);
  wan::LoraSettings lora;
  lora.rank = 4;
  lora.alpha = 4;
  lora.dropout = 0.5;
  lora.targets = {"blocks.*"};
  wan::attach_adapters(*dit, lora);
  {
    torch::NoGradGuard no_grad;  // adapters that change the output
    for (auto& p : dit->parameters())
      if (p.requires_grad()) p.normal_(0.0, 0.2);
  }
  dit->train();
  dit->lora_dropout->set(wan::LoraDropoutStreams::Samples{{3, 8}, 0, 42, torch::kCPU});
  auto* block = dit->blocks[0]->as<wan::WanBlock>();
  const BlockInputs in = block_inputs(c, false);
  torch::NoGradGuard no_grad;
  const torch::Tensor whole = block->forward(in.x, in.e0, in.context, in.rope);
  const torch::Tensor chunked = wan::checkpointed_block(*block, {in.x, in.e0, in.context, in.rope},
                                                        {.dropout = dit->lora_dropout.get(), .chunks = 4});
  CHECK(same_bits(chunked, whole));
  dit->lora_dropout->set(wan::LoraDropoutStreams::Samples{{4, 8}, 0, 42, torch::kCPU});  // other samples' masks
  CHECK_FALSE(torch::equal(block->forward(in.x, in.e0, in.context, in.rope), whole));
}
