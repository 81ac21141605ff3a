#include "vae_decoder.hpp"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>

#include "wan/vae/resample.hpp"
#include "wan/vae/residual_block.hpp"
#include "wan/vae/space_time_shuffle.hpp"

namespace wan {

namespace {

/// An up block: num_res_blocks + 1 residual blocks, then (except the last stage) an upsampler;
/// Wan2.2 adds the input duplicated up alike.
class VaeUpBlockImpl : public torch::nn::Module {
 public:
  VaeUpBlockImpl(std::int64_t in, std::int64_t out, std::int64_t blocks, bool up, bool temporal, bool residual)
      : out_(out), ft_(temporal ? 2 : 1), residual_(residual && up) {
    torch::nn::ModuleList list;
    for (std::int64_t i = 0; i <= blocks; ++i) {
      resnets_.push_back(VaeResidualBlock(i == 0 ? in : out, out));
      list->push_back(resnets_.back());
    }
    register_module("resnets", list);
    if (!up) return;
    const ResampleMode mode = temporal ? ResampleMode::Upsample3d : ResampleMode::Upsample2d;
    if (residual) {
      upsampler_ = register_module("upsampler", Resample(out, mode, out));
    } else {
      upsampler_ = Resample(out, mode, out / 2);
      torch::nn::ModuleList upsamplers;
      upsamplers->push_back(upsampler_);
      register_module("upsamplers", upsamplers);
    }
  }
  at::Tensor forward(const at::Tensor& input, FeatureCache* cache, bool first_chunk) {
    at::Tensor x = input;
    for (auto& block : resnets_) x = block->forward(x, cache);
    if (upsampler_) x = upsampler_->forward(x, cache);
    return residual_ ? x + duplicate_up(input, out_, ft_, 2, first_chunk) : x;
  }

 private:
  std::int64_t out_, ft_;
  bool residual_;
  std::vector<VaeResidualBlock> resnets_;
  Resample upsampler_{nullptr};
};
TORCH_MODULE(VaeUpBlock);

}  // namespace

VaeDecoderImpl::VaeDecoderImpl(const VaeConfig& c) {
  const std::int64_t base = c.decoder_base_dim;
  std::vector<std::int64_t> dims{base * c.dim_mult.back()};
  for (auto it = c.dim_mult.rbegin(); it != c.dim_mult.rend(); ++it) dims.push_back(base * *it);
  const std::array<std::int64_t, 3> k3{3, 3, 3}, p1{1, 1, 1};
  conv_in_ = register_module("conv_in", CausalConv3d(c.z_dim, dims[0], k3, p1));
  mid_ = register_module("mid_block", VaeMidBlock(dims[0]));
  torch::nn::ModuleList blocks;
  const std::size_t stages = c.dim_mult.size();
  for (std::size_t i = 0; i < stages; ++i) {
    const bool up = i + 1 != stages;
    // The upsampling is the reverse of the downsampling: stage i undoes stage stages - 2 - i.
    const bool temporal = up && c.temporal_downsample[stages - 2 - i];
    const std::int64_t in = i > 0 && !c.is_residual ? dims[i] / 2 : dims[i];  // Wan2.1's upsamplers halve
    VaeUpBlock block(in, dims[i + 1], c.num_res_blocks, up, temporal, c.is_residual);
    blocks->push_back(block);
    up_.push_back([p = block.ptr()](const at::Tensor& x, FeatureCache* cache, bool first) {
      return p->forward(x, cache, first);
    });
  }
  register_module("up_blocks", blocks);
  norm_out_ = register_module("norm_out", VaeRmsNorm(dims.back(), false));
  conv_out_ = register_module("conv_out", CausalConv3d(dims.back(), c.out_channels, k3, p1));
}

at::Tensor VaeDecoderImpl::forward(const at::Tensor& input, FeatureCache* cache, bool first_chunk) {
  at::Tensor x = mid_->forward(cached_conv(*conv_in_, input, cache), cache);
  for (const Step& step : up_) x = step(x, cache, first_chunk);
  return cached_conv(*conv_out_, silu_in_place(norm_out_->forward(x)), cache);
}

}  // namespace wan
