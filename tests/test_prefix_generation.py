"""Prefix-shared generation (a shared prompt head's KV computed once) against the plain generate path,
and log-probs recorded at the sampling temperature, on the tiny model."""
from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from seed_train.generation import Generation, HFGenerateBackend  # noqa: E402
from seed_train.codec import encode_prompt  # noqa: E402
from seed_train.policy import LoraSettings, load_policy  # noqa: E402
from seed_train.scoring import (MIN_SHARED_PREFIX, auto_prefix_groups, cache_layers,  # noqa: E402
                                response_logprobs, shared_head_groups)
from seed_train.tiny import cached_tiny_model  # noqa: E402

# Three "tasks" whose heads differ in length, each with rollouts in the state of a first turn (identical
# prompts) and of later turns (same head, observations of different lengths), plus a prompt of its own.
HEADS = [
    "You are an expert agent operating in an environment. Your task is to: put a clean apple in fridge.",
    "EZPoints: use the cards to make the target number. Cards: 3, 7, 10, J. Target: 24",
    "Sokoban: # wall, _ floor, O target, X box, P player. Push the box onto the target.",
]
TAILS = ["", "", " You arrive at countertop 1. On the countertop 1, you see a bread 1.", " Nothing happens."]
# Two prompts of their own (different lengths: their prefill is left-padded without a shared head).
TEXTS = [head + tail for head in HEADS for tail in TAILS] + ["go", "Sokoban: up down left right"]


@pytest.fixture(scope="module")
def policy():
    return load_policy(str(cached_tiny_model(seed=0)))


@pytest.fixture(scope="module")
def prompts(policy) -> list[list[int]]:
    _, tok = policy
    ids = [encode_prompt(tok, t) for t in TEXTS]
    assert len({len(p) for p in ids}) > 5  # groups of different prompt lengths, and within groups
    return ids


def _pair(model, tok, **kwargs) -> tuple[HFGenerateBackend, HFGenerateBackend]:
    return (HFGenerateBackend(model, tok, prefix_sharing=False, **kwargs),
            HFGenerateBackend(model, tok, prefix_sharing=True, **kwargs))


def _assert_same(plain: list[Generation], shared: list[Generation]) -> None:
    assert [g.response_token_ids for g in shared] == [g.response_token_ids for g in plain]
    assert [g.text for g in shared] == [g.text for g in plain]
    assert [g.finished for g in shared] == [g.finished for g in plain]
    assert [g.prompt_token_ids for g in shared] == [g.prompt_token_ids for g in plain]
    for p, s in zip(plain, shared):
        assert s.response_logprobs == pytest.approx(p.response_logprobs, abs=1e-5)


# ------------------------------------------------------------------------------------ grouping


def test_identical_prompts_form_one_group_and_keep_a_token_each() -> None:
    a = list(range(40))
    keys = auto_prefix_groups([a, a, a])
    assert len(set(keys)) == 1
    groups, alone = shared_head_groups([a, a, a], keys)
    assert groups == [(39, [0, 1, 2])] and alone == []  # the last token is each row's own


def test_grouping_prefers_the_larger_saving() -> None:
    common = list(range(30))
    x, y = common + list(range(100, 120)), common + list(range(200, 220))
    # Two identical pairs under a 30-token common head: two groups (head 49 each) save 98 > 3 * 30.
    keys = auto_prefix_groups([x, y, x, y])
    assert keys[0] == keys[2] and keys[1] == keys[3] and keys[0] != keys[1]
    # Four rows sharing 40 tokens, pairs sharing 42: one group saves 3 * 40 = 120 > 2 * 42.
    common = list(range(40))
    rows = [common + [500, 501, 502 + i] for i in range(2)] + [common + [600, 601, 602 + i] for i in range(2)]
    assert len(set(auto_prefix_groups(rows))) == 1
    groups, _ = shared_head_groups(rows, auto_prefix_groups(rows))
    assert groups == [(40, [0, 1, 2, 3])]


def test_short_common_prefixes_and_singletons_are_not_grouped() -> None:
    short = list(range(MIN_SHARED_PREFIX - 1))
    rows = [short + [900], short + [901], list(range(50, 90)), [7]]
    keys = auto_prefix_groups(rows)
    assert len(set(keys)) == len(rows)
    groups, alone = shared_head_groups(rows, keys)
    assert groups == [] and sorted(alone) == [0, 1, 2, 3]


