"""Log-probs of given response tokens under a model, computed only where they are needed.

On CPU the cost of a scoring pass is dominated by projecting hidden states through the vocabulary
head (49k x 576 for SmolLM2). Every prompt position would go through it if we asked the model for
all logits, so the batch is laid out to make the response positions one aligned block and the model
is asked for just those logits (``logits_to_keep``): prompt positions never touch the head.

Layout of one micro-batch (P = longest prompt, T = longest response)::

    [pad pad p0 p1 p2 | r0 r1 pad]     prompts left-padded, responses right-padded
    [ 0   0  1  1  1  |  1  1  0 ]     attention mask
    position ids = cumsum(mask) - 1    (as generate computes them for left padding)

The logits at columns P-1 .. P+T-2 predict the response tokens at columns P .. P+T-1.

**Shared prefixes.** The steps of one episode repeat a long prompt head (system prompt, task line and,
for the teacher pass, the episode's skill block) and differ only in the current observation. With
``prefix_groups`` the head shared by a group (longest common token prefix) is run once, its KV cache
is broadcast to the group's rows, and only each step's tail and response are computed::

    [h0 h1 h2 h3 | pad t0 t1 | r0 r1 pad]   one head (no padding), tails left-padded, responses right-padded

Mathematically the same log-probs (causal attention never lets the head see the tail); on SmolLM2 with
EZPoints prompts it removes most of a scoring pass (``benchmarks/bench_train_step.py``).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch


def _micro_batch_logprobs(
    model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], device: "torch.device",
    temperature: float = 1.0,
) -> "torch.Tensor":
    """[b, T] log-probs (T = longest response here), zeros at padding."""
    import torch

    from seed_train.vision import model_vision_kwargs

    b = len(prompts)
    p_len = max(len(p) for p in prompts)
    t_len = max(len(r) for r in responses)
    if t_len == 0:
        return torch.zeros((b, 0), dtype=torch.float32, device=device)
    # Any valid id works for padding: padded positions are masked out and never read.
    input_ids = torch.zeros((b, p_len + t_len), dtype=torch.long)
    attention_mask = torch.zeros((b, p_len + t_len), dtype=torch.long)
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        start = p_len - len(prompt)
        input_ids[i, start:p_len] = torch.as_tensor(list(prompt), dtype=torch.long)
        input_ids[i, p_len:p_len + len(response)] = torch.as_tensor(list(response), dtype=torch.long)
        attention_mask[i, start:p_len + len(response)] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    # Prompts with images: their pixels, and the model derives its (multimodal) positions from the mask.
    pixels = model_vision_kwargs(model, prompts, input_ids, device)
    positions = {} if pixels else {"position_ids": position_ids.to(device)}
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)

    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        **positions,
        **pixels,
        use_cache=False,
        # The last t_len + 1 positions are P-1 .. P+T-1; the very last predicts past the sequence.
        logits_to_keep=t_len + 1,
    )
    logits = out.logits[:, :-1, :].float() / temperature
    targets = input_ids[:, p_len:]
    # log_softmax(x)[y] = x[y] - logsumexp(x): avoids materialising a second [b, T, V] tensor.
    logprobs = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return logprobs * attention_mask[:, p_len:].to(logprobs.dtype)


# A shared head shorter than this is not worth a separate forward pass.
MIN_SHARED_PREFIX = 16


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix that every sequence starts with."""
    first = sequences[0]
    n = min(len(s) for s in sequences)
    for seq in sequences[1:]:
        k = 0
        while k < n and seq[k] == first[k]:
            k += 1
        n = k
    return n


