"""Vision-language policies on image observations, with a tiny VLM built locally (nothing downloaded)."""
from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from seed_train.cli import main_eval  # noqa: E402
from seed_train.config import SeedConfig  # noqa: E402
from seed_train.codec import (IMAGE_PLACEHOLDER, PromptCodec, VisionPromptCodec, encode_prompt,  # noqa: E402
                               is_processor, load_step_images, prompt_codec)
from seed_train.policy import LoraSettings, load_policy  # noqa: E402
from seed_train.rollout import EnvPool, EnvSpec, group_jobs, run_episodes  # noqa: E402
from seed_train.scoring import response_logprobs  # noqa: E402
from seed_train.tiny import cached_tiny_model, cached_tiny_vlm  # noqa: E402
from seed_train.trainer import generate_skills, load, train  # noqa: E402
from seed_train.vision import vision_of, vision_special_ids  # noqa: E402
from wrappers import TrajectoryWriter, read_trajectories, resolve_image  # noqa: E402

IMAGE_ENVS = ("seed/EZPoints-v0", "seed/Sokoban-v0")


@pytest.fixture(scope="module")
def vlm_path() -> str:
    return str(cached_tiny_vlm(seed=0))


@pytest.fixture(scope="module")
def vlm(vlm_path):
    return load(SeedConfig(model=vlm_path, lora=False, env_id="seed/EZPoints-v0", env_kwargs={"obs_mode": "image"}))


# One small Stage 2 iteration on EZPoints image mode (the tests' shared settings).
SMALL_RUN = dict(env_id="seed/EZPoints-v0", env_kwargs={"obs_mode": "image"}, template="compact", history=1,
                 action_format="plain", max_steps=3, max_new_tokens=4, stage1_demos=0, iterations=1,
                 tasks_per_iteration=2, group_size=2, lr=1e-3, eval_before=False, eval_after=False, checkpoint_every=0)


def image_spec(env_id: str, split: str = "test") -> EnvSpec:
    return EnvSpec(env_id=env_id, split=split, template="compact", history=1, action_format="plain",
                   format_penalty=0.1, max_steps=3, env_kwargs={"obs_mode": "image"})


def test_tiny_vlm_loads_as_a_vision_policy(vlm_path):
    model, processor = load_policy(vlm_path)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration" and is_processor(processor)
    tok = processor.tokenizer
    assert {"<|image_pad|>", "<|vision_start|>"} <= set(tok.all_special_tokens)
    assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and not any(".visual." in f".{n}" for n in trainable)  # vision tower frozen by default
    model, _ = load_policy(vlm_path, freeze_vision=False)
    assert any(p.requires_grad for n, p in model.named_parameters() if n.startswith("model.visual."))
    model, _ = load_policy(vlm_path, lora=LoraSettings(r=2, alpha=4, target_modules=("q_proj", "v_proj", "qkv")))
    adapted = [n for n, p in model.named_parameters() if p.requires_grad]
    assert adapted and all("lora_" in n and "language_model" in n for n in adapted)  # language part only
    # A prompt with an image: the image's pad tokens are expanded, the pixels ride on the ids.
    image = np.zeros((96, 96, 3), dtype=np.uint8)
    ids = encode_prompt(processor, "Push the box.", images=[image])
    n_pads = ids.count(model.config.image_token_id)
    assert vision_of(ids).num_images == 1 and n_pads == int(vision_of(ids).image_grid_thw.prod()) // 4 > 0
    assert vision_of(encode_prompt(processor, "no image")) is None


def test_an_unwired_vlm_family_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {"model_type": "clip_vision_model"}}))
    with pytest.raises(ValueError, match="'llava' vision-language model"):
        load_policy(str(tmp_path))


