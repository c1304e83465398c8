"""Vision-language policies: loading, image inputs, analyzer prompts with images, and a tiny test VLM.

A vision-language model (VLM) is any local Hugging Face folder whose ``config.json`` has a
``vision_config`` (Qwen2.5-VL is the reference family). It loads through ``AutoModelForImageTextToText``
and ``AutoProcessor``; :func:`seed_train.policy.load_policy` picks this path from the config and returns
``(model, processor)`` where a text model returns ``(model, tokenizer)``. Everything downstream takes
either: a processor carries its tokenizer (:func:`text_tokenizer`) and renders prompts with images
through its chat template (:func:`encode_vision_prompt`).

**Pixel inputs ride on the prompt ids.** A prompt with images is an :class:`ImagePrompt`: the token ids
(a ``list``, with every image's pad tokens already expanded, exactly what the model is fed and what the
trajectory records) plus the processor's pixel inputs (:class:`VisionInputs`). Generation
(:class:`seed_train.generation.HFGenerateBackend`) and scoring (:func:`seed_train.scoring.response_logprobs`)
read them from the prompt, so the rollout, the old/teacher/reference log-probs and the update all see
the same pixels for a step, and the trainer's code is the same for text and vision policies. Pixel
inputs are a pure function of the image, and trajectories keep each step's image as a PNG (lossless),
so a recorded step re-scores exactly from the file (:func:`load_step_images`, :func:`step_prompt`).

Nothing here downloads. :func:`build_tiny_vlm` writes a tiny randomly initialised
``Qwen2_5_VLForConditionalGeneration`` with a processor assembled locally (the Qwen2-VL image processor
with its defaults, a smaller pixel budget, and the tokenizer of :mod:`seed_train.tiny` plus the vision
special tokens) for tests and benchmarks.

Processors without torchvision: transformers builds Qwen2-VL-style processors with a video processor
that needs torchvision. When ``AutoProcessor`` cannot load one, :func:`load_processor` assembles the
same processor class without its video part (images only, which is all an env shows).
"""
from __future__ import annotations

import atexit
import hashlib
import inspect
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

#: Shown in text in place of an image (the analyzer's placeholder mode).
IMAGE_PLACEHOLDER = "[image]"
#: Module-name components of vision towers (Qwen2-VL ``visual``, LLaVA ``vision_tower``, Idefics ``vision_model``).
VISION_MODULES = ("visual", "vision_tower", "vision_model")
#: Model families whose pixel inputs (``pixel_values`` + ``image_grid_thw``, multimodal positions from the
#: attention mask) are wired through generation and scoring; the tests use qwen2_5_vl.
SUPPORTED_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl")
#: Config attributes of the vision special tokens a policy must never write (suppressed in generation).
_VISION_TOKEN_ATTRS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
# Marks, in an analyzer prompt, where a step's image goes (split out before tokenizing; never shown).
_IMAGE_SLOT = "\x00image\x00"


@dataclass(frozen=True)
class VisionInputs:
    """A prompt's pixel inputs, as the processor makes them: ``pixel_values`` (all images' patches,
    concatenated) and ``image_grid_thw`` (one (t, h, w) patch grid per image), on the CPU."""

    pixel_values: "torch.Tensor"
    image_grid_thw: "torch.Tensor"

    @property
    def num_images(self) -> int:
        return int(self.image_grid_thw.shape[0])


class ImagePrompt(list):
    """Prompt token ids (a ``list[int]``) that carry their images' pixel inputs in ``.vision``.

    It *is* the id list (equality, slicing and ``len`` are the list's), so code that passes prompt ids
    along passes the pixels with them. ``list(prompt)`` drops them, on purpose: the trajectory records
    plain ids and keeps the image itself.
    """

    def __init__(self, ids: Sequence[int], vision: VisionInputs):
        super().__init__(int(t) for t in ids)
        self.vision = vision

    def __reduce__(self):
        return (ImagePrompt, (list(self), self.vision))


def vision_of(prompt: Any) -> VisionInputs | None:
    """The pixel inputs a prompt carries, or None (a plain id list)."""
    return getattr(prompt, "vision", None)


