"""One GRPO iteration of seed-train vs one step of TRL's GRPOTrainer, on the same work.

    OMP_NUM_THREADS=2 python benchmarks/bench_grpo_vs_trl.py [--repeats 1] [--threads 2] [--beta 0 0.04]

Both sides train the same model (SmolLM2-135M by default, full fine-tuning, or both with the same LoRA
config with ``--lora``) on the same 8 prompts x group 4 = 32 completions through the same chat
template, sampling at temperature 1 (top-p 1, no top-k) up to the same number of new tokens, with the
same learning rate, the same cheap reward (:func:`length_reward`) and, for each ``--beta``, the same
KL weight (TRL ``beta``, our ``kl_coef``; > 0 adds the reference pass). One optimizer step uses all 32
completions on both sides.

- TRL: ``trl.GRPOTrainer`` with ``per_device_train_batch_size=32, num_generations=4,
  steps_per_generation=1`` (so ``generation_batch_size=32``), ``max_steps=1``, ``use_cpu``, no
  bf16/fp16, no gradient checkpointing (TRL turns it on by default; we do not checkpoint either), no
  logging or saving. Each timed step is one ``trainer.train()`` call; the step itself is timed by a
  callback (``on_step_begin`` .. ``on_step_end``), so the per-call set-up of ``train()`` (optimizer,
  dataloader) is left out, as our side builds its optimizer outside the timer too. Phases: generation
  is ``_generate``; scoring is the rest of ``_generate_and_score_completions`` (rewards, advantages,
  the reference pass when beta > 0); update is the rest of the step (log-probs with grad, loss,
  backward, clipping, AdamW). TRL exposes no public timing hook per phase, so a subclass wraps those
  two methods (timing only, behaviour unchanged).
- Ours: the trainer's pieces for one iteration: prompts encoded with
  :func:`seed_train.codec.encode_prompt`, :class:`seed_train.generation.HFGenerateBackend` (its
  default path, row seeds), group-normalised advantages of the rewards, :class:`StepSample` per
  completion, :func:`seed_train.trainer.score_samples` (reference pass when beta > 0, against a frozen
  copy made once as TRL makes its reference model once), :func:`seed_train.trainer.update_policy`
  with ``opd_coef=0, kl_coef=beta, minibatch_size=32, ppo_epochs=1`` and a fresh AdamW (as each TRL
  ``train()`` call makes one).

Each side warms up with one untimed step; then the two alternate ``--repeats`` times (medians
reported), so a load that comes and goes hits both alike. Each side has its own copy of the model
(TRL patches the forward of the model it is given). Sampling differs (TRL samples with torch's global
generator, we with one generator per row), so completion lengths can differ: the table shows them.

Rollout throughput: (prompt + generated tokens) / generation seconds of our generation, against the
plain no-grad forward of the same model over the same 32 prompt + response sequences in one batch
(left-padded; the model's default forward, logits at every position), timed right after each of our
steps; the goal is >= 0.5 of it.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

# Run as a script from anywhere: the project root on the path, like the other benchmarks assume.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seed_train.advantages import grpo_episode_advantages  # noqa: E402
from seed_train.config import SeedConfig  # noqa: E402
from seed_train.generation import HFGenerateBackend  # noqa: E402
from seed_train.codec import encode_prompt  # noqa: E402
from seed_train.policy import LoraSettings, frozen_copy, load_policy, resolve_model  # noqa: E402
from seed_train.samples import StepSample  # noqa: E402
from seed_train.threads import torch_threads  # noqa: E402
from seed_train.trainer import score_samples, update_policy  # noqa: E402

# Eight short chat prompts, ~50 tokens each with SmolLM2's chat template (system line included): the size
# of the prompts behind the TRL figures in DESIGN.md's performance notes.
SHORT_PROMPTS = [
    "Cards show 3 and 7. Using each number once with + or *, write a formula that equals 21.",
    "You are in a kitchen with a fridge and a sink. Put a cool apple on the table. Next action?",
    "Find red running shoes under 60 dollars in size 9. Write the query you would type into the search box.",
    "A box sits one step left of its target and you stand to its right. Which move pushes it onto the target?",
    "Who wrote the novel that introduced the detective Hercule Poirot? Give the author's name as your answer.",
    "Cards: 4 and 5. Target: 9. Use each number exactly once with + or * and write the formula.",
    "You hold a key before a locked drawer in the bedroom. Your goal is to find the watch. What do you do next?",
    "In one sentence, what does a reinforcement learning agent do with the reward it gets after each step?",
]


def length_reward(text: str, target_chars: int = 40) -> float:
    """The cheap reward both sides use: 1 at ``target_chars`` characters, falling linearly to 0 at 0 and 2x.

    Cheap on purpose (the benchmark times the trainers, not a reward model) and varied within a group,
    so advantages are non-zero and every completion gets a gradient.
    """
    return max(0.0, 1.0 - abs(len(text) - target_chars) / target_chars)


def trl_reward(completions: Sequence[Any], **_: Any) -> list[float]:
    """:func:`length_reward` in TRL's reward-function shape (conversational completions are message lists)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [length_reward(t) for t in texts]