# ------------------------------------------------------------------------------------ same tokens, same log-probs


def test_greedy_matches_the_plain_path(policy, prompts) -> None:
    plain, shared = _pair(*policy)
    a = plain.generate(prompts, max_new_tokens=10, greedy=True)
    b = shared.generate(prompts, max_new_tokens=10, greedy=True)
    _assert_same(a, b)
    assert shared.prefill_tokens < 0.6 * plain.prefill_tokens  # the heads really were shared
    assert plain.prompt_tokens == shared.prompt_tokens == sum(len(p) for p in prompts)


def test_row_seeded_sampling_matches_the_plain_path(policy, prompts) -> None:
    plain, shared = _pair(*policy)
    seeds = list(range(100, 100 + len(prompts)))
    a = plain.generate(prompts, max_new_tokens=12, temperature=0.7, top_p=0.9, row_seeds=seeds)
    b = shared.generate(prompts, max_new_tokens=12, temperature=0.7, top_p=0.9, row_seeds=seeds)
    _assert_same(a, b)
    # Identical prompts with different seeds still sample differently (the noise is per row).
    assert a[0].response_token_ids != a[1].response_token_ids


def test_batch_seeded_sampling_matches_the_plain_path(policy, prompts) -> None:
    plain, shared = _pair(*policy)
    state = torch.random.get_rng_state()
    a = plain.generate(prompts, max_new_tokens=8, temperature=1.3, seed=11)
    b = shared.generate(prompts, max_new_tokens=8, temperature=1.3, seed=11)
    assert torch.equal(state, torch.random.get_rng_state())
    _assert_same(a, b)


def test_stop_tokens_mid_batch_match_the_plain_path(policy, prompts) -> None:
    model, tok = policy
    seeds = list(range(len(prompts)))
    free = HFGenerateBackend(model, tok, prefix_sharing=False).generate(prompts, max_new_tokens=12, row_seeds=seeds)
    # A stop token that the first row samples early and some other row never samples.
    stop = next(t for t in free[0].response_token_ids[1:6]
                if any(t not in g.response_token_ids for g in free))
    plain, shared = _pair(model, tok, stop_token_ids=[stop])
    a = plain.generate(prompts, max_new_tokens=12, row_seeds=seeds)
    b = shared.generate(prompts, max_new_tokens=12, row_seeds=seeds)
    _assert_same(a, b)
    assert a[0].finished and a[0].response_token_ids[-1] == stop and len(a[0].response_token_ids) < 12
    assert not all(g.finished for g in a)  # others ran on after the first row stopped


def test_lora_model_matches_the_plain_path(policy, prompts) -> None:
    _, tok = policy
    with torch.random.fork_rng(devices=[]):  # LoRA's A matrices are drawn from the global RNG
        torch.manual_seed(0)
        model, _ = load_policy(str(cached_tiny_model(seed=0)), lora=LoraSettings(r=4, alpha=8))
    with torch.no_grad():  # B starts at zero: move it so the adapters change the outputs
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(0.5 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    plain, shared = _pair(model, tok)
    seeds = list(range(7, 7 + len(prompts)))
    a = plain.generate(prompts, max_new_tokens=8, temperature=0.9, row_seeds=seeds)
    b = shared.generate(prompts, max_new_tokens=8, temperature=0.9, row_seeds=seeds)
    _assert_same(a, b)
    base = HFGenerateBackend(*policy).generate(prompts, max_new_tokens=8, temperature=0.9, row_seeds=seeds)
    assert [g.response_logprobs for g in base] != [g.response_logprobs for g in b]  # the adapters are on


def test_prefill_token_counts(policy) -> None:
    model, tok = policy
    prompt = encode_prompt(tok, HEADS[0])
    other = encode_prompt(tok, "go")
    plain, shared = _pair(model, tok)
    plain.generate([prompt] * 4 + [other], max_new_tokens=2, greedy=True)
    shared.generate([prompt] * 4 + [other], max_new_tokens=2, greedy=True)
    n = len(prompt)
    assert plain.prefill_tokens == 5 * n  # the left-padded [rows, longest prompt] block
    # The head (all but the last token) once; "go" alone, all but its last token; one last token per row.
    assert shared.prefill_tokens == (n - 1) + (len(other) - 1) + 5
    assert plain.prompt_tokens == shared.prompt_tokens == 4 * n + len(other)
    # Nothing to share: the plain path, counted the same way.
    shared.generate([prompt, other], max_new_tokens=2, greedy=True)
    assert shared.prefill_tokens == (n - 1) + (len(other) - 1) + 5 + 2 * n


def test_a_model_whose_cache_cannot_be_shared_takes_the_plain_path(policy, prompts) -> None:
    """Sliding-window layers keep a cache that cannot be rebuilt from plain tensors: fall back, same output."""
    from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

    _, tok = policy
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True, sliding_window=64,
                         max_window_layers=0, layer_types=["sliding_attention", "sliding_attention"],
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    assert cache_layers(DynamicCache(config=config)) is None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config).eval()
    plain, shared = _pair(model, tok)
    a = plain.generate(prompts, max_new_tokens=4, greedy=True)
    b = shared.generate(prompts, max_new_tokens=4, greedy=True)
    _assert_same(a, b)
    assert shared.prefill_tokens == plain.prefill_tokens == len(prompts) * max(len(p) for p in prompts)


