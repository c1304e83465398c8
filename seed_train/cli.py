"""``seed-train`` and ``seed-eval``.

    seed-train quickstart                      # the main job: Stage 1 + Stage 2 on EZPoints, before/after eval
    seed-train train --env-id seed/Sokoban-v0 --iterations 50 --opd-coef 0.01 ...
    seed-train train --config run.yaml --opd-coef 0          # GRPO baseline
    seed-eval --model runs/seed/final --env seed/Sokoban-v0 --split unseen --seeds 0 1 2
    seed-eval compare runs/grpo/eval_after.json runs/seed/eval_after.json --labels GRPO SEED --out runs/cmp
    seed-eval aggregate runs/s0/eval_after.json runs/s1/eval_after.json --out runs/agg   # mean ± sd over runs
    seed-train experiment --env-id seed/EZPoints-v0 --arms grpo sft-grpo seed seed-shuffled --seeds 0 1 2 \
        --output-dir runs/exp --iterations 4                                             # seed_train/experiment.py
    seed-train recipes                         # run configs per env: --config sokoban-cpu, --config alfworld-paper
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from seed_train.config import SeedConfig, SetupError, _read_yaml, field_default


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a bad command line ends with one line naming the flag (not the whole usage, which
    for seed-train's ~80 flags buries the message), and exit status 2 as argparse's own."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {one_line(message)} (see {self.prog} --help)\n")


def one_line(error: object) -> str:
    """An error's text on one line (an env's or YAML's message may span several)."""
    return " ".join(str(error).split())


def fail(prog: str, error: object) -> int:
    """Print ``prog: error`` as one line on stderr; the exit status of a refused setting or setup (2)."""
    print(f"{prog}: {one_line(error)}", file=sys.stderr)
    return 2

#: The main job: sized from measurements on a 2-core CPU (docs/quickstart.md, "Quickstart budget").
QUICKSTART = {
    "env_id": "seed/EZPoints-v0",
    "model": "smollm2-135m",
    "template": "compact",  # ~150-token prompts: every prompt token is paid at every step on CPU
    "history": 0,  # EZPoints' observation already shows the formula so far
    "action_format": "plain",
    "max_steps": 5,  # a formula takes 4 tokens; one slack step
    "max_new_tokens": 4,  # an action is one card or operator: at most 2 tokens ("10") and eos
    "stage1_demos": 24,
    "stage1_epochs": 1,
    "stage1_batch_size": 8,
    "stage1_lr": 5e-4,
    # Each skill pair 5 times and 2 analyzer retries: the policy's own skills are valid in >= 80% of Stage 2
    # episodes (11/12 and 12/12 in the two iterations, docs/quickstart.md), so the OPD term acts on most
    # tokens; one skill pair per demo leaves 0-2 of 12 valid.
    "stage1_skill_repeats": 5,
    "iterations": 2,
    "tasks_per_iteration": 3,
    "group_size": 4,
    "lr": 5e-5,
    "kl_coef": 0.0,  # two iterations cannot drift far; saves a reference pass per iteration
    "minibatch_size": 16,
    "skill_max_new_tokens": 48,
    # At 0.7, 79% of the Stage 1 policy's analyzer answers parse at the first attempt (56% at 1.0; 72 answers,
    # docs/quickstart.md), so the two retries rarely run: the analyzer pass is the largest part of an iteration.
    "analyzer_temperature": 0.7,
    "analyzer_retries": 2,
    "eval_limit": 24,
    "checkpoint_every": 0,
    "output_dir": "runs/quickstart",
}