def ezpoints_prompts(n: int) -> list[str]:
    """The first ``n`` EZPoints train tasks' first prompts, rendered by the env and wrappers as the trainer does."""
    from seed_train.evaluate import panel_of
    from seed_train.trainer import env_spec

    spec = env_spec(SeedConfig(env_id="seed/EZPoints-v0", template="compact", history=0, action_format="plain"),
                    "train")
    env = spec.make(lambda _trajectory: None)
    try:
        return [env.reset(seed=0, options={"task_id": task})[0]["prompt"] for task in panel_of(spec)[:n]]
    finally:
        env.close()


@dataclass(frozen=True)
class Workload:
    """What both sides do in one step."""

    prompts: tuple[str, ...]  # the unique prompt texts (user turns)
    group_size: int = 4
    max_new_tokens: int = 24
    lr: float = 1e-6
    beta: float = 0.0  # KL weight: TRL beta, our kl_coef
    lora: LoraSettings | None = None

    @property
    def completions(self) -> int:
        return len(self.prompts) * self.group_size


@dataclass
class StepTiming:
    """One timed step of one side."""

    generate_s: float
    score_s: float
    update_s: float
    total_s: float
    prompt_tokens: int  # real (unpadded) prompt tokens over the 32 rows
    generated_tokens: int
    forward_s: float | None = None  # plain no-grad forward over the same sequences (ours only)


