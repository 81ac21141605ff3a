// The VACE branch of a Wan DiT: how it is built and how its context enters (WanDiTImpl's forward
// runs its blocks beside the main ones).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "wan/wan_dit.hpp"
#include "wanfw/error.hpp"
#include "wanfw/parallel/units.hpp"

namespace wan {

void WanDiTImpl::reset_vace() {
  const auto& c = config_;
  const auto place = [this](torch::nn::Module& part) { part.to(placement_.device, placement_.dtype); };
  vace_patch_embedding = register_module(
      "vace_patch_embedding",
      torch::nn::Conv3d(torch::nn::Conv3dOptions(c.vace_in_dim, c.dim, {c.patch[0], c.patch[1], c.patch[2]})
                            .stride({c.patch[0], c.patch[1], c.patch[2]})));
  place(*vace_patch_embedding);
  vace_blocks = register_module("vace_blocks", torch::nn::ModuleList());
  for (std::size_t n = 0; n < c.vace_layers.size(); ++n) {
    WanBlock block(c, static_cast<std::int64_t>(n));
    {
      torch::NoGradGuard no_grad;
      for (auto* projection : {&block->before_proj, &block->after_proj})
        if (*projection) {
          (*projection)->weight.zero_();
          (*projection)->bias.zero_();
        }
    }
    if (placement_.storage().fp8_blocks(ParameterPlace::VaceBlock))
      for (auto& m : block->modules(/*include_self=*/false))
        if (auto* linear = m->as<WanLinearImpl>()) linear->quantize_base();
    place(*block);
    vace_blocks->push_back(block);
  }
}

torch::Tensor WanDiTImpl::embedded_vace(const VaceInput& vace, const torch::Tensor& x_full) {
  const auto& c = config_;
  if (!c.has_vace()) {
    if (vace.context.defined())
      throw wanfw::Error("a VACE context was given to a model without the VACE branch",
                         "choose a VACE preset (wan2.1-vace-1.3b, wan2.1-vace-14b, wan2.2-vace-fun-a14b) or set "
                         "model.vace_layers");
    return {};
  }
  const torch::Tensor& context = vace.context;
  if (!context.defined())
    throw wanfw::Error("the VACE model got no vace_context",
                       "give each sample its control context (tools/encode_dataset.py --control writes it)");
  const std::vector<std::int64_t> expected = {x_full.size(0), c.vace_in_dim, x_full.size(2), x_full.size(3),
                                              x_full.size(4)};
  if (context.sizes() != at::IntArrayRef(expected))
    throw wanfw::Error(fmt::format("the VACE context has shape {}, but the latents [B, C, F, H, W] {} need [{}]: "
                                   "{} channels on the latents' grid",
                                   c10::str(context.sizes()), c10::str(x_full.sizes()), fmt::join(expected, ", "),
                                   c.vace_in_dim),
                       "encode the control video with as many frames as the target (reference frames prepended to "
                       "both), at the target's size");
  if (vace.scales.size() > 1 && vace.scales.size() != c.vace_layers.size())
    throw wanfw::Error(fmt::format("{} VACE scales were given for the model's {} hints", vace.scales.size(),
                                   c.vace_layers.size()),
                       "give one scale, or one for each entry of vace_layers");
  const torch::Tensor embedded = vace_patch_embedding(context.to(vace_patch_embedding->weight.scalar_type()));
  return embedded.flatten(2).transpose(1, 2).contiguous();  // [B, L, dim]
}

std::array<torch::Tensor, 2> WanDiTImpl::vace_unit(std::size_t n, const torch::Tensor& state,
                                                   const torch::Tensor& embedded, const torch::Tensor& e0,
                                                   const torch::Tensor& context, const RopeTables& rope,
                                                   bool checkpoint) {
  auto* block = vace_blocks[n]->as<WanBlock>();
  std::vector<torch::Tensor> inputs = {state, e0, context};
  if (n == 0) inputs.push_back(embedded);  // the first block adds the embedded latents
  const auto out = wanfw::run_unit(unit_runner_, first_unit_ + blocks->size() + n, inputs,
                                   [&](const std::vector<torch::Tensor>& in) {
                                     const torch::Tensor added = in.size() > 3 ? in[3] : torch::Tensor();
                                     if (checkpoint) {
                                       const auto [next, hint] = checkpointed_vace_block(
                                           *block, {in[0], in[1], in[2], rope}, added, recomputation());
                                       return std::vector<torch::Tensor>{next, hint};
                                     }
                                     const torch::Tensor input = block->before_proj ? block->before_proj(in[0]) + added
                                                                                    : in[0];
                                     const torch::Tensor next = block->forward(input, in[1], in[2], rope);
                                     return std::vector<torch::Tensor>{next, block->after_proj(next)};
                                   });
  return {out.at(0), out.at(1)};
}

}  // namespace wan
