#include "wan/dit_export.hpp"

#include <fmt/format.h>

#include "wan/lora.hpp"
#include "wan/lora_files.hpp"
#include "wan/wan_weights.hpp"
#include "wanfw/log.hpp"

namespace wan {

void export_dit(WanDiTImpl& dit, Task task, const std::filesystem::path& folder,
                const wanfw::ExportSettings& settings) {
  const bool adapters = !adapter_parameters(dit).empty();
  if (adapters && !settings.merge_adapters) {
    write_adapter_files(dit, folder);
    wanfw::log::info(
        fmt::format("wrote the adapters to {} (wan_lora.safetensors: Wan / ComfyUI keys; "
                    "pytorch_lora_weights.safetensors: diffusers)",
                    folder.string()));
    return;
  }
  if (adapters) merge_adapters(dit);
  save_wan_weights(dit, folder, task_name(task), settings.max_shard_bytes);
  wanfw::log::info(
      fmt::format("wrote the official layout{} to {}", adapters ? " with the adapters merged" : "", folder.string()));
}

void export_denoiser(WanDenoiser& denoiser, Task task, const std::filesystem::path& folder,
                     const wanfw::ExportSettings& settings) {
  auto dits = denoiser.dits();
  for (std::size_t i = 0; i < dits.size(); ++i) {
    const std::string expert = denoiser.expert_name(i);
    export_dit(*dits[i], task, expert.empty() ? folder : folder / (expert + "_model"), settings);
  }
}

}  // namespace wan