# ------------------------------------------------------------------------------------ what is what
def is_processor(obj: Any) -> bool:
    """True for a multimodal processor (it has an image processor and a tokenizer)."""
    return hasattr(obj, "image_processor") and hasattr(obj, "tokenizer")


def text_tokenizer(tokenizer_or_processor: Any) -> Any:
    """The tokenizer itself, or a processor's tokenizer."""
    return tokenizer_or_processor.tokenizer if is_processor(tokenizer_or_processor) else tokenizer_or_processor


def is_vision_model_folder(path: str | Path) -> bool:
    """A model folder holds a vision-language model when its config has a ``vision_config``."""
    config = Path(path) / "config.json"
    try:
        return "vision_config" in json.loads(config.read_text())
    except (OSError, ValueError):
        return False


def _config(model: Any) -> Any:
    return getattr(model, "config", None)


def is_vision_model(model: Any) -> bool:
    """True for a loaded vision-language model (also behind a peft wrapper)."""
    return getattr(_config(model), "vision_config", None) is not None


def image_token_id(model: Any) -> int | None:
    value = getattr(_config(model), "image_token_id", None)
    return None if value is None else int(value)


def vision_special_ids(model: Any) -> list[int]:
    """Ids of the image/video pad and frame tokens: part of prompts, never of a response."""
    if not is_vision_model(model):
        return []
    ids = [getattr(_config(model), name, None) for name in _VISION_TOKEN_ATTRS]
    return sorted({int(i) for i in ids if i is not None})


def is_vision_param(name: str) -> bool:
    """True for a parameter of the vision tower (by module name)."""
    return any(part in VISION_MODULES for part in name.split("."))


def language_lora_targets(targets: Sequence[str]) -> str:
    """A peft ``target_modules`` regex: the named modules outside the vision tower only.

    peft matches a list of names as module-name suffixes; the regex does the same and excludes any
    module under a vision tower (Qwen2.5-VL's vision MLP also has ``gate_proj``/``up_proj``/``down_proj``).
    """
    import re

    names = "|".join(re.escape(t) for t in targets)
    towers = "|".join(VISION_MODULES)
    return rf"^(?!(?:.*\.)?(?:{towers})\.)(?:.*\.)?(?:{names})$"


def check_policy_sees_observations(tokenizer: Any, env_id: str, env_kwargs: dict | None) -> None:
    """Refuse a text-only policy on an env whose observations are images only (``obs_mode="image"``)."""
    obs_mode = (env_kwargs or {}).get("obs_mode", "text")
    if obs_mode == "image" and not is_processor(tokenizer):
        raise ValueError(
            f"{env_id} with obs_mode='image' shows the state only as an image, but the policy is a text-only "
            f"model (it has a tokenizer, no image processor), so it would act blind. Use obs_mode='text' or "
            f"'text+image' (a text-only model gets the text rendering), or a vision-language model folder "
            f"(e.g. Qwen2.5-VL, loaded with AutoModelForImageTextToText + AutoProcessor)."
        )


# ------------------------------------------------------------------------------------ loading
def _processor_class_name(path: Path) -> str | None:
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        try:
            value = json.loads((path / name).read_text()).get("processor_class")
        except (OSError, ValueError):
            continue
        if value:
            return str(value)
    return None


def image_only_processor_class(cls: type) -> type:
    """``cls`` (a Qwen2-VL-style processor: image processor, tokenizer, video processor) without its video
    processor, which transformers can only build with torchvision. Same name, so it saves as ``cls``."""
    params = list(inspect.signature(cls.__init__).parameters)[1:4]
    if params != ["image_processor", "tokenizer", "video_processor"]:
        raise TypeError(f"{cls.__name__} does not take (image_processor, tokenizer, video_processor)")

    class ImageOnly(cls):  # type: ignore[misc, valid-type]
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            # ProcessorMixin takes its attributes from this signature: no video_processor, so the
            # None passed for it is dropped.
            cls.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    ImageOnly.__name__ = ImageOnly.__qualname__ = cls.__name__
    return ImageOnly