def test_vision_models_take_the_plain_path() -> None:
    from seed_train.tiny import cached_tiny_vlm

    model, processor = load_policy(str(cached_tiny_vlm(seed=0)))
    prompt = encode_prompt(processor, HEADS[0])
    backend = HFGenerateBackend(model, processor)
    gens = backend.generate([prompt] * 3, max_new_tokens=3, greedy=True)
    assert backend.prefill_tokens == 3 * len(prompt)
    assert gens[0].response_token_ids == gens[1].response_token_ids == gens[2].response_token_ids
    # Nor do they keep a turn's KV for the next: the same prompts again run whole.
    for _ in range(2):
        backend.generate([prompt] * 3, max_new_tokens=3, greedy=True, row_keys=[0, 1, 2])
    assert backend.prefill_tokens == 3 * 3 * len(prompt) and backend.reused_tokens == 0


# ------------------------------------------------------------------------------------ log-prob temperature


def test_logprobs_are_recorded_at_the_sampling_temperature(policy, prompts) -> None:
    model, tok = policy
    seeds = list(range(len(prompts)))
    gens = HFGenerateBackend(model, tok).generate(prompts, max_new_tokens=6, temperature=0.7, top_p=0.9,
                                                 row_seeds=seeds)
    responses = [g.response_token_ids for g in gens]
    recorded = torch.zeros(len(gens), 6)
    for i, g in enumerate(gens):
        recorded[i, : len(g.response_logprobs)] = torch.tensor(g.response_logprobs)
    tempered, mask = response_logprobs(model, prompts, responses, temperature=0.7)
    torch.testing.assert_close(tempered, recorded, atol=1e-5, rtol=0)
    # Shared-prefix scoring follows the same convention.
    groups = [i // len(TAILS) for i in range(len(prompts))]
    shared_scored, _ = response_logprobs(model, prompts, responses, temperature=0.7, prefix_groups=groups)
    torch.testing.assert_close(shared_scored, recorded, atol=1e-5, rtol=0)
    untempered, _ = response_logprobs(model, prompts, responses)
    assert ((untempered - recorded).abs() * mask).max() > 1e-2  # T=1 is a different number

    # logprob_temperature=False: the same tokens, log-probs of the unmodified policy (T=1).
    plain_t = HFGenerateBackend(model, tok, logprob_temperature=False).generate(
        prompts, max_new_tokens=6, temperature=0.7, top_p=0.9, row_seeds=seeds)
    assert [g.response_token_ids for g in plain_t] == responses
    for i, g in enumerate(plain_t):
        assert g.response_logprobs == pytest.approx(untempered[i, : len(g.response_logprobs)].tolist(), abs=1e-5)
    # Greedy decoding records T=1 whatever temperature is passed.
    greedy = HFGenerateBackend(model, tok).generate(prompts[:3], max_new_tokens=4, temperature=0.5, greedy=True)
    g_lp, _ = response_logprobs(model, prompts[:3], [g.response_token_ids for g in greedy])
    for i, g in enumerate(greedy):
        assert g.response_logprobs == pytest.approx(g_lp[i, : len(g.response_logprobs)].tolist(), abs=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        response_logprobs(model, prompts, responses, temperature=0.0)


def test_first_ppo_minibatch_has_ratio_one_at_the_sampling_temperature() -> None:
    """Rollout log-probs at T=0.7 and the update's re-scoring use the same convention: ratio exactly 1 at
    the first minibatch (before any step); scoring at T=1 instead would not be."""
    import copy

    import numpy as np

    from seed_train.config import SeedConfig
    from seed_train.evaluate import panel_of
    from seed_train.rollout import EnvPool, EnvSpec, group_jobs, run_episodes
    from seed_train.samples import build_samples
    from seed_train.trainer import load, update_policy

    cfg = SeedConfig(model=str(cached_tiny_model(seed=0)), lora=False, temperature=0.7, kl_coef=0.0, opd_coef=0.0,
                     ppo_epochs=1, minibatch_size=64, lr=1e-3)
    with torch.random.fork_rng(devices=[]):  # load seeds torch's global RNG (LoRA init); keep the caller's
        policy = load(cfg)
    spec = EnvSpec(env_id="seed/EZPoints-v0", split="test", template="compact", history=1, action_format="plain",
                   format_penalty=0.1, max_steps=2)
    jobs = group_jobs(list(panel_of(spec)[:2]), 2, base_seed=3, prefix="it0")
    pool = EnvPool(spec)
    try:
        trajectories = run_episodes(policy.backend, policy.codec, pool, jobs, max_new_tokens=4,
                                    temperature=cfg.temperature, seed=5)
    finally:
        pool.close()
    # Advantages of both signs (the tiny model's groups have uniform outcomes, so GRPO's would be all 0
    # and the update would skip its forward: nothing measured).
    advantages = [[1.0 if e % 2 else -1.0] * len(t.steps) for e, t in enumerate(trajectories)]
    samples = build_samples(trajectories, advantages, [None] * len(trajectories), policy.codec)
    no_scores = {"teacher_logprobs": None, "ref_logprobs": None}
    ratios = {}
    for flag in (True, False):
        run_cfg = SeedConfig(**{**cfg.to_dict(), "logprob_temperature": flag})
        model = copy.deepcopy(policy.model)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=run_cfg.lr)
        stats = update_policy(model, optimizer, samples, no_scores, run_cfg, np.random.default_rng(0))
        ratios[flag] = (stats["ratio_mean"], stats["approx_kl"])
    assert ratios[True][0] == pytest.approx(1.0, abs=1e-5) and ratios[True][1] < 1e-8
    assert ratios[False][1] > 1e-3  # T=1 re-scoring of T=0.7 samples: the ratio is off from the start


def test_config_switches_reach_the_backend(policy) -> None:
    from seed_train.config import SeedConfig
    from seed_train.trainer import generation_backend, logprob_temperature

    model, tok = policy
    on = SeedConfig(temperature=0.7)
    off = SeedConfig(temperature=0.7, prefix_sharing=False, logprob_temperature=False)
    assert (on.prefix_sharing, on.logprob_temperature) == (True, True)  # the defaults
    backend = generation_backend(on, model, tok)
    assert backend.prefix_sharing and backend.logprob_temperature and logprob_temperature(on) == 0.7
    backend = generation_backend(off, model, tok)
    assert not backend.prefix_sharing and not backend.logprob_temperature and logprob_temperature(off) == 1.0
    # vLLM records T=1 log-probs: a tempered convention with it is refused, naming the field.
    with pytest.raises(ValueError, match="logprob_temperature"):
        SeedConfig(generation_backend="vllm", device="cuda", temperature=0.7)
    SeedConfig(generation_backend="vllm", device="cuda", temperature=0.7, logprob_temperature=False)


# ------------------------------------------------------------------------------------ previous-turn reuse

KEYS = ["a", "b", "c"]


def _common(x: list[int], y: list[int]) -> int:
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


def _kept(prompts: list[list[int]], gens: list[Generation]) -> list[list[int]]:
    """What a call's KV covers per row: the prompt and the generated tokens generate fed back, i.e. all
    but the last step's token (generate stops after the longest response)."""
    steps = max(len(g.response_token_ids) for g in gens)
    return [list(p) + g.response_token_ids[: steps - 1] for p, g in zip(prompts, gens)]


def _expected_prefill(prompts: list[list[int]], kept: list[list[int]] | None) -> int:
    """Prefill positions when rows whose prompt shares >= MIN_SHARED_PREFIX tokens with their kept sequence
    start from it (one left-padded batch of tails) and the others, which share no head here, run whole."""
    reused = {}
    for i, p in enumerate(prompts):
        n = min(_common(p, kept[i]), len(p) - 1) if kept is not None and kept[i] is not None else 0
        if n >= MIN_SHARED_PREFIX:
            reused[i] = n
    others = [i for i in range(len(prompts)) if i not in reused]
    if not reused:  # nothing to share: the plain path's [rows, longest prompt] block
        return len(prompts) * max(len(p) for p in prompts)
    total = len(reused) * max(len(prompts[i]) - 1 - n for i, n in reused.items())
    if others:
        total += len(others) * max(len(prompts[i]) - 1 for i in others)
    return total + len(prompts)  # the last token of every row


def _multi_turn(policy, extend, *, turns: int, keys=None, **sampling):
    """Play ``turns`` calls on a plain backend and a reusing one (same prompts: the plain path's), prompt
    t+1 of row i being ``extend(i, t, prompt, generation)``. Returns the reusing backend and, per call,
    (prompts, plain generations, prefill positions of the reusing backend)."""
    model, tok = policy
    plain, reuse = _pair(model, tok)
    prompts = [encode_prompt(tok, h) for h in HEADS]
    keys = keys or (lambda t: KEYS)
    calls = []
    for t in range(turns):
        seeds = {"row_seeds": [1000 * t + i for i in range(len(prompts))]} if "temperature" in sampling else {}
        before = reuse.prefill_tokens
        a = plain.generate(prompts, max_new_tokens=6, row_keys=keys(t), **sampling, **seeds)
        b = reuse.generate(prompts, max_new_tokens=6, row_keys=keys(t), **sampling, **seeds)
        _assert_same(a, b)
        calls.append((prompts, a, reuse.prefill_tokens - before))
        prompts = [extend(i, t, p, g) for i, (p, g) in enumerate(zip(prompts, a))]
    assert plain.reused_tokens == 0
    return reuse, calls


@pytest.mark.parametrize("sampling", [{"greedy": True}, {"temperature": 0.8, "top_p": 0.9}],
                         ids=["greedy", "row_seeds"])
def test_previous_turn_reuse_when_each_prompt_extends_the_last_sequence(policy, sampling) -> None:
    _, tok = policy
    # Turn t+1 = prompt t + completion t + a new user turn (a chat that appends turns).
    reuse, calls = _multi_turn(policy, lambda i, t, p, g: p + g.response_token_ids + encode_prompt(
        tok, f"Observation {t}: nothing happens to row {i}."), turns=3, **sampling)
    assert calls[0][2] == _expected_prefill(calls[0][0], None)  # first call: nothing kept yet
    reused = 0
    for (before, gens, _), (prompts, _, positions) in zip(calls, calls[1:]):
        kept = _kept(before, gens)
        assert all(len(p) > len(k) for p, k in zip(prompts, kept))
        # Every row starts from its whole kept sequence and runs only the rest of its prompt.
        assert positions == len(prompts) * max(len(p) - 1 - len(k) for p, k in zip(prompts, kept)) + len(prompts)
        assert positions == _expected_prefill(prompts, kept)
        assert positions < 0.4 * len(prompts) * max(len(p) for p in prompts)
        reused += sum(len(k) for k in kept)
    assert reuse.reused_tokens == reused


def test_previous_turn_reuse_when_prompts_extend_only_part_of_it(policy) -> None:
    _, tok = policy

    def extend(i, t, prompt, gen):
        if i == 0:  # keeps only its first 20 tokens, then new text (a history window that moved on)
            return prompt[:20] + encode_prompt(tok, f"Step {t}: you see a bread 1.")
        if i == 1:  # keeps the prompt, drops the completion
            return prompt + encode_prompt(tok, f"Step {t}: nothing happens.")
        return encode_prompt(tok, f"go {t}")  # shares nothing with its past: runs whole

    reuse, calls = _multi_turn(policy, extend, turns=3, temperature=1.0)
    for (before, gens, _), (prompts, _, positions) in zip(calls, calls[1:]):
        kept = _kept(before, gens)
        assert _common(prompts[0], kept[0]) >= 20 and _common(prompts[2], kept[2]) < MIN_SHARED_PREFIX
        assert positions == _expected_prefill(prompts, kept)


def test_a_group_head_starts_from_a_members_previous_turn(policy) -> None:
    """As in a GRPO group: identical first prompts, then prompts sharing a head that goes past what each row
    kept (a history header): the group's head runs only from the end of the longest kept prefix."""
    model, tok = policy
    plain, reuse = _pair(model, tok)
    first = [encode_prompt(tok, HEADS[0])] * 2 + [encode_prompt(tok, HEADS[1])]
    gens = plain.generate(first, max_new_tokens=4, greedy=True, row_keys=KEYS)
    _assert_same(gens, reuse.generate(first, max_new_tokens=4, greedy=True, row_keys=KEYS))
    history = encode_prompt(tok, "You have taken 1 step(s) so far. Your last 1 step(s), oldest first:")
    following = [first[i][:-8] + history + encode_prompt(tok, f"row {i}: you see a {('apple', 'bread', 'fridge')[i]}")
                 for i in range(3)]
    kept = _kept(first, gens)
    own = [min(_common(p, k), len(p) - 1) for p, k in zip(following, kept)]
    head = min(_common(following[0], following[1]), len(following[0]) - 1, len(following[1]) - 1)
    assert MIN_SHARED_PREFIX <= max(own[:2]) < head  # the group's head reaches past both rows' own prefixes
    assert own[2] >= MIN_SHARED_PREFIX and _common(following[2], following[0]) < MIN_SHARED_PREFIX
    before, reused_before = reuse.prefill_tokens, reuse.reused_tokens
    b = reuse.generate(following, max_new_tokens=4, greedy=True, row_keys=KEYS)
    _assert_same(plain.generate(following, max_new_tokens=4, greedy=True, row_keys=KEYS), b)
    # The head past the longest kept prefix, the group's two tails, row 2's own tail, a last token per row.
    expected = ((head - max(own[:2])) + 2 * max(len(following[i]) - 1 - head for i in range(2))
                + (len(following[2]) - 1 - own[2]) + 3)
    assert reuse.prefill_tokens - before == expected
    assert reuse.reused_tokens - reused_before == max(own[:2]) + own[2]


def test_kept_sequences_of_keys_absent_from_a_call_are_dropped(policy) -> None:
    _, tok = policy
    present = {0: KEYS, 1: KEYS[:2] + ["d"], 2: KEYS}  # "c" sits out call 1: its sequence is not kept for 2
    reuse, calls = _multi_turn(policy, lambda i, t, p, g: p + g.response_token_ids + encode_prompt(tok, "next"),
                               turns=3, keys=present.get, greedy=True)
    kept = _kept(calls[1][0], calls[1][1])
    kept[2] = None  # row 2's key in call 1 was "d", not "c"
    assert calls[2][2] == _expected_prefill(calls[2][0], kept)
    assert calls[2][2] > _expected_prefill(calls[2][0], _kept(calls[1][0], calls[1][1]))


def test_kv_kept_under_other_weights_is_never_reused(policy) -> None:
    import copy

    model, tok = policy
    model = copy.deepcopy(model)  # this test writes the weights
    prompts = [encode_prompt(tok, h) for h in HEADS]
    backend = HFGenerateBackend(model, tok)
    param = next(p for p in model.parameters() if p.dim() == 2)

    def add_in_place() -> None:  # what an optimizer step or a weights load does
        with torch.no_grad():
            param.add_(1e-2)

    for change, reused in [(lambda: None, True), (add_in_place, False), (lambda: backend.sync_weights(model), False),
                           (backend.forget, False)]:
        first = backend.generate(prompts, max_new_tokens=4, greedy=True, row_keys=KEYS)
        following = [p + g.response_token_ids + encode_prompt(tok, "next") for p, g in zip(prompts, first)]
        change()
        before = backend.prefill_tokens
        gens = backend.generate(following, max_new_tokens=4, greedy=True, row_keys=KEYS)
        _assert_same(HFGenerateBackend(model, tok, prefix_sharing=False).generate(following, max_new_tokens=4,
                                                                                  greedy=True), gens)
        expected = _expected_prefill(following, _kept(prompts, first) if reused else None)
        assert backend.prefill_tokens - before == expected
    assert expected == len(prompts) * max(len(p) for p in following)  # nothing kept: the plain block


def test_reuse_off_or_no_keys_keeps_nothing(policy) -> None:
    model, tok = policy
    prompts = [encode_prompt(tok, h) for h in HEADS]
    for backend, keys in [(HFGenerateBackend(model, tok, turn_reuse=False), KEYS),
                          (HFGenerateBackend(model, tok), None)]:
        first = backend.generate(prompts, max_new_tokens=4, greedy=True, row_keys=keys)
        following = [p + g.response_token_ids + encode_prompt(tok, "next") for p, g in zip(prompts, first)]
        before = backend.prefill_tokens
        backend.generate(following, max_new_tokens=4, greedy=True, row_keys=keys)
        assert backend.prefill_tokens - before == len(prompts) * max(len(p) for p in following)
        assert backend.reused_tokens == 0
    with pytest.raises(ValueError, match="row_keys"):
        HFGenerateBackend(model, tok).generate(prompts, max_new_tokens=2, row_keys=["a", "a", "b"])
    with pytest.raises(ValueError, match="row_keys"):
        HFGenerateBackend(model, tok).generate(prompts, max_new_tokens=2, row_keys=["a"])


def test_rollouts_reuse_previous_turns_with_the_same_episodes(policy) -> None:
    """run_episodes keys rows by episode: same token ids with previous-turn reuse, shared heads only and the
    plain path, fewer prefill positions with reuse; a backend whose generate takes no row_keys still works."""
    from seed_train.evaluate import panel_of
    from seed_train.rollout import EnvPool, EnvSpec, RolloutStats, group_jobs, run_episodes

    model, tok = policy
    spec = EnvSpec(env_id="seed/EZPoints-v0", split="test", template="compact", history=2, action_format="plain",
                   format_penalty=0.1, max_steps=4)
    jobs = group_jobs(list(panel_of(spec)[:3]), 2, base_seed=3, prefix="it0")

    class NoKeys:  # a backend written before row_keys existed
        def __init__(self, inner):
            self.inner = inner

        def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, seed=None,
                     row_seeds=None):
            return self.inner.generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                       greedy=greedy, seed=seed, row_seeds=row_seeds)

    backends = {"plain": HFGenerateBackend(model, tok, prefix_sharing=False),
                "heads": HFGenerateBackend(model, tok, turn_reuse=False),
                "reuse": HFGenerateBackend(model, tok),
                "no_keys": NoKeys(HFGenerateBackend(model, tok))}
    tokens, prefill = {}, {}
    pool = EnvPool(spec)
    try:
        for name, backend in backends.items():
            stats = RolloutStats()
            played = run_episodes(backend, tok, pool, jobs, max_new_tokens=4, temperature=0.9, seed=5, stats=stats)
            tokens[name] = [[s.response_token_ids for s in t.steps] for t in played]
            prefill[name] = getattr(backend, "inner", backend).prefill_tokens
            assert stats.prefill_tokens == (0 if name == "no_keys" else prefill[name])  # counted where exposed
    finally:
        pool.close()
    assert max(len(t) for t in tokens["plain"]) >= 3  # later turns, with history in the prompt
    assert tokens["heads"] == tokens["reuse"] == tokens["no_keys"] == tokens["plain"]
    assert backends["reuse"].reused_tokens > 0 and backends["no_keys"].inner.reused_tokens == 0
    assert prefill["reuse"] < prefill["heads"] == prefill["no_keys"] < prefill["plain"]
    assert not backends["reuse"]._turns  # the rollout freed what it kept
