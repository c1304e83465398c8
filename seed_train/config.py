"""Every hyperparameter of a SEED run, in one dataclass.

Each field's ``help`` doubles as its CLI help (``seed-train train --help``). A config loads from YAML
(``--config run.yaml``) and CLI flags override it; ``__post_init__`` validates everything at start
and names the offending field.

Baselines and controls are flags, not code paths of their own. The paper's baselines, by name
(``BASELINES``; ``cfg.arm("GRPO")`` applies one):

============================  ============================================================
GRPO                          no Stage 1 + no OPD: ``--stage1-demos 0 --opd-coef 0``
SFT+GRPO                      Stage 1 + no OPD: ``--opd-coef 0`` (``stage1_demos`` > 0)
SEED                          Stage 1 + OPD (the defaults)
============================  ============================================================

Controls (each pinned by tests/test_skill_sources.py):

============================  ============================================================
static skill library          ``--skill-source static --static-skills FILE``
shuffled skills               ``--skill-source shuffled`` (another episode's skill, same group)
shuffled across tasks         ``--skill-source shuffled_tasks`` (an episode's skill of another task)
shuffled across categories    ``--skill-source shuffled_categories`` (an episode's skill of another category)
wrong rule (own skills)       ``--skill-source wrong_rule`` (the policy's skills rewritten by the env's wrong_rule)
wrong rule (static library)   ``--skill-source static_wrong --static-skills FILE`` (the library, rewritten so)
empty skill                   ``--skill-source empty`` (the skill header with no rule)
frozen analyzer               ``--skill-source frozen`` (θ_0 analyses, on every generation backend)
no skills                     ``--skill-source none`` (no teacher pass)
constant gate                 ``--opd-gate constant`` (g = 1)
GiGPO step advantages         ``--advantage gigpo``
============================  ============================================================

The conventions of the paper's released code (verl-agent) are the defaults: ``group_stats steps``,
``format_penalty_on step``, ``reward_mode success``, ``dual_clip_c 3`` (docs/trainer.md).
"""
from __future__ import annotations

import argparse
import json
import math
import numbers
import re
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, get_args, get_type_hints


class SetupError(ValueError):
    """A run that cannot start as asked: a launch setting, checkpoint or model that does not fit.

    Raised by the trainer before any training; the CLI prints the message (which names the setting) and
    exits with status 2, as it does for a bad config field.
    """

# The choices of enumerated fields. Each list's owner is the module that acts on it (config.py stays free
# of torch and of the env packages, so it restates them); tests/test_config_owners.py holds them equal.
SKILL_SOURCES = ("on_policy", "shuffled", "shuffled_tasks", "shuffled_categories", "wrong_rule", "frozen", "static",
                 "static_wrong", "empty", "none")
OPD_GATES = ("sigmoid", "constant")
GROUP_STATS = ("steps", "episodes")
FORMAT_PENALTY_ON = ("step", "episode")
REWARD_MODES = ("success", "env")
# The paper's baselines, by name: the fields each sets (SeedConfig.arm). SFT+GRPO and SEED need Stage 1.
BASELINES: dict[str, dict[str, Any]] = {
    "GRPO": {"stage1_demos": 0, "stage1_from": None, "opd_coef": 0.0},
    "SFT+GRPO": {"opd_coef": 0.0},
    "SEED": {},
}
ADVANTAGES = ("grpo", "grpo_mean", "gigpo")
#: What a group with a failed member does (seed_train.trainer: its owner, tested equal).
FAILED_GROUP = ("drop", "keep")
ENV_BACKENDS = ("sync", "async", "ray")
GENERATION_BACKENDS = ("hf", "vllm")
#: The key of a ``panels`` entry that is the evaluation's task limit, not a gym.make argument.
PANEL_LIMIT = "eval_limit"