def _parser_train(sub) -> None:
    p = sub.add_parser("train", help="run SEED (or a baseline) from a config and flags")
    SeedConfig.add_arguments(p)
    p = sub.add_parser("quickstart", help="the main job on the embedded default model (~5 min on 2 quiet CPU cores)",
                       description="The train command with the quickstart's values as defaults (shown below); a "
                                   "--config file overrides them and flags override both.")
    SeedConfig.add_arguments(p, defaults=QUICKSTART)
    from seed_train.arms import ARMS, DEFAULT_ARMS
    from seed_train.experiment import DEFAULT_SPLITS

    p = sub.add_parser("experiment", help="arms x training seeds on one env: one Stage 1 per seed shared by its arms, "
                                          "evaluation before / after Stage 1 / after Stage 2, paired tests; resumable",
                       description="Runs every (seed, arm) with the other flags as the base config; a rerun skips "
                                   "finished units and resumes interrupted ones. --output-dir is the experiment folder "
                                   "(default runs/experiment); --seed is replaced by --seeds.")
    SeedConfig.add_arguments(p)
    p.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), metavar="ARM",
                   help=f"arms to run, each a named set of config overrides: {', '.join(ARMS)} "
                        f"(default: {' '.join(DEFAULT_ARMS)}; table in docs/trainer.md); ARM@field=value[,...] "
                        "adds overrides, e.g. sft-grpo@lr=1e-4")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="training seeds (default: 0)")
    p.add_argument("--splits", nargs="+", default=list(DEFAULT_SPLITS),
                   help=f"panels evaluated before, after Stage 1 and after Stage 2 (default: {' '.join(DEFAULT_SPLITS)})")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes that run the units side by side (default 1: one after another): a seed's "
                        "arms start together once its Stage 1 has trained, and further seeds fill free workers; "
                        "each worker uses --threads torch threads, so give --threads 1 (or cores / jobs)")
    p.add_argument("--baselines-only", action="store_true",
                   help="run only each seed's base-model evaluation and Stage 1 (with its evaluation), not the "
                        "arms: the before / after-Stage-1 rows first where the arms take hours; the report lists the "
                        "arms as unfinished, and the same command without this flag adds them in the same folder")
    p.add_argument("--times-from", default=None, metavar="RECORD",
                   help="a record of an earlier run on this env (e.g. docs/results/records/webshop-cpu.jsonl): its "
                        "unit times give the ETA from the start, for each arm or unit kind until this run has timed "
                        "one of its own (their load and machine, not this one's); a record of another env is refused")


def _parser_records(sub) -> None:
    p = sub.add_parser("record", help="add an experiment folder's finished units to a committed record (JSONL, "
                                      "a few hundred KB): per-episode outcomes, skills, metrics, command, versions",
                       description="Creates RECORD or adds the units it lacks; a unit it already holds must have the "
                                   "same evaluation outcomes (a reproduction check). docs/results.md lists the "
                                   "published records.")
    p.add_argument("experiment_dir", help="a seed-train experiment --output-dir")
    p.add_argument("record", help="the record file (e.g. docs/results/records/NAME.jsonl)")
    p = sub.add_parser("report", help="rebuild an experiment's report (report.md, report.json, curves) from its "
                                      "record alone: no model, no experiment folder")
    p.add_argument("record", help="a record file written by seed-train record (or an experiment's record.jsonl)")
    p.add_argument("--out", default=None, help="folder for the report (default: beside the record, NAME-report/)")


def _parser_recipes(sub) -> None:
    p = sub.add_parser("recipes", help="list the shipped run configs per env (cpu: the embedded model on 2 cores; "
                                       "paper: the SEED paper's settings for a GPU); --config NAME runs one",
                       description="Without NAME: every recipe and what it is. With NAME: the recipe's YAML, to "
                                   "read or to copy and edit (seed-train recipes ezpoints-cpu > my.yaml).")
    p.add_argument("name", nargs="?", default=None, help="a recipe to print")


def main_recipes(args) -> int:
    """``seed-train recipes [NAME]``."""
    from seed_train.recipes import recipe_names, recipe_path, recipe_summary

    if args.name is None:
        names = recipe_names()
        width = max(map(len, names))
        for name in names:
            print(f"{name:<{width}}  {recipe_summary(name)}")
        print("\nrun one: seed-train train --config NAME (or seed-train experiment --config NAME ...); docs/recipes.md")
        return 0
    path = recipe_path(args.name)
    if path is None:
        return fail("seed-train recipes", f"no recipe {args.name!r}; recipes: {', '.join(recipe_names())}")
    print(path.read_text(encoding="utf-8"), end="")
    return 0


