"""Skill validity after Stage 1: how often the policy's own skills are valid on fresh rollouts.

    OMP_NUM_THREADS=2 nice python benchmarks/skill_validity.py [--env-id seed/EZPoints-v0] [--demos 24]
        [--epochs 1] [--lr 5e-4] [--skill-repeats 1] [--skill-acting] [--rollouts 24] [--analyzer-retries 0] [--model smollm2-135m] [--seed 0]
        [--analyzer-temperatures 1.0 0.7 0.5] [--analyzer-budgets 64 96] [--rollout-top-p 0.9 0.8]
    OMP_NUM_THREADS=2 nice python benchmarks/skill_validity.py --config sokoban-cpu [--rollouts 24]
        [--trajectories runs/validity.jsonl]

Runs Stage 1 with the trainer's own pieces (``seed_train.trainer.load`` and ``run_stage1``; defaults:
the quickstart's settings, ``seed_train.cli.QUICKSTART``, or a recipe's or YAML file's with ``--config``,
which the flags given override), then plays fresh rollouts of train tasks
with the Stage 1 policy and runs Stage 2's analyzer pass on them (``generate_skills``: the same
analyzer prompt, sampling and ``skill_max_new_tokens``). Prints the share of steps whose action parsed
and was valid (issue 30's target: >= 90%) with examples of the answers that did not parse and the actions
the env refused, the skill valid rate (DESIGN.md's target: >= 80% after
Stage 1), split by outcome, how many invalid analyzer answers stopped at the token budget (cut: more
tokens might have made them valid) rather than by themselves, the share of valid skills that replay two or more of their
episode's consecutive actions, and example skills; with ``--rollout-top-p`` the same Stage 1 policy replays the
same tasks and sampling seeds at other nucleus sizes, each with the actions' and skills' validity and what
Stage 2 would have to learn from (groups whose returns differ, distinct answer sequences per group); what an
invalid answer looks like is shown from a fresh sample of the same prompts. On another env than EZPoints, the quickstart's EZPoints-only
settings (template, history, max_steps) give way to the env's defaults.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from collections import Counter

import numpy as np

from seed_envs.hindsight import replays_actions
from seed_train.cli import QUICKSTART
from seed_train.config import SeedConfig, _read_yaml
from seed_train.evaluate import panel_of, wilson_interval
from seed_train.rollout import EnvPool, group_jobs, run_episodes, sample_tasks
from seed_train.skill_sources import AnalyzerAnswer
from seed_train.skills import parse_skill
from seed_train.trainer import env_spec, generate_skills, load, run_stage1
from wrappers import TrajectoryWriter

ENV_SPECIFIC = ("template", "history", "max_steps")  # QUICKSTART's values are for EZPoints


def config(args: argparse.Namespace) -> SeedConfig:
    """The --config file's (or recipe's) settings, else the quickstart's; the flags given override them."""
    given = {"env_id": args.env_id, "model": args.model, "stage1_demos": args.demos, "stage1_epochs": args.epochs,
             "stage1_lr": args.lr, "stage1_skill_repeats": args.skill_repeats,
             "stage1_skill_acting": args.skill_acting or None}
    settings = {**(_read_yaml(args.config) if args.config else QUICKSTART),
                **{k: v for k, v in given.items() if v is not None},
                "seed": args.seed, "eval_before": False, "eval_after": False, "output_dir": "runs/skill_validity"}
    if not args.config and settings["env_id"] != QUICKSTART["env_id"]:
        for key in ENV_SPECIFIC:
            settings.pop(key)
    if args.skill_max_new_tokens:
        settings["skill_max_new_tokens"] = args.skill_max_new_tokens
    if args.analyzer_retries is not None:
        settings["analyzer_retries"] = args.analyzer_retries
    return SeedConfig.from_dict(settings)


def reanalyse(policy, trajectories: list, cfg: SeedConfig, field: str, value, seed: int) -> str:
    """Stage 2's analyzer pass over the same rollouts with one config field replaced; its counts as one line."""
    at = dataclasses.replace(cfg, **{field: value})
    answers: list[AnalyzerAnswer] = []
    t0 = time.perf_counter()
    skills = generate_skills(policy.backend, policy.codec, trajectories, at, seed=seed, answers=answers)
    return f"{analyzer_counts(skills, answers, at)} ({time.perf_counter() - t0:.0f}s)"


