"""Token-exact batched generation that records what was sampled and its log-probability.

Prompts come in as token ids (from :func:`seed_train.policy.encode_prompt`) and responses go out as
token ids plus their log-probs: the trainer never re-tokenizes text. A backend is anything with the
:class:`GenerationBackend` shape; :class:`HFGenerateBackend` uses transformers ``generate`` (a vLLM
backend can plug in later through the same protocol and its ``sync_weights`` hook).

**Prefix sharing.** On CPU a rollout turn is prefill-bound, and its prompts repeat themselves: the G
rollouts of a GRPO group start from the same prompt, and later turns of a group share a long head
(system prompt, task line...). :class:`HFGenerateBackend` groups the prompts by common token prefix
(:func:`seed_train.scoring.auto_prefix_groups`), runs each group's head once, broadcasts its KV cache
to the group's rows, runs each row's tail on top of it, and hands the assembled cache to ``generate``,
which then feeds only each prompt's last token and decodes as usual::

    row layout   [pad | head_g | pad tail_i[:-1] | last_i] -> generated tokens
                  '------------ cached -------------'  '-- fed to generate

Causal attention never lets a head see a tail, so this is the same computation regrouped: same
tokens and log-probs as the plain path up to float rounding (the sampling itself, processors, RNG
draws and stop handling are ``generate``'s own in both paths).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from transformers import PreTrainedTokenizerBase


@dataclass
class Generation:
    """One sampled response.

    - ``prompt_token_ids``: the ids the model was fed (no padding).
    - ``response_token_ids``: the ids sampled, without padding, up to and INCLUDING the stop token
      (eos) when the response finished: the model sampled it, so it must get its log-prob, its
      gradient and its share of the credit like any other token (this is also what teaches the
      policy to stop).
    - ``response_logprobs``: ``log π_θ(token | prompt, earlier tokens)`` of each response token,
      without top-p, at the sampling temperature (``log_softmax(logits / T)``, as verl computes
      ``old_log_prob``) when the backend's ``logprob_temperature`` is on (the default), else at T=1
      (the unmodified policy); greedy decoding records T=1. Re-score with
      :func:`seed_train.scoring.response_logprobs` at the same temperature (see
      :class:`HFGenerateBackend`).
    - ``text``: the decoded response without a terminating special stop token (eos); an ordinary
      text token used as a stop token stays in the text.
    - ``finished``: the response ended with a stop token; False when ``max_new_tokens`` cut it.
    """

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    text: str
    finished: bool


@runtime_checkable
class GenerationBackend(Protocol):
    """What the rollout loop needs from a generator."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        greedy: bool = False,
        seed: int | None = None,
        row_seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Generate one response per prompt (token ids in, :class:`Generation` out, same order).

        ``row_seeds`` (one per prompt) make each row's sampling depend on its own seed only, not on
        which other prompts share the batch or their order; ``seed`` seeds the batch as a whole.
        """
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the backend sample from ``model``'s current weights (after an update)."""
        ...


def _validate(prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use greedy=True for argmax); got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompts[{i}] is empty; a prompt needs at least one token")


@contextlib.contextmanager
def _seeded(seed: int | None, device: "torch.device") -> Iterator[None]:
    """Seed sampling without touching the caller's global RNG state."""
    if seed is None:
        yield
        return
    import torch

    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class RowSeededSampler:
    """A logits processor that samples each row with its own generator (use with greedy decoding).

    ``argmax(log softmax(logits / T) restricted to the top-p nucleus + Gumbel noise)`` is a draw from
    the tempered, nucleus-truncated distribution (the Gumbel-max trick). The noise of row ``i`` comes
    from a generator seeded with ``row_seeds[i]``, so a row's tokens depend on its prompt and seed and
    not on the rest of the batch: episodes replay the same whatever the batch size, the order of
    jobs or the number of data-parallel ranks.
    """

    def __init__(self, row_seeds: Sequence[int], temperature: float, top_p: float, device: "torch.device"):
        import torch

        self.temperature, self.top_p = float(temperature), float(top_p)
        self.generators = []
        for s in row_seeds:
            g = torch.Generator(device=device)
            g.manual_seed(int(s) % (2**63))
            self.generators.append(g)

    def __call__(self, input_ids: "torch.Tensor", scores: "torch.Tensor") -> "torch.Tensor":
        import torch

        logits = scores.float() / self.temperature
        if self.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            # Drop a token when the tokens ranked above it already hold top_p of the mass (keeps >= 1).
            drop_sorted = (probs.cumsum(-1) - probs) >= self.top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        uniform = torch.stack([torch.rand(logits.shape[-1], generator=g, device=logits.device)
                               for g in self.generators])
        gumbel = -torch.log(-torch.log(uniform.clamp(min=1e-20)))
        return torch.log_softmax(logits, dim=-1) + gumbel


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    # Sampling must not see dropout; restore whatever mode the trainer had.
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _first_stop(ids: Sequence[int], stop_ids: frozenset[int]) -> int | None:
    for i, tok in enumerate(ids):
        if tok in stop_ids:
            return i
    return None