def main_records(args) -> int:
    """``seed-train record`` and ``seed-train report``."""
    from seed_train.records import record_experiment, write_report_from_record

    try:
        if args.command == "record":
            counts = record_experiment(args.experiment_dir, args.record)
            print(f"{args.record}: {counts['added']} unit(s) added, {counts['identical']} already recorded "
                  f"(same outcomes), {counts['panels_added']} given an added panel's evaluation, "
                  f"{counts['unfinished']} unfinished in the folder")
            return 0
        path = Path(args.record)
        out = Path(args.out) if args.out else path.with_name(path.name.split(".")[0] + "-report")
        report = write_report_from_record(path, out)
    except ValueError as e:
        return fail(f"seed-train {args.command}", e)
    print(f"report: {report['files']['markdown']}")
    return 0


def main_train(argv: list[str] | None = None) -> int:
    """``seed-train``: every subcommand. A rank of a multi-process launch (``accelerate launch -m seed_train``)
    ends at the end of its command, past the interpreter's finalization, where gloo can abort a finished rank
    (:func:`seed_train.distributed.end_launched_rank`)."""
    code = _run_command(argv)
    if "torch.distributed" in sys.modules:  # (no process group without it: light commands never import torch)
        from seed_train.distributed import end_launched_rank

        end_launched_rank(code)
    return code


def _run_command(argv: list[str] | None) -> int:
    parser = OneLineErrorParser(prog="seed-train", description="SEED: self-evolving on-policy distillation")
    sub = parser.add_subparsers(dest="command", required=True)
    _parser_train(sub)
    _parser_records(sub)
    _parser_recipes(sub)
    args = parser.parse_args(argv)
    if args.command == "experiment":
        return main_experiment(args, argv)
    if args.command in ("record", "report"):
        return main_records(args)
    if args.command == "recipes":
        return main_recipes(args)
    from seed_train.trainer import train

    try:
        if args.command == "quickstart":
            cfg = quickstart_config(args)
        else:
            cfg = SeedConfig.from_args(args)
            cfg = resumed_run_folder(cfg, output_dir_given=args.output_dir is not None or (
                bool(args.config) and "output_dir" in _read_yaml(args.config)))
    except ValueError as e:
        return fail("seed-train", e)
    from seed_train.trainer import RunStopped

    try:  # train() checks env, splits, model folder and output folder before loading or creating anything
        results = train(cfg)
    except SetupError as e:  # a launch setting or checkpoint that does not fit: named, before any training
        return fail("seed-train", e)
    except RunStopped as e:  # e.g. every episode failed for several iterations: what was played is written
        fail("seed-train", e)
        return 1
    print(stages_summary(cfg, results))
    return 0


def quickstart_config(args: argparse.Namespace) -> SeedConfig:
    """The quickstart's values, then the ``--config`` file's, then the flags' (each over the ones before)."""
    from_file = _read_yaml(args.config) if args.config else {}
    flags = {k: v for k, v in vars(args).items() if v is not None and k not in ("command", "config")}
    cfg = SeedConfig.from_dict({**QUICKSTART, **from_file, **flags})
    return resumed_run_folder(cfg, output_dir_given="output_dir" in flags or "output_dir" in from_file)


def resumed_run_folder(cfg: SeedConfig, *, output_dir_given: bool) -> SeedConfig:
    """``--resume RUN/checkpoints/iterNNNN`` without an output folder of its own (flag or config file): the
    run goes on in RUN, the run the checkpoint belongs to (its metrics, trajectories, later checkpoints),
    not in the default folder."""
    from seed_train.checkpoint import checkpoint_run_dir

    run = checkpoint_run_dir(cfg.resume) if cfg.resume else None
    if run is None or output_dir_given:
        return cfg
    return dataclasses.replace(cfg, output_dir=str(run))


def stages_summary(cfg: SeedConfig, results: dict) -> str:
    """One line: success (95% CI) and score before -> after Stage 1 -> after Stage 2, for the evaluations run."""
    stage1 = bool(cfg.stage1_demos or cfg.stage1_from)
    last = "after Stage 2" if cfg.iterations else ("after Stage 1" if stage1 else "after")
    stages = [(label, results[key]["categories"]["all"]) for key, label in
              (("before", "before"), ("after_stage1", "after Stage 1"), ("after", last)) if key in results]
    if not stages:
        return f"\nno evaluation run; report: {Path(cfg.output_dir) / 'report.html'}"
    success = " -> ".join(f"{label} {r['success']:.3f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]" for label, r in stages)
    score = " -> ".join(f"{r['score']:.3f}" for _, r in stages)
    return (f"\n{cfg.env_id} {cfg.eval_split}: success (95% CI) {success}; score {score}; "
            f"report: {Path(cfg.output_dir) / 'report.html'}")