@contextlib.contextmanager
def _rng_untouched() -> Any:
    """LoRA's A matrices draw from torch's global generator: keep the caller's RNG state as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


# ------------------------------------------------------------------------------------------ ours
class OursGRPO:
    """Our trainer's pieces for one GRPO iteration, on its own copy of the model."""

    def __init__(self, model_path: str | os.PathLike[str], work: Workload):
        with _rng_untouched():
            self.model, self.tokenizer = load_policy(model_path, lora=work.lora)
        self.model.eval()
        self.work = work
        self.backend = HFGenerateBackend(self.model, self.tokenizer)
        # Full fine-tuning needs a frozen copy for the KL term (made once, like TRL's ref model); LoRA
        # disables its adapters instead.
        self.reference = frozen_copy(self.model) if work.beta > 0 and work.lora is None else None
        self.cfg = SeedConfig(env_id="seed/EZPoints-v0", model=str(model_path), lora=work.lora is not None,
                              opd_coef=0.0, kl_coef=work.beta, minibatch_size=work.completions, ppo_epochs=1,
                              lr=work.lr, temperature=1.0, top_p=1.0, max_new_tokens=work.max_new_tokens)
        self.steps = 0

    def step(self, *, time_forward: bool = True) -> StepTiming:
        work, g = self.work, self.work.group_size
        # 8 unique prompts x group 4, each group's rows together, as TRL's sampler lays them out.
        texts = [t for t in work.prompts for _ in range(g)]
        seed = 1000 * self.steps
        optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=work.lr)
        t0 = time.perf_counter()
        prompts = [encode_prompt(self.tokenizer, t) for t in texts]
        gens = self.backend.generate(prompts, max_new_tokens=work.max_new_tokens, temperature=1.0, top_p=1.0,
                                     row_seeds=[seed + i for i in range(len(prompts))])
        t1 = time.perf_counter()
        rewards = torch.tensor([length_reward(gen.text) for gen in gens], dtype=torch.float64)
        groups = torch.arange(len(gens)) // g
        advantages = grpo_episode_advantages(rewards, groups)
        # One sample per completion; each is its own episode, as each rollout is in the trainer.
        samples = [StepSample(gen.prompt_token_ids, gen.response_token_ids, gen.response_logprobs, float(adv),
                              None, i) for i, (gen, adv) in enumerate(zip(gens, advantages))]
        scored = score_samples(self.model, samples, teacher=False, reference=work.beta > 0,
                               reference_model=self.reference)
        t2 = time.perf_counter()
        update_policy(self.model, optimizer, samples, scored, self.cfg, np.random.default_rng(self.steps))
        t3 = time.perf_counter()
        self.steps += 1
        forward_s = plain_forward_seconds(self.model, [s.prompt_ids + s.response_ids for s in samples]) \
            if time_forward else None
        return StepTiming(t1 - t0, t2 - t1, t3 - t2, t3 - t0, sum(len(p) for p in prompts),
                          sum(len(gen.response_token_ids) for gen in gens), forward_s)


def plain_forward_seconds(model: Any, sequences: Sequence[Sequence[int]], runs: int = 3) -> float:
    """Seconds of one no-grad forward of ``model`` over ``sequences`` (left-padded, one batch, all logits).

    The median of ``runs`` timed passes after one untimed pass: a single pass of ~1 s is easily hit by a
    neighbour's burst on a shared machine.
    """
    width = max(len(s) for s in sequences)
    input_ids = torch.zeros((len(sequences), width), dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        input_ids[i, width - len(seq):] = torch.as_tensor(list(seq))
        attention_mask[i, width - len(seq):] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    was_training = model.training
    model.eval()
    try:
        seconds = []
        with torch.no_grad():
            for _ in range(runs + 1):
                t0 = time.perf_counter()
                model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
                seconds.append(time.perf_counter() - t0)
        return statistics.median(seconds[1:])
    finally:
        model.train(was_training)


# ------------------------------------------------------------------------------------------ TRL
class TRLGRPO:
    """TRL's GRPOTrainer on its own copy of the model, one ``train()`` call per timed step."""

    def __init__(self, model_path: str | os.PathLike[str], work: Workload, output_dir: str):
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        class StepTimer(TrainerCallback):
            """Seconds from the start to the end of each optimizer step (the step's own work)."""

            def __init__(self) -> None:
                self.start, self.seconds = 0.0, []

            def on_step_begin(self, args, state, control, **kwargs):
                self.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                self.seconds.append(time.perf_counter() - self.start)

        class PhaseTimedGRPOTrainer(GRPOTrainer):
            """GRPOTrainer that adds up the time spent generating and generating + scoring (no other change)."""

            generate_s = 0.0
            generate_and_score_s = 0.0
            prompt_tokens = 0
            generated_tokens = 0

            def _generate(self, prompts):
                t0 = time.perf_counter()
                out = super()._generate(prompts)
                self.generate_s += time.perf_counter() - t0
                prompt_ids, completion_ids = out[0], out[1]
                self.prompt_tokens += sum(len(p) for p in prompt_ids)
                self.generated_tokens += sum(len(c) for c in completion_ids)
                return out

            def _generate_and_score_completions(self, inputs):
                t0 = time.perf_counter()
                out = super()._generate_and_score_completions(inputs)
                self.generate_and_score_s += time.perf_counter() - t0
                return out

        self.work = work
        path = str(model_path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        peft_config = None
        if work.lora is not None:
            from peft import LoraConfig

            peft_config = LoraConfig(r=work.lora.r, lora_alpha=work.lora.alpha, lora_dropout=work.lora.dropout,
                                     target_modules=list(work.lora.target_modules), task_type="CAUSAL_LM")
        config = GRPOConfig(
            output_dir=output_dir,
            per_device_train_batch_size=work.completions,
            gradient_accumulation_steps=1,
            num_generations=work.group_size,
            steps_per_generation=1,  # generation_batch_size = 32: one generation feeds one optimizer step
            num_iterations=1,
            max_completion_length=work.max_new_tokens,
            temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0,
            learning_rate=work.lr,
            beta=work.beta,
            epsilon=0.2,
            max_grad_norm=1.0,
            max_steps=1,
            use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
            report_to="none", logging_strategy="no", save_strategy="no", disable_tqdm=True,
            dataloader_num_workers=0, dataloader_pin_memory=False,
            seed=0,
        )
        dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in work.prompts])
        self.timer = StepTimer()
        self.trainer = PhaseTimedGRPOTrainer(model=model, reward_funcs=trl_reward, args=config, train_dataset=dataset,
                                             processing_class=tokenizer, callbacks=[self.timer],
                                             peft_config=peft_config)
        self.trainer.remove_callback(PrinterCallback)  # the end-of-train metrics dict on stdout

    def step(self) -> StepTiming:
        t = self.trainer
        t.generate_s = t.generate_and_score_s = 0.0
        t.prompt_tokens = t.generated_tokens = 0
        t.train()
        total = self.timer.seconds[-1]
        return StepTiming(t.generate_s, t.generate_and_score_s - t.generate_s, total - t.generate_and_score_s, total,
                          t.prompt_tokens, t.generated_tokens)


