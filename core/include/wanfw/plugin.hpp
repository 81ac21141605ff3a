#pragma once
// The plugin contract. A plugin library exports two symbols, both made by WANFW_PLUGIN:
//
//   - `wanfw_plugin_record`: plain constant data (ABI version, LibTorch version, kind). The host
//     reads it from the file itself, before it loads the library, and refuses a plugin whose
//     versions differ from its own: no code of a refused plugin runs, not even its static
//     initialisers.
//   - `wanfw_plugin_entry`: a function returning the PluginDescriptor (name, options, factory),
//     called only for a plugin whose record matched.
//
//   #include <wanfw/plugin.hpp>
//   static wanfw::PluginDescriptor describe() {
//     auto d = wanfw::PluginDescriptor::for_model("my_model", "1.0.0", "One line for `wanfw plugins`.");
//     d.options = {wanfw::option("width", wanfw::OptionType::Integer).value("64").doc("...")};
//     d.make_model = [](const wanfw::Options& o, const wanfw::PluginContext& c) { ... };
//     return d;
//   }
//   WANFW_PLUGIN(Model, describe)

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "wanfw/decoder.hpp"
#include "wanfw/logger.hpp"
#include "wanfw/model.hpp"
#include "wanfw/options.hpp"
#include "wanfw/strategy.hpp"
#include "wanfw/version.hpp"

