#include "numerics/finite_copy.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "wanfw/error.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WANFW_STREAMING_COPY 1
#endif

// The loops below are plain C++; on x86-64 the compiler also builds an AVX2 copy of each and the
// loader picks it at run time where the CPU has AVX2 (the build itself targets baseline x86-64).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WANFW_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define WANFW_VECTOR_CLONES
#endif

namespace wanfw {

namespace {

/// The floating-point lanes of a 64-bit word: a value is NaN or infinite exactly when all of its
/// exponent bits are set. `low` and `high` hold each lane's lowest and highest bit.
struct Lanes {
  std::uint64_t exponent = 0, low = 0, high = 0;
  int bytes = 0;  ///< of one lane
};

Lanes lanes(int bytes, std::uint64_t exponent_mask) {
  Lanes out;
  out.bytes = bytes;
  const int bits = 8 * bytes;
  for (int shift = 0; shift < 64; shift += bits) {
    out.exponent |= exponent_mask << shift;
    out.low |= std::uint64_t{1} << shift;
    out.high |= (std::uint64_t{1} << (bits - 1)) << shift;
  }
  return out;
}

std::optional<Lanes> lanes_of(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return lanes(2, 0x7F80);
    case at::kHalf: return lanes(2, 0x7C00);
    case at::kFloat: return lanes(4, 0x7F800000);
    case at::kDouble: return lanes(8, 0x7FF0000000000000ULL);
    default: return std::nullopt;
  }
}

/// Non-zero when a lane of `word` is NaN or infinite: a lane whose exponent bits are all set is
/// zero after the XOR, and (t - low) & ~t & high detects a zero lane exactly.
inline std::uint64_t nonfinite_lanes(std::uint64_t word, const Lanes& l) {
  const std::uint64_t t = (word & l.exponent) ^ l.exponent;
  return (t - l.low) & ~t & l.high;
}

inline std::uint64_t load(const std::byte* p) {
  std::uint64_t word;
  std::memcpy(&word, p, sizeof word);
  return word;
}

bool scan(const std::byte* data, std::size_t bytes, const Lanes& l);


/// Same dtype: the C library's copy a chunk at a time, each chunk then checked while it is still
/// in the L1/L2 cache.
bool copy_same_cached(std::byte* target, const std::byte* source, std::size_t bytes, const Lanes* l) {
  constexpr std::size_t kChunk = 32 << 10;
  bool finite = true;
  for (std::size_t i = 0; i < bytes; i += kChunk) {
    const std::size_t length = std::min(kChunk, bytes - i);
    std::memcpy(target + i, source + i, length);
    if (l != nullptr) finite = scan(target + i, length, *l) && finite;
  }
  return finite;
}

/// bf16 -> fp32 (the upper half of the fp32 bits), checking the bf16 lanes: a bf16 value is
/// finite exactly when its fp32 widening is.
WANFW_VECTOR_CLONES bool widen_bf16_cached(float* target, const std::uint16_t* source, std::size_t count) {
  const Lanes l = lanes(2, 0x7F80);
  std::uint64_t flags = 0;
  std::size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    std::uint64_t word;
    std::memcpy(&word, source + i, 8);
    flags |= nonfinite_lanes(word, l);
    for (std::size_t k = 0; k < 4; ++k) {
      const std::uint32_t bits = static_cast<std::uint32_t>(source[i + k]) << 16;
      std::memcpy(target + i + k, &bits, 4);
    }
  }
  for (; i < count; ++i) {
    flags |= nonfinite_lanes(source[i], l);
    const std::uint32_t bits = static_cast<std::uint32_t>(source[i]) << 16;
    std::memcpy(target + i, &bits, 4);
  }
  return flags == 0;
}

