"""Vision-language policies: what a VLM is, loading it, and the pixel inputs its prompts carry.

A vision-language model (VLM) is any local Hugging Face folder whose ``config.json`` has a
``vision_config`` (Qwen2.5-VL is the reference family). It loads through ``AutoModelForImageTextToText``
and ``AutoProcessor`` (:func:`load_vision_policy`; :func:`seed_train.policy.load_policy` picks this path
from the config and adds LoRA to the language part). Prompts for it are built by the policy's prompt codec
(:class:`seed_train.codec.VisionPromptCodec`).

**Pixel inputs ride on the prompt ids.** A prompt with images is an :class:`ImagePrompt`: the token ids
(a ``list``, with every image's pad tokens already expanded, exactly what the model is fed and what the
trajectory records) plus the processor's pixel inputs (:class:`VisionInputs`). Generation
(:class:`seed_train.generation.HFGenerateBackend`) and scoring (:func:`seed_train.scoring.response_logprobs`)
read them from the prompt (:func:`model_vision_kwargs`), so the rollout, the old/teacher/reference
log-probs and the update all see the same pixels for a step, and the trainer's code is the same for text
and vision policies. ``list(prompt)`` gives the plain ids on purpose: a trajectory records ids and keeps
the image itself (a PNG, lossless), from which the codec rebuilds the pixel inputs exactly
(:meth:`seed_train.codec.PromptCodec.step_prompt`); :func:`check_image_prompts` refuses ids with image
tokens but no pixels, so a dropped attachment fails loudly instead of scoring pad embeddings.

Nothing here downloads; the tiny test VLM is in :mod:`seed_train.tiny` (:func:`seed_train.tiny.build_tiny_vlm`).

Processors without torchvision: transformers builds Qwen2-VL-style processors with a video processor
that needs torchvision. When ``AutoProcessor`` cannot load one, :func:`load_processor` assembles the
same processor class without its video part (images only, which is all an env shows).
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence


if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

#: Module-name components of vision towers (Qwen2-VL ``visual``, LLaVA ``vision_tower``, Idefics ``vision_model``).
VISION_MODULES = ("visual", "vision_tower", "vision_model")
#: Model families whose pixel inputs (``pixel_values`` + ``image_grid_thw``, multimodal positions from the
#: attention mask) are wired through generation and scoring; the tests use qwen2_5_vl.
SUPPORTED_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl")
#: Config attributes of the vision special tokens a policy must never write (suppressed in generation).
_VISION_TOKEN_ATTRS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


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
        if hasattr(processor, "image_processor") and hasattr(processor, "tokenizer"):
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


def load_vision_policy(path: str | Path, *, dtype: "torch.dtype", device: "torch.device",
                       freeze_vision: bool = True) -> tuple[Any, Any]:
    """``(model, processor)`` of a local VLM folder, the vision tower frozen unless ``freeze_vision=False``
    (LoRA, on the language part only, is :func:`seed_train.policy.load_policy`'s)."""
    from transformers import AutoConfig, AutoModelForImageTextToText

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
    return model, processor


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
                             f"the policy's codec (codec.step_prompt(step), or codec.encode(text, images=[...]))")
    return any_vision
