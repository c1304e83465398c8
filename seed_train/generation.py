"""Token-exact batched generation that records what was sampled and its log-probability.

Prompts come in as token ids (from :func:`seed_train.codec.encode_prompt`) and responses go out as
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

**Previous-turn reuse.** Across the turns of an episode the prompt of turn t+1 often starts with a
long piece of turn t's sequence (the system prompt, the task, history entries still in the window;
in a chat that appends turns, all of prompt t and its completion). With ``row_keys`` (one stable
key per episode, e.g. the rollout's job index) the backend keeps, per key, the token ids and KV of
the row's last sequence (prompt + the generated tokens fed back, left padding removed: positions
0..n-1 as in a fresh prefill) until the next call. A row whose prompt shares with its stored
sequence a prefix at least as long as its group's head (and >= ``MIN_SHARED_PREFIX``) starts from
that KV cropped to the prefix and runs only its tail; the prefix stops before the prompt's last
token, which ``generate`` runs. A group's head that is longer still (the G rollouts of a GRPO group
share the task and more, and each turn's history header differs from the last) starts from the
longest kept prefix among its rows and runs only the rest. Entries whose keys are not in the
current call are dropped; all are dropped by :meth:`HFGenerateBackend.forget`, by ``sync_weights``
and when a parameter changes (so KV computed under other weights is never reused).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Hashable, Iterator, Mapping, Protocol, Sequence,
                    runtime_checkable)

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
        row_keys: Sequence[Hashable] | None = None,
    ) -> list[Generation]:
        """Generate one response per prompt (token ids in, :class:`Generation` out, same order).

        ``row_seeds`` (one per prompt) make each row's sampling depend on its own seed only, not on
        which other prompts share the batch or their order; ``seed`` seeds the batch as a whole.
        ``row_keys`` (one distinct key per prompt, stable across calls, e.g. an episode) let a backend
        reuse work from the same key's previous call; a hint that changes no token. The rollout passes
        it only to backends whose ``generate`` takes it.
        """
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the backend sample from ``model``'s current weights (after an update)."""
        ...


def takes_row_keys(backend: Any) -> bool:
    """Whether ``backend.generate`` accepts ``row_keys`` (named, or through ``**kwargs`` of a wrapper)."""
    import inspect

    try:
        params = inspect.signature(backend.generate).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "row_keys" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def forget_turns(backend: Any) -> None:
    """Drop the KV a backend kept by row key (HFGenerateBackend): the next call's rows under the same keys
    are other sequences (another rollout's episodes, the analyzer's), possibly under other weights."""
    forget = getattr(backend, "forget", None)
    if callable(forget):
        forget()


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


def _check_rows(prompts: Sequence[Sequence[int]], row_seeds: Sequence[int] | None,
                row_keys: Sequence[Hashable] | None) -> None:
    """One seed and one distinct key per prompt, when given."""
    if row_seeds is not None and len(row_seeds) != len(prompts):
        raise ValueError(f"row_seeds: {len(row_seeds)} seeds for {len(prompts)} prompts")
    if row_keys is not None:
        if len(row_keys) != len(prompts):
            raise ValueError(f"row_keys: {len(row_keys)} keys for {len(prompts)} prompts")
        if len(set(row_keys)) != len(row_keys):
            raise ValueError("row_keys: every prompt needs a key of its own (found a key twice)")


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


KVLayers = list  # per layer (keys, values), each [rows, kv_heads, length, head_dim]


def _right_aligned(heads: Sequence[tuple[int, KVLayers]]) -> KVLayers:
    """Stack one-row KV heads of different lengths into ``[rows, kv_heads, longest, head_dim]``, each
    cropped to its length and right-aligned (zeros on the left: masked padding, and finite)."""
    width = max(n for n, _ in heads)
    stacked = []
    for layer, (k_ref, v_ref) in enumerate(heads[0][1]):
        keys = k_ref.new_zeros((len(heads), k_ref.shape[1], width, k_ref.shape[3]))
        values = v_ref.new_zeros((len(heads), v_ref.shape[1], width, v_ref.shape[3]))
        for r, (n, layers) in enumerate(heads):
            keys[r, :, width - n:] = layers[layer][0][0, :, :n]
            values[r, :, width - n:] = layers[layer][1][0, :, :n]
        stacked.append((keys, values))
    return stacked