def analyzer_counts(skills: list, answers: list[AnalyzerAnswer], cfg: SeedConfig) -> str:
    """Skills valid, valid at the first attempt (the samples a pass without retries draws) and the invalid answers
    cut at the analyzer's token budget, as one phrase."""
    n = len(skills)
    first = sum(a.valid for a in answers if a.attempt == 0)
    invalid = [a for a in answers if not a.valid]
    return (f"{sum(s is not None for s in skills)}/{n} valid with {cfg.analyzer_retries} retries, {first}/{n} at the "
            f"first attempt; {len(answers)} answers, {len(invalid)} invalid, {sum(a.cut for a in invalid)} of them "
            f"cut at {cfg.skill_max_new_tokens}")


def play_and_analyse(policy, spec, jobs: list, cfg: SeedConfig, seed: int) -> tuple[list, list, list, float, float]:
    """The jobs played with the config's sampling (seeded from ``seed``) and Stage 2's analyzer pass on them:
    trajectories, skills, analyzer answers, rollout and analyzer seconds."""
    pool = EnvPool(spec)
    t0 = time.perf_counter()
    trajectories = run_episodes(policy.backend, policy.codec, pool, jobs, max_new_tokens=cfg.max_new_tokens,
                                temperature=cfg.temperature, top_p=cfg.top_p, seed=seed + 1)
    pool.close()
    t1 = time.perf_counter()
    answers: list[AnalyzerAnswer] = []
    skills = generate_skills(policy.backend, policy.codec, trajectories, cfg, seed=seed + 2, answers=answers)
    return trajectories, skills, answers, t1 - t0, time.perf_counter() - t1


