// What training state costs a trained parameter, and where it sits (wan/memory_estimate.hpp).

#include <fmt/format.h>

#include "wan/memory_estimate.hpp"

namespace wan {

namespace {

const char* type_of(double bytes) { return bytes == 4 ? "fp32" : "bf16"; }

}  // namespace

TrainedBytes trained_parameter_bytes(double value_bytes, bool master_weights, bool host_state,
                                     double sharded_copy_bytes) {
  const double compute = master_weights ? 2 : value_bytes;  // the weight and gradient the device computes with
  const char* type = type_of(compute);
  if (host_state && sharded_copy_bytes > 0)
    return {sharded_copy_bytes + value_bytes, 4 * value_bytes,
            fmt::format("{} copy of the shard {:g} + {} gradient {:g} on the device; the {} shard {:g} + gradient "
                        "{:g} + AdamW moments {:g} in host memory",
                        type_of(sharded_copy_bytes), sharded_copy_bytes, type_of(value_bytes), value_bytes,
                        type_of(value_bytes), value_bytes, value_bytes, 2 * value_bytes),
            value_bytes};
  if (host_state)
    return {2 * compute, 16,
            fmt::format("{} weight {:g} + gradient {:g} on the device; fp32 master weight 4 + gradient 4 + AdamW "
                        "moments 8 in host memory",
                        type, compute, compute),
            compute};
  if (master_weights)
    return {16, 0, "bf16 weight 2 + bf16 gradient 2 + fp32 master weight 4 + fp32 AdamW moments 8", 2};
  return {4 * value_bytes, 0,
          fmt::format("{} weight {:g} + gradient {:g} + AdamW moments {:g}", type, value_bytes, value_bytes,
                      2 * value_bytes),
          value_bytes};
}

double dit_state_bytes(const WanConfig& config, const LoraSettings& lora, const std::string& dtype) {
  const double value = bytes_per_value(dtype), weights = static_cast<double>(config.parameter_count());
  if (!lora.enabled()) return weights * trained_parameter_bytes(value, false).total();
  return weights * value +
         static_cast<double>(adapter_parameter_count(config, lora)) * trained_parameter_bytes(4, false).total();
}

}  // namespace wan