def main_experiment(args, argv: list[str] | None = None) -> int:
    """``seed-train experiment``: the base config from --config and flags, then every (seed, arm) unit."""
    from seed_train.experiment import Experiment, WorkerFailed
    from seed_train.preflight import TRAIN_NAMES, check_env, check_run_setup

    if args.seed is not None:
        print("seed-train experiment: use --seeds (training seeds), not --seed", file=sys.stderr)
        return 2
    if args.jobs < 1:
        return fail("seed-train experiment", ValueError(f"--jobs must be at least 1, got {args.jobs}"))
    try:  # every arm's config is built and validated here, before any work
        base = SeedConfig.from_args(args)
        out = base.output_dir if args.output_dir is not None or base.output_dir != "runs/seed" else "runs/experiment"
        experiment = dataclasses.replace(Experiment.plan(base, args.arms, args.seeds, out, splits=args.splits),
                                         command=("seed-train", *(sys.argv[1:] if argv is None else argv)),
                                         baselines_only=args.baselines_only)
        if args.times_from is not None:
            from seed_train.records import recorded_times

            try:
                experiment.prior_times = recorded_times(args.times_from, base.env_id)
            except ValueError as e:
                raise ValueError(f"--times-from: {e}") from None
        check_run_setup(dataclasses.replace(base, output_dir=str(out)))  # before the experiment folder is made
        for name in args.splits:  # each evaluated panel, named as the flag that chose it
            split, env_kwargs = base.panel(name)
            where = "--splits" if name not in base.panels else f"config field 'panels' ({name})"
            check_env(base.env_id, dict(env_kwargs, split=split),
                      {**TRAIN_NAMES, "split": where, "env_kwargs": where if name in base.panels else
                       TRAIN_NAMES["env_kwargs"]})
    except ValueError as e:  # (SetupError is one)
        return fail("seed-train experiment", e)
    try:
        report = experiment.run(jobs=args.jobs)
    except SetupError as e:
        return fail("seed-train experiment", e)
    except WorkerFailed as e:  # a unit's error in a worker: its traceback is above, the others have stopped
        print(f"seed-train experiment: {e}", file=sys.stderr)
        return 1
    print(f"\nreport: {report['files']['markdown']}")
    return 0


def _result_files_parser(prog: str, description: str, out: str, out_help: str) -> argparse.ArgumentParser:
    """The arguments ``seed-eval compare`` and ``seed-eval aggregate`` share: result files, labels, --out."""
    p = OneLineErrorParser(prog=prog, description=description)
    p.add_argument("results", nargs="+", help="result JSON files (seed-eval's, or a run's results.json: its 'after')")
    p.add_argument("--labels", nargs="+", default=None, help="one name per file (default: file names)")
    p.add_argument("--out", default=out, help=out_help)
    return p


def main_compare(argv: list[str]) -> int:
    args = _result_files_parser("seed-eval compare", "put two or more evaluation results side by side (markdown + bar chart)",
                                "runs/compare", "folder for compare.md and compare.png").parse_args(argv)
    from seed_train.reports import write_comparison

    try:
        md, png = write_comparison(args.results, args.out, args.labels)
    except (ValueError, OSError) as e:
        print(f"seed-eval compare: {e}", file=sys.stderr)
        return 2
    print(md.read_text())
    print(f"wrote {md} and {png}")
    return 0