def auto_prefix_groups(prompts: Sequence[Sequence[int]], min_shared: int = MIN_SHARED_PREFIX) -> list[int]:
    """One group key per row, grouping rows whose prompts share a head worth computing once.

    Without a caller's grouping (e.g. a batch of rollout prompts: a GRPO group's prompts are identical
    at the first turn and share the system prompt and task line later; other groups share less), rows
    are sorted by their token ids, so the longest common prefix of any run of neighbours is the
    minimum of the neighbours' pairwise ones, and the runs are cut to maximise the prompt tokens not
    recomputed, ``(rows - 1) * head`` summed over groups (one level: a row belongs to one group).
    A head leaves every row at least one token of its own (see :func:`shared_head_groups`) and is at
    least ``min_shared`` tokens; rows that share less get a key of their own.
    """
    n = len(prompts)
    order = sorted(range(n), key=lambda i: tuple(prompts[i]))
    # Shareable prefix of neighbours j, j+1 in sorted order (each keeps one token of its own).
    links = [min(common_prefix_length([prompts[a], prompts[b]]), len(prompts[a]) - 1, len(prompts[b]) - 1)
             for a, b in zip(order, order[1:])]
    keys = list(range(n))  # singletons by default

    def best(lo: int, hi: int, depth: int = 0) -> tuple[int, list[tuple[int, int]]]:
        """(saved tokens, runs [lo, hi] of sorted positions to group) for sorted positions lo..hi."""
        if lo == hi:
            return 0, []
        m = min(links[lo:hi])
        whole = (hi - lo) * m if m >= min_shared else 0
        if depth >= 32 and whole > 0:  # deeply nested prefixes: stop refining (bounded recursion)
            return whole, [(lo, hi)]
        # The alternative: cut at the weakest links and group each side on its own (longer heads).
        saved, runs, start = 0, [], lo
        for j in range(lo, hi + 1):
            if j == hi or links[j] == m:
                sub_saved, sub_runs = best(start, j, depth + 1)
                saved, runs = saved + sub_saved, runs + sub_runs
                start = j + 1
        if whole >= saved and whole > 0:
            return whole, [(lo, hi)]
        return saved, runs

    # Iterative over the top-level cuts (links below min_shared never join a group): keeps recursion shallow.
    start = 0
    for j in range(n):
        if j == n - 1 or links[j] < min_shared:
            if j > start:
                for lo, hi in best(start, j)[1]:
                    for pos in range(lo, hi + 1):
                        keys[order[pos]] = order[lo]
            start = j + 1
    return keys


def shared_head_groups(prompts: Sequence[Sequence[int]], keys: Sequence[Any],
                       min_shared: int = MIN_SHARED_PREFIX) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """Split rows by group key into ``(head length, rows)`` groups that share a head, and the other rows.

    A group's head is its rows' longest common prefix, cut so that every row keeps at least one
    token of its own (the position that predicts the first response token is computed per row); a
    group of one row, or one whose head is shorter than ``min_shared``, goes to the other rows.
    """
    members: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    shared, alone = [], []
    for rows in members.values():
        head = min(common_prefix_length([prompts[i] for i in rows]), min(len(prompts[i]) for i in rows) - 1)
        if len(rows) > 1 and head >= min_shared:
            shared.append((head, rows))
        else:
            alone.extend(rows)
    return shared, alone


def cache_argument(model_output: Any) -> str:
    """The keyword the model takes its KV cache under: transformers 5.2x renamed ``past_key_values`` to
    ``cache``, and the output class tells which one this version uses."""
    return "cache" if hasattr(model_output, "cache") else "past_key_values"


def cache_layers(cache: Any) -> list[tuple["torch.Tensor", "torch.Tensor"]] | None:
    """Per-layer ``(keys, values)`` ``[batch, kv_heads, length, head_dim]`` of a plain dynamic cache, or
    None for any other kind (sliding-window, linear-attention or quantized layers): those cannot be
    sliced and rebuilt as plain tensors, so callers fall back to running the whole prompt."""
    from transformers import DynamicCache

    if type(cache) is not DynamicCache:
        return None
    if hasattr(cache, "layers"):
        from transformers.cache_utils import DynamicLayer

        if not all(type(layer) is DynamicLayer for layer in cache.layers):
            return None
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))  # older DynamicCache