def _head_from(model: Any, head: Sequence[int], start: tuple[int, KVLayers], device: "torch.device",
               cache_kwarg: str) -> tuple[KVLayers | None, str]:
    """The KV of ``head`` (one row) when ``start = (n, KV)`` already holds its first ``n`` positions: runs
    only ``head[n:]`` on top (positions n..); the same KV as :func:`seed_train.scoring.prefill_head`."""
    import torch

    from seed_train.scoring import cache_argument, cache_layers, make_cache

    n, kept = start
    cropped = [(k[:, :, :n], v[:, :, :n]) for k, v in kept]
    if n == len(head):
        return cropped, cache_kwarg
    out = model(input_ids=torch.as_tensor([list(head[n:])], dtype=torch.long, device=device),
                attention_mask=torch.ones((1, len(head)), dtype=torch.long, device=device),
                position_ids=torch.arange(n, len(head), device=device)[None], use_cache=True, logits_to_keep=1,
                **{cache_kwarg: make_cache(cropped)})
    name = cache_argument(out)
    return cache_layers(getattr(out, name)), name


def _prefill_shared(model: Any, prompts: Sequence[Sequence[int]], groups: Sequence[tuple[int, list[int]]],
                    alone: Sequence[int], pad_token_id: int, device: "torch.device", *,
                    reused: Mapping[int, tuple[int, KVLayers]] | None = None,
                    head_starts: Sequence[tuple[int, KVLayers] | None] | None = None,
                    cache_kwarg: str | None = None) -> _Prefilled | None:
    """Run each group's head once and every row's tail (all but the last token) on top of it.

    ``groups``: ``(head length, rows)`` from :func:`seed_train.scoring.shared_head_groups`; ``alone``: rows
    prefilled without a head (left-padded together); ``reused``: row -> ``(n, one-row KV)`` whose first
    ``n`` positions are the KV of ``prompts[row][:n]`` computed earlier (previous-turn reuse): those rows
    form one unit whose heads (of different lengths, right-aligned) are not run again; ``head_starts``:
    per group, None or ``(n, one-row KV)`` holding the first ``n`` positions of its head (a member's
    previous turn), so only the rest of the head runs. ``cache_kwarg``: the cache keyword when no forward
    pass here would tell it. Returns None when the model's cache is not a plain dynamic cache (the caller
    then takes the plain path).
    """
    import torch

    from seed_train.scoring import cache_argument, cache_layers, make_cache, prefill_head

    # Units: (rows, each row's head length, the heads' KV when already computed, else None, a head's start).
    starts = list(head_starts) if head_starts is not None else [None] * len(groups)
    units: list[tuple[list[int], list[int], KVLayers | None, Any]] = [
        (list(rows), [h] * len(rows), None, start) for (h, rows), start in zip(groups, starts)]
    if reused:
        rows = sorted(reused)
        units.append((rows, [reused[i][0] for i in rows], _right_aligned([reused[i] for i in rows]), None))
    if alone:
        units.append((list(alone), [0] * len(alone), None, None))
    built = []  # (rows, ids [b, n], mask [b, n], per-layer (k, v) [b, kvh, n, d] or None when n == 0)
    positions = 0
    for rows, head_lens, head_kv, start in units:
        b, head_width = len(rows), max(head_lens)
        if head_kv is None and head_width:  # a group: its one head, run once and broadcast
            head = prompts[rows[0]][:head_width]
            if start is not None:
                head_kv, cache_kwarg = _head_from(model, head, start, device, cache_kwarg)
                positions += head_width - start[0]
            else:
                head_kv, cache_kwarg = prefill_head(model, head, device)
                positions += head_width
            if head_kv is None:
                return None
            head_kv = [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in head_kv]
        tails = [list(prompts[i][h:-1]) for i, h in zip(rows, head_lens)]
        width = max(len(t) for t in tails)
        ids = torch.full((b, head_width + width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((b, head_width + width), dtype=torch.long)
        for r, (i, h, tail) in enumerate(zip(rows, head_lens, tails)):
            if h:
                ids[r, head_width - h:head_width] = torch.as_tensor(list(prompts[i][:h]), dtype=torch.long)
                mask[r, head_width - h:head_width] = 1
            if tail:
                ids[r, head_width + width - len(tail):] = torch.as_tensor(tail, dtype=torch.long)
                mask[r, head_width + width - len(tail):] = 1
        layers = head_kv
        if width:
            # Positions count real tokens only: a tail continues at its own head's length.
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0)[:, head_width:]
            cache = {cache_kwarg: make_cache(layers)} if layers is not None else {}
            out = model(input_ids=ids[:, head_width:].to(device), attention_mask=mask.to(device),
                        position_ids=position_ids.to(device), use_cache=True, logits_to_keep=1, **cache)
            cache_kwarg = cache_argument(out)
            layers = cache_layers(getattr(out, cache_kwarg))
            if layers is None:
                return None
            positions += b * width
        built.append((rows, ids, mask, layers))
    if cache_kwarg is None:  # only reused heads and no tails: nothing ran here to name the keyword
        return None

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


@dataclass
class _StoredTurn:
    """A row's last sequence and its KV, kept for the same key's next call (previous-turn reuse)."""

    token_ids: list[int]  # prompt + the generated tokens that were fed back (not the last one sampled)
    layers: KVLayers  # [1, kv_heads, len(token_ids), head_dim] per layer; positions 0..n-1


def _weights_version(model: Any) -> tuple:
    """Changes when a parameter is written in place (optimizer steps, ``copy_`` loads: torch's version
    counter), replaced, moved or cast: stored KV is only valid for the weights that computed it."""
    return tuple((id(p), p._version, p.device, p.dtype) for p in model.parameters())


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
    models take the plain path. With it, ``turn_reuse=True`` (default) and ``row_keys`` passed to
    :meth:`generate`, a row also starts from the KV of its key's previous sequence where its prompt
    extends it, and a group's head from the longest such prefix among its rows (see the module
    docstring); ``reused_tokens`` counts the prompt positions taken from there instead of computed.
    The rollout loop calls :meth:`forget` before and after each rollout, ``sync_weights`` forgets too,
    and any write to a parameter drops what was kept.

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
        turn_reuse: bool = True,
    ) -> None:
        from seed_train.codec import prompt_codec

        self.model = model
        self.prefix_sharing = bool(prefix_sharing)
        self.turn_reuse = bool(turn_reuse)
        self.reused_tokens = 0
        self._turns: dict[Hashable, _StoredTurn] = {}  # previous call's sequences by row key
        self._turns_version: tuple = ()  # _weights_version of the model that computed them
        self._cache_kwarg: str | None = None  # the cache keyword generate returned them under
        self.logprob_temperature = bool(logprob_temperature)
        self.prefill_tokens = 0
        self.prompt_tokens = 0
        self._cache_shareable = True  # False once the model's cache proved not shareable (cache_layers)
        tokenizer = prompt_codec(tokenizer).tokenizer  # a processor or a codec: its text tokenizer
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
        self.forget()  # new weights: no KV computed under the old ones may be reused

    def forget(self) -> None:
        """Drop every kept sequence and its KV (previous-turn reuse); the next call starts afresh."""
        self._turns = {}
        self._turns_version = ()

    def _device(self) -> "torch.device":
        return next(self.model.parameters()).device

    def _shares_prefixes(self, prompts: Sequence[Sequence[int]]) -> bool:
        from seed_train.vision import is_vision_model, vision_of

        return (self.prefix_sharing and self._cache_shareable and not is_vision_model(self.model)
                and not any(vision_of(p) is not None for p in prompts))

    def _reusable_turns(self, prompts: Sequence[Sequence[int]], row_keys: Sequence[Hashable],
                        group_heads: Sequence[int]) -> dict[int, tuple[int, KVLayers]]:
        """Rows whose prompt shares with their key's kept sequence a prefix at least as long as the head
        grouping gives them (and >= MIN_SHARED_PREFIX): row -> (prefix length, kept KV)."""
        from seed_train.scoring import MIN_SHARED_PREFIX, common_prefix_length

        reused = {}
        for i, key in enumerate(row_keys):
            kept = self._turns.get(key)
            if kept is None:
                continue
            # Stop before the prompt's last token: generate runs it (it predicts the first response token).
            n = min(common_prefix_length([prompts[i], kept.token_ids]), len(prompts[i]) - 1)
            # At equal length reuse still wins: the group's head need not run for this row at all.
            if n >= MIN_SHARED_PREFIX and n >= group_heads[i]:
                reused[i] = (n, kept.layers)
        return reused

    def _shared_prefill(self, prompts: Sequence[Sequence[int]], device: "torch.device",
                        row_keys: Sequence[Hashable] | None = None) -> _Prefilled | None:
        """The prefix-shared prefill of ``prompts``, or None where the plain path applies."""
        from seed_train.scoring import auto_prefix_groups, shared_head_groups

        if not self._shares_prefixes(prompts):
            return None
        groups, alone = shared_head_groups(prompts, auto_prefix_groups(prompts))
        reused: dict[int, tuple[int, KVLayers]] = {}
        if row_keys is not None and self._turns:
            group_heads = [0] * len(prompts)
            for head, rows in groups:
                for i in rows:
                    group_heads[i] = head
            reused = self._reusable_turns(prompts, row_keys, group_heads)
        if reused:  # group the other rows again, without the ones that start from their own KV
            rest = [i for i in range(len(prompts)) if i not in reused]
            rest_prompts = [prompts[i] for i in rest]
            rest_groups, rest_alone = shared_head_groups(rest_prompts, auto_prefix_groups(rest_prompts))
            groups = [(head, [rest[r] for r in rows]) for head, rows in rest_groups]
            alone = [rest[r] for r in rest_alone]
        if not groups and not reused:
            return None
        # A head longer than its rows' own kept prefixes still starts with them (system prompt, task): the
        # longest one among its rows gives the head's first positions.
        head_starts = [self._head_start(prompts, rows, head, row_keys) if row_keys is not None else None
                       for head, rows in groups]
        prefilled = _prefill_shared(self.model, prompts, groups, alone, self.pad_token_id, device,
                                    reused=reused, head_starts=head_starts, cache_kwarg=self._cache_kwarg)
        self._cache_shareable = prefilled is not None  # do not retry a head pass that cannot be used
        if prefilled is not None:
            self.reused_tokens += (sum(n for n, _ in reused.values())
                                   + sum(start[0] for start in head_starts if start is not None))
        return prefilled

    def _head_start(self, prompts: Sequence[Sequence[int]], rows: Sequence[int], head: int,
                    row_keys: Sequence[Hashable]) -> tuple[int, KVLayers] | None:
        """The longest kept prefix of a group's head among its rows' keys (>= MIN_SHARED_PREFIX), or None."""
        from seed_train.scoring import MIN_SHARED_PREFIX, common_prefix_length

        best = None
        for i in rows:
            kept = self._turns.get(row_keys[i])
            if kept is not None:
                n = min(common_prefix_length([prompts[i][:head], kept.token_ids]), head)
                if n >= MIN_SHARED_PREFIX and (best is None or n > best[0]):
                    best = (n, kept.layers)
        return best

    def _keep_turns(self, row_keys: Sequence[Hashable], generations: Sequence[Generation], cache: Any,
                    cache_kwarg: str, attention_mask: "torch.Tensor", steps: int) -> None:
        """Keep each row's sequence (prompt + the generated tokens fed back) and its KV, by row key.

        ``cache`` is generate's cache for the batch: ``attention_mask``'s width of prompt positions (left
        padding, and padding between head and tail under prefix sharing), then ``steps - 1`` generated
        positions (the last sampled token is never fed back). A row's real positions are gathered in
        order, so the kept KV has positions 0..n-1 like a fresh prefill of its tokens.
        """
        import torch

        from seed_train.scoring import cache_layers

        self.forget()
        layers = cache_layers(cache)
        width = attention_mask.shape[1]
        if layers is None or layers[0][0].shape[2] != width + steps - 1:
            return  # not a cache laid out as above (another cache type): keep nothing
        device = layers[0][0].device
        turns = {}
        for i, (key, gen) in enumerate(zip(row_keys, generations)):
            prompt_positions = attention_mask[i].nonzero().squeeze(-1)
            if len(prompt_positions) != len(gen.prompt_token_ids):
                continue
            fed = gen.response_token_ids[: steps - 1]  # after a stop token, generate feeds padding
            index = torch.cat([prompt_positions, torch.arange(width, width + len(fed))]).to(device)
            turns[key] = _StoredTurn(list(gen.prompt_token_ids) + list(fed),
                                     [(k[i:i + 1].index_select(2, index), v[i:i + 1].index_select(2, index))
                                      for k, v in layers])
        self._turns, self._turns_version, self._cache_kwarg = turns, _weights_version(self.model), cache_kwarg

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
        row_keys: Sequence[Hashable] | None = None,
    ) -> list[Generation]:
        """Generate one response per prompt; see :class:`Generation` for what is recorded.

        With ``row_seeds`` (and not greedy) each row samples with its own generator
        (:class:`RowSeededSampler`) and ``seed`` is not used. ``row_keys``: one distinct hashable per
        prompt, stable across calls (an episode); with prefix sharing and ``turn_reuse`` on, each row's
        sequence is kept for its key's next call (previous-turn reuse; entries of keys absent from this
        call are dropped). Without ``row_keys`` nothing is kept.
        """
        import torch

        from seed_train.scoring import cache_argument
        from seed_train.vision import check_image_prompts, vision_special_ids

        _validate(prompts, max_new_tokens, temperature, top_p)
        _check_rows(prompts, row_seeds, row_keys)
        if not prompts:
            return []
        device = self._device()
        keep_turns = row_keys is not None and self.turn_reuse and self._shares_prefixes(prompts)
        if not keep_turns or (self._turns and self._turns_version != _weights_version(self.model)):
            self.forget()  # no keys (nothing to match), reuse off, or the weights changed since
        config, processors = self._decoding(max_new_tokens, temperature, top_p, greedy, row_seeds, device)
        suppress = vision_special_ids(self.model)
        if suppress:
            config.suppress_tokens = suppress
            check_image_prompts(self.model, prompts)  # image tokens without pixels (a list() copy): refused
        with _eval_mode(self.model), _seeded(None if greedy else seed, device), torch.no_grad():
            input_ids, attention_mask, extra = self._model_inputs(prompts, device, row_keys if keep_turns else None,
                                                                  vision=bool(suppress))
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
        results = self._generations(prompts, out, new_tokens, temperature, greedy)
        if keep_turns:
            cache_kwarg = cache_argument(out)
            self._keep_turns(row_keys, results, getattr(out, cache_kwarg, None), cache_kwarg, attention_mask,
                             new_tokens.shape[1])
        return results

    def _decoding(self, max_new_tokens: int, temperature: float, top_p: float, greedy: bool,
                  row_seeds: Sequence[int] | None, device: "torch.device") -> tuple[Any, Any]:
        """transformers' ``GenerationConfig`` and logits processors for one call: greedy, one generator per
        row (``row_seeds``), or plain sampling; every setting a model's generation_config.json could change
        given explicitly."""
        from transformers import GenerationConfig, LogitsProcessorList

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
        return config, processors

    def _model_inputs(self, prompts: Sequence[Sequence[int]], device: "torch.device",
                      row_keys: Sequence[Hashable] | None, *, vision: bool) -> tuple[Any, Any, dict[str, Any]]:
        """``input_ids``, ``attention_mask`` and further ``generate`` arguments: the shared prompt heads'
        prefilled KV cache (with earlier turns' where ``row_keys`` find them), else the prompts left-padded."""
        import torch

        from seed_train.vision import model_vision_kwargs

        prefilled = self._shared_prefill(prompts, device, row_keys)
        self.forget()  # what was reused is copied into this batch's cache: free the rest now
        if prefilled is not None:
            self.prefill_tokens += prefilled.positions
            return prefilled.input_ids, prefilled.attention_mask, {prefilled.cache_kwarg: prefilled.cache}
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - len(prompt):] = torch.as_tensor(list(prompt), dtype=torch.long)
            attention_mask[i, width - len(prompt):] = 1
        self.prefill_tokens += input_ids.numel()
        extra = model_vision_kwargs(self.model, prompts, input_ids, device) if vision else {}
        return input_ids, attention_mask, extra

    def _generations(self, prompts: Sequence[Sequence[int]], out: Any, new_tokens: Any, temperature: float,
                     greedy: bool) -> list[Generation]:
        """One :class:`Generation` per prompt: the response up to its first stop token, its log-probs (at
        the sampling temperature with ``logprob_temperature``) and its text."""
        import torch

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
