"""The prompt codec: prompt text (and images) -> the token ids a policy is fed, one object per policy.

A policy loads with its codec (:func:`seed_train.policy.load_policy`, ``Policy.codec``) and the codec is
what the rollout, Stage 1, the analyzer pass, the sample builder and evaluation take where they need to
turn text into ids. There are two:

- :class:`PromptCodec` for a text model: its tokenizer's chat template; images are ignored (a text model
  gets the env's text rendering);
- :class:`VisionPromptCodec` for a vision-language model: its processor's chat template, each image
  before the text, and the result an :class:`seed_train.vision.ImagePrompt` (the ids with the image pad
  tokens expanded, carrying the pixel inputs), which generation and scoring read.

So the code that builds prompts is the same for both, and which one a run has is decided once, from
the loaded object (:func:`prompt_codec`: the one place that asks whether a tokenizer is a processor).

A recorded step keeps its prompt ids (plain ints) and its image (a PNG on disk); :meth:`step_prompt`
puts the pixel inputs back, so a step re-scores exactly from the file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from seed_train.vision import ImagePrompt, VisionInputs

#: Shown in text in place of an image (the analyzer's placeholder mode).
IMAGE_PLACEHOLDER = "[image]"
# Marks, in an analyzer prompt, where a step's image goes (split out before tokenizing; never shown).
_IMAGE_SLOT = "\x00image\x00"


class PromptCodec:
    """Prompts for a text-only policy, through its tokenizer's chat template.

    Args:
        tokenizer: a chat model's tokenizer (it needs a ``chat_template``).
    """

    sees_images = False

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer

    @property
    def source(self) -> Any:
        """What the model folder saves with the weights (the tokenizer; a VLM's processor)."""
        return self.tokenizer

    def save_pretrained(self, folder: str | Path) -> None:
        self.source.save_pretrained(folder)

    def encode(self, text: str, *, system: str | None = None, images: Sequence[Any] | None = None) -> list[int]:
        """``text`` as a user turn with the chat template (plus the assistant header), tokenized.

        The one place prompts are tokenized: the ids are what the model is fed and what trajectories
        record; never re-tokenize the text later to recover them. ``images`` are ignored.
        """
        tok = self.tokenizer
        if not getattr(tok, "chat_template", None):
            raise ValueError("tokenizer has no chat_template; encode_prompt needs a chat model's tokenizer")
        messages = [] if system is None else [{"role": "system", "content": system}]
        messages.append({"role": "user", "content": text})
        rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        # The template already spells out the special tokens (BOS, <|im_start|>...), so the tokenizer
        # must not add its own on top.
        return list(tok(rendered, add_special_tokens=False)["input_ids"])

    def encode_response(self, text: str) -> list[int]:
        """A target response's ids, ending with eos (what Stage 1 trains the policy to write)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [int(self.tokenizer.eos_token_id)]

    def encode_analyzer(self, trajectory: Any, images: int = 0) -> list[int]:
        """The analyzer prompt of ``trajectory`` (:func:`seed_train.skills.analyzer_prompt`), tokenized."""
        from seed_train.skills import analyzer_prompt

        return self.encode(analyzer_prompt(trajectory))

    def step_images(self, step: Any) -> list[np.ndarray] | None:
        """The images the policy saw at a recorded step: None for a text policy."""
        return None

    def attach(self, prompt_ids: Sequence[int], images: Sequence[Any] | None,
               vision: VisionInputs | None = None) -> list[int]:
        """Recorded prompt ids with their images' pixel inputs attached (a text policy: the ids)."""
        return list(prompt_ids)

    def step_prompt(self, step: Any) -> list[int]:
        """A recorded step's prompt ids, ready to score (with its image's pixel inputs for a VLM)."""
        return self.attach(step.prompt_token_ids, self.step_images(step))

    def check_sees(self, env_id: str, obs_mode: str) -> None:
        """Refuse an env whose observations are images only (``obs_mode="image"``): a text policy would act blind."""
        check_sees(env_id, obs_mode, self.sees_images)


class VisionPromptCodec(PromptCodec):
    """Prompts for a vision-language policy, through its processor: images first, then the text.

    Args:
        processor: the model's processor (an image processor, a tokenizer and a chat template).
    """

    sees_images = True

    def __init__(self, processor: Any):
        super().__init__(processor.tokenizer)
        self.processor = processor

    @property
    def source(self) -> Any:
        return self.processor

    def encode(self, text: str, *, system: str | None = None, images: Sequence[Any] | None = None) -> list[int]:
        """A user turn of ``images`` (first, in order) then ``text``: an :class:`ImagePrompt` carrying the
        pixel inputs when there are images, else plain ids."""
        images = [im for im in (images or []) if im is not None]
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
        return self._encode_content(content, images, system)

    def encode_analyzer(self, trajectory: Any, images: int = 0) -> list[int]:
        """The analyzer prompt with an ``[image]`` placeholder at every shown step that had an image and, with
        ``images`` > 0, the images themselves at the last ``images`` of those steps (earlier ones keep the
        placeholder)."""
        from seed_train.skills import analyzer_prompt

        pieces = analyzer_prompt(trajectory, image_placeholder=_IMAGE_SLOT).split(_IMAGE_SLOT)
        shown = [s for s in trajectory.steps if s.image is not None][-(len(pieces) - 1):] if len(pieces) > 1 else []
        with_pixels = {id(s) for s in shown[max(0, len(shown) - images):]} if images > 0 else set()
        content: list[dict] = []
        pixels: list[np.ndarray] = []
        buffer = pieces[0]
        for step, piece in zip(shown, pieces[1:]):
            if id(step) in with_pixels and isinstance(step.image, np.ndarray):
                content += [{"type": "text", "text": buffer}, {"type": "image"}]
                pixels.append(_as_uint8(step.image))
                buffer = piece
            else:
                buffer += IMAGE_PLACEHOLDER + piece
        content.append({"type": "text", "text": buffer})
        return self._encode_content([c for c in content if c.get("type") != "text" or c["text"]], pixels, None)

    def step_images(self, step: Any) -> list[np.ndarray] | None:
        """The step's image (None for an image-less step). A path must be read first (:func:`load_step_images`)."""
        if step.image is None:
            return None
        if isinstance(step.image, str):
            raise ValueError(f"step {step.index}: the image is a path ({step.image!r}); read the file's images "
                             f"first with seed_train.codec.load_step_images(trajectories, jsonl_path)")
        return [_as_uint8(step.image)]

    def attach(self, prompt_ids: Sequence[int], images: Sequence[Any] | None,
               vision: VisionInputs | None = None) -> list[int]:
        """``vision`` when already computed (it is a pure function of the pixels), else the images' own."""
        if not images:
            return list(prompt_ids)
        return ImagePrompt(prompt_ids, vision if vision is not None else self.pixel_inputs(images))

    def pixel_inputs(self, images: Sequence[Any]) -> VisionInputs:
        """Pixel inputs of ``images`` alone (what :meth:`encode` attaches)."""
        out = self.processor.image_processor(images=[_as_uint8(im) for im in images], return_tensors="pt")
        return VisionInputs(out["pixel_values"].contiguous(), out["image_grid_thw"].contiguous())

    def _encode_content(self, content: list[dict], images: Sequence[Any], system: str | None) -> list[int]:
        messages = [] if system is None else [{"role": "system", "content": [{"type": "text", "text": system}]}]
        messages.append({"role": "user", "content": content})
        rendered = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        if not images:
            return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
        out = self.processor(text=[rendered], images=[_as_uint8(im) for im in images], return_tensors="pt",
                             add_special_tokens=False)
        vision = VisionInputs(out["pixel_values"].contiguous(), out["image_grid_thw"].contiguous())
        return ImagePrompt(out["input_ids"][0].tolist(), vision)


def check_sees(env_id: str, obs_mode: str, sees_images: bool) -> None:
    """ValueError when a policy that does not see images gets an env that shows its state only as one."""
    if obs_mode == "image" and not sees_images:
        raise ValueError(
            f"{env_id} with obs_mode='image' shows the state only as an image, but the policy is a text-only "
            f"model (it has a tokenizer, no image processor), so it would act blind. Use obs_mode='text' or "
            f"'text+image' (a text-only model gets the text rendering), or a vision-language model folder "
            f"(e.g. Qwen2.5-VL, loaded with AutoModelForImageTextToText + AutoProcessor).")


def is_processor(obj: Any) -> bool:
    """True for a multimodal processor (it has an image processor and a tokenizer)."""
    return hasattr(obj, "image_processor") and hasattr(obj, "tokenizer")


def prompt_codec(tokenizer: Any) -> PromptCodec:
    """The codec of a loaded tokenizer or processor (a codec is returned as it is)."""
    if isinstance(tokenizer, PromptCodec):
        return tokenizer
    return VisionPromptCodec(tokenizer) if is_processor(tokenizer) else PromptCodec(tokenizer)


class PromptTokenBudget:
    """A prompt's test against the model's prompt budget: fits when its chat-templated token count is at
    most ``budget`` (``wrappers.PromptRenderer``'s ``prompt_fits``). A plain object, so a vector env in
    another process gets it pickled with its spec. Images are not counted: the rollout's own check on
    the encoded prompt is the gate (:func:`seed_train.rollout.run_episodes`)."""

    def __init__(self, codec: Any, budget: int):
        self.codec, self.budget = prompt_codec(codec), int(budget)

    def __call__(self, prompt: str) -> bool:
        return len(self.codec.encode(prompt)) <= self.budget


def model_context_tokens(model: Any) -> int | None:
    """The longest sequence the model takes (its config's ``max_position_embeddings``, a vision-language
    model's text config's); None when the config does not say."""
    config = getattr(model, "config", None)
    for cfg in (config, getattr(config, "text_config", None)):
        n = getattr(cfg, "max_position_embeddings", None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def encode_prompt(codec: Any, text: str, *, system: str | None = None, images: Sequence[Any] | None = None) -> list[int]:
    """``prompt_codec(codec).encode(text, ...)``: for callers holding a tokenizer, a processor or a codec."""
    return prompt_codec(codec).encode(text, system=system, images=images)


def _as_uint8(image: Any) -> np.ndarray:
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"image: expected a uint8 HxWx3 array, got {array.dtype} {array.shape}")
    return array


def load_step_images(trajectories: Sequence[Any], jsonl_path: str | Path) -> None:
    """Replace the PNG paths of steps read from ``jsonl_path`` by their uint8 arrays (in place)."""
    from PIL import Image

    from wrappers import resolve_image

    for trajectory in trajectories:
        for step in trajectory.steps:
            path = resolve_image(jsonl_path, step)
            if path is not None:
                with Image.open(path) as image:
                    step.image = np.asarray(image.convert("RGB"), dtype=np.uint8)