WANFW_VECTOR_CLONES bool scan(const std::byte* data, std::size_t bytes, const Lanes& l) {
  std::uint64_t flags = 0;
  std::size_t i = 0;
  for (; i + 32 <= bytes; i += 32)
    flags |= nonfinite_lanes(load(data + i), l) | nonfinite_lanes(load(data + i + 8), l) |
             nonfinite_lanes(load(data + i + 16), l) | nonfinite_lanes(load(data + i + 24), l);
  for (; i + 8 <= bytes; i += 8) flags |= nonfinite_lanes(load(data + i), l);
  if (i < bytes) {
    std::uint64_t last = 0;
    std::memcpy(&last, data + i, bytes - i);
    flags |= nonfinite_lanes(last, l);
  }
  return flags == 0;
}

#ifdef WANFW_STREAMING_COPY
// Large copies bypass the caches: the target (a batch on its way to the device or the step) is
// written with non-temporal stores, so its lines are not read from memory first, and each 32
// bytes are checked in registers between the load and the store — one read of the source, one
// write of the target. Small ones stay with memcpy, whose target stays in cache.
constexpr std::size_t kStreamAbove = 256 << 10;

bool have_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

__attribute__((target("avx2"))) inline __m256i nonfinite_mask(__m256i v, __m256i exponent, int lane_bytes) {
  const __m256i masked = _mm256_and_si256(v, exponent);
  switch (lane_bytes) {
    case 2: return _mm256_cmpeq_epi16(masked, exponent);
    case 4: return _mm256_cmpeq_epi32(masked, exponent);
    default: return _mm256_cmpeq_epi64(masked, exponent);
  }
}

/// Same dtype, `bytes` >= kStreamAbove. `l` null: not floating (copied, not checked).
__attribute__((target("avx2"))) bool stream_same(std::byte* target, const std::byte* source, std::size_t bytes,
                                                 const Lanes* l) {
  // The head up to the target's 32-byte alignment, and the tail, go through copy_same.
  const std::size_t head = (32 - reinterpret_cast<std::uintptr_t>(target) % 32) % 32;
  bool finite = copy_same_cached(target, source, head, l);
  const __m256i exponent = _mm256_set1_epi64x(static_cast<long long>(l ? l->exponent : 0));
  const int lane_bytes = l ? l->bytes : 8;
  __m256i found = _mm256_setzero_si256();
  std::size_t i = head;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source + i + 96));
    if (l != nullptr)
      found = _mm256_or_si256(
          found, _mm256_or_si256(_mm256_or_si256(nonfinite_mask(a, exponent, lane_bytes), nonfinite_mask(b, exponent, lane_bytes)),
                                 _mm256_or_si256(nonfinite_mask(c, exponent, lane_bytes), nonfinite_mask(d, exponent, lane_bytes))));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(target + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(target + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(target + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(target + i + 96), d);
  }
  _mm_sfence();  // the streamed stores are visible before the batch is handed on
  finite = _mm256_testz_si256(found, found) && finite;
  return copy_same_cached(target + i, source + i, bytes - i, l) && finite;
}

/// bf16 -> fp32, `count` * 4 >= kStreamAbove: 16 values a step, widened in registers and streamed.
__attribute__((target("avx2"))) bool stream_widen_bf16(float* target, const std::uint16_t* source, std::size_t count) {
  std::size_t i = 0;
  bool finite = true;
  while (i < count && reinterpret_cast<std::uintptr_t>(target + i) % 32 != 0) {
    finite = widen_bf16_cached(target + i, source + i, 1) && finite;
    ++i;
  }
  const __m256i exponent = _mm256_set1_epi16(0x7F80);
  __m256i found = _mm256_setzero_si256();
  for (; i + 16 <= count; i += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source + i));
    found = _mm256_or_si256(found, nonfinite_mask(v, exponent, 2));
    const __m256i low = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16);
    const __m256i high = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(target + i), low);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(target + i + 8), high);
  }
  _mm_sfence();
  finite = _mm256_testz_si256(found, found) && finite;
  return widen_bf16_cached(target + i, source + i, count - i) && finite;
}
#endif

/// Same dtype: streamed when large (and the CPU has AVX2), else through the cache.
bool copy_same(std::byte* target, const std::byte* source, std::size_t bytes, const Lanes* l) {
#ifdef WANFW_STREAMING_COPY
  if (bytes >= kStreamAbove && have_avx2()) return stream_same(target, source, bytes, l);
#endif
  return copy_same_cached(target, source, bytes, l);
}

