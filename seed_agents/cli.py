"""``seed-envs``: list, play, evaluate and record the registered environments.

    seed-envs list
    seed-envs play seed/Sokoban-v0 --split test
    seed-envs eval seed/EZPoints-v0 --split unseen --agent expert
    seed-envs record seed/Sokoban-v0 --split train --agent random --episodes 20 --out traj.jsonl
    seed-envs view traj.jsonl --out report.html        # or a run folder; one self-contained HTML file
    seed-envs check seed/Sokoban-v0                    # the env contract, PASS / FAIL per check
    seed-envs eval seed/EZPoints-v0 --split unseen --agent openai --base-url http://127.0.0.1:8080/v1 \
        --model smollm2 --concurrency 4                # any OpenAI-compatible endpoint (docs/endpoints.md)
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

import seed_envs
from seed_agents.agents import Agent, make_agent
from seed_agents.runner import EpisodeResult, play_panel
from seed_envs.core import SeedEnv

AGENTS = ("expert", "random", "openai")


def summarize(results: list[EpisodeResult]) -> dict[str, dict[str, float]]:
    """Per-category and overall: episodes, success rate, mean score, mean return, mean steps."""
    groups: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        groups[r.category].append(r)
    groups = dict(sorted(groups.items()))
    groups["all"] = list(results)
    return {
        name: {
            "episodes": len(rs),
            "success": float(np.mean([r.success for r in rs])) if rs else 0.0,
            "score": float(np.mean([r.score for r in rs])) if rs else 0.0,
            "return": float(np.mean([r.return_ for r in rs])) if rs else 0.0,
            "steps": float(np.mean([r.steps for r in rs])) if rs else 0.0,
        }
        for name, rs in groups.items()
    }


def format_table(summary: dict[str, dict[str, float]]) -> str:
    header = f"{'category':<28} {'episodes':>8} {'success':>8} {'score':>7} {'return':>8} {'steps':>6}"
    rows = [header, "-" * len(header)]
    for name, s in summary.items():
        rows.append(
            f"{name:<28} {s['episodes']:>8d} {s['success']:>8.3f} {s['score']:>7.3f} {s['return']:>8.2f} {s['steps']:>6.1f}"
        )
    return "\n".join(rows)


#: The runner's env limits, as the trainer's defaults (seed_train.config: env_step_timeout_s, ...): far past
#: any call of our envs on a loaded 2-core machine, so they fire only on a hung env.
ENV_STEP_TIMEOUT_S, ENV_EPISODE_TIMEOUT_S = 300.0, 1800.0


def _make_kwargs(args: argparse.Namespace) -> dict:
    """``gym.make`` arguments from ``--kwargs`` and the named flags (which win)."""
    kwargs = json.loads(args.kwargs) if args.kwargs else {}
    if not isinstance(kwargs, dict):
        raise SystemExit("--kwargs: expected a JSON object")
    for name in ("split", "obs_mode", "max_steps", "data_dir"):
        value = getattr(args, name, None)
        if value is not None:
            kwargs[name] = value
    return kwargs


def _make(args: argparse.Namespace) -> gym.Env:
    """The env for ``args.agent``: the bare env for scripted agents; for a model agent the same stack as
    training (prompt renderer and action parser with the env's own defaults; see wrappers.stack)."""
    kwargs = _make_kwargs(args)
    limits = {"step_timeout_s": getattr(args, "env_step_timeout", 0.0) or 0.0,
              "episode_timeout_s": getattr(args, "env_episode_timeout", 0.0) or 0.0}
    if min(limits.values()) < 0:
        raise ValueError("--env-step-timeout / --env-episode-timeout: expected seconds >= 0 (0: no limit)")
    if getattr(args, "agent", None) != "openai":
        env = gym.make(args.env_id, **kwargs)
        if limits["step_timeout_s"] or limits["episode_timeout_s"]:
            from wrappers.deadline import EnvDeadline

            env = EnvDeadline(env, limits["step_timeout_s"] or limits["episode_timeout_s"], limits["episode_timeout_s"])
        return env
    from wrappers.stack import make_agent_env

    stack_args = {name: kwargs.pop(name) for name in ("split", "max_steps") if name in kwargs}
    return make_agent_env(args.env_id, history=args.history, action_format=args.action_format,
                          env_kwargs=kwargs, **stack_args, **limits)


def _agent_factory(args: argparse.Namespace) -> Callable[[gym.Env], Agent]:
    """A function giving each worker env its agent: scripted agents are bound to their env, the endpoint
    agent is one object shared by all workers (its client is thread-safe)."""
    if args.agent != "openai":
        return lambda env: make_agent(env, args.agent, seed=args.seed)
    from seed_agents.openai_endpoint import OpenAIChatAgent

    if not args.base_url or not args.model:
        raise ValueError("--agent openai: needs --base-url URL and --model NAME")
    tools = None
    if args.action_format == "tools":  # the env's verbs as functions; the reply's tool call is the action
        from wrappers.stack import default_tools
        from wrappers.tools import tool_schemas

        tools = tool_schemas(default_tools(args.env_id))
    agent = OpenAIChatAgent(args.base_url, args.model, api_key_env=args.api_key_env, temperature=args.temperature,
                            seed=args.seed, max_tokens=args.max_tokens, timeout=args.timeout,
                            max_retries=args.max_retries, tools=tools)
    return lambda env: agent


def _print_errors(results: list[EpisodeResult]) -> None:
    failed = [r for r in results if r.error]
    if failed:
        print(f"{len(failed)} of {len(results)} episodes ended on an agent or env error (counted as failures; "
              f"{sum(r.env_failed for r in failed)} the env's); "
              f"first: {failed[0].task_id}: {failed[0].error}", file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    """Each id's splits with panel sizes; splits that need real data say so instead of a size."""
    print(f"{'id':<22} {'split':<22} {'tasks':>7}  notes")
    for env_id in seed_envs.ENV_IDS:
        try:
            base: SeedEnv = gym.make(env_id).unwrapped
        except (ImportError, ValueError) as e:  # an optional backend or its data is missing
            print(f"{env_id:<22} {'-':<22} {'-':>7}  unavailable: {e}")
            continue
        for split in base.split_names:
            alias = [a for a, s in base.split_aliases.items() if s == split]
            name = split + (f" ({', '.join(alias)})" if alias else "")
            try:
                env = gym.make(env_id, split=split)
                size, note = str(len(env.unwrapped.task_ids())), f"max_steps={env.unwrapped.max_steps}"
                env.close()
            except ValueError as e:
                size, note = "-", f"needs data: {str(e).splitlines()[0][:70]}"
            print(f"{env_id:<22} {name:<22} {size:>7}  {note}")
        base.close()
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    env = _make(args)
    expert = seed_envs.make_expert(env)
    print("Type an action; ':hint' asks the expert, ':reset' starts over, ':quit' leaves.")
    obs, info = env.reset(seed=args.seed)
    while True:
        print(f"\nTask: {info['task']}\n{obs['text']}")
        if info.get("admissible_actions"):
            print("Actions: " + ", ".join(info["admissible_actions"]))
        try:
            action = input("> ")
        except EOFError:
            break
        if action.strip() == ":quit":
            break
        if action.strip() == ":reset":
            obs, info = env.reset()
            continue
        if action.strip() == ":hint":
            print(f"expert: {expert(obs, info)}")
            continue
        obs, reward, terminated, truncated, info = env.step(action)
        print(f"reward {reward:+.2f}" + ("  (invalid action)" if info["invalid_action"] else ""))
        if terminated or truncated:
            print(f"\n{obs['text']}\nEpisode over: {'success' if info['success'] else 'failure'}, score {info['score']:.2f}")
            obs, info = env.reset()
    env.close()
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    env = _make(args)
    split, panel = env.unwrapped.split, env.unwrapped.task_ids()
    env.close()
    if args.limit:
        panel = panel[: args.limit]
    results = play_panel(lambda: _make(args), _agent_factory(args), panel, concurrency=args.concurrency)
    summary = summarize(results)
    print(f"{args.env_id} split={split} agent={args.agent} tasks={len(panel)}")
    print(format_table(summary))
    _print_errors(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env_id": args.env_id, "split": split, "agent": args.agent,
                       "summary": summary, "episodes": [r.__dict__ for r in results]}, f, indent=1)
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    """Episodes reset with seeds seed, seed+1, ...; with --concurrency N several play at once, each written
    as it ends (so the file's order is then the order they finished in)."""
    from wrappers import TrajectoryRecorder, TrajectoryWriter

    agent_for = _agent_factory(args)
    with TrajectoryWriter(args.out) as writer:
        results = play_panel(lambda: TrajectoryRecorder(_make(args), sink=writer, env_id=args.env_id), agent_for,
                             [None] * args.episodes, seeds=[args.seed + i for i in range(args.episodes)],
                             concurrency=args.concurrency)
        print(f"wrote {writer.count} episodes to {args.out}")
    _print_errors(results)
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from wrappers.viewer import write_viewer

    out = write_viewer(args.paths, args.out, with_images=not args.no_images)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB); open it in any browser, no server needed")
    return 0


