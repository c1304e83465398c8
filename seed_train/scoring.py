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

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch


def _micro_batch_logprobs(
    model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], device: "torch.device"
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
    logits = out.logits[:, :-1, :].float()
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


def _shared_prefix_logprobs(
    model: Any, head: Sequence[int], tails: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
    device: "torch.device", batch_size: int,
) -> list["torch.Tensor"]:
    """Per-row [T_i] log-probs of responses after ``head + tail_i``, running ``head`` once.

    The head's KV cache is computed once and broadcast (a view, then concatenated by the cache) to
    every micro-batch of tails; each tail must be non-empty so the first response token is predicted
    from a position computed here.
    """
    import torch
    from transformers import DynamicCache

    head_ids = torch.as_tensor([list(head)], dtype=torch.long, device=device)
    out = model(input_ids=head_ids, use_cache=True, logits_to_keep=1)
    # transformers 5.2x renamed past_key_values to cache; the output class tells which one this is.
    cache_kwarg = "cache" if hasattr(out, "cache") else "past_key_values"
    kv = getattr(out, cache_kwarg)
    if hasattr(kv, "layers"):
        head_kv = [(layer.keys, layer.values) for layer in kv.layers]
    else:  # older DynamicCache
        head_kv = list(zip(kv.key_cache, kv.value_cache))
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
        cache = DynamicCache(ddp_cache_data=[(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in head_kv])
        logits = model(input_ids=new_ids, attention_mask=mask, position_ids=position_ids, use_cache=True,
                       logits_to_keep=t_len + 1, **{cache_kwarg: cache}).logits[:, :-1, :].float()
        targets = new_ids[:, s_len:]
        logprobs = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        for i, response in enumerate(resp_chunk):
            results.append(logprobs[i, : len(response)])
    return results


def response_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    batch_size: int = 8,
    grad: bool = False,
    prefix_groups: Sequence[Any] | None = None,
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """``log π(response_t | prompt, response_<t)`` for every response token.

    Returns ``(logprobs, mask)``, both float32 ``[B, T]`` on the model's device, right-padded to the
    longest response (``T``); ``mask`` is 1.0 at real response tokens and 0.0 at padding, where
    ``logprobs`` is exactly 0 and carries no gradient. Works for plain and peft-wrapped models (inside
    :func:`seed_train.policy.reference_logprobs_context` it scores the reference policy).

    ``grad=False`` runs under ``torch.no_grad`` (not inference mode, so the results can enter a loss
    as targets). With ``grad=True`` all micro-batches' graphs stay alive until backward: for large
    batches call this once per optimiser micro-batch instead of raising ``batch_size``. The caller
    owns train/eval mode (dropout).

    ``prefix_groups`` (one hashable key per row, e.g. the episode index) lets rows with the same key
    share one forward pass over their longest common prompt prefix (see the module docstring); rows
    whose group is alone or shares fewer than ``MIN_SHARED_PREFIX`` tokens take the plain path.

    Vision-language models: a prompt that is a :class:`seed_train.vision.ImagePrompt` is scored with its
    pixel inputs. Such batches take the plain path (the pad tokens of two different images are the same
    ids, so a common id prefix is no shared prefix), and a prompt with image tokens but no pixels is an error.
    """
    import torch
    import torch.nn.functional as F

    from seed_train.vision import check_image_prompts

    if len(prompts) != len(responses):
        raise ValueError(f"prompts and responses differ in length: {len(prompts)} vs {len(responses)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
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
    if check_image_prompts(model, prompts):
        prefix_groups = None
    plain, shared = list(range(n)), []
    if prefix_groups is not None:
        members: dict[Any, list[int]] = {}
        for i, key in enumerate(prefix_groups):
            members.setdefault(key, []).append(i)
        plain = []
        for rows in members.values():
            # Keep at least one tail token per row: it predicts the first response token.
            head = min(common_prefix_length([prompts[i] for i in rows]), min(len(prompts[i]) for i in rows) - 1)
            if len(rows) > 1 and head >= MIN_SHARED_PREFIX:
                shared.append((head, rows))
            else:
                plain.extend(rows)

    pieces: list[tuple[list[int], torch.Tensor]] = []  # (row indices, [rows, t_len] log-probs)
    with torch.set_grad_enabled(grad):
        # Group similar total lengths into the same micro-batch to waste less compute on padding.
        plain.sort(key=lambda i: (len(prompts[i]) + len(responses[i]), i))
        for s in range(0, len(plain), batch_size):
            idx = plain[s:s + batch_size]
            lp = _micro_batch_logprobs(model, [prompts[i] for i in idx], [responses[i] for i in idx], device)
            pieces.append((idx, F.pad(lp, (0, t_len - lp.shape[1]))))
        for head, rows in shared:
            rows = sorted(rows, key=lambda i: (len(prompts[i]) + len(responses[i]), i))
            per_row = _shared_prefix_logprobs(model, prompts[rows[0]][:head], [prompts[i][head:] for i in rows],
                                              [responses[i] for i in rows], device, batch_size)
            pieces.append((rows, torch.stack([F.pad(lp, (0, t_len - lp.shape[0])) for lp in per_row])))
        order = [i for idx, _ in pieces for i in idx]
        stacked = torch.cat([lp for _, lp in pieces], dim=0)
        inverse = torch.empty(n, dtype=torch.long)
        inverse[torch.as_tensor(order)] = torch.arange(n)
        logprobs = stacked.index_select(0, inverse.to(device))
    return logprobs, mask