def play_summary(trajectories: list, skills: list, answers: list[AnalyzerAnswer], cfg: SeedConfig) -> str:
    """One line: actions and skills valid, and what GRPO could learn from these rollouts. Its advantages are
    zero in a group whose returns are all equal, and a group that writes the same answers four times explores
    nothing; narrower sampling (top_p < 1) can raise validity at the cost of both."""
    steps = [st for t in trajectories for st in t.steps]
    valid_actions = sum(not st.format_error and not st.invalid_action for st in steps)
    low, high = wilson_interval(valid_actions, len(steps)) if steps else (0.0, 0.0)
    groups: dict[str, list] = {}
    for t in trajectories:
        groups.setdefault(t.group_id, []).append(t)
    spread = sum(len({round(t.return_, 6) for t in g}) > 1 for g in groups.values())
    distinct = np.mean([len({tuple(st.response for st in t.steps) for t in g}) for g in groups.values()])
    n = len(trajectories)
    return (f"actions {valid_actions}/{len(steps)} = {valid_actions / max(1, len(steps)):.0%} valid (Wilson 95% "
            f"{low:.0%}-{high:.0%}); skills {analyzer_counts(skills, answers, cfg)}; success "
            f"{sum(t.success for t in trajectories)}/{n}, mean return {np.mean([t.return_ for t in trajectories]):.3f}; "
            f"groups whose returns differ {spread}/{len(groups)}, "
            f"distinct answer sequences per group {distinct:.2f} of {len(trajectories) // max(1, len(groups))}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=None, help="a recipe name (seed-train recipes) or YAML file to start from")
    p.add_argument("--env-id", default=None, help=f"default: {QUICKSTART['env_id']} (or the --config's)")
    p.add_argument("--model", default=None, help=f"default: {QUICKSTART['model']} (or the --config's)")
    p.add_argument("--demos", type=int, default=None, help="Stage 1 demonstrations")
    p.add_argument("--epochs", type=int, default=None, help="Stage 1 epochs")
    p.add_argument("--lr", type=float, default=None, help="Stage 1 learning rate")
    p.add_argument("--skill-repeats", type=int, default=None, help="copies of each skill pair per Stage 1 epoch")
    p.add_argument("--skill-acting", action="store_true", help="Stage 1 also trains acting with the skill in the prompt")
    p.add_argument("--rollouts", type=int, default=24, help="fresh rollouts analysed (groups of the quickstart's size)")
    p.add_argument("--skill-max-new-tokens", type=int, default=0, help="analyzer budget (0: the quickstart's)")
    p.add_argument("--analyzer-retries", type=int, default=None,
                   help="new samples for an invalid skill (default: the quickstart's; DESIGN.md's SEED default is 2)")
    p.add_argument("--analyzer-temperatures", type=float, nargs="*", default=[],
                   help="also run the analyzer pass on the same rollouts at each of these temperatures (the run's "
                        "own is --analyzer-temperature of the config, else its rollout temperature)")
    p.add_argument("--analyzer-budgets", type=int, nargs="*", default=[],
                   help="also run the analyzer pass on the same rollouts with each of these token budgets "
                        "(skill_max_new_tokens): whether answers cut at the run's own budget become valid with more "
                        "tokens, without another Stage 1")
    p.add_argument("--rollout-top-p", type=float, nargs="*", default=[],
                   help="also replay the same tasks with the same sampling seeds at each of these top_p values "
                        "(the Stage 1 policy unchanged), each analysed as Stage 2 would: what narrower sampling "
                        "buys in valid actions and costs in GRPO's signal, without another Stage 1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--examples", type=int, default=6)
    p.add_argument("--trajectories", default=None, metavar="PATH",
                   help="also write the fresh rollouts here (JSONL, wrappers.read_trajectories reads it; each "
                        "episode's skill, or null where invalid, in meta['skill']): what every invalid action was")
    args = p.parse_args()
    cfg = config(args)

    t0 = time.perf_counter()
    policy = load(cfg)
    stage1 = run_stage1(policy, cfg, print)
    policy.backend.sync_weights(policy.model)
    stage1_s = time.perf_counter() - t0

    # Fresh rollouts of train tasks (a draw of its own, apart from Stage 1's demonstration tasks).
    spec = env_spec(cfg, cfg.train_split)
    rng = np.random.default_rng([args.seed, 2_000_003])
    groups = max(1, args.rollouts // cfg.group_size)
    jobs = group_jobs(sample_tasks(panel_of(spec), groups, rng), cfg.group_size, base_seed=args.seed + 10_000,
                      prefix="validity")
    trajectories, skills, answers, rollout_s, analyze_s = play_and_analyse(policy, spec, jobs, cfg, args.seed)

    if args.trajectories:
        with TrajectoryWriter(args.trajectories) as writer:
            for t, s in zip(trajectories, skills):
                t.meta["skill"] = None if s is None else s.text  # as the trainer's own log keeps it
                writer.write(t)

    steps = [st for t in trajectories for st in t.steps]
    parsed = sum(not st.format_error for st in steps)
    valid_actions = sum(not st.format_error and not st.invalid_action for st in steps)
    valid = [s is not None for s in skills]
    by_outcome = Counter((t.success, ok) for t, ok in zip(trajectories, valid))
    replays = [replays_actions(s.text, [st.action for st in t.steps])
               for t, s in zip(trajectories, skills) if s is not None]
    n = len(trajectories)
    print(f"\n{cfg.env_id}  model {cfg.model}  Stage 1: {cfg.stage1_demos} demos, {cfg.stage1_epochs} epoch(s), "
          f"lr {cfg.stage1_lr}, skill pairs x{cfg.stage1_skill_repeats}, {stage1['stage1_pairs']} pairs, loss {stage1['stage1_loss_first']:.3f} -> "
          f"{stage1['stage1_loss_last']:.3f}  analyzer budget {cfg.skill_max_new_tokens} tokens, "
          f"{cfg.analyzer_retries} retries")
    low, high = wilson_interval(valid_actions, len(steps)) if steps else (0.0, 0.0)
    print(f"actions: {valid_actions}/{len(steps)} = {valid_actions / max(1, len(steps)):.0%} of steps valid "
          f"(Wilson 95% {low:.0%}-{high:.0%})   "
          f"(target >= 90%; {parsed / max(1, len(steps)):.0%} parsed, the rest format errors)")
    print(f"skill validity: {sum(valid)}/{n} = {sum(valid) / n:.0%}   (target >= 80%)")
    if cfg.analyzer_retries:
        valid_first = sum(a.valid for a in answers if a.attempt == 0)  # the first attempt alone
        print(f"  first attempt alone: {valid_first}/{n} = {valid_first / n:.0%}")
    # Cut answers: the generation stopped at the token budget. An invalid answer that was cut may only have
    # needed more tokens (a raised skill_max_new_tokens is the fix); one that stopped by itself was wrong.
    invalid_answers = [a for a in answers if not a.valid]
    print(f"  analyzer answers: {len(answers)} ({n} first, {len(answers) - n} retries); invalid {len(invalid_answers)}, "
          f"{sum(a.cut for a in invalid_answers)} of them cut at the {cfg.skill_max_new_tokens}-token budget; "
          f"valid answers cut there: {sum(a.cut and a.valid for a in answers)}")
    for success in (True, False):
        total = by_outcome[(success, True)] + by_outcome[(success, False)]
        if total:
            print(f"  after a {'success' if success else 'failure'}: {by_outcome[(success, True)]}/{total} valid")
    print(f"rollout success: {sum(t.success for t in trajectories)}/{n}")
    unparsed = [st for st in steps if st.format_error]
    if unparsed:
        # What the policy wrote that no action parses from (a cut answer, an answer in another format, ...).
        print(f"format errors: {len(unparsed)}; the first {min(len(unparsed), args.examples)} as written:")
        for st in unparsed[: args.examples]:
            print(f"  step {st.index}: {(st.response or '')[:160]!r}")
    invalid = [st for st in steps if st.invalid_action and not st.format_error]
    if invalid:
        # What the env refused (the action as parsed): the first words name the kind (a click on no button, ...).
        kinds = Counter(" ".join(st.action.split()[:2]) for st in invalid)
        print(f"invalid actions by their first words: {', '.join(f'{k!r} {c}' for k, c in kinds.most_common(8))}")
        for st in invalid[: args.examples]:
            print(f"  step {st.index}: {st.action[:120]!r}")
        # Refused because the policy wanted another action, or because sampling at the rollout temperature drew an
        # unlikely token (a miscopied name)? The least likely sampled token of each answer tells them apart.
        lowest = {ok: [float(np.exp(min(st.response_logprobs))) for st in steps if st.response_logprobs
                       and not st.format_error and st.invalid_action != ok] for ok in (True, False)}
        print("least likely sampled token per answer: " + ", ".join(
            f"{name} median p {np.median(ps):.3f} ({sum(p < 0.1 for p in ps)}/{len(ps)} below 0.1)"
            for name, ps in (("refused", lowest[False]), ("valid", lowest[True])) if ps))
    if replays:
        print(f"valid skills that replay their episode's actions: {sum(replays)}/{len(replays)}")
    print(f"time: load + Stage 1 {stage1_s:.0f}s, rollouts {rollout_s:.0f}s, analyzer {analyze_s:.0f}s")
    print(f"rollout top_p {cfg.top_p:g}: " + play_summary(trajectories, skills, answers, cfg))
    # The same tasks, env seeds and sampling seeds at a narrower nucleus: the rollouts differ only by top_p.
    for top_p in args.rollout_top_p:
        at = dataclasses.replace(cfg, top_p=top_p)
        *replay, replay_rollout_s, replay_analyze_s = play_and_analyse(policy, spec, jobs, at, args.seed)
        print(f"rollout top_p {top_p:g}: " + play_summary(*replay, at)
              + f" ({replay_rollout_s + replay_analyze_s:.0f}s)")
    # The same rollouts and sampling seeds re-analysed with one analyzer setting changed: what the knob buys
    # (more tokens for the answers cut at the budget, a cooler analyzer) without another Stage 1.
    for field, label, values in (("analyzer_temperature", "temperature {:g}", args.analyzer_temperatures),
                                 ("skill_max_new_tokens", "budget {} tokens", args.analyzer_budgets)):
        for value in values:
            print(f"analyzer {label.format(value)}: " + reanalyse(policy, trajectories, cfg, field, value, args.seed + 2))
    print("\nexample skills:")
    for t, s in [(t, s) for t, s in zip(trajectories, skills) if s is not None][: args.examples]:
        print(f"  [{'won ' if t.success else 'lost'}] {s.text}   (summary: {s.summary})")
    bad = [t for t, ok in zip(trajectories, valid) if not ok][:3]
    if bad:
        # A fresh sample of the same prompts: what an invalid answer tends to look like.
        prompts = [policy.codec.encode_analyzer(t, cfg.analyzer_images) for t in bad]
        gens = policy.backend.generate(prompts, max_new_tokens=cfg.skill_max_new_tokens, temperature=cfg.temperature,
                                       top_p=cfg.top_p, seed=args.seed + 3)
        print("\ninvalid answers (re-sampled):")
        for g in gens:
            ok = parse_skill(g.text, cfg.skill_min_words) is not None
            print(f"  {'(valid this time) ' if ok else ''}{'' if g.finished else '(cut at the budget) '}{g.text!r}")


if __name__ == "__main__":
    main()