# ------------------------------------------------------------------------------------------ report
@dataclass
class Runs:
    ours: list[StepTiming] = field(default_factory=list)
    trl: list[StepTiming] = field(default_factory=list)


def _median(runs: Sequence[StepTiming], key: str) -> float:
    return statistics.median(getattr(r, key) for r in runs)


def markdown_rows(beta: float, runs: Runs) -> list[str]:
    """Table rows of one beta: TRL, ours, and the ratio TRL/ours of each median."""
    rows = []
    for name, side in [("TRL GRPOTrainer", runs.trl), ("seed-train", runs.ours)]:
        if side:
            rows.append(f"| {beta:g} | {name} | {_median(side, 'generate_s'):.2f} | {_median(side, 'score_s'):.2f} | "
                        f"{_median(side, 'update_s'):.2f} | {_median(side, 'total_s'):.2f} | "
                        f"{_median(side, 'prompt_tokens'):.0f} + {_median(side, 'generated_tokens'):.0f} |")
    if runs.trl and runs.ours:
        ratio = {k: _median(runs.trl, k) / max(_median(runs.ours, k), 1e-9)
                 for k in ("generate_s", "score_s", "update_s", "total_s")}
        rows.append(f"| {beta:g} | **TRL / ours** | {ratio['generate_s']:.2f}x | {ratio['score_s']:.2f}x | "
                    f"{ratio['update_s']:.2f}x | **{ratio['total_s']:.2f}x** | |")
    return rows


def _tokens_per_s(runs: Sequence[StepTiming], seconds: str = "generate_s") -> list[float]:
    return [(r.prompt_tokens + r.generated_tokens) / getattr(r, seconds) for r in runs]


