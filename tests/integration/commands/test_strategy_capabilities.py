"""The host treats a strategy by what it declares (StrategyCapabilities), never by its name: test
strategies it has never heard of (tests/plugins/declared_strategy) that declare they shard the
training state, or replicate the module, get fsdp's and data_parallel's treatment from `wanfw
model-info` and `wanfw validate` (the built strategy's sharding is its declaration, a wrapper's its
inner strategy's), and one that shards the weights but gives the host no fetcher for the model's
units is refused before training; a model that declares no replication is kept from a layout of replicas."""

import os

import pytest

from harness.layouts import tiny_wan
from harness.runs import SOURCE, TEST_PLUGINS, base_config, wanfw, write_config

SHARDING, REPLICATING = "test_sharding_strategy", "test_replicating_strategy"
FSDP = {"name": "fsdp", "timeout_s": 60}
FINETUNE = SOURCE / "examples" / "wan22-ti2v-5b-finetune.yaml"  # fsdp on 8 x 80 GB


def model_info(*overrides):
    """model-info of the TI2V-5B fine-tuning example on 8 GPUs, its strategy section overridden."""
    sets = [arg for override in overrides for arg in ("--set", override)]
    return wanfw("model-info", FINETUNE, "--gpus", 8, *sets, check=0,
                 env={**os.environ, "WANFW_PLUGIN_PATH": str(TEST_PLUGINS)}).stdout


def validate(tmp_path, name, strategy, **sections):
    """`wanfw validate` of the tiny Wan DiT on `strategy`: its exit code and what it said."""
    config = base_config(tmp_path / "runs", model=tiny_wan("t2v"), strategy=strategy,
                         data={"num_samples": 8, "batch_size": 2, "workers": 0, "buckets": ["3x4x4"]}, **sections)
    result = wanfw("validate", write_config(tmp_path / f"{name}.json", config))
    return result.returncode, result.stdout + result.stderr


def test_model_info_plans_a_strategy_that_declares_sharding_as_it_plans_fsdp():
    fsdp = model_info()
    assert "per GPU, fsdp on 8 GPUs" in fsdp and "; 1/8 of" in fsdp, fsdp
    assert model_info(f"strategy.name={SHARDING}") == fsdp.replace("fsdp", SHARDING)
    # Wrapped by grad_accum, the inner strategy's declaration still holds (the accumulated gradients
    # then stay on the device until the last micro-batch, with the state on the host as for fsdp).
    wrapped = model_info("strategy.name=grad_accum", "strategy.inner.name=fsdp")
    assert "; 1/8 of" in wrapped, wrapped
    assert model_info("strategy.name=grad_accum", f"strategy.inner.name={SHARDING}") == wrapped.replace("fsdp", SHARDING)
    # A strategy that declares nothing is planned with the whole state on every GPU.
    whole = model_info("strategy.name=ddp")
    assert "per GPU, ddp on 8 GPUs" in whole and "1/8 of" not in whole, whole


@pytest.mark.parametrize("sections, message", [
    ({"block_swap": {"blocks": 1}}, "block swap does not combine with a strategy that shards the weights ({})"),
    ({"precision": {"mode": "bf16_weights"}},
     "precision.mode bf16_weights does not combine with a strategy that shards the weights"),
], ids=["block_swap", "bf16_weights"])
def test_validate_refuses_for_a_strategy_that_declares_sharding_what_it_refuses_for_fsdp(tmp_path, sections, message):
    for name, strategy in (("fsdp", FSDP), (SHARDING, {"name": SHARDING})):
        code, said = validate(tmp_path, name, strategy, **sections)
        assert code == 2 and message.format(name) in said, said
    _, said = validate(tmp_path, "single", {"name": "single", "device": "cpu"}, **sections)
    assert "shards the weights" not in said, said  # a strategy that declares nothing is not refused for it


def test_validate_refuses_block_swap_for_a_strategy_that_declares_replicas_as_for_data_parallel(tmp_path):
    message = ("block swap does not combine with a strategy that replicates the module on several devices "
               "({}: its replicas copy the model's weights)")
    for name, strategy in (("data_parallel", {"name": "data_parallel", "devices": ["cpu", "cpu"]}),
                           (REPLICATING, {"name": REPLICATING})):
        code, said = validate(tmp_path, name, strategy, block_swap={"blocks": 1})
        assert code == 2 and message.format(name) in said, said