@pytest.fixture(scope="module")
def recorded(vlm, tmp_path_factory):
    """Image-mode rollouts on both envs, written with the trajectory writer: {env_id: (jsonl, trajectories)}."""
    out = {}
    for env_id in IMAGE_ENVS:
        panel = list(gym.make(env_id, split="test").unwrapped.task_ids()[:2])
        trajs = run_episodes(vlm.backend, vlm.codec, EnvPool(image_spec(env_id)), group_jobs(panel, 2, base_seed=3, prefix="t"),
                             max_new_tokens=5, seed=1)
        path = tmp_path_factory.mktemp("vision") / f"{env_id.split('/')[1]}.jsonl"
        with TrajectoryWriter(path) as writer:
            for t in trajs:
                writer.write(t)
        out[env_id] = (path, trajs)
    return out


@pytest.mark.parametrize("env_id", IMAGE_ENVS)
def test_image_rollout_records_images_and_tokens_and_rescores_exactly(vlm, recorded, env_id):
    path, trajs = recorded[env_id]
    image_id = vlm.model.config.image_token_id
    read = list(read_trajectories(path))
    assert len(read) == 4
    for memory, disk in zip(trajs, read):
        for m, d in zip(memory.steps, disk.steps):
            assert m.image.dtype == np.uint8 and m.image.shape[-1] == 3
            png = resolve_image(path, d)
            assert png.suffix == ".png" and png.is_file()
            assert d.prompt_token_ids == m.prompt_token_ids and image_id in d.prompt_token_ids  # pads expanded
            assert not set(d.response_token_ids) & set(vision_special_ids(vlm.model))  # never sampled
            # The text leaves the state out: it is in the image only.
            assert ("shown in the image" in d.observation) if "Sokoban" in env_id else ("Cards:" not in d.observation)
    # Re-score every step from the file alone: the PNG gives the pixels, the recorded ids the tokens.
    load_step_images(read, path)
    steps = [s for t in read for s in t.steps]
    assert np.array_equal(steps[0].image, trajs[0].steps[0].image)
    prompts = [vlm.codec.step_prompt(s) for s in steps]
    assert all(vision_of(p) is not None for p in prompts)
    lp, _ = response_logprobs(vlm.model, prompts, [s.response_token_ids for s in steps], batch_size=5)
    for i, s in enumerate(steps):
        torch.testing.assert_close(lp[i, : len(s.response_token_ids)], torch.tensor(s.response_logprobs), atol=1e-4, rtol=0)
    # Image tokens without their pixels are refused, not silently scored against pad embeddings.
    with pytest.raises(ValueError, match="no pixel inputs"):
        response_logprobs(vlm.model, [list(prompts[0])], [steps[0].response_token_ids])
    with pytest.raises(ValueError, match="no pixel inputs"):  # nor generated from
        vlm.backend.generate([list(prompts[0])], max_new_tokens=2, greedy=True)


def test_a_vlm_on_text_prompts_rescores_exactly(vlm):
    """No image (obs_mode text, analyzer placeholders): plain and shared-prefix scoring match generation."""
    head = "Task: push every box onto a target. You can push a box but not pull it. "
    prompts = [encode_prompt(vlm.codec, head + obs) for obs in ("Now: left wall.", "Now: box above.", "Go")]
    gens = vlm.backend.generate(prompts, max_new_tokens=5, row_seeds=[1, 2, 3])
    responses = [g.response_token_ids for g in gens]
    for groups in (None, [0, 0, 1]):
        lp, _ = response_logprobs(vlm.model, prompts, responses, prefix_groups=groups)
        for i, g in enumerate(gens):
            torch.testing.assert_close(lp[i, : len(responses[i])], torch.tensor(g.response_logprobs), atol=1e-4, rtol=0)