def throughput_line(ours: Sequence[StepTiming], trl: Sequence[StepTiming] = ()) -> str:
    """Our rollout throughput against the plain forward over the same tokens (medians of the per-step values)."""
    rollout, forward = _tokens_per_s(ours), _tokens_per_s(ours, "forward_s")
    ratios = [a / b for a, b in zip(rollout, forward)]
    line = (f"our rollout {statistics.median(rollout):.0f} tokens/s (prompt + generated / generation s), plain "
            f"no-grad forward over the same sequences {statistics.median(forward):.0f} tokens/s: "
            f"ratio {statistics.median(ratios):.2f} (goal >= 0.5)")
    if trl:
        line += f"; TRL's generation {statistics.median(_tokens_per_s(trl)):.0f} tokens/s"
    return line


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m", help="embedded model name or local HF folder")
    p.add_argument("--prompts", choices=["short", "ezpoints"], default="short",
                   help="8 short chat prompts (~50 tokens) or the first 8 EZPoints train prompts (~130 tokens)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--beta", type=float, nargs="+", default=[0.0, 0.04],
                   help="KL weights to run (one table block each)")
    p.add_argument("--lora", action="store_true", help="both sides train the same LoRA adapters (default: full FT)")
    p.add_argument("--repeats", type=int, default=3, help="timed TRL/ours pairs per beta (medians reported)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads for both (0: OMP_NUM_THREADS, else the usable CPUs)")
    p.add_argument("--skip-trl", action="store_true", help="time only our side")
    args = p.parse_args(argv)

    # Script-only noise: TRL's config sets deprecated TrainingArguments names; weight-loading progress bars.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = resolve_model(args.model)
    texts = tuple(SHORT_PROMPTS if args.prompts == "short" else ezpoints_prompts(8))
    lora = LoraSettings() if args.lora else None
    with torch_threads(args.threads), tempfile.TemporaryDirectory(prefix="bench-trl-") as out:
        print(f"torch threads {torch.get_num_threads()}; load average before {_loadavg()}", flush=True)
        blocks, throughput = [], []
        for beta in args.beta:
            work = Workload(prompts=texts, group_size=args.group_size, max_new_tokens=args.max_new_tokens,
                            lr=args.lr, beta=beta, lora=lora)
            ours = OursGRPO(path, work)
            trl = None if args.skip_trl else TRLGRPO(path, work, out)
            # Warm-up, untimed: first-call costs (allocator, kernels, lazy imports) on both sides.
            ours.step(time_forward=False)
            if trl is not None:
                trl.step()
            runs = Runs()
            for r in range(args.repeats):
                if trl is not None:
                    runs.trl.append(trl.step())
                    print(f"beta {beta:g} repeat {r + 1}: TRL step {runs.trl[-1].total_s:.2f} s", flush=True)
                runs.ours.append(ours.step())
                print(f"beta {beta:g} repeat {r + 1}: our step {runs.ours[-1].total_s:.2f} s (load {_loadavg()})",
                      flush=True)
            blocks.append((beta, runs))
            throughput.append(throughput_line(runs.ours, runs.trl))
            del ours, trl
        print(f"load average after {_loadavg()}")
    try:
        import trl as trl_module

        trl_version = trl_module.__version__
    except ImportError:
        trl_version = "absent"
    print(f"\nmodel {args.model} ({'LoRA' if lora else 'full fine-tuning'}), {len(texts)} prompts ({args.prompts}) x "
          f"group {args.group_size} = {len(texts) * args.group_size} completions, <= {args.max_new_tokens} new tokens, "
          f"temperature 1, lr {args.lr:g}; TRL {trl_version}; medians of {args.repeats} after one warm-up step each\n")
    print("| beta | trainer | generation s | scoring s | update s | step s | prompt + generated tokens |")
    print("|---|---|---|---|---|---|---|")
    for beta, runs in blocks:
        print("\n".join(markdown_rows(beta, runs)))
    print()
    for beta, line in zip(args.beta, throughput):
        print(f"beta {beta:g}: {line}")


if __name__ == "__main__":
    main()