def load_processor(path: str | Path) -> Any:
    """The processor of a local VLM folder (``AutoProcessor``; images-only when torchvision is missing)."""
    import transformers
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    path = Path(path)
    error: Exception | None = None
    try:
        processor = AutoProcessor.from_pretrained(path)
        if is_processor(processor):
            return processor
    except Exception as exc:  # noqa: BLE001 - e.g. OSError "Can't load video processor" without torchvision
        error = exc
    name = _processor_class_name(path)
    cls = getattr(transformers, name, None) if name else None
    try:
        if cls is None:
            raise TypeError(f"no processor class recorded in {path} (processor_config.json)")
        image_only = image_only_processor_class(cls)
        tokenizer = AutoTokenizer.from_pretrained(path)
        return image_only(image_processor=AutoImageProcessor.from_pretrained(path), tokenizer=tokenizer,
                          chat_template=getattr(tokenizer, "chat_template", None))
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(
            f"could not load the processor of the vision-language model in {path}: {error or exc}. A folder "
            f"made with `save_pretrained` of the model's processor has what AutoProcessor needs; Qwen2-VL-style "
            f"processors also need torchvision for their video part (`pip install torchvision`)."
        ) from exc


def load_vision_policy(path: str | Path, *, lora: Any = None, dtype: "torch.dtype", device: "torch.device",
                       freeze_vision: bool = True) -> tuple[Any, Any]:
    """``(model, processor)`` of a local VLM folder, the vision tower frozen unless ``freeze_vision=False``.

    With ``lora`` (a :class:`seed_train.policy.LoraSettings`) the adapters go on the language part only.
    """
    from transformers import AutoConfig, AutoModelForImageTextToText

    from seed_train.policy import _add_lora

    model_type = AutoConfig.from_pretrained(path).model_type
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"{path}: a {model_type!r} vision-language model; seed-gym passes image inputs the way "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)} models take them (Qwen2.5-VL is the reference)")
    processor = load_processor(path)
    tokenizer = processor.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(processor, "chat_template", None):
        raise ValueError(f"the processor of {path} has no chat template; a chat VLM's processor needs one")
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype).to(device)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if freeze_vision:
        for name, param in model.named_parameters():
            if is_vision_param(name):
                param.requires_grad_(False)
    if lora is not None:
        model = _add_lora(model, lora)
    return model, processor


# ------------------------------------------------------------------------------------ prompts with images
def _as_uint8(image: Any) -> np.ndarray:
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"image: expected a uint8 HxWx3 array, got {array.dtype} {array.shape}")
    return array


def _render(processor: Any, content: list[dict], system: str | None) -> str:
    messages = [] if system is None else [{"role": "system", "content": [{"type": "text", "text": system}]}]
    messages.append({"role": "user", "content": content})
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def _encode_content(processor: Any, content: list[dict], images: Sequence[Any], system: str | None) -> list[int]:
    rendered = _render(processor, content, system)
    if not images:
        return list(processor.tokenizer(rendered, add_special_tokens=False)["input_ids"])
    out = processor(text=[rendered], images=[_as_uint8(im) for im in images], return_tensors="pt",
                    add_special_tokens=False)
    vision = VisionInputs(out["pixel_values"].contiguous(), out["image_grid_thw"].contiguous())
    return ImagePrompt(out["input_ids"][0].tolist(), vision)


def encode_vision_prompt(processor: Any, text: str, *, images: Sequence[Any] | None = None,
                         system: str | None = None) -> list[int]:
    """A user turn of ``images`` (first, in order) then ``text``, through the processor's chat template.

    Returns the ids the model is fed, image pad tokens expanded: an :class:`ImagePrompt` carrying the
    pixel inputs when there are images, else a plain list.
    """
    images = [im for im in (images or []) if im is not None]
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
    return _encode_content(processor, content, images, system)


def vision_inputs(processor: Any, images: Sequence[Any]) -> VisionInputs:
    """Pixel inputs of ``images`` alone (what :func:`encode_vision_prompt` attaches; a pure function of the pixels)."""
    out = processor.image_processor(images=[_as_uint8(im) for im in images], return_tensors="pt")
    return VisionInputs(out["pixel_values"].contiguous(), out["image_grid_thw"].contiguous())


