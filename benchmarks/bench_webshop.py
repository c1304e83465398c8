"""WebShop speed: text-mode reset and step, browser-mode step, search latency by catalog size.

    python benchmarks/bench_webshop.py [--episodes 200] [--browser-episodes 5] [--sizes 2000 50000]
                                       [--queries 300]

- text mode: the oracle plays ``--episodes`` goals of the test panel; reset and step times (ms).
- browser mode (skipped without selenium + chromium): the oracle plays ``--browser-episodes`` goals
  through the Flask server and headless Chromium; step times, text only and with screenshots.
- search: for each catalog size, the generated catalog of that size is built, then indexed (bm25s,
  no cache), then queried with its goals' instructions one at a time (what a search step does):
  p50/p95 latency (ms) and how often the target is in the top 50.
Goals: text step p50 <= 5 ms, search p50 <= 5 ms at 50,000 products.
"""
from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym
import numpy as np

import seed_envs
from seed_envs.webshop.catalog import generate_catalog
from seed_envs.webshop.search import ProductSearch


def ms(values: list[float], q: float) -> float:
    return 1000 * float(np.percentile(values, q))


def play(env: gym.Env, task_ids: list[str]) -> tuple[list[float], list[float], float]:
    resets, steps, scores = [], [], []
    for tid in task_ids:
        t0 = time.perf_counter()
        obs, info = env.reset(options={"task_id": tid})
        resets.append(time.perf_counter() - t0)
        expert = seed_envs.make_expert(env)
        while True:
            action = expert(obs, info)
            t0 = time.perf_counter()
            obs, _, term, trunc, info = env.step(action)
            steps.append(time.perf_counter() - t0)
            if term or trunc:
                break
        scores.append(info["score"])
    return resets, steps, float(np.mean(scores))


def bench_text(episodes: int) -> dict:
    env = gym.make("seed/WebShop-v0", split="test")
    ids = list(env.unwrapped.task_ids())[:episodes]
    play(env, ids[:3])  # load the cached index and warm up
    resets, steps, score = play(env, ids)
    return {"resets": resets, "steps": steps, "score": score, "episodes": len(ids)}


def bench_browser(episodes: int, obs_mode: str) -> dict | None:
    from seed_envs.webshop.browser import browser_unavailable_reason

    reason = browser_unavailable_reason()
    if reason:
        print(f"browser mode skipped: {reason}")
        return None
    env = gym.make("seed/WebShop-v0", split="test", mode="browser", obs_mode=obs_mode)
    try:
        ids = list(env.unwrapped.task_ids())[:episodes + 1]
        play(env, ids[:1])  # start Chromium and the server
        resets, steps, score = play(env, ids[1:])
    finally:
        env.close()
    return {"resets": resets, "steps": steps, "score": score, "episodes": len(ids) - 1}


def bench_search(size: int, queries: int) -> dict:
    t0 = time.perf_counter()
    catalog = generate_catalog(size)
    generated = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine = ProductSearch(catalog.products, use_cache=False)
    build = time.perf_counter() - t0
    goals = catalog.goals[:queries]
    times, found = [], 0
    for g in goals:
        t0 = time.perf_counter()
        hits = engine.search(g.instruction.lower())
        times.append(time.perf_counter() - t0)
        found += catalog.by_asin[g.asin] in hits
    return {"size": size, "generate": generated, "build": build, "times": times, "found": found / len(goals),
            "queries": len(goals)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--browser-episodes", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=[2000, 50_000])
    p.add_argument("--queries", type=int, default=300)
    a = p.parse_args(argv)
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    text = bench_text(a.episodes)
    rows.append((f"text mode, oracle, {text['episodes']} test goals (score {text['score']:.2f})",
                 ms(text["resets"], 50), ms(text["resets"], 90), ms(text["steps"], 50), ms(text["steps"], 90)))
    print(rows[-1], flush=True)
    for obs_mode in ("text", "text+image"):
        web = bench_browser(a.browser_episodes, obs_mode)
        if web is not None:
            rows.append((f"browser mode ({obs_mode}), oracle, {web['episodes']} goals (score {web['score']:.2f})",
                         ms(web["resets"], 50), ms(web["resets"], 90), ms(web["steps"], 50), ms(web["steps"], 90)))
            print(rows[-1], flush=True)
    searches = []
    for size in a.sizes:
        s = bench_search(size, a.queries)
        searches.append(s)
        print(f"search at {size:,} products: generated in {s['generate']:.1f} s, indexed in {s['build']:.1f} s, "
              f"p50 {ms(s['times'], 50):.2f} ms, target in top 50 for {s['found']:.0%}", flush=True)
    print("\n| env / mode | reset p50 ms | reset p90 ms | step p50 ms | step p90 ms |")
    print("|---|---:|---:|---:|---:|")
    for name, r50, r90, s50, s90 in rows:
        print(f"| {name} | {r50:.2f} | {r90:.2f} | {s50:.2f} | {s90:.2f} |")
    print("\n| search (bm25s) | products | index build s | query p50 ms | query p95 ms | target in top 50 | queries |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in searches:
        print(f"| instruction as query | {s['size']:,} | {s['build']:.2f} | {ms(s['times'], 50):.2f} | "
              f"{ms(s['times'], 95):.2f} | {s['found']:.0%} | {s['queries']} |")


if __name__ == "__main__":
    main()