def test_analyzer_sees_placeholders_or_images(vlm, recorded):
    _, trajs = recorded["seed/Sokoban-v0"]
    t = trajs[0]
    text_ids = vlm.codec.encode_analyzer(t, images=0)
    assert vision_of(text_ids) is None
    assert vlm.codec.tokenizer.decode(text_ids).count(f"saw: {IMAGE_PLACEHOLDER} ") == t.length
    two = vlm.codec.encode_analyzer(t, images=2)
    assert vision_of(two).num_images == 2
    assert vlm.codec.tokenizer.decode(two).count(IMAGE_PLACEHOLDER) == t.length - 2  # earlier steps keep the placeholder
    for images in (0, 2):  # text with placeholders, and prompts with several images, generate
        cfg = SeedConfig(analyzer_images=images, analyzer_retries=0, skill_max_new_tokens=6)
        assert len(generate_skills(vlm.backend, vlm.codec, trajs, cfg, seed=0)) == len(trajs)


def test_one_seed_update_on_images_with_valid_skills(tmp_path, vlm_path):
    """Stage 1 (expert demos with images) and one Stage 2 iteration: rollouts, teacher pass under the
    skill-augmented prompt with the same image, reference pass (LoRA adapters off), PPO + OPD update."""
    library = tmp_path / "skills.json"
    library.write_text(json.dumps({"default": "Use both cards once and check that the formula reaches the target."}))
    cfg = SeedConfig(**{**SMALL_RUN, "stage1_demos": 2}, model=vlm_path, lora=True, lora_r=4, stage1_epochs=1,
                     kl_coef=0.01, skill_source="static", static_skills=str(library), output_dir=str(tmp_path / "run"))
    results = train(cfg, say=lambda _: None)
    assert results["stage1"]["stage1_pairs"] > 0
    (m,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert m["skill_valid_rate"] == 1.0 and m["opd_tokens"] > 0 and 0.0 < m["mean_gate"] < 1.0
    assert np.isfinite(m["loss"]) and m["kl"] >= 0 and m["grad_norm"] > 0
    trajs = list(read_trajectories(tmp_path / "run" / "trajectories.jsonl"))
    steps = [s for t in trajs for s in t.steps]
    assert len(trajs) == 4 and all(resolve_image(tmp_path / "run" / "trajectories.jsonl", s).is_file() for s in steps)
    assert all(s.prompt_token_ids and s.response_token_ids and s.teacher_logprobs for s in steps)
    model, processor = load_policy(str(tmp_path / "run" / "final"))  # LoRA merged, still a VLM with its processor
    assert is_processor(processor) and type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"


def test_full_finetuning_with_the_analyzer_on_images(tmp_path, vlm_path):
    """Full fine-tuning (frozen-copy reference, vision tower frozen), on-policy skills from an analyzer
    that sees the last 2 images, GiGPO (states told apart by their images)."""
    cfg = SeedConfig(**SMALL_RUN, model=vlm_path, lora=False, kl_coef=0.01, analyzer_images=2, analyzer_retries=0,
                     skill_max_new_tokens=8, advantage="gigpo", save_final=False, output_dir=str(tmp_path / "run"))
    train(cfg, say=lambda _: None)
    (m,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "skill_valid_rate" in m and np.isfinite(m["loss"]) and m["grad_norm"] > 0
    from safetensors.torch import load_file

    trained = load_file(str(tmp_path / "run" / "checkpoints" / "iter0000" / "trainable.safetensors"))
    assert any("language_model" in k for k in trained) and not any(".visual." in f".{k}" for k in trained)


def test_text_only_model_on_an_image_env_fails_naming_obs_mode(tmp_path, capsys):
    from seed_train.preflight import check_run_setup

    text_model = str(cached_tiny_model(seed=0))
    # Before any model loads: the built env's obs_mode and the model folder's config.
    for model in (text_model, "smollm2-135m"):
        with pytest.raises(ValueError, match="config field 'env_kwargs'.*obs_mode='image'.*text-only model"):
            check_run_setup(SeedConfig(model=model, lora=False, env_id="seed/Sokoban-v0", env_kwargs={"obs_mode": "image"},
                                       output_dir=str(tmp_path / "never")))
    assert not (tmp_path / "never").exists()
    check_run_setup(SeedConfig(model=text_model, env_id="seed/Sokoban-v0", env_kwargs={"obs_mode": "text+image"},
                               output_dir=str(tmp_path / "ok")))
    check_run_setup(SeedConfig(model=str(cached_tiny_vlm(seed=0)), env_id="seed/Sokoban-v0",
                               env_kwargs={"obs_mode": "image"}, output_dir=str(tmp_path / "ok")))
    policy = load(SeedConfig(model=text_model, lora=False))
    with pytest.raises(ValueError, match="obs_mode='image'.*text-only model"):
        run_episodes(policy.backend, policy.codec, EnvPool(image_spec("seed/Sokoban-v0")),
                     group_jobs(["any"], 1, base_seed=0, prefix="x"), max_new_tokens=2)
    code = main_eval(["--model", text_model, "--env", "seed/EZPoints-v0", "--env-kwargs", '{"obs_mode": "image"}',
                      "--out", str(tmp_path / "ev")])
    assert code == 2 and "--env-kwargs: seed/EZPoints-v0 with obs_mode='image'" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


def test_the_codec_is_chosen_once_from_what_loaded(vlm, vlm_path):
    text_tok = load_policy(str(cached_tiny_model(seed=0)))[1]
    text = prompt_codec(text_tok)
    assert type(text) is PromptCodec and not text.sees_images and prompt_codec(text) is text
    assert isinstance(vlm.codec, VisionPromptCodec) and vlm.codec.sees_images
    image = np.zeros((28, 28, 3), dtype=np.uint8)
    # A text model gets the text alone; its ids are the chat template's, whatever images are passed.
    assert text.encode("hi", images=[image]) == text.encode("hi") == encode_prompt(text_tok, "hi")
    with_image = vlm.codec.encode("hi", images=[image])
    assert vision_of(with_image) is not None and vision_of(vlm.codec.encode("hi")) is None
    assert vlm.model.config.image_token_id in with_image
    # The pixels are a pure function of the image: attaching them to the recorded ids gives the same inputs.
    again = vlm.codec.attach(list(with_image), [image])
    assert list(again) == list(with_image)
    assert torch.equal(vision_of(again).pixel_values, vision_of(with_image).pixel_values)
    assert text.attach([1, 2], [image]) == [1, 2] and vlm.codec.attach([1, 2], None) == [1, 2]


def test_seed_eval_of_a_vision_policy_writes_the_same_report_as_text(tmp_path, vlm_path):
    common = ["--env", "seed/Sokoban-v0", "--split", "unseen", "--limit", "3", "--max-new-tokens", "3",
              "--action-format", "plain", "--history", "0"]
    assert main_eval(["--model", vlm_path, *common, "--env-kwargs", '{"obs_mode": "image"}',
                      "--out", str(tmp_path / "vision")]) == 0
    assert main_eval(["--model", str(cached_tiny_model(seed=0)), *common, "--out", str(tmp_path / "text")]) == 0
    files = {p.name for p in (tmp_path / "text").iterdir() if p.is_file()}
    assert files == {p.name for p in (tmp_path / "vision").iterdir() if p.is_file()}
    assert {"eval_seed0.json", "eval_seed0.md", "eval_seed0.png", "seed0.trajectories.jsonl"} <= files
    vision, text = (json.loads((tmp_path / d / "eval_seed0.json").read_text()) for d in ("vision", "text"))
    assert vision["categories"].keys() == text["categories"].keys() and vision["meta"].keys() == text["meta"].keys()
    assert vision["meta"]["split"] == "unseen" and vision["categories"]["all"]["episodes"] == 3
    assert vision["categories"]["all"].keys() == text["categories"]["all"].keys()
    header = lambda d: (tmp_path / d / "eval_seed0.md").read_text().splitlines()[:4]  # noqa: E731
    assert header("vision") == header("text")
    trajs = list(read_trajectories(tmp_path / "vision" / "seed0.trajectories.jsonl"))
    assert all(isinstance(s.image, str) for t in trajs for s in t.steps)  # the images were saved as PNG files