@pytest.mark.parametrize("strategy", [{"name": SHARDING}, {"name": "grad_accum", "inner": {"name": SHARDING}}],
                         ids=["declared", "wrapped"])
def test_the_built_strategy_shards_as_its_descriptor_or_the_strategy_it_wraps_declares(tmp_path, strategy):
    # Sharding is declared once (the descriptor): the host sets the built strategy's shards_state()
    # from it, a wrapper's from its inner strategy's, and a sharding strategy without a unit
    # fetcher is then refused before training, wrapped or not.
    config = base_config(tmp_path / "runs", model=tiny_wan("t2v"), strategy=strategy,
                         data={"num_samples": 8, "batch_size": 2, "workers": 0, "buckets": ["3x4x4"]})
    result = wanfw("run", write_config(tmp_path / "run.json", config))
    said = result.stdout + result.stderr
    assert result.returncode == 2, said
    assert "the strategy shards the weights but gives no fetcher for the model's units (Strategy::unit_fetcher)" in said


def test_a_strategy_that_shards_the_weights_but_gives_no_unit_fetcher_is_refused_before_training(tmp_path):
    config = base_config(tmp_path / "runs", model=tiny_wan("t2v"), strategy={"name": SHARDING},
                         data={"num_samples": 8, "batch_size": 2, "workers": 0, "buckets": ["3x4x4"]})
    result = wanfw("run", write_config(tmp_path / "run.json", config))
    said = result.stdout + result.stderr
    assert result.returncode == 2, said
    assert "the strategy shards the weights but gives no fetcher for the model's units (Strategy::unit_fetcher)" in said
    assert "a strategy that wraps another forwards unit_fetcher() to it" in said
    assert "step 1" not in said  # refused before the first step


def test_a_model_that_declares_no_replication_is_refused_by_a_layout_of_replicas_and_trains_without_one(tmp_path):
    # test_unreplicable_linear: the linear test model whose descriptor leaves ModelCapabilities::replicates
    # false. data_parallel over two devices asks for replicas: refused at validate and run, before any
    # step; over one device, or under ddp, nothing is replicated.
    def config(name, strategy):
        return write_config(tmp_path / f"{name}.json", base_config(
            tmp_path / "runs", model={"name": "test_unreplicable_linear", "in_features": 8, "out_features": 2},
            strategy=strategy, trainer={"max_steps": 2, "log_every": 1}))

    replicas = config("replicas", {"name": "data_parallel", "devices": ["cpu", "cpu"]})
    for command in ("validate", "run"):
        result = wanfw(command, replicas)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "the strategy data_parallel runs 2 replicas of the model in one process, and the model plugin " \
               "'test_unreplicable_linear' declares no replication (ModelCapabilities::replicates)" in result.stderr
        assert "use ddp: one process a device" in result.stderr
    assert not (tmp_path / "runs" / "exp").exists()
    one_device = wanfw("run", config("one", {"name": "data_parallel", "devices": ["cpu"]}))
    assert one_device.returncode == 0 and "done: 2 steps" in one_device.stdout
    # The model that declares it trains under the same layout.
    declared = write_config(tmp_path / "declared.json", base_config(
        tmp_path / "runs2", strategy={"name": "data_parallel", "devices": ["cpu", "cpu"]},
        trainer={"max_steps": 2, "log_every": 1}))
    assert wanfw("run", declared).returncode == 0


def test_model_info_plans_the_layouts_an_unknown_strategy_and_data_set_declare_under_their_own_option_names():
    # test_sharding_strategy lays out sequence parallelism with `sp_ranks`, test_shaped_dataset its
    # buckets with `shapes`: the host asks their descriptors (strategy_layout, data_buckets), so the
    # plans equal fsdp's with `sequence_parallel` and the synthetic set's with `buckets`.
    known = model_info("strategy.sequence_parallel=2", 'data.buckets=["13x30x52"]')
    assert "fsdp on 8 GPUs, sequence parallel 2" in known and "latents 13x30x52: 5,070 tokens" in known, known
    unknown = model_info(f"strategy.name={SHARDING}", "strategy.sp_ranks=2", "data.name=test_shaped_dataset",
                         'data.shapes=["13x30x52"]')
    assert unknown == known.replace("fsdp", SHARDING)
    # Another shape, another plan: the data set's declaration is what was read.
    assert model_info(f"strategy.name={SHARDING}", "strategy.sp_ranks=2", "data.name=test_shaped_dataset",
                      'data.shapes=["31x44x80"]') != unknown
