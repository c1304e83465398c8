"""torch CPU threads: the trainer's default policy against 1 and 2 threads, idle and beside busy work.

    python benchmarks/bench_threads.py [--model smollm2-135m] [--repeats 3]

Each cell runs in a fresh process: load the policy (LoRA), then time ``--repeats`` rounds of the
trainer's two hot paths on EZPoints prompts: one batched generation (8 prompts, 8 new tokens, the
rollout backend) and one training step (log-probs with grad over 16 step samples, backward, AdamW).
Cells alternate over thread settings within each background, so a load that comes and goes hits all
alike. Backgrounds: ``idle``; ``python-spin`` (another process busy on one core, e.g. an env worker or
a shell job); ``torch-2`` (another torch process with 2 threads doing matrix products, e.g. a second
run). ``auto`` is :class:`seed_train.threads.ThreadPolicy` with ``--threads 0``, what the trainer uses,
refreshed before each round as the trainer refreshes it at each phase (the threads it chose are shown).
Prints the load average, the median seconds a round and each setting's time relative to the best.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SETTINGS = ("1", "2", "auto")
BACKGROUNDS = ("idle", "python-spin", "torch-2")


def child(model: str, threads: str, repeats: int) -> None:
    """One cell: prints a JSON line with the seconds of each round."""
    import torch

    from seed_train.config import SeedConfig
    from seed_train.evaluate import panel_of
    from seed_train.codec import encode_prompt
    from seed_train.scoring import response_logprobs
    from seed_train.threads import ThreadPolicy
    from seed_train.trainer import env_spec, load

    policy_threads = ThreadPolicy(0 if threads == "auto" else int(threads))
    cfg = SeedConfig(env_id="seed/EZPoints-v0", model=model, template="compact", history=0, action_format="plain",
                     max_new_tokens=8)
    policy = load(cfg)
    spec = env_spec(cfg, "train")
    env = spec.make(lambda t: None)
    prompts = []
    for task_id in panel_of(spec)[:8]:
        obs, _ = env.reset(seed=0, options={"task_id": task_id})
        prompts.append(encode_prompt(policy.codec, obs["prompt"]))
    params = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    rounds = []
    for r in range(repeats + 1):  # round 0 warms up (allocator, kernels) and is not reported
        n = policy_threads.refresh()  # as the trainer does at each phase
        t0 = time.perf_counter()
        gens = policy.backend.generate(prompts, max_new_tokens=8, row_seeds=list(range(len(prompts))))
        t1 = time.perf_counter()
        batch = [(g.prompt_token_ids, g.response_token_ids) for g in gens] * 2
        lp, mask = response_logprobs(policy.model, [b[0] for b in batch], [b[1] for b in batch], grad=True)
        loss = -(lp * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        t2 = time.perf_counter()
        if r:
            rounds.append({"generate_s": t1 - t0, "train_s": t2 - t1, "threads": n})
    print(json.dumps({"threads": "/".join(str(r["threads"]) for r in rounds), "rounds": rounds}), flush=True)


def background(kind: str) -> subprocess.Popen | None:
    if kind == "idle":
        return None
    if kind == "python-spin":
        code = "import time\nend = time.time() + 3600\nwhile time.time() < end: pass"
    else:
        code = ("import torch, time\ntorch.set_num_threads(2)\na = torch.randn(512, 512)\n"
                "end = time.time() + 3600\nwhile time.time() < end: a = (a @ a).tanh()")
    return subprocess.Popen([sys.executable, "-c", code])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per cell (after one warm-up round)")
    p.add_argument("--backgrounds", nargs="+", default=list(BACKGROUNDS), choices=BACKGROUNDS)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        child(args.model, args.child, args.repeats)
        return
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # "auto" must see no override
    print(f"load average at start: {os.getloadavg()}; cores usable: {len(os.sched_getaffinity(0))}")
    rows = []
    for kind in args.backgrounds:
        noise = background(kind)
        try:
            time.sleep(1.0 if noise else 0.0)
            for setting in SETTINGS:
                out = subprocess.run([sys.executable, __file__, "--model", args.model, "--repeats", str(args.repeats),
                                      "--child", setting], env=env, capture_output=True, text=True, check=True)
                cell = json.loads(out.stdout.strip().splitlines()[-1])
                gen = statistics.median(r["generate_s"] for r in cell["rounds"])
                train = statistics.median(r["train_s"] for r in cell["rounds"])
                rows.append((kind, setting, cell["threads"], gen, train))
                print(f"  {kind:12s} {setting:5s} threads={cell['threads']} generate {gen:.2f}s train {train:.2f}s "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            if noise:
                noise.kill()
                noise.wait()
    print(f"\nload average at end: {os.getloadavg()}\n")
    print("| background | setting | threads chosen | generate s (median) | train step s (median) | total s | vs best |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for kind in args.backgrounds:
        cells = [r for r in rows if r[0] == kind]
        best = min(g + t for _, _, _, g, t in cells)
        for _, setting, n, g, t in cells:
            print(f"| {kind} | {setting} | {n} | {g:.2f} | {t:.2f} | {g + t:.2f} | {(g + t) / best:.2f}x |")


if __name__ == "__main__":
    main()
