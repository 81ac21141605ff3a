"""tools/encode_dataset.py with tiny random encoders built here (nothing downloaded): videos and
images with captions -> shards -> `wanfw data verify` -> training; re-runs encode only what changed."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from harness.media import TOOL, encode_dataset, tiny_encoders, write_video
from harness.references import reference_model
from harness.runs import SOURCE, base_config, wanfw, write_config

av = pytest.importorskip("av")
transformers = pytest.importorskip("transformers")

TEXT_LEN = 16  # the tiny Wan preset's


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("encode")
    clips = root / "clips"
    clips.mkdir()
    write_video(clips / "ball_left.mp4", 12)
    write_video(clips / "ball_right.mp4", 20, size=(64, 48))  # portrait: the other bucket
    write_video(clips / "too_short.mp4", 3)  # 3 frames: fits no video bucket
    (clips / "ball_left.txt").write_text("a red ball moves left")
    (clips / "ball_right.txt").write_text("a blue  ball moves\nright over the grass")
    (clips / "too_short.txt").write_text("a ball")
    from PIL import Image
    Image.new("RGB", (80, 64), (200, 30, 30)).save(clips / "still.png")
    (clips / "still.txt").write_text("a still image of the sky")
    return clips, tiny_encoders(root / "encoders")


def encode(clips, encoders, out, *extra):
    result = encode_dataset(clips, out, "--vae", encoders / "vae", "--text-encoder", encoders / "text_encoder",
                            "--tokenizer", encoders / "tokenizer", "--buckets", "5x32x48,5x48x32,1x32x48",
                            "--text-len", TEXT_LEN, "--shard-mb", "0.01", *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.own_entry
def test_encoded_videos_and_images_verify_and_train_the_tiny_wan_model(tmp_path, sources):
    clips, encoders = sources
    out = tmp_path / "set"
    log = encode(clips, encoders, out)
    assert "not encoded: too_short: 3 frames at 16 fps, fewer than the shortest bucket's 5: a video needs 5 frames; " \
           "read at --fps 27 or more it has them" in log  # a short clip among good ones: what would take it
    assert "encoded 3, caption re-encoded 0, reused 0, fit no bucket 1" in log
    assert "ok: 3 samples" in wanfw("data", "verify", out, check=0).stdout
    manifest = json.loads((out / "manifest.json").read_text())
    by_id = {s["id"]: s for s in manifest["samples"]}
    # Latent buckets: 5 frames -> 2 latent frames; 32 x 48 pixels -> 4 x 6 latents (stride 8).
    assert by_id["ball_left"]["bucket"] == "2x4x6" and by_id["ball_right"]["bucket"] == "2x6x4"
    assert by_id["still"]["bucket"] == "1x4x6"

    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny"},
                         data={"name": "latent_shards", "path": str(out), "batch_size": 1, "workers": 1,
                               "caption_dropout": 0.5},
                         trainer={"max_steps": 6, "log_every": 1})
    result = wanfw("run", write_config(tmp_path / "run.json", config), check=0)
    assert "3 samples in 3 bucket(s)" in result.stdout


@pytest.mark.own_entry
def test_image_condition_is_the_first_frame_then_zero_frames_encoded_and_trains_the_i2v_model(tmp_path, sources):
    clips, encoders = sources
    out = tmp_path / "set"
    encode(clips, encoders, out, "--image-condition")
    assert "ok: 3 samples" in wanfw("data", "verify", out, check=0).stdout
    manifest = json.loads((out / "manifest.json").read_text())
    sample = next(s for s in manifest["samples"] if s["id"] == "ball_right")

    def stored(field):
        where = sample["fields"][field]
        return load_file(out / where["shard"])[where["tensor"]].float()
    latents, condition = stored("latents"), stored("image_condition")
    assert condition.shape == latents.shape == (4, 2, 6, 4)
    # The reference: the item's fitted video (the tool's own resize and crop), its first frame and
    # zero frames encoded by diffusers' AutoencoderKLWan, normalised as the Wan pipelines do.
    sys.path.insert(0, str(TOOL.parent))
    import encode_dataset
    from diffusers import AutoencoderKLWan
    frames = encode_dataset.read_frames(clips / "ball_right.mp4", 16.0)
    video = encode_dataset.fit(frames, encode_dataset.choose_bucket(frames, [(5, 32, 48), (5, 48, 32), (1, 32, 48)]))
    first_then_zeros = torch.cat([video[:, :1], torch.zeros_like(video[:, 1:])], 1)
    vae = AutoencoderKLWan.from_pretrained(encoders / "vae").eval()
    mean, std = (torch.tensor(vae.config.latents_mean).view(-1, 1, 1, 1),
                 torch.tensor(vae.config.latents_std).view(-1, 1, 1, 1))
    with torch.no_grad():
        expected = (vae.encode(first_then_zeros[None]).latent_dist.mode()[0] - mean) / std
    assert torch.allclose(condition, expected.to(torch.bfloat16).float(), atol=1e-2, rtol=1e-2)
    # Why it is stored: its first latent frame is the clip's, the rest are not zeros nor the clip's.
    assert torch.allclose(condition[:, 0], latents[:, 0], atol=1e-2)
    assert condition[:, 1].abs().mean() > 0.05 and not torch.allclose(condition[:, 1], latents[:, 1], atol=1e-2)

    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "task": "i2v",
                                                   "in_dim": 12},
                         data={"name": "latent_shards", "path": str(out), "batch_size": 1},
                         trainer={"max_steps": 3, "log_every": 1})
    assert "3 samples in 3 bucket(s)" in wanfw("run", write_config(tmp_path / "run.json", config), check=0).stdout
    # A set encoded without it is refused by the i2v model, naming the field.
    plain = tmp_path / "plain"
    encode(clips, encoders, plain)
    config["data"]["path"] = str(plain)
    config["run"]["output_dir"] = str(tmp_path / "runs2")
    result = wanfw("run", write_config(tmp_path / "plain.json", config), check=1)
    assert "the manifest gives no 'image_condition'" in result.stderr


def test_stored_text_embeddings_match_umt5_as_the_wan_pipeline_computes_them(tmp_path, sources):
    clips, encoders = sources
    out = tmp_path / "set"
    encode(clips, encoders, out)
    from transformers import AutoTokenizer, UMT5EncoderModel
    tokenizer = AutoTokenizer.from_pretrained(encoders / "tokenizer")
    model = UMT5EncoderModel.from_pretrained(encoders / "text_encoder").eval()
    manifest = json.loads((out / "manifest.json").read_text())
    sample = next(s for s in manifest["samples"] if s["id"] == "ball_right")
    where = sample["fields"]["context"]
    stored = load_file(out / where["shard"])[where["tensor"]].float()
    # The diffusers Wan pipeline: whitespace cleaned, padded to max_length, cut to the real length.
    tokens = tokenizer(["a blue ball moves right over the grass"], padding="max_length", max_length=TEXT_LEN,
                       truncation=True, add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(tokens.input_ids, tokens.attention_mask).last_hidden_state[0]
    length = int(tokens.attention_mask.sum())
    assert stored.shape == (length, 32) == (9, 32)  # 8 words and </s>
    assert torch.allclose(stored, hidden[:length].to(torch.bfloat16).float())
    empty = manifest["empty_caption"]["context"]
    assert empty["shape"] == [1, 32]  # the empty prompt: </s> alone


def test_a_rerun_encodes_nothing_and_a_changed_caption_re_encodes_that_item_alone(tmp_path, sources):
    clips, encoders = sources
    mine = tmp_path / "clips"
    shutil.copytree(clips, mine)  # this test edits a caption
    out = tmp_path / "set"
    encode(mine, encoders, out)
    shards = {p.name: p.read_bytes() for p in (out / "shards").iterdir()}
    assert "encoded 0, caption re-encoded 0, reused 3" in encode(mine, encoders, out)
    assert {p.name: p.read_bytes() for p in (out / "shards").iterdir()} == shards

    before = {s["id"]: s for s in json.loads((out / "manifest.json").read_text())["samples"]}
    (mine / "still.txt").write_text("a still image of the grass")
    assert "encoded 0, caption re-encoded 1, reused 2" in encode(mine, encoders, out)
    after = {s["id"]: s for s in json.loads((out / "manifest.json").read_text())["samples"]}
    assert after["still"]["caption_hash"] != before["still"]["caption_hash"]
    assert after["still"]["fields"]["latents"] == before["still"]["fields"]["latents"]  # its latents kept
    assert after["ball_left"] == before["ball_left"]
    assert "ok: 3 samples" in wanfw("data", "verify", out, check=0).stdout


def test_two_ranks_split_the_items_and_the_last_one_merges_their_manifests(tmp_path, sources):
    clips, encoders = sources
    out = tmp_path / "set"
    first = encode(clips, encoders, out, "--rank", "0", "--world-size", "2")
    assert "rank 0: encoded 2" in first and not (out / "manifest.json").exists()
    second = encode(clips, encoders, out, "--rank", "1", "--world-size", "2")
    assert "merged 2 ranks: 3 samples" in second
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["id"] for s in manifest["samples"]] == ["ball_left", "ball_right", "still"]  # source order
    assert {s["file"].split("/")[1].split("-")[0] for s in manifest["shards"]} == {"rank0", "rank1"}
    assert "ok: 3 samples" in wanfw("data", "verify", out, check=0).stdout


def test_prompts_alone_encode_to_text_embeddings_that_data_free_distillation_trains_on(tmp_path, sources):
    _, encoders = sources
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red ball moves left\n\na blue ball over the grass\nthe sky\n")
    out = tmp_path / "prompts"
    args = [prompts, out, "--prompts", "--text-encoder", encoders / "text_encoder", "--tokenizer",
            encoders / "tokenizer", "--text-len", TEXT_LEN]
    result = encode_dataset(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: 3 samples" in wanfw("data", "verify", out, check=0).stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert [set(s["fields"]) for s in manifest["samples"]] == [{"context"}] * 3
    assert "encoded 0, caption re-encoded 0, reused 3" in encode_dataset(*args).stdout

    reference_model(tmp_path / "teacher", seed=3)
    config = base_config(tmp_path / "runs", model={"name": "wan22_distill", "teacher_preset": "tiny",
                                                   "teacher_weights": str(tmp_path / "teacher"),
                                                   "student_num_layers": 1, "inputs": "teacher_trajectory",
                                                   "latent_size": "2x4x4"},
                         data={"name": "latent_shards", "path": str(out), "batch_size": 1},
                         trainer={"max_steps": 3, "log_every": 1})
    result = wanfw("run", write_config(tmp_path / "distill.json", config), check=0)
    assert "3 samples from" in result.stdout and "done: 3 steps" in result.stdout + result.stderr


def test_clips_that_fit_no_bucket_end_the_encoder_non_zero_with_the_bucket_that_would_take_each(tmp_path, sources):
    clips, encoders = sources
    result = encode_dataset(clips, tmp_path / "set", "--vae", encoders / "vae", "--text-encoder",
                            encoders / "text_encoder", "--tokenizer", encoders / "tokenizer",
                            "--buckets", "81x32x48", "--text-len", TEXT_LEN)
    assert result.returncode == 1, result.stdout + result.stderr
    said = result.stdout + result.stderr
    # ball_left: 12 frames at 16 fps; ball_right: 20, portrait; still: an image.
    assert "not encoded: ball_left: 12 frames at 16 fps, fewer than the shortest bucket's 81: a bucket of 9x32x48 " \
           "would take it" in said
    assert "not encoded: ball_right: 20 frames at 16 fps, fewer than the shortest bucket's 81: a bucket of " \
           "17x32x48 would take it" in said
    assert "not encoded: still: an image, and no bucket holds images: a bucket of 1x32x48 would take it" in said
    assert "none of the 4 item(s) fit a bucket of --buckets 81x32x48: the data set would be empty, so no manifest " \
           "was written" in said
    assert not (tmp_path / "set" / "manifest.json").exists()


def test_data_inspect_of_a_set_without_samples_fails_and_says_where_to_look(tmp_path):
    wanfw("data", "synth", tmp_path / "set", "--samples", "4", check=0)
    manifest = json.loads((tmp_path / "set" / "manifest.json").read_text())
    manifest["samples"] = []  # as an older encoder left a set whose clips fit no bucket
    (tmp_path / "set" / "manifest.json").write_text(json.dumps(manifest))
    result = wanfw("data", "inspect", tmp_path / "set")
    assert result.returncode == 1
    assert f"{tmp_path / 'set'} holds no sample: a run has nothing to train on" in result.stderr
    assert "tools/encode_dataset.py lists the items it did not encode and the bucket that would take each" in \
        result.stderr


def test_a_jsonl_with_several_bad_lines_is_refused_listing_every_one(tmp_path, sources):
    clips, encoders = sources
    source = tmp_path / "clips.jsonl"
    source.write_text("\n".join([
        json.dumps({"path": str(clips / "ball_left.mp4"), "caption": "a red ball"}),
        '{"path": "ball_right.mp4", "caption": "unterminated',
        json.dumps({"path": str(clips / "ball_right.mp4")}),
        json.dumps({"path": "gone.mp4", "caption": "a clip that is not there"}),
    ]) + "\n")
    result = encode_dataset(source, tmp_path / "set", "--vae", encoders / "vae", "--text-encoder",
                            encoders / "text_encoder", "--tokenizer", encoders / "tokenizer",
                            "--buckets", "5x32x48", "--text-len", TEXT_LEN)
    assert result.returncode == 1
    said = result.stdout + result.stderr
    assert f"3 line(s) of {source} cannot be read:" in said
    assert f"{source}:2: not JSON (Unterminated string" in said
    assert f"{source}:3: each line is an object with 'path' and 'caption'" in said
    assert f"{source}:4: {tmp_path / 'gone.mp4'} does not exist" in said
    assert not (tmp_path / "set" / "manifest.json").exists()


def test_the_documented_first_try_encodes_own_clips_with_the_tiny_encoders_a_command_makes(tmp_path, sources):
    # docs/data.md: tools/make_tiny_encoders.py, then the encoder with them; a caption of any words.
    clips, _ = sources
    made = subprocess.run([sys.executable, SOURCE / "tools" / "make_tiny_encoders.py", tmp_path / "encoders"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    encoders = tmp_path / "encoders"
    result = encode_dataset(clips, tmp_path / "set", "--vae", encoders / "vae", "--text-encoder",
                            encoders / "text_encoder", "--tokenizer", encoders / "tokenizer",
                            "--buckets", "5x32x48,5x48x32,1x32x48", "--text-len", TEXT_LEN)
    assert result.returncode == 0, result.stdout + result.stderr
    inspect = wanfw("data", "inspect", tmp_path / "set", check=0).stdout
    assert "3 samples, 3 distinct captions" in inspect and "field context: BF16, [16..16 tokens, 32]" in inspect


@pytest.mark.parametrize("hub", ["unreachable", "offline"])
def test_an_encoder_the_hub_cannot_give_is_refused_at_once_with_the_way_to_local_or_tiny_weights(tmp_path, sources,
                                                                                                   hub):
    # A machine that cannot reach the hub (an endpoint nothing listens on) or is told it is offline: the
    # tool asks the hub cache only (no half a minute of retries) and names the flag, the name and the way.
    clips, encoders = sources
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy")}
    env.update({"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")} if hub == "unreachable"
               else {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    result = subprocess.run([sys.executable, TOOL, clips, tmp_path / "set", "--vae", "no-such-org/no-such-vae",
                             "--text-encoder", encoders / "text_encoder", "--tokenizer", encoders / "tokenizer",
                             "--buckets", "5x32x48"], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 1
    assert "--vae no-such-org/no-such-vae: no such folder here, and the model hub cannot be reached from here and " \
           "the hub cache does not hold it" in result.stderr
    assert "huggingface-cli download no-such-org/no-such-vae --local-dir DIR) and pass DIR" in result.stderr
    assert "tools/make_tiny_encoders.py DIR" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "set" / "manifest.json").exists()


def test_a_manifest_key_that_dataset_format_json_does_not_list_is_refused_before_anything_is_written(tmp_path):
    # dataset_format.json names the manifest's keys for the C++ reader (a generated header) and for
    # tools/dataset_folder.py, which checks every object it puts in a manifest against them.
    sys.path.insert(0, str(TOOL.parent))
    from dataset_folder import Folder
    folder = Folder(tmp_path, "part-", 1 << 20, {}, "fingerprint", "manifest.json")
    latents = folder.store("latents/a", torch.zeros(2, 1, 2, 2))
    with pytest.raises(ValueError, match=r"a sample of the manifest has keys \['captionhash'\] that dataset_format.json "
                                         r"does not list \(a sample's keys: \['bucket', 'caption_hash', "):
        folder.add({"id": "a", "bucket": "1x2x2", "captionhash": "x", "fields": {"latents": latents}})
    with pytest.raises(ValueError, match=r"a tensor of the manifest has keys \['dtype'\]"):
        folder.add({"id": "a", "bucket": "1x2x2", "fields": {"latents": {**latents, "dtype": "BF16"}}})
    assert folder.manifest["samples"] == [] and not (tmp_path / "manifest.json").exists()