def _read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML config file, or in the recipe of that name (``--config ezpoints-cpu``, a file of
    ``seed_train/recipes``: a file path that exists wins); every way it can be unreadable is a ValueError
    naming ``config``."""
    import yaml

    from seed_train.recipes import recipe_names, recipe_path

    file = Path(path).expanduser()
    if not file.exists() and recipe_path(str(path)) is not None:
        file = recipe_path(str(path))
    if not file.exists():
        raise ValueError(f"config: file not found: {str(path)!r} (nor a recipe of that name; recipes: "
                         f"{', '.join(recipe_names())})")
    if not file.is_file():
        raise ValueError(f"config: {str(path)!r} is not a file")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"config: cannot read {str(path)!r}: {e}") from e
    except yaml.YAMLError as e:  # its text spans lines (the offending line quoted): keep the error one line
        raise ValueError(f"config: {str(path)!r} is not valid YAML: {' '.join(str(e).split())}") from e
    if not isinstance(data, dict):
        raise ValueError(f"config: {str(path)!r}: expected a mapping of field: value")
    return data


TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def coerce_field(name: str, hint: Any, value: Any) -> Any:
    """``value`` as the type ``hint`` of config field ``name``, or a ValueError naming the field.

    YAML and hand-written dicts bring values of the wrong type: PyYAML reads ``1e-5`` (no dot) as the
    string '1e-5', and a quoted ``"false"`` is a non-empty, truthy string. Numeric strings become numbers,
    the usual yes/no words (and 0/1) become bools, and anything else of the wrong type is refused, as is
    a non-finite float (``.inf``, ``.nan``: no field has a use for one, and inf lr trains to NaN).
    """
    args = get_args(hint)  # (int, NoneType) for int | None; () for a plain type
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint

    def refuse(what: str) -> ValueError:
        return ValueError(f"config field '{name}': {what} (got {value!r})")

    if value is None:
        if optional:
            return None
        raise refuse(f"expected {_TYPE_WORDS.get(base, 'a value')}, not null")
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, numbers.Integral) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS:
            return value.strip().lower() in TRUE_WORDS
        raise refuse(f"expected true or false ({'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)})")
    if base is int:
        number = _number(value)
        if number is None or isinstance(number, float) and not (math.isfinite(number) and number.is_integer()):
            raise refuse("expected an integer")
        return int(number)
    if base is float:
        number = _number(value)
        if number is None:
            raise refuse("expected a number")
        if not math.isfinite(number):
            raise refuse("expected a finite number")
        return float(number)
    if base is str:
        if not isinstance(value, str):
            raise refuse("expected a string")
        return value
    if base is list:
        if not isinstance(value, (list, tuple)):
            raise refuse("expected a list")
        return list(value)
    if base is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise refuse("expected a mapping with string keys")
        return value
    return value


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
               dict: "a mapping"}


def _number(value: Any) -> int | float | None:
    """An int or float from a number or a numeric string ('1e-5', ' 16 '); None for anything else (bools too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        for parse in (int, float):
            try:
                return parse(text)
            except ValueError:
                pass
    return None


def _f(default: Any, help: str, **kw: Any) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class SeedConfig:
    # --- environment
    env_id: str = _f("seed/Sokoban-v0", "registered env id, e.g. seed/EZPoints-v0")
    env_kwargs: dict = _f({}, "extra gym.make arguments (JSON on the CLI)")
    train_split: str = _f("train", "split the policy is trained on")
    stage1_split: str | None = _f(None, "split Stage 1's demonstrations are drawn from (default: train_split); e.g. "
                                        "CodeLock's warmup families, so Stage 1 teaches the format and reading a "
                                        "skill without teaching Stage 2's tasks")
    eval_split: str = _f("unseen", "split evaluated before and after training")
    panels: dict = _f({}, "named evaluation panels, usable wherever a split is named (eval_split, experiment "
                          "--splits): NAME -> {split: SPLIT, other gym.make arguments}, the arguments added to "
                          "env_kwargs for that panel only, and optionally eval_limit: N, the panel's own task "
                          "limit instead of eval_limit (0: all its tasks); e.g. ALFWorld's real unseen games beside the generated "
                          "ones: {real-unseen: {split: valid_unseen, data_dir: PATH}} (JSON on the CLI)")
    max_steps: int | None = _f(None, "episode length; default: the env's agent budget (Sokoban 15, EZPoints 8, ...)")
    history: int | None = _f(None, "past (observation, action) pairs in the prompt; default: the env's own")
    template: str | None = _f(None, "generic prompt template (default, compact); default: the env's own wording")
    action_format: str | None = _f(None, "how actions are written: tags (<action>..</action>), plain, boxed, json, "
                                         "search_r1; default: the env's own (its agent defaults; tags unless it "
                                         "declares another)")
    # --- policy
    model: str = _f("smollm2-135m", "local Hugging Face model folder, or smollm2-135m (embedded)")
    lora: bool = _f(True, "train LoRA adapters (peft) instead of all weights")
    lora_r: int = _f(16, "LoRA rank")
    lora_alpha: int = _f(32, "LoRA alpha")
    lora_targets: list = _f(["q_proj", "k_proj", "v_proj", "o_proj"], "modules LoRA adapts")
    dtype: str = _f("float32", "float32, bfloat16 or float16")
    device: str = _f("cpu", "torch device: cpu, cuda, cuda:1, ...")
    gradient_checkpointing: bool = _f(False, "recompute each layer's activations in the backward pass instead of "
                                             "keeping them (transformers' non-reentrant checkpointing; the paper's "
                                             "launchers turn it on): Stage 1's and Stage 2's updates keep about one "
                                             "layer's activations at a time, at the cost of a second forward, and "
                                             "run every sample's prompt whole (a shared head's cache cannot be replayed)")
    freeze_vision: bool = _f(True, "vision-language models: keep the vision tower frozen (--no-freeze-vision "
                                   "trains it too; needs --no-lora, since LoRA adapts the language part only)")
    # --- rollout
    tasks_per_iteration: int = _f(4, "tasks (groups) sampled per Stage 2 iteration")
    group_size: int = _f(8, "rollouts per task (GRPO group); all start from the same task and seed")
    max_new_tokens: int = _f(48, "tokens generated per step")
    max_prompt_tokens: int = _f(0, "prompt tokens a turn may take: the oldest history is left out first, then an "
                                   "episode whose prompt still does not fit ends truncated (ended_by "
                                   "prompt_overflow, counted in metrics and evaluations); 0: the model's context "
                                   "length minus max_new_tokens")
    env_step_timeout_s: float = _f(300.0, "seconds one env reset or step may take; past it the env counts as hung: "
                                          "its episode ends as an env failure and the env is replaced (0: no "
                                          "limit; docs/fault-policy.md)")
    env_episode_timeout_s: float = _f(1800.0, "seconds the env's own calls of one episode may take together (the "
                                             "model's time not counted); past it the episode ends as an env "
                                             "failure (0: no limit)")
    env_backend: str = _f("sync", "where envs step: sync (this process), async (gymnasium AsyncVectorEnv "
                                  "subprocesses) or ray (Ray actors; extra 'ray')")
    env_urls: list = _f([], "OpenEnv servers serving env_id (seed-envs serve ENV --splits ...; "
                            "docs/integrations-openenv.md): every env of the run is then a seed/Remote-v0 session on "
                            "one of them, by env slot in turn; each must serve the run's splits, max_steps and "
                            "env_kwargs (checked at start)")
    generation_backend: str = _f("hf", "rollout generation: hf (transformers generate) or vllm (extra 'vllm', GPU)")
    temperature: float = _f(1.0, "sampling temperature for rollouts")
    top_p: float = _f(1.0, "nucleus sampling for rollouts, the analyzer and sampled evaluations (eval_temperature > 0)")
    prefix_sharing: bool = _f(True, "hf generation: prompts sharing a head (a group's identical first prompts, the "
                                    "system prompt and task line of later turns) run that head's KV once and only "
                                    "their own tails, and a rollout's next prompt starts from the KV of the part "
                                    "it shares with its previous turn (same tokens and log-probs; "
                                    "--no-prefix-sharing runs every prompt whole)")
    logprob_temperature: bool = _f(True, "log-probs of sampled tokens (old, reference, teacher and updated policy) "
                                         "computed at the sampling temperature, as verl does; --no-logprob-temperature: "
                                         "at T=1 (the unmodified policy)")
    # --- Stage 1 (skill SFT on expert demonstrations)
    stage1_demos: int = _f(32, "expert episodes for Stage 1; 0 skips Stage 1")
    stage1_epochs: int = _f(2, "passes over the Stage 1 data")
    stage1_lr: float = _f(2e-4, "Stage 1 learning rate")
    stage1_batch_size: int = _f(8, "Stage 1 samples per optimizer step")
    stage1_skill_repeats: int = _f(1, "copies of each skill pair per Stage 1 epoch (act pairs: one): more passes over "
                                      "skill writing than over acting, so a light Stage 1 that leaves Stage 2 room to "
                                      "act still teaches the analyzer its JSON skill format")
    stage1_balance_categories: bool = _f(False, "draw Stage 1's demo tasks with the task categories equally often "
                                                "(one reset per train task to read its category) instead of as the "
                                                "train panel holds them: a rare category (EZPoints' product deals, one train deal in "
                                                "eight) gets as many demos, and skills, as a common one")
    stage1_failure_demos: int = _f(0, "extra Stage 1 episodes on other train tasks, moves random (an admissible "
                                      "action; where the env lists none, one of its verbs on words of the page): they "
                                      "mostly fail, so the analyzer learns the env's failure rules, not only success "
                                      "ones (an expert that replans from any state rarely loses; on Sokoban never). "
                                      "Each gives a skill pair, and act pairs only where the move played was the expert's")
    stage1_failure_noise: float = _f(1.0, "the share of a failure demo's moves that are random (the expert plays the "
                                          "rest): 1 is random play; lower loses less often, and on Sokoban no more "
                                          "varied (32 demos: 21 lost, 17 of them 'back and forth', at 1; 12 lost, 8 of "
                                          "them, at 0.6; more demos vary them: docs/results.md). Which rules the demos "
                                          "teach: benchmarks/failure_demo_rules.py")
    stage1_skill_acting: bool = _f(False, "Stage 1 also trains acting with the demo's skill block in the prompt (OPD's "
                                          "teacher prompt): the policy learns to read a skill, so the teacher can differ "
                                          "from the student in the skill's direction (a small model otherwise reacts to "
                                          "the block's presence, not its content)")
    annotator_model: str | None = _f(None, "local model that writes Stage 1 skills (default: rule-based annotator)")
    stage1_from: str | None = _f(None, "trainable weights of a finished Stage 1 (a run's checkpoints/stage1.safetensors, "
                                       "same model and LoRA settings) to start Stage 2 from instead of running Stage 1; "
                                       "seed-train experiment shares one Stage 1 per seed among its arms this way")
    # --- Stage 2 (GRPO + gated on-policy skill distillation)
    iterations: int = _f(10, "Stage 2 iterations (collect, analyze, update)")
    stage2_balance_categories: bool = _f(False, "draw each Stage 2 iteration's tasks with the task categories equally "
                                                "often, as --stage1-balance-categories does for the demos: a rare "
                                                "category gets as many groups, skills and OPD tokens as a common one")
    lr: float = _f(1e-6, "Stage 2 learning rate (paper: 1e-6 full fine-tuning; LoRA wants ~1e-5..1e-4)")
    ppo_epochs: int = _f(1, "passes over each iteration's samples")
    minibatch_size: int = _f(16, "samples (env steps) per optimizer step")
    micro_batch_size: int = _f(0, "samples per forward/backward inside a minibatch (Stage 2) or batch (Stage 1): "
                                  "gradients accumulate over its micro-batches, so the update is the minibatch's "
                                  "(the same token-mean denominators) in the memory of a micro-batch; 0: the whole "
                                  "minibatch in one pass. Long prompts (ALFWorld, WebShop, search QA) need it on "
                                  "small machines")
    clip_eps: float = _f(0.2, "PPO clip range")
    dual_clip_c: float = _f(3.0, "dual-clip PPO: a token with negative advantage A has its loss capped at -c*A "
                                 "(verl clip_ratio_c; the paper's code uses 3); must be > 1, 0 disables")
    kl_coef: float = _f(0.01, "KL to the reference policy (low-variance estimator); 0 disables")
    opd_coef: float = _f(0.01, "lambda_opd of the OPD term; 0 gives plain GRPO")
    opd_beta: float = _f(5.0, "beta_opd of the gate sigma(beta * delta)")
    opd_gate: str = _f("sigmoid", "OPD gate: sigmoid (SEED, g = sigma(beta * delta)) or constant (control: g = 1, "
                                  "content-free self-imitation: the OPD gradient is -g * grad log pi on the student's own sampled "
                                  "tokens, so with g = 1 the teacher drops out)")
    format_penalty: float = _f(0.1, "reward penalty for an output whose action cannot be parsed")
    format_penalty_on: str = _f("step", "who pays the format penalty: step (the paper's code: only the invalid step's "
                                        "sample score) or episode (the episode return, so every step of the episode)")
    group_stats: str = _f("steps", "GRPO group mean/std over the group's step samples (the paper's code: episodes "
                                   "weighted by length) or over its episodes (one return each)")
    failed_group: str = _f("drop", "a group with a member whose env failed or whose reward is NaN/inf: drop (the "
                                   "whole group leaves the update: a partial group biases its advantages) or keep "
                                   "(its survivors are trained on); counted as groups_dropped (docs/fault-policy.md)")
    max_failed_iterations: int = _f(3, "stop the run (one line) after this many consecutive Stage 2 iterations in "
                                       "which every episode failed; such an iteration makes no update (0: never stop)")
    reward_mode: str = _f("success", "env reward passed to every env unless env_kwargs sets it: success (SEED: 10 on "
                                     "success, else 0) or env (the env's own reward); evaluation reports success/score either way")
    advantage: str = _f("grpo", "grpo (mean/std), grpo_mean (mean only) or gigpo (step-level)")
    gigpo_gamma: float = _f(0.95, "GiGPO discount for step-level returns")
    gigpo_omega: float = _f(1.0, "GiGPO weight of the step-level advantage")
    grad_clip: float = _f(1.0, "max gradient norm")
    # --- skills
    skill_source: str = _f("on_policy", "where skills come from: on_policy (θ_k analyses), shuffled (another episode's, "
                                        "same group), shuffled_tasks (an episode's of another task), "
                                        "shuffled_categories (an episode's of another task category), wrong_rule (θ_k's "
                                        "skills rewritten by the env's wrong_rule to be wrong for the category), frozen "
                                        "(θ_0 analyses), static (--static-skills file), static_wrong (that file rewritten "
                                        "by wrong_rule), empty (skill header, no rule) or none")
    static_skills: str | None = _f(None, "JSON file {category: skill} for --skill-source static / static_wrong")
    analyzer_retries: int = _f(2, "extra attempts when the analyzer's JSON does not parse")
    skill_min_words: int = _f(5, "a skill shorter than this is invalid (its tokens get no OPD term)")
    skill_max_new_tokens: int = _f(96, "tokens the analyzer may generate")
    analyzer_temperature: float | None = _f(None, "sampling temperature of the analyzer pass (default: --temperature); "
                                                  "below 1 more of its answers parse, so fewer retries run")
    analyzer_images: int = _f(0, "vision-language models: the analyzer sees the images of the last N steps it "
                                 "shows; 0 shows the trajectory as text, each step's image an [image] placeholder")
    # --- evaluation
    eval_limit: int = _f(0, "evaluate only the first N panel tasks (0 = full panel)")
    eval_temperature: float = _f(0.0, "evaluation decoding: 0 = greedy; > 0 samples at this temperature, each "
                                      "episode with its own seed from --seed, the task and the sample index, so "
                                      "two policies evaluated with the same --seed draw the same noise (paired)")
    eval_samples: int = _f(1, "episodes per panel task in evaluation (> 1 needs --eval-temperature > 0)")
    eval_before: bool = _f(True, "evaluate before training")
    eval_after: bool = _f(True, "evaluate after training")
    eval_after_stage1: bool = _f(True, "also evaluate between Stage 1 and Stage 2 (eval_after_stage1.*; only when "
                                       "Stage 1 runs or stage1_from is set, eval_after is on and iterations > 0)")
    # --- operations
    seed: int = _f(0, "seed of everything (tasks, sampling, init)")
    threads: int = _f(0, "torch intra-op CPU threads; 0 = the CPUs this process may use (affinity, cgroup "
                         "quota) shared among this machine's data-parallel ranks (seed_train/threads.py)")
    output_dir: str = _f("runs/seed", "run folder: config, logs, trajectories, checkpoints, plots")
    checkpoint_every: int = _f(5, "save a checkpoint every N iterations (0: only at the end)")
    save_final: bool = _f(True, "save the trained policy (LoRA merged) to OUTPUT_DIR/final for seed-eval")
    resume: str | None = _f(None, "checkpoint folder to resume from")

    def __post_init__(self) -> None:
        def need(cond: bool, name: str, what: str) -> None:
            if not cond:
                raise ValueError(f"config field '{name}': {what} (got {getattr(self, name)!r})")

        # Types first (YAML's '1e-5' is a str, "false" a truthy str), so the checks below compare numbers.
        for name, hint in _field_hints(type(self)).items():
            setattr(self, name, coerce_field(name, hint, getattr(self, name)))
        need(isinstance(self.env_id, str) and self.env_id, "env_id", "must be a registered env id")
        need(isinstance(self.env_kwargs, dict), "env_kwargs", "must be a mapping")
        need("split" not in self.env_kwargs, "env_kwargs", "the split is set by train_split and eval_split, "
             "not env_kwargs")
        need(isinstance(self.panels, dict) and all(
            isinstance(name, str) and name and isinstance(panel, dict) and isinstance(panel.get("split"), str)
            and panel["split"] for name, panel in self.panels.items()), "panels",
            "must map each panel name to a mapping with a 'split' (and any other gym.make arguments)")
        for name, panel in self.panels.items():
            limit = panel.get(PANEL_LIMIT, 0)
            need((isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0),
                 "panels", f"({name}): {PANEL_LIMIT} must be a non-negative int (the panel's own task limit; "
                           f"0: all its tasks), got {limit!r}")
        for name in ("max_steps", "history"):
            value = getattr(self, name)
            need(value is None or (isinstance(value, int) and value >= (1 if name == "max_steps" else 0)), name,
                 "must be a non-negative int" if name == "history" else "must be a positive int")
        from wrappers.action_parser import FORMATS  # the parser owns the list (wrappers imports gymnasium only)

        need(self.action_format is None or self.action_format in FORMATS, "action_format",
             f"must be one of {', '.join(FORMATS)}")
        need(self.dtype in ("float32", "bfloat16", "float16"), "dtype", "must be float32, bfloat16 or float16")
        need(self.lora_r >= 1 and self.lora_alpha >= 1, "lora_r", "LoRA rank and alpha must be >= 1")
        need(isinstance(self.lora_targets, list) and self.lora_targets
             and all(isinstance(t, str) and t for t in self.lora_targets), "lora_targets",
             "must be a non-empty list of module names")
        for name in ("tasks_per_iteration", "group_size", "max_new_tokens", "stage1_epochs", "stage1_batch_size",
                     "stage1_skill_repeats",
                     "ppo_epochs", "minibatch_size", "skill_max_new_tokens", "eval_samples"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, name, "must be an int >= 1")
        for name in ("stage1_demos", "stage1_failure_demos", "iterations", "analyzer_retries", "skill_min_words", "eval_limit", "max_prompt_tokens",
                     "max_failed_iterations",
                     "micro_batch_size", "checkpoint_every", "analyzer_images", "threads"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 0, name, "must be an int >= 0")
        need(isinstance(self.stage1_failure_noise, (int, float)) and 0 < self.stage1_failure_noise <= 1,
             "stage1_failure_noise", "must be a share in (0, 1]")
        need(self.freeze_vision or not self.lora, "freeze_vision",
             "a trained vision tower needs full fine-tuning (--no-lora): LoRA adapts the language part only")
        need(self.env_backend in ENV_BACKENDS, "env_backend", f"must be one of {ENV_BACKENDS}")
        need(isinstance(self.env_urls, list) and all(isinstance(u, str) and re.match(r"^(https?|wss?)://\S+$", u)
                                                      for u in self.env_urls),
             "env_urls", "must be a list of server URLs (http://host:port)")
        need(self.generation_backend in GENERATION_BACKENDS, "generation_backend",
             f"must be one of {GENERATION_BACKENDS}")
        need(self.generation_backend != "vllm" or self.device.startswith("cuda"), "generation_backend",
             "vllm needs a CUDA device (set --device cuda)")
        need(not (self.generation_backend == "vllm" and self.logprob_temperature and self.temperature != 1.0),
             "logprob_temperature", "the vllm backend records log-probs at T=1: with --temperature other than 1 "
             "set --no-logprob-temperature")
        for name in ("env_step_timeout_s", "env_episode_timeout_s"):
            value = getattr(self, name)
            need(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                 and value >= 0, name, "must be a number of seconds >= 0 (0: no limit)")
        need(self.temperature > 0, "temperature", "must be > 0")
        need(self.analyzer_temperature is None or self.analyzer_temperature > 0, "analyzer_temperature", "must be > 0")
        need(self.eval_temperature >= 0, "eval_temperature", "must be >= 0 (0 = greedy)")
        need(self.eval_samples == 1 or self.eval_temperature > 0, "eval_samples",
             "several episodes per task need sampling: set --eval-temperature > 0 (greedy plays each task one way)")
        need(0 < self.top_p <= 1, "top_p", "must be in (0, 1]")
        for name in ("lr", "stage1_lr"):
            need(getattr(self, name) > 0, name, "must be > 0")
        for name in ("kl_coef", "opd_coef", "opd_beta", "format_penalty", "grad_clip", "gigpo_omega"):
            need(getattr(self, name) >= 0, name, "must be >= 0")
        need(0 < self.clip_eps < 1, "clip_eps", "must be in (0, 1)")
        need(0 <= self.gigpo_gamma <= 1, "gigpo_gamma", "must be in [0, 1]")
        need(self.advantage in ADVANTAGES, "advantage", f"must be one of {ADVANTAGES}")
        need(self.skill_source in SKILL_SOURCES, "skill_source", f"must be one of {SKILL_SOURCES}")
        need(self.skill_source != "shuffled_tasks" or self.tasks_per_iteration >= 2, "skill_source",
             "shuffled_tasks takes each episode's skill from another task: needs tasks_per_iteration >= 2")
        need(self.opd_gate in OPD_GATES, "opd_gate", f"must be one of {OPD_GATES}")
        need(self.group_stats in GROUP_STATS, "group_stats", f"must be one of {GROUP_STATS}")
        need(self.failed_group in FAILED_GROUP, "failed_group", f"must be one of {FAILED_GROUP}")
        need(self.format_penalty_on in FORMAT_PENALTY_ON, "format_penalty_on", f"must be one of {FORMAT_PENALTY_ON}")
        need(self.reward_mode in REWARD_MODES, "reward_mode", f"must be one of {REWARD_MODES}")
        need(self.dual_clip_c == 0 or self.dual_clip_c > 1, "dual_clip_c",
             "must be > 1 (0 disables the dual clip)")
        need(self.skill_source not in ("static", "static_wrong") or bool(self.static_skills), "static_skills",
             f"is required with --skill-source {self.skill_source}")
        need(self.skill_source != "shuffled_categories" or self.stage2_balance_categories, "skill_source",
             "shuffled_categories takes each episode's skill from another category: needs --stage2-balance-categories "
             "(every iteration then holds every category)")
        if self.static_skills:
            need(Path(self.static_skills).is_file(), "static_skills", "file not found")
        if self.resume:
            need(Path(self.resume).is_dir(), "resume", "checkpoint folder not found")
        if self.stage1_from:
            need(Path(self.stage1_from).is_file(), "stage1_from", "file not found")

    # ------------------------------------------------------------ derived values
    def panel(self, name: str) -> tuple[str, dict[str, Any]]:
        """The env split and gym.make arguments (``env_kwargs`` with the panel's own) of a split or panel
        name: a name in ``panels`` is that panel, any other name a split of the env with ``env_kwargs``."""
        if name not in self.panels:
            return name, dict(self.env_kwargs)
        own = dict(self.panels[name])
        own.pop(PANEL_LIMIT, None)  # the evaluation's, not the env's
        return own.pop("split"), {**self.env_kwargs, **own}

    def panel_limit(self, name: str) -> int | None:
        """How many tasks an evaluation on split or panel ``name`` plays: the panel's own ``eval_limit``
        where it gives one (e.g. all 38 real ALFWorld games beside 12 generated ones a split), else
        ``eval_limit``."""
        return self.panels.get(name, {}).get(PANEL_LIMIT, self.eval_limit)

    def env_default(self, name: str) -> Any:
        """``max_steps`` / ``history`` / ``action_format`` / ``template``: the config's value, else the env's own
        agent default.

        The env declares its defaults as data (``agent_defaults`` on its class, e.g.
        ``seed_envs.core.AgentDefaults``), read from the registry entry point without building the env.
        ``template`` stays None: the prompt renderer then uses the env's own wording.
        """
        value = getattr(self, name)
        if value is not None or name == "template":
            return value
        if name not in ("max_steps", "history", "action_format"):
            raise ValueError(f"env_default: expected max_steps, history, action_format or template, got {name!r}")
        import gymnasium as gym

        import seed_envs  # noqa: F401  (registers the ids; imported here so the config module stays light)
        from wrappers.stack import default_action_format, default_history, default_max_steps

        read = {"history": default_history, "max_steps": default_max_steps,
                "action_format": default_action_format}[name]
        try:
            return read(self.env_id)
        except (gym.error.Error, ImportError):  # an id not registered (or its package missing): the generic
            # defaults; preflight's env check then names the bad --env-id
            return read(None)

    def arm(self, name: str) -> SeedConfig:
        """This config as the paper's baseline ``name`` (a key of ``BASELINES``: GRPO, SFT+GRPO, SEED).

        SFT+GRPO and SEED need Stage 1 (``stage1_demos`` > 0 or ``stage1_from``); a config without it
        is refused rather than silently run as GRPO.
        """
        if name not in BASELINES:
            raise ValueError(f"arm: expected one of {sorted(BASELINES)}, got {name!r}")
        if name != "GRPO" and not (self.stage1_demos or getattr(self, "stage1_from", None)):
            raise ValueError(f"config field 'stage1_demos': the {name} arm needs Stage 1 (got 0)")
        known = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in BASELINES[name].items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeedConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known, key=str)  # (YAML keys need not be strings)
        if unknown:
            raise ValueError(f"config: unknown fields {unknown}")
        return cls(**data)

    @classmethod
    def from_yaml(cls, path: str | Path) -> SeedConfig:
        return cls.from_dict(_read_yaml(path))

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, defaults: dict[str, Any] | None = None) -> None:
        """One ``--flag`` per field, its help from the field's metadata; defaults stay unset (None).

        ``defaults``: values a command puts in place of the field defaults (``seed-train quickstart``'s),
        shown as the defaults in the help."""
        hints = get_type_hints(cls)
        parser.add_argument("--config", default=None, help="YAML file of field: value (flags override it)")
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            default = (defaults or {}).get(f.name, default)
            help_text = f"{f.metadata['help']} (default: {default!r})"
            hint = hints[f.name]
            if hint is bool:
                parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            elif hint in (list, dict):
                parser.add_argument(flag, dest=f.name, type=cls.json_argument, default=None, help=help_text + " [JSON]")
            else:
                base = {int: int, float: float, str: str,
                        int | None: int, float | None: float, str | None: str}.get(hint, str)
                parser.add_argument(flag, dest=f.name, type=base, default=None, help=help_text)

    @staticmethod
    def json_argument(text: str) -> Any:
        """A JSON flag value; argparse reports a bad one as ``argument --flag: invalid JSON ...``."""
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"invalid JSON ({e}): {text!r}") from None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SeedConfig:
        data = _read_yaml(args.config) if getattr(args, "config", None) else {}
        for f in fields(cls):
            value = getattr(args, f.name, None)
            if value is not None:
                data[f.name] = value
        return cls.from_dict(data)


def field_default(name: str) -> Any:
    """The default of SeedConfig field ``name`` (a fresh copy for a list or dict): what other commands that
    take a field's value (seed-eval) fall back to, so no default is stated twice."""
    f = {f.name: f for f in fields(SeedConfig)}[name]
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]


@lru_cache(maxsize=None)
def _field_hints(cls: type) -> dict[str, Any]:
    """Each field's resolved type hint (``int | None``, ``float``, ...), which :func:`coerce_field` enforces."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def flag_table_markdown() -> str:
    """The markdown table of every field (flag, default, help) that docs/trainer.md embeds.

    Generated from the dataclass so the documentation cannot drift from the code; tests/test_docs.py
    checks the page holds exactly this table.
    """
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    for f in fields(SeedConfig):
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        meaning = f.metadata["help"].replace("|", "\\|")
        default_text = json.dumps(default) if isinstance(default, (list, dict)) else repr(default)
        rows.append(f"| `--{f.name.replace('_', '-')}` | `{default_text}` | {meaning} |")
    return "\n".join(rows)