def main_aggregate(argv: list[str]) -> int:
    args = _result_files_parser("seed-eval aggregate",
                                "mean ± sd over training runs (e.g. seeds) of the same evaluation, per category",
                                "runs/aggregate", "folder for aggregate.json and aggregate.md").parse_args(argv)
    from seed_train.evaluate import aggregate_markdown, aggregate_runs
    from seed_train.reports import load_summary, run_labels

    try:
        if args.labels is not None and len(args.labels) != len(args.results):
            raise ValueError(f"{len(args.labels)} labels for {len(args.results)} result files")
        summaries = [load_summary(path) for path in args.results]
    except (ValueError, OSError) as e:
        print(f"seed-eval aggregate: {e}", file=sys.stderr)
        return 2
    labels = args.labels or run_labels(args.results)
    aggregate = aggregate_runs(summaries)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "aggregate.json").write_text(json.dumps({"runs": dict(zip(labels, args.results)), "categories": aggregate},
                                                   indent=1))
    md = aggregate_markdown(aggregate, labels, f"mean ± sd over {len(summaries)} runs")
    (out / "aggregate.md").write_text(md + "\n")
    print(md)
    print(f"wrote {out / 'aggregate.json'} and {out / 'aggregate.md'}")
    return 0


def main_eval(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # A subcommand word keeps the original flag-only form (seed-eval --model ...) working unchanged.
    if argv[:1] == ["compare"]:
        return main_compare(argv[1:])
    if argv[:1] == ["aggregate"]:
        return main_aggregate(argv[1:])
    p = OneLineErrorParser(prog="seed-eval", description="evaluate a policy on a split's full panel",
                           epilog="seed-eval compare A.json B.json [...] --out DIR: results side by side; "
                                  "seed-eval aggregate A.json B.json [...] --out DIR: mean ± sd over runs")
    p.add_argument("--config", default=None,
                   help="a run's config.json (a seed-train run's, or an experiment unit's run/config.json): evaluate "
                        "as that run and seed-train experiment do (its env, prompt, max steps, tokens, eval limit, "
                        "decoding: eval_temperature x eval_samples per task, and its training seed for the sampling "
                        "noise); --model defaults to the run's final/ folder; flags given here override it")
    p.add_argument("--model", default=None, help="local HF model folder (or smollm2-135m); with --endpoint, "
                                                 "the model name the server knows")
    p.add_argument("--env", default=None, help="registered env id")
    p.add_argument("--split", default=None, help=f"split, or a panel named in --config's panels (default: "
                                                f"{field_default('eval_split')})")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="sampling seeds (default 0; with --config the run's seed); several imply --sample (greedy "
                        "decoding would give every seed the same result) and aggregate to mean ± sd. Spread over "
                        "training runs: seed-eval aggregate")
    p.add_argument("--sample", action="store_true", help="sample (temperature 1) instead of greedy decoding")
    p.add_argument("--limit", type=int, default=None, help="only N panel tasks, spread over it (default: all)")
    p.add_argument("--max-new-tokens", type=int, default=None, help=f"default {field_default('max_new_tokens')}")
    p.add_argument("--action-format", default=None, help="default: the env's own")
    p.add_argument("--history", type=int, default=None, help="default: the env's own")
    p.add_argument("--env-kwargs", type=SeedConfig.json_argument, default=None, help="extra gym.make arguments [JSON]")
    p.add_argument("--out", default="runs/eval", help="folder for the JSON and markdown reports")
    p.add_argument("--device", default=None, help=f"default {field_default('device')}")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads; 0 (default) = the CPUs this process may use, less those other processes "
                        "keep busy")
    g = p.add_argument_group("a model behind an OpenAI-compatible endpoint (docs/endpoints.md)")
    g.add_argument("--endpoint", default=None, help="API root, e.g. http://127.0.0.1:8080/v1 (instead of a local model)")
    g.add_argument("--api-key-env", default=None, help="environment variable holding the key (default OPENAI_API_KEY)")
    g.add_argument("--concurrency", type=int, default=4, help="tasks played at once against the endpoint")
    g.add_argument("--timeout", type=float, default=60.0,
                   help="seconds one request attempt may take in all (connect, headers, body)")
    g.add_argument("--max-retries", type=int, default=2,
                   help="retries with backoff on 408/409/429/5xx, timeouts, dropped connections and unusable replies")
    args = p.parse_args(argv)
    try:
        cfg = eval_config(args)
    except ValueError as e:
        return fail("seed-eval", e)
    if args.endpoint and args.config and args.model is None:
        return fail("seed-eval", ValueError("--model: name the model the endpoint serves (with --config it defaults "
                                            "to the run's local final/ folder)"))
    args.model, args.seeds = cfg.model, args.seeds or [cfg.seed]
    if len(args.seeds) > 1 and cfg.eval_temperature == 0:
        cfg = dataclasses.replace(cfg, eval_temperature=1.0)
        print("seed-eval: several --seeds: sampling (temperature 1) so that the seeds differ", file=sys.stderr)
    args.sample = cfg.eval_temperature > 0
    if args.endpoint:
        try:
            return eval_endpoint(args, cfg)
        except KeyboardInterrupt:  # workers may wait on the endpoint: end now, played episodes are written
            from seed_agents.runner import exit_interrupted

            exit_interrupted("seed-eval")
    from seed_train.evaluate import evaluate_policy, markdown_table, write_report
    from seed_train.preflight import check_model, check_output_dir
    from seed_train.trainer import eval_decoding, load
    from seed_train.threads import torch_threads

    try:
        # Everything but the weights is checked first: a bad env, split or --out fails in a second, not after
        # the model has loaded, and leaves no --out folder behind.
        check_model(cfg.model, "--model")
        spec = checked_eval_spec(cfg, cfg.eval_split, model=cfg.model)
        check_output_dir(args.out, "--out")
        policy = load(cfg)  # a vision-language model folder loads as one (obs_mode image / text+image envs)
    except ValueError as e:  # (SetupError is one)
        return fail("seed-eval", e)
    summaries = []
    with torch_threads(cfg.threads) as threads:
        for seed in args.seeds:
            threads.refresh()
            summary = evaluate_policy(policy.backend, policy.codec, spec, max_new_tokens=cfg.max_new_tokens,
                                      limit=eval_limit(args, cfg), seed=seed, env_backend=cfg.env_backend,
                                      trajectories_path=Path(args.out) / f"seed{seed}.trajectories.jsonl",
                                      progress=f"seed {seed}", **eval_decoding(cfg, policy))
            write_report(summary, args.out, f"eval_seed{seed}")
            print(markdown_table(summary, f"{cfg.env_id} {cfg.eval_split} seed {seed}"))
            summaries.append(summary)
    write_seed_aggregate(summaries, args.out)
    return 0