bool widen_bf16(float* target, const std::uint16_t* source, std::size_t count) {
#ifdef WANFW_STREAMING_COPY
  if (count * 4 >= kStreamAbove && have_avx2()) return stream_widen_bf16(target, source, count);
#endif
  return widen_bf16_cached(target, source, count);
}

/// Runs `part(first, last)` over elements [0, count): on LibTorch's threads for a large tensor
/// (a weight), on the calling thread for a small one (a sample's field). True when every part
/// found only finite values.
template <class Part>
bool in_parts(std::int64_t count, const Part& part) {
  constexpr std::int64_t kGrain = std::int64_t{1} << 20;
  if (count <= kGrain) return part(0, count);
  std::atomic<bool> finite{true};
  at::parallel_for(0, count, kGrain, [&](std::int64_t first, std::int64_t last) {
    if (!part(first, last)) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

}  // namespace

bool all_finite(const at::Tensor& tensor) {
  const auto l = lanes_of(tensor.scalar_type());
  if (!l || !tensor.device().is_cpu()) return !at::isFloatingType(tensor.scalar_type()) || at::isfinite(tensor).all().item<bool>();
  const at::Tensor dense = tensor.contiguous();
  const auto* data = static_cast<const std::byte*>(dense.const_data_ptr());
  const std::int64_t size = dense.element_size();
  return in_parts(dense.numel(), [&](std::int64_t first, std::int64_t last) {
    return scan(data + first * size, static_cast<std::size_t>((last - first) * size), *l);
  });
}

std::int64_t count_nonfinite(const at::Tensor& tensor) {
  if (!at::isFloatingType(tensor.scalar_type())) return 0;
  return (~at::isfinite(tensor)).sum().item<std::int64_t>();
}

bool copy_finite(at::Tensor& target, const at::Tensor& source) {
  if (target.sizes() != source.sizes() || !target.is_contiguous())
    throw Error("copy_finite: the target must be contiguous and of the source's shape");
  if (!target.device().is_cpu() || !source.device().is_cpu()) {
    target.copy_(source);
    return all_finite(target);
  }
  const at::Tensor dense = source.contiguous();
  const auto from = dense.scalar_type(), to = target.scalar_type();
  auto* out = static_cast<std::byte*>(target.data_ptr());
  const auto* in = static_cast<const std::byte*>(dense.const_data_ptr());
  if (from == to && (lanes_of(to) || !at::isFloatingType(to))) {
    const auto l = lanes_of(to);
    const std::int64_t size = dense.element_size();
    return in_parts(dense.numel(), [&](std::int64_t first, std::int64_t last) {
      return copy_same(out + first * size, in + first * size, static_cast<std::size_t>((last - first) * size),
                       l ? &*l : nullptr);
    });
  }
  if (from == at::kBFloat16 && to == at::kFloat)
    return in_parts(dense.numel(), [&](std::int64_t first, std::int64_t last) {
      return widen_bf16(reinterpret_cast<float*>(out) + first, reinterpret_cast<const std::uint16_t*>(in) + first,
                        static_cast<std::size_t>(last - first));
    });
  // Any other pair: ATen converts a chunk, then the chunk is checked while it is in cache.
  const std::int64_t chunk = std::max<std::int64_t>(1, (256 << 10) / static_cast<std::int64_t>(target.element_size()));
  at::Tensor flat_out = target.view({-1});
  const at::Tensor flat_in = dense.view({-1});
  bool finite = true;
  for (std::int64_t start = 0; start < flat_in.numel(); start += chunk) {
    const std::int64_t length = std::min(chunk, flat_in.numel() - start);
    at::Tensor part = flat_out.narrow(0, start, length);
    part.copy_(flat_in.narrow(0, start, length));
    finite = finite && all_finite(part);
  }
  return finite;
}

}  // namespace wanfw
