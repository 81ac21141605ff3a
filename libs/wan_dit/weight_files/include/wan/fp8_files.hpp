#pragma once
// fp8 weights as the community's checkpoints store them, read into wan::Fp8Weight as they are
// (an fp8 file is never quantized again). The layouts, per Linear `<l>`:
//
//   ComfyUI "scaled fp8"     <l>.weight fp8, <l>.scale_weight one value ([] or [1])
//   ComfyUI comfy_quant      <l>.weight fp8, <l>.weight_scale one value, <l>.comfy_quant: uint8
//                            bytes of JSON {"format": "float8_e4m3fn"}
//   Kijai                    <l>.weight fp8, <l>.scale_weight one value
//   musubi-tuner             <l>.weight fp8, <l>.scale_weight [1], [out, 1] or [out, in/64, 1]
//   plain fp8 (a cast)       <l>.weight fp8 without a scale: scale 1
//
// In every layout the weight is values x scale. Input scales (`scale_input`, `input_scale`) belong
// to fp8 matrix products, which dequantized training does not run, and are not read.

#include <optional>
#include <string>

#include "wan/fp8_weight.hpp"
#include "wanfw/io/safetensors.hpp"

namespace wan {

/// The fp8 weight stored under `name` (a "....weight" key) with its scale, or nothing when that
/// tensor is not fp8 (a bf16 or float32 weight: quantize_fp8 it while loading). Throws
/// wanfw::FileError naming the file and the tensor for a layout none of the above is: a scale
/// whose shape fits no scaling of the weight, a scale that is not a finite positive float, a
/// comfy_quant format other than float8_e4m3fn / float8_e5m2, an fp8 dtype other than those two.
std::optional<Fp8Weight> read_fp8_weight(const wanfw::SafetensorsCheckpoint& checkpoint, const std::string& name);

}  // namespace wan