def eval_endpoint(args: argparse.Namespace, cfg: SeedConfig) -> int:
    """``seed-eval --endpoint URL --model NAME``: the panel, reports and files of a local evaluation, played by
    a model behind an OpenAI-compatible endpoint (greedy, or temperature 1 with --sample; seeded per --seeds)."""
    from seed_agents.openai_endpoint import OpenAIChatAgent
    from seed_train.evaluate import evaluate_endpoint, markdown_table, write_report
    from seed_train.preflight import check_output_dir

    try:
        spec = checked_eval_spec(cfg, cfg.eval_split, model=cfg.model)
        check_output_dir(args.out, "--out")
        if args.concurrency < 1:
            raise ValueError(f"--concurrency: expected >= 1, got {args.concurrency}")
        tools = None
        if spec.action_format == "tools":  # the env's verbs as functions; the reply's tool call is the action
            from wrappers.stack import default_tools
            from wrappers.tools import tool_schemas

            tools = tool_schemas(default_tools(spec.env_id))
        agents = [OpenAIChatAgent(args.endpoint, args.model, api_key_env=args.api_key_env, seed=seed,
                                  temperature=1.0 if args.sample else 0.0, max_tokens=cfg.max_new_tokens,
                                  timeout=args.timeout, max_retries=args.max_retries, tools=tools)
                  for seed in args.seeds]
    except (ValueError, ImportError) as e:
        return fail("seed-eval", e)
    summaries = []
    for seed, agent in zip(args.seeds, agents):
        summary = evaluate_endpoint(agent, spec, limit=eval_limit(args, cfg), concurrency=args.concurrency,
                                    trajectories_path=Path(args.out) / f"seed{seed}.trajectories.jsonl",
                                    progress=f"seed {seed}")
        write_report(summary, args.out, f"eval_seed{seed}")
        print(markdown_table(summary, f"{cfg.env_id} {cfg.eval_split} seed {seed} ({args.model} at {args.endpoint})"))
        if summary["meta"]["errors"]:
            print(f"seed-eval: {summary['meta']['errors']} episodes ended on endpoint errors (counted as failures; "
                  "see meta.error in the trajectories)", file=sys.stderr)
        summaries.append(summary)
    write_seed_aggregate(summaries, args.out)
    return 0


