"""Tiny randomly initialised models with a locally trained tokenizer, for tests and smoke runs: the one
home of test-only models (a text chat model, :func:`build_tiny_model`; a vision-language one,
:func:`build_tiny_vlm`).

Nothing is downloaded: the tokenizer is a byte-level BPE trained with the ``tokenizers`` library on a
built-in corpus of the words this project's prompts and actions use, and the model is a 2-layer
``Qwen2ForCausalLM`` built from a config. The folder it writes reloads with
``AutoModelForCausalLM`` / ``AutoTokenizer`` like any Hugging Face model, so every code path that takes
a model folder can be exercised in milliseconds. Same seed, same bytes.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

# Special tokens, in id order (0, 1, 2). The chat format is ChatML, like Qwen and SmolLM2.
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # end of a turn: the eos token, where generation stops

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Words and snippets from the envs' prompts and the answer formats, so the BPE merges cover them
# and token sequences stay short (a byte-per-token tokenizer would make tests slower and less real).
_CORPUS_LINES = [
    "You are an expert agent operating in an environment. Your task is to",
    "Your admissible actions of the current situation are: [",
    "You should first reason step-by-step about the current situation. This reasoning process MUST be "
    "enclosed within <think> </think> tags. Once you've finished your reasoning, you should choose an "
    "action and present it within <action> </action> tags.",
    "<think> I need to find the box and push it onto the target. </think> <action>up</action>",
    "<think>The apple is probably in the fridge.</think><action>go to fridge 1</action>",
    "<action>left</action> <action>right</action> <action>down</action> <action>up</action>",
    "up down left right push pull wall floor box target player room Sokoban",
    "# wall, _ floor, O target, X box, P player, √ box on target, S player on target",
    "Your task is to: put a clean apple in fridge. put some mug on desk. heat some egg and put it in "
    "countertop. cool some lettuce and put it in diningtable. examine the book with the desklamp.",
    "go to cabinet 1, go to countertop 2, open drawer 3, close microwave 1, take apple 1 from fridge 1, "
    "put mug 2 in/on shelf 1, clean knife 1 with sinkbasin 1, heat egg 1 with microwave 1, "
    "cool tomato 1 with fridge 1, use desklamp 1, look, inventory, examine sofa 1",
    "You arrive at countertop 1. On the countertop 1, you see a bread 1, a knife 2, and a spoon 3.",
    "Nothing happens. You pick up the apple 1 from the fridge 1. The fridge 1 is open.",
    "EZPoints: use the cards to make the target number. Cards: 3, 7, 10, J, Q, K, A. Target: 24",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 24 + - * / = ( ) 5 + 7 = 12 3 * 8 = 24 (10 - 4) * 4 = 24",
    "search[red running shoes] click[Buy Now] click[size 9] click[< Prev] click[Next >] price: $35.99",
    "<search> who wrote the novel </search> <information> Doc 1 (Title: ...) </information> "
    "<answer> Paris </answer>",
    '{"episode_summary": "The agent pushed the box onto the target.", "episode_skill": "Push boxes '
    'along walls only when the target is on that wall."}',
    '{"action": "go to desk 1", "reason": "the book is usually on the desk"} [ ] { } : , " \\boxed{24}',
    "user\nassistant\nsystem\n user assistant system You are a helpful assistant.",
    "success failure reward score step task observation history skill workflow rule avoid",
    "The quick brown fox jumps over the lazy dog. the of and to in is it that was for on are with as",
]


def _corpus() -> list[str]:
    # Repeat so frequent project words win merges over one-off pairs; order is fixed -> deterministic.
    return _CORPUS_LINES * 4


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, IM_START, IM_END],
        # The full byte alphabet: any text (unicode included) encodes, so nothing is ever <unk>.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    out_dir: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 768,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    context: int = 4096,
) -> Path:
    """Write a tiny random ``Qwen2ForCausalLM`` and its tokenizer to ``out_dir``; return the folder.

    ``vocab_size`` is the BPE target (at least 256 bytes + 3 special tokens); the model's vocabulary
    is the trained tokenizer's actual size. ``context``: its ``max_position_embeddings`` (a small one
    tests the prompt budget). Weights depend only on ``seed`` (drawn under a forked RNG,
    so the caller's global RNG state is untouched).
    """
    if vocab_size < 300:
        raise ValueError(f"vocab_size must be >= 300 (256 byte tokens + specials + merges); got {vocab_size}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(vocab_size)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        # Grouped-query attention like the real models, when the head count allows it.
        num_key_value_heads=heads // 2 if heads % 2 == 0 else heads,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# (builder name, seed, sorted kwargs) -> folder: each tiny model is built once per process.
_CACHE: dict[tuple, Path] = {}


def _cached(build, prefix: str, seed: int, kwargs: dict) -> Path:
    """``build`` into a temp folder (removed at exit), once per process and arguments."""
    key = (build.__name__, seed, tuple(sorted(kwargs.items())))
    if key not in _CACHE or not (_CACHE[key] / "config.json").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=prefix))
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        _CACHE[key] = build(tmp, seed=seed, **kwargs)
    return _CACHE[key]


def cached_tiny_model(seed: int = 0, **kwargs: int) -> Path:
    """:func:`build_tiny_model` into a temp folder, once per process and arguments (for tests)."""
    return _cached(build_tiny_model, "seedgym-tiny-", seed, kwargs)


# ------------------------------------------------------------------------------------ the tiny VLM
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
    :func:`build_tiny_model` with Qwen2-VL's vision special tokens, and :data:`VLM_CHAT_TEMPLATE`. Weights
    depend only on ``seed`` (drawn under a forked RNG). Reloads with ``AutoModelForImageTextToText``
    and :func:`seed_train.vision.load_processor`.
    """
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"hidden ({hidden}) / heads ({heads}) must be an even head size")
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from seed_train.vision import image_only_processor_class

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


def cached_tiny_vlm(seed: int = 0, **kwargs: int) -> Path:
    """:func:`build_tiny_vlm` into a temp folder, once per process and arguments (for tests)."""
    return _cached(build_tiny_vlm, "seedgym-tiny-vlm-", seed, kwargs)
