"""Token-exact generation and log-prob scoring on the tiny model."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from seed_train.generation import Generation, GenerationBackend, HFGenerateBackend  # noqa: E402
from seed_train.codec import encode_prompt  # noqa: E402
from seed_train.policy import load_policy  # noqa: E402
from seed_train.scoring import response_logprobs  # noqa: E402
from seed_train.tiny import cached_tiny_model  # noqa: E402

TEXTS = [
    "go",
    "Your task is to: put a clean apple in fridge. Your admissible actions of the current situation "
    "are: [go to fridge 1, go to countertop 2, look, inventory]",
    "Sokoban: up down left right",
    "EZPoints: 3, 7, 10, J. Target: 24",
]


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return cached_tiny_model(seed=0)


@pytest.fixture(scope="module")
def policy(tiny_model_dir: Path):
    return load_policy(str(tiny_model_dir))


@pytest.fixture(scope="module")
def prompts(policy) -> list[list[int]]:
    _, tok = policy
    ids = [encode_prompt(tok, t) for t in TEXTS]
    assert len({len(p) for p in ids}) == len(ids)  # different lengths: left padding matters
    return ids


def _padded(gens: list[Generation]) -> torch.Tensor:
    width = max(len(g.response_logprobs) for g in gens)
    out = torch.zeros(len(gens), width)
    for i, g in enumerate(gens):
        out[i, : len(g.response_logprobs)] = torch.tensor(g.response_logprobs)
    return out


def test_backend_satisfies_protocol(policy) -> None:
    assert isinstance(HFGenerateBackend(*policy), GenerationBackend)


def test_recorded_tokens_and_logprobs_match_a_fresh_forward(policy, prompts) -> None:
    model, tok = policy
    gens = HFGenerateBackend(model, tok).generate(prompts, max_new_tokens=10, seed=7)
    assert [g.prompt_token_ids for g in gens] == prompts
    for g in gens:
        assert len(g.response_token_ids) == len(g.response_logprobs) == 10 and not g.finished
        assert tok.pad_token_id not in g.response_token_ids or not g.finished
        assert tok.decode(g.response_token_ids) == g.text
        assert all(lp <= 0 for lp in g.response_logprobs)
    lp, mask = response_logprobs(model, prompts, [g.response_token_ids for g in gens], batch_size=3)
    assert lp.shape == mask.shape == (len(prompts), 10) and mask.all()
    torch.testing.assert_close(lp, _padded(gens), atol=1e-4, rtol=0)


def test_seeded_sampling_is_reproducible_and_leaves_global_rng(policy, prompts) -> None:
    backend = HFGenerateBackend(*policy)
    state = torch.random.get_rng_state()
    a = backend.generate(prompts, max_new_tokens=8, seed=1, temperature=0.7, top_p=0.9)
    b = backend.generate(prompts, max_new_tokens=8, seed=1, temperature=0.7, top_p=0.9)
    c = backend.generate(prompts, max_new_tokens=8, seed=2, temperature=0.7, top_p=0.9)
    assert torch.equal(state, torch.random.get_rng_state())
    assert [g.response_token_ids for g in a] == [g.response_token_ids for g in b]
    assert [g.response_token_ids for g in a] != [g.response_token_ids for g in c]
    # Recorded log-probs are at the sampling temperature (verl's convention) and without top-p.
    model, _ = policy
    lp, _ = response_logprobs(model, prompts, [g.response_token_ids for g in a], temperature=0.7)
    torch.testing.assert_close(lp, _padded(a), atol=1e-4, rtol=0)


def test_greedy_is_deterministic(policy, prompts) -> None:
    backend = HFGenerateBackend(*policy)
    a = backend.generate(prompts, max_new_tokens=6, greedy=True, seed=1)
    b = backend.generate(prompts, max_new_tokens=6, greedy=True, seed=99)
    assert [g.response_token_ids for g in a] == [g.response_token_ids for g in b]
    model, _ = policy
    logits = model(torch.tensor([prompts[0]])).logits[0, -1]
    assert a[0].response_token_ids[0] == int(logits.argmax())


def test_stop_token_ends_response_and_is_kept(policy, prompts) -> None:
    model, tok = policy
    free = HFGenerateBackend(model, tok).generate(prompts[:1], max_new_tokens=8, seed=3)[0]
    stop = free.response_token_ids[3]
    assert stop not in free.response_token_ids[:3], "pick a seed whose 4th token is new"
    stopped = HFGenerateBackend(model, tok, stop_token_ids=[stop]).generate(prompts[:1], max_new_tokens=8, seed=3)[0]
    assert stopped.finished and not free.finished  # cut by max_new_tokens -> not finished
    assert stopped.response_token_ids == free.response_token_ids[:4]  # the stop token is included
    assert stopped.response_logprobs == pytest.approx(free.response_logprobs[:4], abs=1e-5)
    assert stopped.text == tok.decode(stopped.response_token_ids)  # ordinary token: stays in text


def test_eos_is_in_ids_not_in_text(policy, prompts) -> None:
    model, tok = policy
    # A copy with a head biased hard towards eos, so every response is exactly [eos].
    eager = copy.deepcopy(model)
    hidden, vocab = eager.config.hidden_size, eager.config.vocab_size
    eager.lm_head = torch.nn.Linear(hidden, vocab, bias=True)
    with torch.no_grad():
        eager.lm_head.weight.copy_(model.get_input_embeddings().weight)
        eager.lm_head.bias.zero_()
        eager.lm_head.bias[tok.eos_token_id] = 20.0
    gens = HFGenerateBackend(eager, tok).generate(prompts, max_new_tokens=5, seed=0)
    for g in gens:
        assert g.finished and g.response_token_ids == [tok.eos_token_id] and g.text == ""
    lp, _ = response_logprobs(eager, prompts, [g.response_token_ids for g in gens])
    torch.testing.assert_close(lp, _padded(gens), atol=1e-4, rtol=0)


def test_scoring_grad_flows_only_through_response_tokens(policy, prompts) -> None:
    model, tok = policy
    responses = [tok(t, add_special_tokens=False)["input_ids"] for t in ("up", "<action>go to fridge 1</action>", "", "24")]
    lp, mask = response_logprobs(model, prompts, responses, grad=True, batch_size=2)
    assert lp.requires_grad
    assert mask.sum(1).tolist() == [len(r) for r in responses]
    assert torch.all(lp[mask == 0] == 0)
    params = [p for p in model.parameters() if p.requires_grad]
    pad_grads = torch.autograd.grad(lp[mask == 0].sum(), params, retain_graph=True, allow_unused=True)
    assert all(g is None or torch.count_nonzero(g) == 0 for g in pad_grads)
    real_grads = torch.autograd.grad((lp * mask).sum(), params, allow_unused=True)
    assert any(g is not None and torch.count_nonzero(g) > 0 for g in real_grads)
    assert all(g is None or torch.isfinite(g).all() for g in real_grads)  # left padding adds no NaN

    nograd, _ = response_logprobs(model, prompts, responses)
    assert not nograd.requires_grad
    torch.testing.assert_close(nograd, lp.detach(), atol=1e-5, rtol=0)


def test_scoring_is_independent_of_batching(policy, prompts) -> None:
    model, tok = policy
    responses = [tok(t, add_special_tokens=False)["input_ids"] for t in ("left", "right right", "up", "<think>x</think>")]
    one, _ = response_logprobs(model, prompts, responses, batch_size=1)
    all_, _ = response_logprobs(model, prompts, responses, batch_size=8)
    torch.testing.assert_close(one, all_, atol=1e-5, rtol=0)


def test_argument_errors(policy, prompts) -> None:
    model, tok = policy
    backend = HFGenerateBackend(model, tok)
    with pytest.raises(ValueError, match="max_new_tokens"):
        backend.generate(prompts, max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        backend.generate(prompts, max_new_tokens=2, temperature=0)
    with pytest.raises(ValueError, match=r"prompts\[1\] is empty"):
        backend.generate([prompts[0], []], max_new_tokens=2)
    with pytest.raises(ValueError, match="differ in length"):
        response_logprobs(model, prompts, [[1]])
    assert backend.generate([], max_new_tokens=2) == []


def test_row_seeds_make_each_row_independent_of_the_batch(policy, prompts) -> None:
    backend = HFGenerateBackend(*policy)
    full = backend.generate(prompts, max_new_tokens=8, temperature=0.8, top_p=0.95, row_seeds=[10, 11, 12, 13])
    # A different batch (subset, other order, another prompt added) gives each row the same tokens.
    part = backend.generate([prompts[2], prompts[0], prompts[2]], max_new_tokens=8, temperature=0.8, top_p=0.95,
                            row_seeds=[12, 10, 99])
    assert part[0].response_token_ids == full[2].response_token_ids
    assert part[1].response_token_ids == full[0].response_token_ids
    assert part[2].response_token_ids != part[0].response_token_ids  # same prompt, other seed
    model, _ = policy
    lp, _ = response_logprobs(model, prompts, [g.response_token_ids for g in full], temperature=0.8)
    torch.testing.assert_close(lp, _padded(full), atol=1e-4, rtol=0)  # the tempered policy's, without top-p
    with pytest.raises(ValueError, match="row_seeds"):
        backend.generate(prompts, max_new_tokens=2, row_seeds=[1])


def test_row_seeded_sampling_draws_from_the_tempered_nucleus(policy, prompts) -> None:
    """Gumbel-max per row samples softmax(logits / T) restricted to the top-p nucleus (checked on 3000 draws)."""
    model, tok = policy
    temperature, top_p, n = 0.7, 0.8, 3000
    with torch.no_grad():
        logits = model(torch.tensor([prompts[1]])).logits[0, -1].float()
    probs = torch.softmax(logits / temperature, -1)
    sorted_p, order = probs.sort(descending=True)
    keep = order[(sorted_p.cumsum(0) - sorted_p) < top_p]
    expected = torch.zeros_like(probs)
    expected[keep] = probs[keep] / probs[keep].sum()
    gens = HFGenerateBackend(model, tok).generate([prompts[1]] * n, max_new_tokens=1, temperature=temperature,
                                                   top_p=top_p, row_seeds=list(range(n)))
    counts = torch.bincount(torch.tensor([g.response_token_ids[0] for g in gens]), minlength=len(probs)).float()
    assert set(torch.nonzero(counts).flatten().tolist()) <= set(keep.tolist())  # nothing outside the nucleus
    # Each frequency within 4 standard errors of its probability.
    se = (expected * (1 - expected) / n).sqrt()
    assert bool(((counts / n - expected).abs() <= 4 * se + 1e-3).all())
    assert len(keep) >= 3  # a real distribution, not a near-greedy one
