"""Snapshot of the prompts, rewards and infos each env stack produces, to prove a refactor byte-equal.

For every registered ``seed/`` id and a few (split, reset seed) pairs, the env's expert plays an
episode (its actions written in the stack's answer format) through each way the project builds an
agent env: the trainer's ``EnvSpec`` (from ``SeedConfig(env_id=...)`` defaults), the TRL adapter's
``TaskEnv`` and the verl-agent adapter's manager. Every step's prompt, reward, flags and info (with
``prompt_parts``) and the recorded trajectory go into one JSON file; run it before and after a change
and ``diff`` the two files.

Runs against the current tree and older ones (it imports only names that exist in both), e.g.::

    cd /tmp/base && PYTHONPATH=/tmp/base python /path/to/seed-gym/benchmarks/prompt_snapshot.py --out /tmp/before.json
    python benchmarks/prompt_snapshot.py --out /tmp/after.json && diff /tmp/before.json /tmp/after.json
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

CASES = (("test", 0), ("test", 1), ("train", 2))  # (split, reset seed) per env
MAX_STEPS_RECORDED = 6  # steps of each episode kept (the first prompts are what a refactor changes)


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars/arrays made JSON-safe (arrays as their shape and a checksum)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"ndarray": list(value.shape), "sum": int(value.astype(np.int64).sum())}
    if isinstance(value, np.generic):
        return value.item()
    return value


#: Trajectory fields that differ on every run by design (fresh ids, wall-clock times).
RUN_FIELDS = ("episode_id", "created", "created_at", "timestamp", "wall_s", "time_s")


def without_run_ids(record: Any) -> Any:
    """``record`` without :data:`RUN_FIELDS` at any depth."""
    if isinstance(record, dict):
        return {k: without_run_ids(v) for k, v in record.items() if k not in RUN_FIELDS}
    if isinstance(record, list):
        return [without_run_ids(v) for v in record]
    return record


def format_response(action: str, action_format: str) -> str:
    try:
        from wrappers.action_parser import format_response as fmt
    except ImportError:
        from seed_train.stage1 import format_response as fmt
    return fmt(action, action_format)


def play(env, seed: int, expert_env=None) -> list[dict[str, Any]]:
    """The expert's episode through ``env`` (a built stack): one record per step (the reset first)."""
    import seed_envs

    action_format = env.get_wrapper_attr("format")  # the LLMActionParser's answer format
    obs, info = env.reset(seed=seed)
    expert = seed_envs.make_expert(expert_env or env)
    steps = [{"prompt": obs["prompt"], "text": obs["text"], "info": jsonable(info)}]
    for _ in range(MAX_STEPS_RECORDED):
        action = expert(obs, info)
        obs, reward, terminated, truncated, info = env.step(format_response(action, action_format))
        steps.append({"action": action, "prompt": obs["prompt"], "reward": float(reward),
                      "terminated": bool(terminated), "truncated": bool(truncated), "info": jsonable(info)})
        if terminated or truncated:
            break
    return steps


def trainer_stack(env_id: str, split: str, seed: int) -> dict[str, Any]:
    from seed_train.config import SeedConfig
    from seed_train.trainer import env_spec

    spec = env_spec(SeedConfig(env_id=env_id), split)
    trajectories: list = []
    env = spec.make(trajectories.append)
    steps = play(env, seed)
    env.close()
    return {"steps": steps, "trajectories": [without_run_ids(jsonable(t.to_dict())) for t in trajectories]}


def trl_stack(env_id: str, split: str, seed: int) -> dict[str, Any]:
    from seed_train.adapters.trl import TaskEnv

    task = TaskEnv(env_id, split=split)
    env = task.make()
    steps = play(env, seed)
    env.close()
    return {"steps": steps}


def verl_stack(env_id: str, split: str, seed: int) -> dict[str, Any]:
    from seed_train.adapters.verl_agent import SeedEnvironmentManager

    manager = SeedEnvironmentManager(env_id, 1, 1, seed=seed, split=split)
    obs, infos = manager.reset()
    import seed_envs

    expert = seed_envs.make_expert(manager.envs[0])
    inner_obs, info = manager._last_obs[0], infos[0]
    steps = [{"prompt": obs["text"][0], "anchor": obs["anchor"][0], "info": jsonable(info)}]
    for _ in range(MAX_STEPS_RECORDED):
        action = expert(inner_obs, info)
        obs, rewards, dones, infos = manager.step([format_response(action, manager.envs[0].get_wrapper_attr("format"))])
        inner_obs, info = manager._last_obs[0], infos[0]
        steps.append({"action": action, "prompt": obs["text"][0], "anchor": obs["anchor"][0],
                      "reward": float(rewards[0]), "done": bool(dones[0]), "info": jsonable(info)})
        if dones[0]:
            break
    manager.close()
    return {"steps": steps}


STACKS = {"trainer": trainer_stack, "trl": trl_stack, "verl_agent": verl_stack}


def snapshot(env_ids: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for env_id in env_ids:
        for split, seed in CASES:
            for name, stack in STACKS.items():
                key = f"{env_id} {split} seed={seed} {name}"
                try:
                    out[key] = stack(env_id, split, seed)
                except ImportError as e:  # an env whose optional extra is missing
                    out[key] = {"skipped": f"missing extra: {e}"}
                    print(f"skip {key}: {e}", file=sys.stderr)
                print(f"done {key}", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> None:
    import seed_envs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON file to write (default: stdout)")
    parser.add_argument("--env", action="append", help="env id (repeatable; default: every seed/ id)")
    args = parser.parse_args(argv)
    text = json.dumps(snapshot(args.env or sorted(seed_envs.ENV_IDS)), indent=1, sort_keys=True, ensure_ascii=False)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