# seed-eval's flags that stand for config fields, and their values without --config.
# seed-eval's flags that stand for config fields; without --config each falls back to the field's own
# default (SeedConfig), except --env, which is required.
_EVAL_FLAGS = {"env": "env_id", "split": "eval_split", "limit": "eval_limit", "max_new_tokens": "max_new_tokens",
               "action_format": "action_format", "history": "history", "env_kwargs": "env_kwargs",
               "device": "device", "threads": "threads"}


def eval_limit(args: argparse.Namespace, cfg: SeedConfig) -> int | None:
    """The tasks seed-eval plays: ``--limit`` where given, else the panel's own limit or the run's
    ``eval_limit`` (:meth:`SeedConfig.panel_limit`)."""
    return args.limit if args.limit is not None else cfg.panel_limit(cfg.eval_split)


def eval_config(args: argparse.Namespace) -> SeedConfig:
    """The config seed-eval evaluates with: a run's (``--config``), else the flags' defaults; flags override.

    With ``--config`` the model is the run's ``final/`` folder unless ``--model`` names one, and decoding
    is the run's (``eval_temperature``, ``eval_samples``); without it, greedy unless ``--sample``."""
    given = {field: getattr(args, flag) for flag, field in _EVAL_FLAGS.items() if getattr(args, flag) is not None}
    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise ValueError(f"--config: file not found: {args.config!r}")
        try:
            data = json.loads(path.read_text(encoding="utf-8")) if path.suffix == ".json" else None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"--config: cannot read {args.config!r} as JSON: {e}") from e
        run = SeedConfig.from_dict(data) if data is not None else SeedConfig.from_yaml(path)
        model = args.model or str(path.parent / "final")
        base = {**run.to_dict(), "resume": None, "stage1_from": None}
        if args.sample and run.eval_temperature == 0:
            base["eval_temperature"] = 1.0
    else:
        if not args.model:
            raise ValueError("--model: required (or --config RUN/config.json)")
        if not args.env:
            raise ValueError("--env: required (or --config RUN/config.json)")
        model = args.model
        base = {field: field_default(field) for field in _EVAL_FLAGS.values() if field != "env_id"}
        base.update(eval_temperature=1.0 if args.sample else 0.0, eval_samples=1)
    # An evaluation loads a saved policy folder whole: no LoRA to add, and transformers' generate.
    return SeedConfig.from_dict({**base, **given, "model": model, "lora": False, "generation_backend": "hf"})


def checked_eval_spec(cfg: SeedConfig, split: str, model: str | None = None):
    """The env stack ``seed-eval`` plays, its env checked first (a bad --env, --split or --env-kwargs fails
    in a second, before any model or endpoint is used; with ``model``, a text-only model on an env that
    shows only images too)."""
    from seed_train.preflight import check_env, check_model_sees
    from seed_train.trainer import env_spec

    spec = env_spec(cfg, split)  # (a name in the config's panels resolved to its split and arguments)
    env_kwargs = dict(spec.env_kwargs, split=spec.split,
                      **({} if spec.max_steps is None else {"max_steps": spec.max_steps}))
    where = f"config field 'panels' ({split})" if split in cfg.panels else None
    obs_mode = check_env(spec.env_id, env_kwargs, {"env_id": "--env", "split": where or "--split",
                                                   "env_kwargs": where or "--env-kwargs"})
    if model is not None:
        check_model_sees(model, spec.env_id, obs_mode, "--env-kwargs")
    return spec


def write_seed_aggregate(summaries: list[dict], out: str | Path) -> None:
    """With several seeds: ``OUT/eval_seeds.json`` (mean ± sd over seeds per category) and a line each."""
    from seed_train.evaluate import aggregate_seeds

    if len(summaries) < 2:
        return
    agg = aggregate_seeds(summaries)
    (Path(out) / "eval_seeds.json").write_text(json.dumps(agg, indent=1))
    for name, r in agg.items():
        print(f"{name}: success {r['success_mean']:.3f} ± {r['success_sd']:.3f} over {r['seeds']} seeds")


if __name__ == "__main__":
    sys.exit(main_train())
