#include "wan/attention_backend.hpp"

#include <mutex>
#include <set>
#include <tuple>

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <fmt/format.h>

#include "wanfw/error.hpp"
#include "wanfw/log.hpp"

namespace wan {

namespace {

const char* kernel_name(std::int64_t choice) {
  switch (static_cast<at::SDPBackend>(choice)) {
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::flash_attention: return "flash";
    case at::SDPBackend::efficient_attention: return "efficient";
    case at::SDPBackend::cudnn_attention: return "cudnn";
    case at::SDPBackend::overrideable: return "overrideable";
    default: return "none";
  }
}

AttentionBackend current = AttentionBackend::Auto;

}  // namespace

const std::vector<std::string>& attention_backend_names() {
  static const std::vector<std::string> names = {"auto", "flash", "efficient", "cudnn", "math"};
  return names;
}

AttentionBackend parse_attention_backend(const std::string& name) {
  const auto& names = attention_backend_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<AttentionBackend>(i);
  throw wanfw::Error(fmt::format("unknown attention backend '{}'", name),
                     fmt::format("choose one of {}", fmt::join(names, ", ")));
}

void use_attention_backend(AttentionBackend backend) {
  auto& context = at::globalContext();
  const bool every = backend == AttentionBackend::Auto;
  context.setSDPUseFlash(every || backend == AttentionBackend::Flash);
  context.setSDPUseMemEfficient(every || backend == AttentionBackend::Efficient);
  context.setSDPUseCuDNN(every || backend == AttentionBackend::CuDNN);
  context.setSDPUseMath(every || backend == AttentionBackend::Math);
  current = backend;
}

void check_attention_kernel(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                   const at::Tensor& mask) {
  using Kind = std::tuple<int, int, std::int64_t, bool>;  // device type, dtype, head size, masked
  static std::mutex mutex;
  static std::set<Kind> seen;
  // Under autocast SDPA runs in the autocast dtype (it is on autocast's lower-precision list).
  const c10::DeviceType device = query.device().type();
  const at::ScalarType dtype = at::autocast::is_autocast_enabled(device) && at::isFloatingType(query.scalar_type())
                                   ? at::autocast::get_autocast_dtype(device)
                                   : query.scalar_type();
  const Kind kind{static_cast<int>(device), static_cast<int>(dtype), query.size(-1), mask.defined()};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (seen.count(kind) != 0) return;
  }
  at::NoGradGuard no_grad;
  std::int64_t choice = static_cast<std::int64_t>(at::SDPBackend::error);
  try {  // ATen answers "none" by returning error or, on some devices, by throwing
    choice = at::_fused_sdp_choice(query.to(dtype), key.to(dtype), value.to(dtype),
                                   mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt);
  } catch (const c10::Error&) {
  }
  const std::string what = fmt::format("{}, {}, head dim {}{}", c10::DeviceTypeName(device, true), c10::toString(dtype),
                                       query.size(-1), mask.defined() ? ", masked" : "");
  if (choice == static_cast<std::int64_t>(at::SDPBackend::error))
    throw wanfw::Error(fmt::format("attention: the {} kernel (model.attention) cannot run this attention ({})",
                                   attention_backend_names().at(static_cast<std::size_t>(current)), what),
                       "set model.attention to auto, or to a kernel that takes this dtype, head size and device");
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(kind).second)
    wanfw::log::info("attention: SDPA runs ", kernel_name(choice), " (", what, ")",
                     current == AttentionBackend::Auto ? "" : ", as model.attention asks");
}

}  // namespace wan
