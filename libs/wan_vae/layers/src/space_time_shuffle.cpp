#include "wan/vae/space_time_shuffle.hpp"

#include <ATen/ATen.h>

namespace wan {

at::Tensor average_down(const at::Tensor& input, std::int64_t out, std::int64_t ft, std::int64_t fs) {
  const std::int64_t pad = (ft - input.size(2) % ft) % ft;
  const at::Tensor x = pad > 0 ? at::constant_pad_nd(input, {0, 0, 0, 0, pad, 0}, 0) : input;
  const std::int64_t b = x.size(0), c = x.size(1), t = x.size(2) / ft, h = x.size(3) / fs, w = x.size(4) / fs;
  const std::int64_t group = c * ft * fs * fs / out;
  return x.view({b, c, t, ft, h, fs, w, fs})
      .permute({0, 1, 3, 5, 7, 2, 4, 6})
      .contiguous()
      .view({b, out, group, t, h, w})
      .mean(2);
}

at::Tensor duplicate_up(const at::Tensor& input, std::int64_t out, std::int64_t ft, std::int64_t fs, bool first_chunk) {
  const std::int64_t repeats = out * ft * fs * fs / input.size(1);
  const at::Tensor x = input.repeat_interleave(repeats, 1);
  const std::int64_t b = x.size(0), t = x.size(2), h = x.size(3), w = x.size(4);
  at::Tensor y = x.view({b, out, ft, fs, fs, t, h, w})
                     .permute({0, 1, 5, 2, 6, 3, 7, 4})
                     .contiguous()
                     .view({b, out, t * ft, h * fs, w * fs});
  return first_chunk ? y.narrow(2, ft - 1, y.size(2) - (ft - 1)) : y;
}

at::Tensor patchify(const at::Tensor& x, std::int64_t p) {
  if (p == 1) return x;
  const std::int64_t b = x.size(0), c = x.size(1), f = x.size(2), h = x.size(3) / p, w = x.size(4) / p;
  return x.view({b, c, f, h, p, w, p}).permute({0, 1, 6, 4, 2, 3, 5}).contiguous().view({b, c * p * p, f, h, w});
}

at::Tensor unpatchify(const at::Tensor& x, std::int64_t p) {
  if (p == 1) return x;
  const std::int64_t b = x.size(0), c = x.size(1) / (p * p), f = x.size(2), h = x.size(3), w = x.size(4);
  return x.view({b, c, p, p, f, h, w}).permute({0, 1, 4, 5, 3, 6, 2}).contiguous().view({b, c, f, h * p, w * p});
}

}  // namespace wan