@dataclass
class _Prefilled:
    """A batch whose prompts, all but their last token, are already in a KV cache (prefix sharing)."""

    input_ids: "torch.Tensor"  # [B, L + 1]: cached layout, then each prompt's last token
    attention_mask: "torch.Tensor"  # [B, L + 1]: 0 at padding (left of a head and between head and tail)
    cache_kwarg: str  # the keyword generate takes the cache under
    cache: Any  # DynamicCache of length L
    positions: int  # token positions run through the model to build it (padding included)


def _prefill_shared(model: Any, prompts: Sequence[Sequence[int]], groups: Sequence[tuple[int, list[int]]],
                    alone: Sequence[int], pad_token_id: int, device: "torch.device") -> _Prefilled | None:
    """Run each group's head once and every row's tail (all but the last token) on top of it.

    ``groups``: ``(head length, rows)`` from :func:`seed_train.scoring.shared_head_groups`; ``alone``: rows
    prefilled without a head (left-padded together). Returns None when the model's cache is not a plain
    dynamic cache (the caller then takes the plain path).
    """
    import torch

    from seed_train.scoring import cache_argument, cache_layers, make_cache, prefill_head

    units = [(h, list(rows)) for h, rows in groups] + ([(0, list(alone))] if alone else [])
    built = []  # (rows, ids [b, n], mask [b, n], per-layer (k, v) [b, kvh, n, d] or None when n == 0)
    positions, cache_kwarg = 0, None
    for head_len, rows in units:
        b = len(rows)
        head_kv = None
        if head_len:
            head_kv, cache_kwarg = prefill_head(model, prompts[rows[0]][:head_len], device)
            if head_kv is None:
                return None
            positions += head_len
        tails = [list(prompts[i][head_len:-1]) for i in rows]
        width = max(len(t) for t in tails)
        ids = torch.full((b, head_len + width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((b, head_len + width), dtype=torch.long)
        ids[:, :head_len] = torch.as_tensor(list(prompts[rows[0]][:head_len]), dtype=torch.long)
        mask[:, :head_len] = 1
        for r, tail in enumerate(tails):
            if tail:
                ids[r, head_len + width - len(tail):] = torch.as_tensor(tail, dtype=torch.long)
                mask[r, head_len + width - len(tail):] = 1
        layers = None if head_kv is None else [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in head_kv]
        if width:
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0)[:, head_len:]
            cache = {cache_kwarg: make_cache(layers)} if layers is not None else {}
            out = model(input_ids=ids[:, head_len:].to(device), attention_mask=mask.to(device),
                        position_ids=position_ids.to(device), use_cache=True, logits_to_keep=1, **cache)
            cache_kwarg = cache_argument(out)
            layers = cache_layers(getattr(out, cache_kwarg))
            if layers is None:
                return None
            positions += b * width
        built.append((rows, ids, mask, layers))

    n_rows = len(prompts)
    length = max(ids.shape[1] for _, ids, _, _ in built)
    ref = next(layers for *_, layers in built if layers is not None)
    merged = []
    for layer, (k_ref, v_ref) in enumerate(ref):
        # Zero keys/values at padding: masked out, and finite (no NaN can leak through a 0 attention weight).
        keys = k_ref.new_zeros((n_rows, k_ref.shape[1], length, k_ref.shape[3]))
        values = v_ref.new_zeros((n_rows, v_ref.shape[1], length, v_ref.shape[3]))
        for rows, ids, _, layers in built:
            if layers is not None:
                index = torch.as_tensor(rows, device=keys.device)
                keys[index, :, length - ids.shape[1]:] = layers[layer][0]
                values[index, :, length - ids.shape[1]:] = layers[layer][1]
        merged.append((keys, values))
    input_ids = torch.full((n_rows, length + 1), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((n_rows, length + 1), dtype=torch.long)
    for rows, ids, mask, _ in built:
        index = torch.as_tensor(rows)
        input_ids[index, length - ids.shape[1]:length] = ids
        attention_mask[index, length - ids.shape[1]:length] = mask
    input_ids[:, length] = torch.as_tensor([p[-1] for p in prompts], dtype=torch.long)
    attention_mask[:, length] = 1
    # generate runs the last tokens: one position per row.
    return _Prefilled(input_ids, attention_mask, cache_kwarg, make_cache(merged), positions + n_rows)


class HFGenerateBackend:
    """Batched sampling with ``model.generate`` (one call for all prompts).

    Prompts are left-padded with an attention mask (generate derives position ids from it) and the
    KV cache is on. Sampling applies ``temperature`` and ``top_p`` (``top_k`` off, no repetition
    penalty, whatever the model's generation_config says).

    Recorded log-probs: with ``logprob_temperature=True`` (default) the log-prob of each sampled token
    is ``log_softmax(raw logits / temperature)[token]``, the convention of verl (on which the paper's
    code is built) for ``old_log_prob``; with False it is ``log_softmax(raw logits)[token]``, the
    unmodified policy at temperature 1. Never with top-p. Greedy decoding records temperature 1. The
    trainer re-scores with :func:`seed_train.scoring.response_logprobs` at the same temperature, so
    PPO's ratio starts at exactly 1.

    ``prefix_sharing=True`` (default): prompts that share a head of at least
    :data:`seed_train.scoring.MIN_SHARED_PREFIX` tokens compute its KV once (see the module docstring);
    batches with nothing to share, models whose cache is not a plain dynamic cache, and vision-language
    models take the plain path.

    ``prefill_tokens`` counts the prompt positions run through the model, padding included (that is
    what costs compute): the plain path runs the left-padded ``[B, longest prompt]`` block; prefix
    sharing runs each head once, each group's left-padded tails and one last token per row.
    ``prompt_tokens`` counts the prompts' own tokens; their ratio is the prefill work per prompt token.

    ``stop_token_ids`` defaults to the tokenizer's eos plus the model generation_config's eos ids.

    Vision-language models: prompts that are :class:`seed_train.vision.ImagePrompt` feed their pixel
    inputs to ``generate``, and the image/video pad and frame tokens are never sampled (they belong to
    prompts; a response holding one could not be scored or shown in a later prompt).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: "PreTrainedTokenizerBase",
        *,
        stop_token_ids: Sequence[int] | None = None,
        prefix_sharing: bool = True,
        logprob_temperature: bool = True,
    ) -> None:
        from seed_train.vision import text_tokenizer

        self.model = model
        self.prefix_sharing = bool(prefix_sharing)
        self.logprob_temperature = bool(logprob_temperature)
        self.prefill_tokens = 0
        self.prompt_tokens = 0
        self._cache_shareable = True  # False once the model's cache proved not shareable (cache_layers)
        tokenizer = text_tokenizer(tokenizer)  # a vision-language model's processor: its tokenizer
        self.tokenizer = tokenizer
        if stop_token_ids is None:
            stops: set[int] = set()
            if tokenizer.eos_token_id is not None:
                stops.add(int(tokenizer.eos_token_id))
            gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
            if gen_eos is not None:
                stops.update([gen_eos] if isinstance(gen_eos, int) else gen_eos)
            stop_token_ids = sorted(stops)
        if not stop_token_ids:
            raise ValueError("stop_token_ids: the tokenizer has no eos token; pass stop_token_ids explicitly")
        self.stop_token_ids = [int(t) for t in stop_token_ids]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("tokenizer has neither a pad nor an eos token to pad prompts with")
        self.pad_token_id = int(pad)
        self._special_ids = frozenset(int(t) for t in tokenizer.all_special_ids)

    def sync_weights(self, model: Any) -> None:
        """Use ``model`` from now on (the HF backend samples from the live module, so this is cheap)."""
        self.model = model
        self._cache_shareable = True

    def _device(self) -> "torch.device":
        return next(self.model.parameters()).device

    def _shared_prefill(self, prompts: Sequence[Sequence[int]], device: "torch.device") -> _Prefilled | None:
        """The prefix-shared prefill of ``prompts``, or None where the plain path applies."""
        from seed_train.scoring import auto_prefix_groups, shared_head_groups
        from seed_train.vision import is_vision_model, vision_of

        if (not self.prefix_sharing or not self._cache_shareable or is_vision_model(self.model)
                or any(vision_of(p) is not None for p in prompts)):
            return None
        groups, alone = shared_head_groups(prompts, auto_prefix_groups(prompts))
        if not groups:
            return None
        prefilled = _prefill_shared(self.model, prompts, groups, alone, self.pad_token_id, device)
        self._cache_shareable = prefilled is not None  # do not retry a head pass that cannot be used
        return prefilled

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        greedy: bool = False,
        seed: int | None = None,
        row_seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Generate one response per prompt; see :class:`Generation` for what is recorded.

        With ``row_seeds`` (and not greedy) each row samples with its own generator
        (:class:`RowSeededSampler`) and ``seed`` is not used.
        """
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        from seed_train.vision import model_vision_kwargs, vision_special_ids

        _validate(prompts, max_new_tokens, temperature, top_p)
        if row_seeds is not None and len(row_seeds) != len(prompts):
            raise ValueError(f"row_seeds: {len(row_seeds)} seeds for {len(prompts)} prompts")
        if not prompts:
            return []
        device = self._device()

        # top_k=0 explicitly: otherwise a model's generation_config (or transformers' default of 50)
        # would silently truncate the sampling distribution.
        processors = LogitsProcessorList()
        if greedy:
            sampling: dict[str, Any] = {"do_sample": False}
        elif row_seeds is not None:
            # Greedy decoding over Gumbel-perturbed log-probs: sampling with one generator per row.
            sampling = {"do_sample": False}
            processors.append(RowSeededSampler(row_seeds, temperature, top_p, device))
        else:
            sampling = {"do_sample": True, "temperature": float(temperature), "top_p": float(top_p), "top_k": 0}
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            # Explicit values, so a model's generation_config.json (e.g. repetition_penalty=1.05)
            # cannot silently change how we sample.
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            num_beams=1,
            eos_token_id=self.stop_token_ids,
            pad_token_id=self.pad_token_id,
            use_cache=True,
            return_dict_in_generate=True,
            output_logits=True,
            **sampling,
        )
        extra: dict[str, Any] = {}
        suppress = vision_special_ids(self.model)
        if suppress:
            config.suppress_tokens = suppress
        with _eval_mode(self.model), _seeded(None if greedy else seed, device), torch.no_grad():
            prefilled = self._shared_prefill(prompts, device)
            if prefilled is not None:
                input_ids, attention_mask = prefilled.input_ids, prefilled.attention_mask
                extra[prefilled.cache_kwarg] = prefilled.cache
                self.prefill_tokens += prefilled.positions
            else:
                width = max(len(p) for p in prompts)
                input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
                attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
                for i, prompt in enumerate(prompts):
                    input_ids[i, width - len(prompt):] = torch.as_tensor(list(prompt), dtype=torch.long)
                    attention_mask[i, width - len(prompt):] = 1
                self.prefill_tokens += input_ids.numel()
                if suppress:
                    extra = model_vision_kwargs(self.model, prompts, input_ids, device)
            self.prompt_tokens += sum(len(p) for p in prompts)
            out = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
                logits_processor=processors,
                **extra,
            )
        width = input_ids.shape[1]
        new_tokens = out.sequences[:, width:].cpu()
        # Raw logits (before temperature/top-p), one [B, V] tensor per step.
        logits = torch.stack(out.logits, dim=1).float()
        if self.logprob_temperature and not greedy:
            logits = logits / float(temperature)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens[..., None].to(logits.device))
        logprobs = logprobs.squeeze(-1).cpu()

        stop_set = frozenset(self.stop_token_ids)
        results = []
        for i, prompt in enumerate(prompts):
            ids = new_tokens[i].tolist()
            stop = _first_stop(ids, stop_set)
            finished = stop is not None
            # Everything after the first stop token is padding that generate appended.
            end = stop + 1 if finished else len(ids)
            response = ids[:end]
            text_ids = response[:-1] if finished and response[-1] in self._special_ids else response
            results.append(
                Generation(
                    prompt_token_ids=list(prompt),
                    response_token_ids=response,
                    response_logprobs=logprobs[i, :end].tolist(),
                    text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
                    finished=finished,
                )
            )
        return results
