"""VLLMBackend: runs only where vllm and a CUDA GPU are present (a lent GPU machine)."""
from __future__ import annotations

import os

import pytest


def _gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU (vLLM)")
vllm = pytest.importorskip("vllm", reason="vllm is not installed (pip install 'seed-gym[vllm]')")


@pytest.fixture(scope="module")
def backend_and_model():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine, so weights can be synced
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seed_train.tiny import cached_tiny_model
    from seed_train.vllm_backend import VLLMBackend

    folder = cached_tiny_model()
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    return VLLMBackend(str(folder), tok, gpu_memory_utilization=0.2, max_model_len=1024), model, tok


def test_generate_matches_protocol_and_recomputed_logprobs(backend_and_model):
    from seed_train.generation import GenerationBackend
    from seed_train.codec import encode_prompt
    from seed_train.scoring import response_logprobs

    backend, model, tok = backend_and_model
    assert isinstance(backend, GenerationBackend)
    prompts = [encode_prompt(tok, "Push the box up."), encode_prompt(tok, "Make 24 from 3 3 8 8.")]
    gens = backend.generate(prompts, max_new_tokens=16, temperature=1.0, seed=0)
    assert [g.prompt_token_ids for g in gens] == prompts
    again = backend.generate(prompts, max_new_tokens=16, temperature=1.0, seed=0)
    assert [g.response_token_ids for g in gens] == [g.response_token_ids for g in again]
    lp, mask = response_logprobs(model.cuda(), prompts, [g.response_token_ids for g in gens])
    for i, g in enumerate(gens):
        assert len(g.response_logprobs) == len(g.response_token_ids)
        assert lp[i, : len(g.response_logprobs)].cpu().tolist() == pytest.approx(g.response_logprobs, abs=2e-2)
    model.cpu()


def test_sync_weights_changes_samples(backend_and_model):
    import torch

    from seed_train.codec import encode_prompt

    backend, model, tok = backend_and_model
    prompt = [encode_prompt(tok, "Push the box up.")]
    before = backend.generate(prompt, max_new_tokens=8, greedy=True)[0].response_token_ids
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    backend.sync_weights(model)
    after = backend.generate(prompt, max_new_tokens=8, greedy=True)[0].response_token_ids
    assert before != after
