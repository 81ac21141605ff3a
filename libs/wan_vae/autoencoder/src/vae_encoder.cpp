#include "vae_encoder.hpp"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>

#include "wan/vae/resample.hpp"
#include "wan/vae/residual_block.hpp"
#include "wan/vae/space_time_shuffle.hpp"

namespace wan {

namespace {

/// Wan2.2's down block: residual blocks, a resample, plus the input averaged down alike.
class ResidualDownBlockImpl : public torch::nn::Module {
 public:
  ResidualDownBlockImpl(std::int64_t in, std::int64_t out, std::int64_t blocks, bool temporal, bool down)
      : out_(out), ft_(temporal ? 2 : 1), fs_(down ? 2 : 1) {
    torch::nn::ModuleList list;
    for (std::int64_t i = 0; i < blocks; ++i) {
      resnets_.push_back(VaeResidualBlock(i == 0 ? in : out, out));
      list->push_back(resnets_.back());
    }
    register_module("resnets", list);
    if (down)
      downsampler_ = register_module(
          "downsampler", Resample(out, temporal ? ResampleMode::Downsample3d : ResampleMode::Downsample2d, out));
  }
  at::Tensor forward(const at::Tensor& input, FeatureCache* cache) {
    at::Tensor x = input;
    for (auto& block : resnets_) x = block->forward(x, cache);
    if (downsampler_) x = downsampler_->forward(x, cache);
    return x + average_down(input, out_, ft_, fs_);
  }

 private:
  std::int64_t out_, ft_, fs_;
  std::vector<VaeResidualBlock> resnets_;
  Resample downsampler_{nullptr};
};
TORCH_MODULE(ResidualDownBlock);

}  // namespace

VaeEncoderImpl::VaeEncoderImpl(const VaeConfig& c) {
  std::vector<std::int64_t> dims{c.base_dim};
  for (const std::int64_t m : c.dim_mult) dims.push_back(c.base_dim * m);
  const std::array<std::int64_t, 3> k3{3, 3, 3}, p1{1, 1, 1};
  conv_in_ = register_module("conv_in", CausalConv3d(c.in_channels, dims[0], k3, p1));
  torch::nn::ModuleList blocks;
  const std::size_t stages = c.dim_mult.size();
  for (std::size_t i = 0; i < stages; ++i) {
    const bool last = i + 1 == stages;
    const std::int64_t out = dims[i + 1];
    if (c.is_residual) {
      ResidualDownBlock block(dims[i], out, c.num_res_blocks, !last && c.temporal_downsample[i], !last);
      blocks->push_back(block);
      down_.push_back([p = block.ptr()](const at::Tensor& x, FeatureCache* cache) { return p->forward(x, cache); });
      continue;
    }
    std::int64_t in = dims[i];
    for (std::int64_t r = 0; r < c.num_res_blocks; ++r, in = out) {
      VaeResidualBlock block(in, out);
      blocks->push_back(block);
      down_.push_back([p = block.ptr()](const at::Tensor& x, FeatureCache* cache) { return p->forward(x, cache); });
    }
    if (last) continue;
    Resample resample(out, c.temporal_downsample[i] ? ResampleMode::Downsample3d : ResampleMode::Downsample2d, out);
    blocks->push_back(resample);
    down_.push_back([p = resample.ptr()](const at::Tensor& x, FeatureCache* cache) { return p->forward(x, cache); });
  }
  register_module("down_blocks", blocks);
  mid_ = register_module("mid_block", VaeMidBlock(dims.back()));
  norm_out_ = register_module("norm_out", VaeRmsNorm(dims.back(), false));
  conv_out_ = register_module("conv_out", CausalConv3d(dims.back(), 2 * c.z_dim, k3, p1));
}

at::Tensor VaeEncoderImpl::forward(const at::Tensor& input, FeatureCache* cache) {
  at::Tensor x = cached_conv(*conv_in_, input, cache);
  for (const Step& step : down_) x = step(x, cache);
  x = mid_->forward(x, cache);
  return cached_conv(*conv_out_, silu_in_place(norm_out_->forward(x)), cache);
}

}  // namespace wan