namespace wanfw {

enum class PluginKind : std::uint32_t { Model = 1, Strategy = 2, Logger = 3, Dataset = 4 };
const char* plugin_kind_name(PluginKind kind);

/// The versions a plugin was built with, as plain data the host can read without running the
/// plugin. Its layout never changes; a later wanfw may append fields (record_size tells).
struct PluginRecord {
  char magic[16];               ///< kPluginRecordMagic
  std::uint32_t record_size;    ///< sizeof(PluginRecord) of the plugin's wanfw
  std::uint32_t abi_version;    ///< WANFW_PLUGIN_ABI_VERSION
  std::uint32_t kind;           ///< PluginKind
  std::uint32_t reserved;
  char torch_version[32];       ///< TORCH_VERSION, e.g. "2.15.0"
  char wanfw_version[32];       ///< WANFW_VERSION_STRING
};
inline constexpr char kPluginRecordMagic[16] = "wanfw-plugin";

/// The run `wanfw model-info` estimates memory for, from the config and the command line.
struct TrainingLayout {
  std::string strategy = "single";   ///< the strategy plugin (a wrapper's inner one: grad_accum's)
  int gpus = 1;                      ///< ranks the run is started on (model-info --gpus)
  int sequence_parallel = 1;         ///< ranks sharing each sample (strategy.sequence_parallel)
  int replica_groups = 1;            ///< a sharded state's copies (fsdp replicate): shards over gpus / this
  std::int64_t batch_size = 1;       ///< samples a rank takes per micro-batch (data.batch_size)
  std::vector<std::int64_t> latent;  ///< the largest bucket's frames, height, width; empty when the config names none
  at::ScalarType dtype = at::kFloat; ///< what precision.mode computes in
  /// precision.mode bf16_weights: trained weights and gradients in bf16, fp32 masters and AdamW state.
  bool master_weights = false;
  /// optimizer.state host: the fp32 masters, their gradients and AdamW's moments in host memory.
  bool host_optimizer_state = false;
  /// The strategy chain leaves a unit's gradients final when its backward ends
  /// (StrategyCapabilities::unit_gradients_final), and the micro-batches it accumulates a step: with
  /// the state on the host and one micro-batch a step, the device holds a unit's gradients at a time.
  bool unit_gradients_final = false;
  int accumulation = 1;
  /// block_swap: units streamed from host memory, and the device slots they share.
  std::int64_t swapped_blocks = 0;
  std::int64_t swap_ring = 2;
  /// model-info --fit and --host-ram: the device and host bytes per rank a plan must fit; 0: none asked.
  double fit_device_bytes = 0;
  double fit_host_bytes = 0;
  /// The strategy shards parameters, gradients and optimizer state across the GPUs (its plugin
  /// declares StrategyCapabilities::shards_state): each GPU holds 1/gpus of the training state.
  bool sharded = false;
  /// The strategy places the model's networks on rank groups of these sizes (its `network_groups`
  /// option); empty: every rank holds the whole model.
  std::vector<int> network_groups{};
};

/// What a strategy does with the model, declared in its descriptor so that the host can plan and
/// check a run (wanfw model-info, the config's combinations) without building the strategy, which
/// may join a process group. The host treats a strategy by these answers alone, never by its name.
/// A strategy that wraps another (a subsection, like grad_accum's `inner`) is treated by what
/// either declares.
struct StrategyCapabilities {
  /// Parameters, gradients and optimizer state are split across the ranks (fsdp). The built
  /// strategy must answer Strategy::shards_state() alike (the host refuses a plugin whose answers
  /// differ). The host then plans 1/N of the training state a rank, writes checkpoints in pieces,
  /// and refuses block swap and precision.mode bf16_weights.
  bool shards_state = false;
  /// The module is copied onto several devices of one process (data_parallel's replicas): block
  /// swap, which streams the blocks of one copy, is refused.
  bool replicates_module = false;
  /// Nothing changes a unit's parameters' gradients once the unit's backward ends: no reduction
  /// over ranks or replicas follows (single), or, for a strategy that wraps another, none that it
  /// adds (grad_accum). A chain of strategies has it when each declares it; the host then moves a
  /// unit's gradients off the device as its backward ends (optimizer.state host). The built
  /// strategy answers it as Strategy::unit_gradients_final().
  bool unit_gradients_final = false;
  /// The strategy keeps the state it shards in host memory when the run asks for it
  /// (optimizer.state host, PluginContext::host_optimizer_state): its shards (the optimizer's
  /// parameters) with their gradients in one host arena (wanfw/parallel/host_arena.hpp), and so the
  /// optimizer's moments and averages, which are made beside them; the device keeps a copy of the
  /// shards that gathers send. The host refuses optimizer.state host with a strategy that shards
  /// the state and does not declare this.
  bool host_state = false;
  /// The strategy can form one group of ranks per network of the model (Strategy::network_groups),
  /// the groups' sizes given by its `network_groups` option: model-info plans each group's ranks.
  bool places_networks = false;
};

/// How a strategy's validated options lay out the ranks, read without joining them
/// (PluginDescriptor::strategy_layout).
struct StrategyLayout {
  int sequence_parallel = 1;        ///< ranks that share each sample's tokens
  std::vector<int> network_groups;  ///< ranks of each network's group; empty: every rank the whole model
  /// Copies of the model one process runs side by side (data_parallel: one a device). Above 1 the
  /// model must declare ModelCapabilities::replicates; the host refuses the config otherwise.
  int replicas = 1;
  /// Micro-batches accumulated a step (grad_accum: its steps); a chain multiplies its strategies'.
  int accumulation = 1;
  /// Groups of ranks that each hold the whole sharded state (fsdp replicate: hybrid sharding, the
  /// state sharded over a group's ranks and the groups' gradients averaged); 1: one group.
  int replica_groups = 1;
};

/// What a model can do beyond the Model contract's required calls, declared in its descriptor so
/// that the host checks a config's combinations before it builds anything.
struct ModelCapabilities {
  /// Model::replicate builds an independent copy on another device, which a strategy running
  /// replicas in one process needs (StrategyLayout::replicas > 1).
  bool replicates = false;
};

/// What the host hands a factory besides the plugin's own options.
struct PluginContext {
  /// The run's seed (run.seed).
  std::uint64_t seed = 0;
  /// The config path of the section being built: "model", "strategy", "strategy.inner", "loggers.0".
  std::string section;
  /// Models and loggers: the device the model will train on (the strategy's), so that a model can
  /// build its weights where they will live. Strategies are built first and choose it: for them
  /// it is the CPU.
  c10::Device device{c10::kCPU};
  /// Models: the device the strategy places the model on. Equal to `device`, except under block
  /// swap, where the model is built on the host (`device` is the CPU) and moved there after its
  /// streamed weights have left for host memory: what is not in module() (a frozen teacher) goes
  /// here directly.
  c10::Device train_device{c10::kCPU};
  /// The precision the run computes in: kFloat (fp32), kBFloat16 (bf16 and bf16_weights), kHalf (fp16).
  at::ScalarType dtype = at::kFloat;
  /// Builds the strategy described by the subsection `key` of this plugin's section (a strategy
  /// that wraps another, like grad_accum's `inner`). The key must be listed in
  /// PluginDescriptor::subsections. Throws ConfigError when the subsection is missing or wrong.
  std::function<std::shared_ptr<Strategy>(const std::string& key)> build_strategy;
  /// Strategies: optimizer.state host. A strategy that shards the state and declares
  /// StrategyCapabilities::host_state keeps its shards in host memory; for one that keeps the
  /// whole model, the host keeps the masters there itself.
  bool host_optimizer_state = false;
  /// Models: under a strategy that places networks on rank groups, this rank's place (sizes empty:
  /// every rank holds the whole model). The model builds its group's network alone, and refuses
  /// groups that do not match its networks (Model::networks) with a ConfigError.
  NetworkGroups network_groups{};
  /// Data sets: the fields the model declared (what every sample must carry).
  std::vector<FieldSpec> fields;
  /// Models: the run as model-info lays it out (batch, largest bucket, block swap), for a memory plan.
  TrainingLayout layout;
  /// Models: false when the model is built to be evaluated (`predict`, `sample`, `export`), not
  /// trained: warnings about what training would learn do not apply.
  bool trains = true;
};

struct PluginDescriptor {
  PluginKind kind = PluginKind::Model;
  std::string name;
  std::string version;
  std::string summary;
  OptionSchema options;
  /// Keys of this plugin's section that hold another plugin's section (a strategy's `inner`);
  /// they are not options, and the plugin builds them through PluginContext::build_strategy.
  std::vector<std::string> subsections;
  /// Options an earlier version had, and what replaced each: a config that still sets one is
  /// refused at the key with this text as the hint ("data.buckets: [\"FxHxW\"] holds the shapes").
  std::vector<std::pair<std::string, std::string>> removed_options;
  /// Strategies: what the strategy does with the model (StrategyCapabilities).
  StrategyCapabilities capabilities;
  /// Models: what the model can do besides the required calls (ModelCapabilities).
  ModelCapabilities model_capabilities;