def step_images(tokenizer: Any, step: Any) -> list[np.ndarray] | None:
    """The images a vision policy saw at a recorded step (None for a text policy or an image-less step)."""
    if not is_processor(tokenizer) or step.image is None:
        return None
    if isinstance(step.image, str):
        raise ValueError(f"step {step.index}: the image is a path ({step.image!r}); read the file's images "
                         f"first with seed_train.vision.load_step_images(trajectories, jsonl_path)")
    return [_as_uint8(step.image)]


def with_vision(tokenizer: Any, prompt_ids: Sequence[int], images: Sequence[Any] | None,
                vision: VisionInputs | None = None) -> list[int]:
    """Recorded prompt ids with their images' pixel inputs attached (``vision`` when already computed)."""
    if not images:
        return list(prompt_ids)
    vision = vision if vision is not None else vision_inputs(tokenizer, images)
    return ImagePrompt(prompt_ids, vision)


def step_prompt(tokenizer: Any, step: Any) -> list[int]:
    """A recorded step's prompt ids, ready to score: with the pixel inputs of its image for a vision policy."""
    return with_vision(tokenizer, step.prompt_token_ids, step_images(tokenizer, step))


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


def image_key(image: Any) -> str:
    """A short digest that tells images apart (for grouping identical states)."""
    if isinstance(image, np.ndarray):
        return hashlib.blake2b(np.ascontiguousarray(image).tobytes() + str(image.shape).encode(), digest_size=8).hexdigest()
    return str(image)


# ------------------------------------------------------------------------------------ the analyzer
def encode_analyzer_prompt(tokenizer: Any, trajectory: Any, images: int = 0) -> list[int]:
    """The analyzer prompt of a trajectory, tokenized for the policy.

    A text policy gets :func:`seed_train.skills.analyzer_prompt` as it is. A vision policy gets the same
    text with an ``[image]`` placeholder at every shown step that had an image, and, with ``images`` > 0,
    the images themselves at the last ``images`` of those steps (earlier ones keep the placeholder).
    """
    from seed_train.policy import encode_prompt
    from seed_train.skills import analyzer_prompt

    if not is_processor(tokenizer):
        return encode_prompt(tokenizer, analyzer_prompt(trajectory))
    text = analyzer_prompt(trajectory, image_placeholder=_IMAGE_SLOT)
    pieces = text.split(_IMAGE_SLOT)
    shown = [s for s in trajectory.steps if s.image is not None][-(len(pieces) - 1):] if len(pieces) > 1 else []
    with_pixels = {id(s) for s in shown[max(0, len(shown) - images):]} if images > 0 else set()
    content: list[dict] = []
    pixels: list[np.ndarray] = []
    buffer = pieces[0]
    for step, piece in zip(shown, pieces[1:]):
        if id(step) in with_pixels and isinstance(step.image, np.ndarray):
            content.append({"type": "text", "text": buffer})
            content.append({"type": "image"})
            pixels.append(_as_uint8(step.image))
            buffer = piece
        else:
            buffer += IMAGE_PLACEHOLDER + piece
    content.append({"type": "text", "text": buffer})
    return _encode_content(tokenizer, [c for c in content if c.get("type") != "text" or c["text"]], pixels, None)


# ------------------------------------------------------------------------------------ model inputs
def _forward_params(model: Any) -> set[str]:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(type(base).forward).parameters)


def model_vision_kwargs(model: Any, prompts: Sequence[Any], input_ids: "torch.Tensor",
                        device: "torch.device") -> dict[str, Any]:
    """The pixel arguments of a forward/generate call over ``input_ids`` (rows in ``prompts`` order)."""
    import torch

    visions = [v for v in (vision_of(p) for p in prompts) if v is not None]
    if not visions:
        return {}
    kwargs: dict[str, Any] = {
        "pixel_values": torch.cat([v.pixel_values for v in visions]).to(device),
        "image_grid_thw": torch.cat([v.image_grid_thw for v in visions]).to(device),
    }
    if "mm_token_type_ids" in _forward_params(model):  # transformers 5: the M-RoPE index needs token types
        kwargs["mm_token_type_ids"] = (input_ids == image_token_id(model)).long().to(device)
    return kwargs