def cmd_make_alfworld(args: argparse.Namespace) -> int:
    from seed_envs.alfworld import make_alfworld_games

    files = make_alfworld_games(args.n, args.seed, args.out, args.split)
    print(f"wrote {len(files)} games under {args.out} (play them with data_dir={args.out!r})")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from seed_agents.openenv_server import ServeLimits, serve
    except ImportError as e:
        raise ImportError(f"serving needs the serve extra: pip install -e '.[serve]' ({e})") from None
    limits = ServeLimits(max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout,
                         request_timeout_s=args.request_timeout, max_message_bytes=args.max_message_bytes)
    print(f"seed-envs serve: {args.env_id} on http://{args.host}:{args.port} (OpenEnv WebSocket sessions at /ws, "
          f"spec at /seed/spec; up to {limits.max_sessions} sessions)", file=sys.stderr)
    serve(args.env_id, _make_kwargs(args), host=args.host, port=args.port, limits=limits, splits=tuple(args.splits or ()))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import importlib

    from seed_agents.contract import ContractChecker

    for package in args.imports:
        importlib.import_module(package)
    if args.env_id not in gym.registry:
        print(f"seed-envs check: {args.env_id!r} is not registered (an out-of-tree env: --import its package)",
              file=sys.stderr)
        return 2
    kwargs = json.loads(args.kwargs) if args.kwargs else {}
    checks = ContractChecker.CHECKS
    only = None
    if args.only:
        only = tuple(c.replace("-", "_") for c in args.only)
        unknown = [c for c in only if c not in checks]
        if unknown:
            print(f"seed-envs check: unknown checks {unknown}; checks: {', '.join(c.replace('_', '-') for c in checks)}",
                  file=sys.stderr)
            return 2
    checker = ContractChecker(args.env_id, kwargs, registered_by=(args.imports or ["seed_envs"])[0],
                              episodes=args.episodes, junk=args.junk, threads=args.threads)
    results = checker.run(only)
    for r in results:
        print(f"{r.status:<4}  {r.name:<13} {r.detail}")
    failed = [r.name for r in results if r.status == "FAIL"]
    print(f"{args.env_id}: {len(results) - len(failed)}/{len(results)} checks passed or skipped"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def cmd_tables(args: argparse.Namespace) -> int:
    from seed_envs.catalog import env_table, stale_files

    if not args.files:
        print(env_table(link_prefix=""))
        return 0
    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        raise ValueError(f"no such file: {', '.join(missing)}")
    stale = stale_files(args.files, write=args.write)
    for path in stale:
        print(f"{path}: " + ("rewrote the env table" if args.write else "the env table differs from the envs' declarations"))
    if stale and not args.write:
        print("seed-envs tables: run `seed-envs tables --write " + " ".join(args.files) + "`", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="seed-envs", description="seed-gym environments")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="ids, splits and panel sizes").set_defaults(fn=cmd_list)

    def env_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("env_id", help="a registered id, e.g. seed/Sokoban-v0")
        sp.add_argument("--split", default=None, help="train, test, unseen or an env-specific name")
        sp.add_argument("--obs-mode", dest="obs_mode", default=None, help="text, image or text+image")
        sp.add_argument("--max-steps", dest="max_steps", type=int, default=None)
        sp.add_argument("--data-dir", dest="data_dir", default=None, help="real benchmark data folder")
        sp.add_argument("--kwargs", default=None, help="JSON object of further gym.make arguments")
        sp.add_argument("--seed", type=int, default=0)

    sp = sub.add_parser("play", help="play in the terminal")
    env_args(sp)
    sp.set_defaults(fn=cmd_play)
    def agent_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--agent", default="expert", choices=AGENTS,
                        help="expert, random, or openai (a model behind an OpenAI-compatible endpoint)")
        sp.add_argument("--concurrency", type=int, default=1, help="episodes played at once (threads, one env each)")
        sp.add_argument("--env-step-timeout", dest="env_step_timeout", type=float, default=ENV_STEP_TIMEOUT_S,
                        help="seconds one env reset or step may take; past it the episode ends as an env failure "
                             "and the env is replaced (0: no limit; docs/fault-policy.md)")
        sp.add_argument("--env-episode-timeout", dest="env_episode_timeout", type=float, default=ENV_EPISODE_TIMEOUT_S,
                        help="seconds the env's calls of one episode may take together (0: no limit)")
        g = sp.add_argument_group("--agent openai (docs/endpoints.md)")
        g.add_argument("--base-url", dest="base_url", default=None, help="API root, e.g. http://127.0.0.1:8080/v1")
        g.add_argument("--model", default=None, help="the model name the server knows")
        g.add_argument("--api-key-env", dest="api_key_env", default=None,
                       help="environment variable holding the API key (default OPENAI_API_KEY, optional)")
        g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
        g.add_argument("--max-tokens", dest="max_tokens", type=int, default=256)
        g.add_argument("--timeout", type=float, default=60.0,
                       help="seconds one attempt may take in all (connect, headers, body)")
        g.add_argument("--max-retries", dest="max_retries", type=int, default=2,
                       help="on 408/409/429/5xx, timeouts, dropped connections, unusable replies; with backoff")
        g.add_argument("--history", type=int, default=None, help="past steps in the prompt (default: the env's)")
        g.add_argument("--action-format", dest="action_format", default=None,
                       help="how the model writes its action (default: the env's)")

    sp = sub.add_parser("eval", help="run an agent on a split's full panel; table by category")
    env_args(sp)
    agent_args(sp)
    sp.add_argument("--limit", type=int, default=0, help="only the first N tasks of the panel")
    sp.add_argument("--json", default=None, help="also write results to this JSON file")
    sp.set_defaults(fn=cmd_eval)
    sp = sub.add_parser("record", help="record episodes to a trajectory JSONL file")
    env_args(sp)
    agent_args(sp)
    sp.add_argument("--episodes", type=int, default=10)
    sp.add_argument("--out", required=True, help="output .jsonl (images go to OUT.images/)")
    sp.set_defaults(fn=cmd_record)
    sp = sub.add_parser("view", help="write one self-contained HTML file to browse trajectories")
    sp.add_argument("paths", nargs="+", metavar="RUN_OR_JSONL", help="trajectory JSONL files or run folders")
    sp.add_argument("--out", required=True, help="output .html")
    sp.add_argument("--no-images", dest="no_images", action="store_true", help="leave images out (smaller file)")
    sp.set_defaults(fn=cmd_view)
    sp = sub.add_parser("check", help="check an env against the environment contract (PASS / FAIL per check)",
                        description="The contract of docs/environments.md, for any registered env: "
                                    "seed_agents/contract.py lists the checks. Exit status 1 when one fails.")
    sp.add_argument("env_id", help="a registered id (an out-of-tree env: name its package with --import)")
    sp.add_argument("--import", dest="imports", action="append", default=[], metavar="PACKAGE",
                    help="a package whose import registers the env (repeatable); default: seed_envs")
    sp.add_argument("--kwargs", default=None, help="JSON object of gym.make arguments (e.g. a split)")
    sp.add_argument("--episodes", type=int, default=5, help="episodes per check that plays some")
    sp.add_argument("--junk", type=int, default=200, help="junk actions sent")
    sp.add_argument("--threads", type=int, default=4, help="threads of the concurrency check")
    sp.add_argument("--only", nargs="+", default=None, metavar="CHECK", help="run only these checks")
    sp.set_defaults(fn=cmd_check)
    sp = sub.add_parser("tables", help="the docs' env table, from what each registered env declares",
                        description="Without FILE: print the table. With FILE(s): check the table between the "
                                    "env-table markers in each (exit 1 when one differs), or rewrite it with "
                                    "--write. Rows: seed_envs.ENV_IDS; cells: each env class's summary, splits "
                                    "(aliases, split_notes, splits_extra) and default_max_steps "
                                    "(seed_envs/catalog.py).")
    sp.add_argument("files", nargs="*", metavar="FILE", help="markdown files holding the table, e.g. README.md "
                                                             "docs/environments.md")
    sp.add_argument("--write", action="store_true", help="rewrite the table in each FILE")
    sp.set_defaults(fn=cmd_tables)
    sp = sub.add_parser("serve", help="serve an env over the OpenEnv protocol (WebSocket sessions; serve extra)",
                        description="One env, its gym.make arguments fixed here, an env instance per session; "
                                    "clients: gym.make('seed/Remote-v0', url=...) or any OpenEnv client "
                                    "(docs/integrations-openenv.md).")
    env_args(sp)
    from seed_agents.serve_limits import ServeLimits
    sp.add_argument("--splits", nargs="+", default=None, metavar="SPLIT",
                    help="the splits a session may choose (the first is the default); default: --split alone")
    sp.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    sp.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    sp.add_argument("--max-sessions", dest="max_sessions", type=int, default=ServeLimits.max_sessions,
                    help="sessions (so envs) at once; more are refused with CAPACITY_REACHED (default: %(default)s)")
    sp.add_argument("--idle-timeout", dest="idle_timeout", type=float, default=ServeLimits.idle_timeout_s,
                    help="seconds a session may stay silent before it is closed (default: %(default)s)")
    sp.add_argument("--request-timeout", dest="request_timeout", type=float,
                    default=ServeLimits.request_timeout_s,
                    help="seconds one env call (make, reset, step) may take; past it the session's env is abandoned "
                         "(default: %(default)s)")
    sp.add_argument("--max-message-bytes", dest="max_message_bytes", type=int,
                    default=ServeLimits.max_message_bytes,
                    help="largest WebSocket message taken; a larger one closes the connection (1009) (default: %(default)s)")
    sp.set_defaults(fn=cmd_serve)
    sp = sub.add_parser("make-alfworld", help="generate ALFWorld games (planner-checked) in alfworld's data layout")
    sp.add_argument("--n", type=int, required=True, help="games per split")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--out", required=True, help="output folder (becomes an ALFWORLD_DATA folder)")
    sp.add_argument("--split", default="train", help="train, valid_seen, valid_unseen, valid_train or all")
    sp.set_defaults(fn=cmd_make_alfworld)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, ImportError) as e:  # configuration errors, a missing extra: say which, no traceback
        print(f"seed-envs: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        from seed_agents.runner import exit_interrupted

        exit_interrupted("seed-envs")


if __name__ == "__main__":
    sys.exit(main())
