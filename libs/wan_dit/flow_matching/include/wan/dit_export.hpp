#pragma once
// `wanfw export` for the Wan model plugins: a DiT in the official layout, or the adapters it
// carries in the layouts adapter loaders read, or the adapters merged into full weights.

#include <filesystem>
#include <string>

#include "wan/task.hpp"
#include "wan/wan_denoiser.hpp"
#include "wanfw/model.hpp"

namespace wan {

/// Writes `dit` to `folder`: its adapters (wan::write_adapter_files) when it carries some and
/// `settings.merge_adapters` is false; otherwise the official layout (wan::save_wan_weights, the
/// adapters folded in first: the DiT keeps them merged).
void export_dit(WanDiTImpl& dit, Task task, const std::filesystem::path& folder, const wanfw::ExportSettings& settings);

/// export_dit for every DiT of `denoiser`: one in `folder`; experts in folder/high_noise_model and
/// folder/low_noise_model (a single trained expert in its own subfolder), as the official
/// download holds them.
void export_denoiser(WanDenoiser& denoiser, Task task, const std::filesystem::path& folder,
                     const wanfw::ExportSettings& settings);

}  // namespace wan