def check_image_prompts(model: Any, prompts: Sequence[Any]) -> bool:
    """True when some prompt carries pixel inputs; raises when a prompt has image tokens but no pixels
    (the model would read the pad tokens' embeddings as the image: silently wrong log-probs)."""
    any_vision = False
    image_id = image_token_id(model)
    for i, prompt in enumerate(prompts):
        if vision_of(prompt) is not None:
            any_vision = True
        elif image_id is not None and image_id in prompt:
            raise ValueError(f"prompts[{i}] holds image tokens but no pixel inputs; build it with "
                             f"seed_train.vision.step_prompt (or encode_prompt(..., images=[...]))")
    return any_vision


# ------------------------------------------------------------------------------------ tiny test VLM
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

#: ChatML like the tiny text model; content is a string or a list of {"type": "image"|"text"} items, an
#: image rendered as Qwen2-VL renders it.
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_vlm(out_dir: str | Path, *, seed: int = 0, vocab_size: int = 768, hidden: int = 64, layers: int = 2,
                   heads: int = 4, vision_hidden: int = 32, vision_depth: int = 1, max_pixels: int = 112 * 112) -> Path:
    """Write a tiny random ``Qwen2_5_VLForConditionalGeneration`` and its processor to ``out_dir``.

    The processor is assembled locally: ``Qwen2VLImageProcessorPil`` with its defaults except a pixel
    budget of ``max_pixels`` (an image becomes at most ``max_pixels / 28²`` tokens: 16 by default, where
    Qwen's default budget gives a 300x300 EZPoints table 121, so CPU tests stay fast), the tokenizer of
    :mod:`seed_train.tiny` with Qwen2-VL's vision special tokens, and :data:`VLM_CHAT_TEMPLATE`. Weights
    depend only on ``seed`` (drawn under a forked RNG). Reloads with ``AutoModelForImageTextToText``
    and :func:`load_processor`.
    """
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"hidden ({hidden}) / heads ({heads}) must be an even head size")
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from seed_train.tiny import IM_START, _train_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(vocab_size)
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, *VISION_TOKENS]})
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    image_processor = Qwen2VLImageProcessorPil(max_pixels=max_pixels)
    processor = image_only_processor_class(Qwen2_5_VLProcessor)(image_processor=image_processor, tokenizer=tokenizer,
                                                                chat_template=VLM_CHAT_TEMPLATE)
    ids = dict(zip(VISION_TOKENS, tokenizer.convert_tokens_to_ids(list(VISION_TOKENS))))
    head_dim = hidden // heads
    # M-RoPE splits the rotary half-dimension into (temporal, height, width) sections.
    third = head_dim // 2 // 3
    mrope = [head_dim // 2 - 2 * third, third, third]
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=heads // 2 if heads % 2 == 0 else heads,
            max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=None,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
        ),
        vision_config=dict(
            depth=vision_depth, hidden_size=vision_hidden, intermediate_size=2 * vision_hidden, num_heads=2,
            out_hidden_size=hidden, patch_size=image_processor.patch_size, temporal_patch_size=2,
            spatial_merge_size=image_processor.merge_size, window_size=56, fullatt_block_indexes=[vision_depth - 1],
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


_CACHE: dict[tuple, Path] = {}


def cached_tiny_vlm(seed: int = 0, **kwargs: int) -> Path:
    """:func:`build_tiny_vlm` into a temp folder, once per process and arguments (for tests)."""
    key = (seed, tuple(sorted(kwargs.items())))
    if key not in _CACHE or not (_CACHE[key] / "config.json").is_file():
        tmp = Path(tempfile.mkdtemp(prefix="seedgym-tiny-vlm-"))
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        _CACHE[key] = build_tiny_vlm(tmp, seed=seed, **kwargs)
    return _CACHE[key]