def make_cache(layers: Sequence[tuple["torch.Tensor", "torch.Tensor"]]) -> Any:
    """A DynamicCache holding ``layers`` (per-layer keys and values); new tokens are concatenated onto
    them, so a broadcast view (``expand``) is never written to."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=[(k, v) for k, v in layers])


def prefill_head(model: Any, head: Sequence[int], device: "torch.device") -> tuple[list[tuple["torch.Tensor", "torch.Tensor"]] | None, str]:
    """Run ``head`` (one row, no padding) through ``model`` once; returns its per-layer KV (None when the
    model's cache is not a plain dynamic one, see :func:`cache_layers`) and the cache keyword."""
    import torch

    head_ids = torch.as_tensor([list(head)], dtype=torch.long, device=device)
    out = model(input_ids=head_ids, use_cache=True, logits_to_keep=1)
    name = cache_argument(out)
    return cache_layers(getattr(out, name)), name


def _shared_prefix_logprobs(
    model: Any, head: Sequence[int], tails: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
    device: "torch.device", batch_size: int, temperature: float = 1.0,
) -> list["torch.Tensor"] | None:
    """Per-row [T_i] log-probs of responses after ``head + tail_i``, running ``head`` once.

    The head's KV cache is computed once and broadcast (a view, then concatenated by the cache) to
    every micro-batch of tails; each tail must be non-empty so the first response token is predicted
    from a position computed here. None when the model's cache cannot be shared (:func:`cache_layers`).
    """
    import torch

    head_kv, cache_kwarg = prefill_head(model, head, device)
    if head_kv is None:
        return None
    h = len(head)
    results: list[torch.Tensor] = []
    for s in range(0, len(tails), batch_size):
        tail_chunk, resp_chunk = tails[s:s + batch_size], responses[s:s + batch_size]
        b = len(tail_chunk)
        s_len = max(len(t) for t in tail_chunk)
        t_len = max(len(r) for r in resp_chunk)
        new_ids = torch.zeros((b, s_len + t_len), dtype=torch.long)
        mask = torch.zeros((b, h + s_len + t_len), dtype=torch.long)
        mask[:, :h] = 1
        for i, (tail, response) in enumerate(zip(tail_chunk, resp_chunk)):
            start = s_len - len(tail)
            new_ids[i, start:s_len] = torch.as_tensor(list(tail), dtype=torch.long)
            new_ids[i, s_len:s_len + len(response)] = torch.as_tensor(list(response), dtype=torch.long)
            mask[i, h + start:h + s_len + len(response)] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)[:, h:]
        new_ids, mask, position_ids = (x.to(device) for x in (new_ids, mask, position_ids))
        # expand() is a view; the cache concatenates the new keys onto it, so the head is never written.
        cache = make_cache([(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in head_kv])
        logits = model(input_ids=new_ids, attention_mask=mask, position_ids=position_ids, use_cache=True,
                       logits_to_keep=t_len + 1, **{cache_kwarg: cache}).logits[:, :-1, :].float() / temperature
        targets = new_ids[:, s_len:]
        logprobs = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        for i, response in enumerate(resp_chunk):
            results.append(logprobs[i, : len(response)])
    return results


def heads_together(idx: np.ndarray, rows: Sequence[Any]) -> np.ndarray:
    """A minibatch's row indices ordered by their rows' ``prompt_ids``, so that rows sharing a prompt head (a
    group's same turn, an episode's task) fall into the same micro-batch, where the head runs once. The
    accumulated gradient is a sum over the rows, so the order changes nothing but float rounding."""
    return np.asarray(sorted(idx, key=lambda i: rows[i].prompt_ids), dtype=np.asarray(idx).dtype)


def micro_batches(idx: np.ndarray, micro_batch_size: int,
                  order: Callable[[np.ndarray], np.ndarray] | None = None) -> list[np.ndarray]:
    """A minibatch's rows as near-equal micro-batches of at most ``micro_batch_size`` rows (0: one pass, the
    rows as they are); ``order`` rearranges the rows before they are split (:func:`heads_together`)."""
    if micro_batch_size <= 0 or len(idx) <= micro_batch_size:
        return [idx]
    return np.array_split(idx if order is None else order(idx), -(-len(idx) // micro_batch_size))


def response_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    batch_size: int = 8,
    grad: bool = False,
    prefix_groups: Sequence[Any] | None = None,
    temperature: float = 1.0,
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """``log π(response_t | prompt, response_<t)`` for every response token, at ``temperature``.

    Returns ``(logprobs, mask)``, both float32 ``[B, T]`` on the model's device, right-padded to the
    longest response (``T``); ``mask`` is 1.0 at real response tokens and 0.0 at padding, where
    ``logprobs`` is exactly 0 and carries no gradient. Works for plain and peft-wrapped models (inside
    :func:`seed_train.policy.reference_logprobs_context` it scores the reference policy).

    ``grad=False`` runs under ``torch.no_grad`` (not inference mode, so the results can enter a loss
    as targets). With ``grad=True`` all micro-batches' graphs stay alive until backward: for large
    batches call this once per optimiser micro-batch instead of raising ``batch_size``. The caller
    owns train/eval mode (dropout).

    ``temperature``: log-probs of ``softmax(logits / temperature)``. Re-scoring sampled tokens must use
    the convention their recorded log-probs were computed with (see
    :class:`seed_train.generation.Generation`): the sampling temperature (as verl computes
    ``old_log_prob``), or 1.0 for the unmodified policy; supervised targets (Stage 1 SFT) use 1.0.

    ``prefix_groups`` (one hashable key per row, e.g. the episode index) lets rows with the same key
    share one forward pass over their longest common prompt prefix (see the module docstring); rows
    whose group is alone or shares fewer than ``MIN_SHARED_PREFIX`` tokens take the plain path. Not with
    ``grad=True`` on a model that checkpoints its activations: the backward pass replays each layer's
    forward, and transformers documents a layer that writes to a cache as unsafe to replay (the cache
    would be updated twice); every row then takes the plain path (the same log-probs and gradients,
    the head computed per row).

    Vision-language models: a prompt that is a :class:`seed_train.vision.ImagePrompt` is scored with its
    pixel inputs. Such batches take the plain path (the pad tokens of two different images are the same
    ids, so a common id prefix is no shared prefix), and a prompt with image tokens but no pixels is an error.
    """
    import torch
    import torch.nn.functional as F

    from seed_train.policy import activation_checkpointing_on
    from seed_train.vision import check_image_prompts

    if len(prompts) != len(responses):
        raise ValueError(f"prompts and responses differ in length: {len(prompts)} vs {len(responses)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompts[{i}] is empty; the first response token needs a prompt token before it")
    device = next(model.parameters()).device
    n = len(prompts)
    t_len = max((len(r) for r in responses), default=0)
    mask = torch.zeros((n, t_len), dtype=torch.float32, device=device)
    for i, response in enumerate(responses):
        mask[i, : len(response)] = 1.0
    if n == 0 or t_len == 0:
        return torch.zeros((n, t_len), dtype=torch.float32, device=device), mask

    if prefix_groups is not None and len(prefix_groups) != n:
        raise ValueError(f"prefix_groups has {len(prefix_groups)} keys for {n} rows")
    if grad and activation_checkpointing_on(model):
        prefix_groups = None
    if check_image_prompts(model, prompts):
        prefix_groups = None
    plain, shared = list(range(n)), []
    if prefix_groups is not None:
        shared, plain = shared_head_groups(prompts, prefix_groups)

    pieces: list[tuple[list[int], torch.Tensor]] = []  # (row indices, [rows, t_len] log-probs)
    with torch.set_grad_enabled(grad):
        for head, rows in shared:
            rows = sorted(rows, key=lambda i: (len(prompts[i]) + len(responses[i]), i))
            per_row = _shared_prefix_logprobs(model, prompts[rows[0]][:head], [prompts[i][head:] for i in rows],
                                              [responses[i] for i in rows], device, batch_size, temperature)
            if per_row is None:  # a cache that cannot be shared (sliding-window layers...): score them whole
                plain.extend(rows)
                continue
            pieces.append((rows, torch.stack([F.pad(lp, (0, t_len - lp.shape[0])) for lp in per_row])))
        # Group similar total lengths into the same micro-batch to waste less compute on padding.
        plain.sort(key=lambda i: (len(prompts[i]) + len(responses[i]), i))
        for s in range(0, len(plain), batch_size):
            idx = plain[s:s + batch_size]
            lp = _micro_batch_logprobs(model, [prompts[i] for i in idx], [responses[i] for i in idx], device,
                                       temperature)
            pieces.append((idx, F.pad(lp, (0, t_len - lp.shape[1]))))
        order = [i for idx, _ in pieces for i in idx]
        stacked = torch.cat([lp for _, lp in pieces], dim=0)
        inverse = torch.empty(n, dtype=torch.long)
        inverse[torch.as_tensor(order)] = torch.arange(n)
        logprobs = stacked.index_select(0, inverse.to(device))
    return logprobs, mask
