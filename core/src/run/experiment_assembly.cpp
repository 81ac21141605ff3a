#include "run/experiment_assembly.hpp"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "host/console.hpp"
#include "run/training_layout.hpp"
#include "wanfw/parallel/distributed.hpp"
#include "wanfw/error.hpp"

namespace wanfw {

namespace {

bool usable(const c10::Device& device) {
  if (!device.is_cuda()) return device.is_cpu();
  return torch::cuda::is_available() && device.index() < static_cast<int>(torch::cuda::device_count());
}

/// The set validation.preview_prompts names, read by the latent_shards plugin with the model's
/// fields but its latents; null when none is named or the model was only described.
std::shared_ptr<Dataset> open_preview_prompts(Experiment& e, const PluginContext& data_context) {
  const std::string& path = e.settings.validation.preview_prompts;
  if (path.empty() || !e.model) return nullptr;
  // (A config that names them but never previews was refused with the settings.)
  const SourceLocation where = e.config.where("validation.preview_prompts");
  Config section = Config::parse(
      fmt::format("preview_prompts:\n  name: latent_shards\n  path: {}\n", yaml_quoted(path)),
      "validation.preview_prompts");
  PluginContext context = data_context;
  context.fields = TrainingData::prompt_fields(data_context.fields);
  try {
    return e.host->make_dataset(section, "preview_prompts", "latent_shards", {}, context);
  } catch (const Error& error) {
    const std::string what = error.what();
    const std::string problem = what.substr(0, what.find("\n  hint:"));  // its hint speaks of data.path
    throw ConfigError(where, fmt::format("the preview prompts cannot be read: {}", problem),
                      "name a folder written by tools/encode_dataset.py --prompts with the model's text encoder");
  }
}

/// The model has a network for each group the strategy places (wanfw/parallel/network_groups.hpp).
void check_network_groups(const Experiment& e, const NetworkGroups& groups) {
  if (groups.sizes.empty()) return;
  if (e.settings.validation.every > 0)
    throw ConfigError(e.config.where("validation.every"),
                      "validation and previews do not run under network groups yet: each rank holds one network, "
                      "and a held-out sample's loss or preview needs every network",
                      "set validation.every: 0; a checkpoint holds every network, so `wanfw sample` and a resumed "
                      "run without network groups can evaluate it");
  const std::vector<PlaceableNetwork> networks = e.model->networks();
  if (networks.size() != groups.sizes.size())
    throw ConfigError(e.config.where("model"),
                      fmt::format("the strategy places {} network groups, but this model has {} network(s) that rank "
                                  "groups can hold apart",
                                  groups.sizes.size(), networks.size()),
                      networks.size() < 2 ? std::string("train on every rank with the whole model: remove the "
                                                        "strategy's network_groups")
                                          : fmt::format("give the strategy one group per network ({} groups)",
                                                        networks.size()));
  if (e.strategy->is_main()) {
    std::string line;
    for (std::size_t g = 0; g < networks.size(); ++g)
      line += fmt::format("{}{} on ranks {}-{}", g == 0 ? "" : ", ", networks[g].name, groups.first_rank(static_cast<int>(g)),
                          groups.first_rank(static_cast<int>(g)) + groups.sizes[g] - 1);
    spdlog::info("network groups: {}; each sample trains on the ranks of its network", line);
  }
}

/// The job this process was started in (one process without a launcher); the rendezvous port is
/// not used here (29500: any valid one).
LaunchEnvironment this_launch() { return detect_launch(process_environment(), /*default_port=*/29500); }

/// The strategy a one-process command (predict, sample, export) runs on: the built-in `single` on
/// `device`, whatever layout the config trains on. The config's strategy sections are checked as a
/// run would check them, not built: building them could join a process group.
std::shared_ptr<Strategy> one_process_strategy(Experiment& e, const StrategyChain& chain, const std::string& device,
                                               const PluginContext& context) {
  const LaunchEnvironment launch = this_launch();
  if (launch.world_size > 1)
    throw ConfigError(SourceLocation{"command line", 0, 0},
                      fmt::format("this command runs as one process, but {} started {} ranks",
                                  launch.launcher.empty() ? "the environment" : launch.launcher, launch.world_size),
                      "run it without torchrun or srun: one process reads a checkpoint whole, whatever layout "
                      "wrote it");
  for (const std::string& section : chain.sections) e.host->check_section(e.config, section, PluginKind::Strategy);
  Config one = Config::parse(fmt::format("strategy:\n  name: single\n  device: {}\n", yaml_quoted(device)),
                             "--device");
  return e.host->make_strategy(one, "strategy", context);
}

/// The built strategy answers as its descriptor declared (model-info and the checks plan by it).
void check_declared_capabilities(const Experiment& e, const StrategyChain& chain) {
  if (e.strategy->network_groups() != nullptr && !chain.capabilities.places_networks)
    throw PluginError(fmt::format("the strategy plugin '{}' places networks on rank groups, but does not declare "
                                  "StrategyCapabilities::places_networks in its descriptor",
                                  chain.innermost_name),
                      "a strategy that places networks on rank groups declares it, so that model-info plans each "
                      "group");
}

/// What the config asks of its strategy that the strategy's declared capabilities rule out: checked
/// when it trains and when it is validated, built or not.
void check_config_against_strategy(const Experiment& e, const StrategyChain& chain) {
  if (e.settings.precision.mode == PrecisionMode::BF16Weights && chain.capabilities.shards_state)
    throw ConfigError(e.config.where("precision.mode"),
                      "precision.mode bf16_weights does not combine with a strategy that shards the weights",
                      "use precision.mode bf16: fsdp then gathers and computes in bf16 (param_dtype) while each "
                      "rank's fp32 shards stay the master weights");
  if (e.settings.optimizer.state == OptimizerStateHome::Host && chain.capabilities.shards_state &&
      !chain.capabilities.host_state)
    throw ConfigError(e.config.where("optimizer.state"),
                      fmt::format("optimizer.state host: the strategy {} shards the state and does not declare that it "
                                  "can keep its shards in host memory (StrategyCapabilities::host_state)",
                                  chain.innermost_name),
                      "use optimizer.state device with this strategy, or fsdp, ddp or single with optimizer.state host");
  if (chain.layout.replicas > 1) {  // replicas ask Model::replicate, which a model declares it has
    const PluginInfo& model =
        e.host->find(PluginKind::Model, e.config.string_at("model.name"), e.config.where("model.name"));
    if (!model.descriptor->model_capabilities.replicates)
      throw ConfigError(e.config.where(chain.innermost_section + ".name"),
                        fmt::format("the strategy {} runs {} replicas of the model in one process, and the model "
                                    "plugin '{}' declares no replication (ModelCapabilities::replicates)",
                                    chain.innermost_name, chain.layout.replicas, model.descriptor->name),
                        "use ddp: one process a device, each building its own model");
  }
  // Block swap streams each rank's own copy of the weights: not for a strategy that shards or
  // replicates them.
  if (e.settings.block_swap.blocks == 0) return;
  if (chain.capabilities.shards_state)
    throw ConfigError(e.config.where("block_swap.blocks"),
                      fmt::format("block swap does not combine with a strategy that shards the weights ({})",
                                  chain.innermost_name),
                      "use ddp or single (each rank streams its own copy), or fsdp without block_swap");
  if (chain.capabilities.replicates_module)
    throw ConfigError(e.config.where("block_swap.blocks"),
                      fmt::format("block swap does not combine with a strategy that replicates the module on several "
                                  "devices ({}: its replicas copy the model's weights)", chain.innermost_name),
                      "use ddp, one process per GPU, each streaming its own copy");
}

}  // namespace

std::optional<std::string> describe_model(Config& config, const PluginHost& host, const TrainingLayout& layout,
                                          const PluginInfo** plugin) {
  const PluginInfo& info = host.find(PluginKind::Model, config.string_at("model.name"), config.where("model.name"));
  if (plugin != nullptr) *plugin = &info;
  if (info.descriptor->inspect_model == nullptr) return std::nullopt;
  refuse_removed_options(config, "model", info);
  const Options options = config.section("model", info.descriptor->options, {"name"});
  config.record_resolved(options, info.descriptor->name);
  return info.descriptor->inspect_model(options, layout);
}

Experiment assemble(const RunRequest& request, ModelAssembly assembly) {
  Experiment e;
  e.config = Config::load(request.config, request.overrides);
  e.settings = CoreSettings::from(e.config);
  configure_console(e.settings.run.log_level, 0);
  e.host = std::make_unique<PluginHost>(PluginHost::search_path(e.settings.plugin_path));

  for (const auto& note : e.config.notes()) spdlog::warn("{}", note);
  take_chosen_data_set_options(e.config, e.settings, *e.host);

  PluginContext context;
  context.seed = e.settings.run.seed;
  context.host_optimizer_state = e.settings.optimizer.state == OptimizerStateHome::Host;
  if (!e.config.has("strategy"))
    throw ConfigError(e.config.where("strategy"), "the config has no 'strategy' section",
                      "add 'strategy: {name: single}' to train on one device");
  const StrategyChain chain = strategy_chain(e.config, *e.host);
  std::string one_process_device = request.one_process_device;
  if (request.one_process_unless_launched) {
    int ranks = chain.layout.sequence_parallel;
    int groups = 0;
    for (const int size : chain.layout.network_groups) groups += size;
    ranks = std::max(ranks, groups);
    if (ranks > 1 && this_launch().world_size == 1) {
      e.ranks_laid_out = ranks;
      one_process_device = "cpu";
    }
  }
  const bool one_process = !one_process_device.empty();
  if (one_process) {
    e.strategy = one_process_strategy(e, chain, one_process_device, context);
  } else {
    e.strategy = e.host->make_strategy(e.config, "strategy", context);
    check_declared_capabilities(e, chain);
  }
  if (!one_process || e.ranks_laid_out > 0) check_config_against_strategy(e, chain);
  configure_console(e.settings.run.log_level, e.strategy->rank());
  // Models and loggers learn where the model will live, so weights are built there. A device this
  // machine lacks (a config validated away from its GPUs) leaves them on the CPU; the strategy's
  // setup names the missing device when a run starts.
  context.device = usable(e.strategy->device()) ? e.strategy->device() : c10::Device(c10::kCPU);
  context.train_device = context.device;
  if (e.settings.block_swap.blocks > 0) {
    // Built on the host: the streamed blocks never reach the device whole, the rest moves there
    // when the strategy places the model.
    context.device = c10::Device(c10::kCPU);
  }
  if (const NetworkGroups* groups = e.strategy->network_groups()) context.network_groups = *groups;
  context.dtype = compute_dtype(e.settings.precision.mode);
  // Validated as one process, the config's layout is still the one planned and checked.
  context.layout = training_layout(e.config, e.settings, *e.host,
                                   e.ranks_laid_out > 0 ? e.ranks_laid_out : e.strategy->world_size());
  if (one_process && e.ranks_laid_out == 0) {
    context.layout = one_process_layout(context.layout);
    context.trains = false;
  }

  if (!e.config.has("model"))
    throw ConfigError(e.config.where("model"), "the config has no 'model' section",
                      "add 'model: {name: <model plugin>}'; `wanfw plugins` lists them");
  if (assembly == ModelAssembly::DescribeIfPossible)
    e.model_summary = describe_model(e.config, *e.host, context.layout);
  if (!e.model_summary) {
    torch::manual_seed(e.settings.run.seed);  // the model's initial weights follow the run's seed
    e.model = e.host->make_model(e.config, "model", context);
    check_network_groups(e, context.network_groups);
  }

  const std::size_t n = e.config.sequence_size("loggers");
  for (std::size_t i = 0; i < n; ++i)
    e.loggers.push_back(e.host->make_logger(e.config, "loggers." + std::to_string(i), context));

  // The data set: its plugin learns the fields the model declared (none when the model was only
  // described: the set is then opened and checked, not read).
  PluginContext data_context = context;
  if (e.model) data_context.fields = e.model->batch_fields();
  std::shared_ptr<Dataset> dataset =
      e.host->make_dataset(e.config, "data", e.settings.data.name, core_option_names("data"), data_context);
  std::shared_ptr<Dataset> preview_prompts = open_preview_prompts(e, data_context);
  e.data = std::make_unique<TrainingData>(e.settings, data_context.fields, std::move(dataset), e.config.where("data"),
                                          std::move(preview_prompts));
  e.resolved_yaml = e.config.resolved_yaml();
  return e;
}

void place_model(Experiment& e) {
  const BlockSwapSection& swap = e.settings.block_swap;
  const auto units_declared = static_cast<std::int64_t>(e.model->units().size());
  if (swap.blocks > 0 && swap.blocks > units_declared - 1)
    throw ConfigError(e.config.where("block_swap.blocks"),
                      fmt::format("{} blocks to stream, but the model declares {} units (blocks): at most {} can "
                                  "stream, for one stays on the device", swap.blocks, units_declared,
                                  std::max<std::int64_t>(units_declared - 1, 0)),
                      units_declared > 1 ? fmt::format("set block_swap.blocks between 1 and {}", units_declared - 1)
                                         : std::string("remove block_swap: this model has nothing to stream"));
  // With the optimizer's state on the host, the streamed blocks' trained weights stream too (their
  // masters are the host's), where nothing reduces their gradients after backward.
  const bool trained = e.settings.optimizer.state == OptimizerStateHome::Host && e.strategy->unit_gradients_final();
  if (swap.blocks > 0)
    e.block_swap = std::make_shared<BlockSwap>(
        *e.model->module(), e.model->units(),
        BlockSwapSettings{swap.blocks, swap.ring, parse_host_memory(swap.host_memory), trained}, e.strategy->device());
  e.strategy->setup(*e.model);
  // The host alone installs the unit runtime: with the strategy's fetcher (fsdp gathers the units)
  // or block swap's (it streams them); the two never combine (validate refuses block swap for a
  // strategy that shards the weights).
  std::shared_ptr<UnitFetcher> fetcher = e.strategy->unit_fetcher();
  if (e.block_swap) {
    if (fetcher)
      throw PluginError("the strategy fetches the model's units itself (Strategy::unit_fetcher), and block swap "
                        "would fetch them too",
                        "remove block_swap, or train with a strategy that keeps the weights on each device");
    e.block_swap->start(e.strategy->device());
    fetcher = e.block_swap;
    if (e.strategy->is_main()) {
      spdlog::info("{}", e.block_swap->describe());
      if (swap.ring_written > 0)
        spdlog::warn("{}: block_swap.ring {} asks for more device slots than the {} streamed block(s): {} slot(s); "
                     "more would never hold a block", e.config.where("block_swap.ring").str(), swap.ring_written,
                     swap.blocks, swap.ring);
    }
  }
  std::vector<Unit> units = e.model->units();
  if (!fetcher && e.strategy->shards_state() && !units.empty())
    throw PluginError("the strategy shards the weights but gives no fetcher for the model's units "
                      "(Strategy::unit_fetcher)",
                      "a strategy that wraps another forwards unit_fetcher() to it, as it forwards setup()");
  if (!fetcher) return;
  // Also for a model without units: under fsdp the runtime then holds all its parameters, the root
  // unit, for each step.
  const bool declared = !units.empty();
  e.units = std::make_shared<UnitRuntime>(std::move(units), std::move(fetcher));
  if (declared) e.model->set_unit_runner(e.units.get());
}

}  // namespace wanfw
