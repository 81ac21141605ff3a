#pragma once
// The scale of each element of an fp8 weight, broadcast to the weight's shape from its scales
// (per block of 64 inputs, per output channel or per tensor), for the fp8 cases' error bounds.
#include <torch/torch.h>

#include "wan/fp8_weight.hpp"

inline torch::Tensor fp8_element_scales(const wan::Fp8Weight& q) {
  switch (q.scaling) {
    case wan::Fp8Scaling::Block64:
      return q.scales.expand({q.values.size(0), q.values.size(1) / 64, 64}).reshape(q.values.sizes());
    case wan::Fp8Scaling::PerChannel:
    case wan::Fp8Scaling::PerTensor:
      return q.scales.expand(q.values.sizes());
  }
  return {};
}
