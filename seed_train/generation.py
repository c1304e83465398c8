"""Token-exact batched generation that records what was sampled and its log-probability.

Prompts come in as token ids (from :func:`seed_train.policy.encode_prompt`) and responses go out as
token ids plus their log-probs: the trainer never re-tokenizes text. A backend is anything with the
:class:`GenerationBackend` shape; :class:`HFGenerateBackend` uses transformers ``generate`` (a vLLM
backend can plug in later through the same protocol and its ``sync_weights`` hook).
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
    - ``response_logprobs``: ``log π_θ(token | prompt, earlier tokens)`` of each response token, at
      temperature 1 and without top-p, i.e. the unmodified policy (see :class:`HFGenerateBackend`).
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


class HFGenerateBackend:
    """Batched sampling with ``model.generate`` (one call for all prompts).

    Prompts are left-padded with an attention mask (generate derives position ids from it) and the
    KV cache is on. Sampling applies ``temperature`` and ``top_p`` (``top_k`` off, no repetition
    penalty, whatever the model's generation_config says), but the recorded log-prob of each sampled
    token is ``log_softmax(raw logits)[token]``: the log-probability under the unmodified policy at
    temperature 1, which is what PPO's ``old_logprobs`` and the KL/OPD terms compare against, and
    what :func:`seed_train.scoring.response_logprobs` recomputes.

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
    ) -> None:
        from seed_train.vision import text_tokenizer

        self.model = model
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

    def _device(self) -> "torch.device":
        return next(self.model.parameters()).device

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
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - len(prompt):] = torch.as_tensor(list(prompt), dtype=torch.long)
            attention_mask[i, width - len(prompt):] = 1

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
        pixels: dict[str, Any] = {}
        suppress = vision_special_ids(self.model)
        if suppress:
            config.suppress_tokens = suppress
            pixels = model_vision_kwargs(self.model, prompts, input_ids, device)
        with _eval_mode(self.model), _seeded(None if greedy else seed, device), torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
                logits_processor=processors,
                **pixels,
            )
        new_tokens = out.sequences[:, width:].cpu()
        # Raw logits (before temperature/top-p), one [B, V] tensor per step.
        logits = torch.stack(out.logits, dim=1).float()
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