  // Exactly the factory of `kind` is set.
  std::unique_ptr<Model> (*make_model)(const Options&, const PluginContext&) = nullptr;
  std::unique_ptr<Strategy> (*make_strategy)(const Options&, const PluginContext&) = nullptr;
  std::unique_ptr<Logger> (*make_logger)(const Options&, const PluginContext&) = nullptr;
  std::unique_ptr<Dataset> (*make_dataset)(const Options&, const PluginContext&) = nullptr;

  /// Optional, for models: a summary (size, parameter count, memory estimate per GPU for `layout`)
  /// worked out from the options alone, without allocating weights (`wanfw model-info`).
  std::string (*inspect_model)(const Options&, const TrainingLayout& layout) = nullptr;
  /// Optional, for models: the decoder from the model's latents to pixels (wanfw/decoder.hpp),
  /// built from the model's options alone, on `context.device`; null when the options name none
  /// (the Wan models: no `vae`), so previews stay images.
  std::unique_ptr<VideoDecoder> (*make_decoder)(const Options&, const PluginContext&) = nullptr;
  /// Optional, for strategies: the layout of ranks the options describe, checked as make_strategy
  /// checks them (a refusal through Options::fail) but without joining any process group. The host
  /// asks it (never the option keys) where no strategy is built: `validate` and `model-info` plan
  /// by it, and a config it lays out on more ranks than a process has is validated as one process.
  /// Null: one rank group, whole sequences.
  StrategyLayout (*strategy_layout)(const Options&) = nullptr;
  /// Optional, for data sets: the buckets (latent frames x height x width) the validated options
  /// describe, read without building the data set (the synthetic set's option, a folder's
  /// manifest), refused through Options::fail as make_dataset refuses them. The host asks it
  /// (never the option keys) to plan the largest sample's activations (`model-info`, the model's
  /// PluginContext::layout). Empty when they cannot be known yet (a folder not made); null: none.
  std::vector<Bucket> (*data_buckets)(const Options&) = nullptr;

  static PluginDescriptor for_model(std::string name, std::string version, std::string summary);
  static PluginDescriptor for_strategy(std::string name, std::string version, std::string summary);
  static PluginDescriptor for_logger(std::string name, std::string version, std::string summary);
  static PluginDescriptor for_dataset(std::string name, std::string version, std::string summary);
};

/// The signature of the exported entry.
using PluginEntry = const PluginDescriptor*();

}  // namespace wanfw

#define WANFW_PLUGIN_EXPORT __attribute__((visibility("default")))

/// Exports the record of a plugin of kind KIND (Model, Strategy, Logger or Dataset) and `describe_fn` (a
/// function returning PluginDescriptor) as its entry. The versions are stamped here, in the
/// plugin's own translation unit, so they record what the plugin was compiled with.
#define WANFW_PLUGIN(KIND, describe_fn)                                                                    \
  extern "C" WANFW_PLUGIN_EXPORT const ::wanfw::PluginRecord wanfw_plugin_record = {                      \
      "wanfw-plugin",                                                                                      \
      sizeof(::wanfw::PluginRecord),                                                                       \
      WANFW_PLUGIN_ABI_VERSION,                                                                            \
      static_cast<std::uint32_t>(::wanfw::PluginKind::KIND),                                               \
      0,                                                                                                   \
      WANFW_TORCH_VERSION_STRING,                                                                          \
      WANFW_VERSION_STRING};                                                                               \
  extern "C" WANFW_PLUGIN_EXPORT const ::wanfw::PluginDescriptor* wanfw_plugin_entry() {                  \
    static const ::wanfw::PluginDescriptor descriptor = describe_fn();                                     \
    return &descriptor;                                                                                    \
  }
