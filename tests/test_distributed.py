"""Data parallelism: 2 CPU processes (gloo, DDP) give the same loss and gradients as 1 process."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch

from seed_train.distributed import DistInfo, global_token_mean, shard_groups, sharded_range


def test_shard_groups_never_splits_groups():
    groups = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e"]
    items = list(range(10))
    shards = [shard_groups(items, groups, DistInfo(r, 2)) for r in range(2)]
    assert shards == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
    assert shard_groups(items, groups, DistInfo()) == items
    assert list(sharded_range(5, DistInfo(1, 2))) == [3, 4]


def _batch():
    """Eight samples in four GRPO groups of two, varied response lengths (so ranks hold unequal token counts)."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 700, (int(n),), generator=g).tolist() for n in torch.randint(5, 12, (8,), generator=g)]
    responses = [torch.randint(3, 700, (n,), generator=g).tolist() for n in (3, 7, 2, 5, 6, 1, 4, 8)]
    returns = torch.tensor([1.0, 0.0, 0.5, 0.7, 0.0, 0.0, 2.0, -1.0])
    groups = [0, 0, 1, 1, 2, 2, 3, 3]
    return prompts, responses, returns, groups


def _step(rank: int, world: int, model_dir: str, port: int, out: str) -> None:
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from seed_train.advantages import group_normalize
    from seed_train.distributed import all_reduce_sum, dist_info
    from seed_train.scoring import response_logprobs

    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    info = dist_info()
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    prompts, responses, returns, groups = _batch()
    mine = shard_groups(list(range(8)), groups, info)
    # Advantages from whole groups, computed on the rank that holds the group.
    adv = group_normalize(returns[mine], torch.tensor([groups[i] for i in mine]))
    lp, mask = response_logprobs(ddp, [prompts[i] for i in mine], [responses[i] for i in mine], grad=True)
    old = lp.detach()
    # The PPO surrogate at ratio 1 (first minibatch of an update): its gradient is -A * grad(logprob).
    per_token = -(torch.exp(lp - old) * adv[:, None])
    loss = global_token_mean(per_token, mask)
    loss.backward()
    total = float(all_reduce_sum(loss.detach()) / info.world_size)
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    if info.is_main:
        Path(out).write_text(json.dumps({"loss": total, "grad_norm": float(grad.norm()), "grad_head": grad[:50].tolist()}))
    if world > 1:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_match_one(tmp_path):
    import torch.multiprocessing as mp

    from seed_train.tiny import cached_tiny_model

    model_dir = str(cached_tiny_model())
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    _step(0, 1, model_dir, 0, str(one))
    mp.spawn(_step, args=(2, model_dir, _free_port(), str(two)), nprocs=2, join=True)
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    assert a["grad_head"] == pytest.approx(b["grad_head"], rel=1e-4, abs=1e-7)


def _train_args(out, model_dir: str, skills: str) -> list[str]:
    # One minibatch covering every sample (8 episodes x <= 2 steps), so 1 and 2 processes take the same step.
    return ["train", "--env-id", "seed/EZPoints-v0", "--train-split", "test", "--model", model_dir, "--no-lora",
            "--template", "compact", "--history", "0", "--action-format", "plain", "--max-steps", "2",
            "--max-new-tokens", "4", "--stage1-demos", "0", "--iterations", "1", "--tasks-per-iteration", "4",
            "--group-size", "2", "--minibatch-size", "64", "--lr", "1e-3", "--kl-coef", "0.01",
            "--skill-source", "static", "--static-skills", skills, "--no-eval-before", "--no-eval-after",
            "--checkpoint-every", "1", "--no-save-final", "--output-dir", str(out)]


@pytest.mark.slow
def test_accelerate_launch_two_processes_match_one(tmp_path):
    """`accelerate launch` of the real trainer on 2 CPU processes (gloo) gives the same update as 1 process."""
    import shutil
    import subprocess
    import sys

    from safetensors.torch import load_file

    from seed_train.tiny import cached_tiny_model

    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        pytest.skip("accelerate is not installed (pip install 'seed-gym[train]')")
    model_dir = str(cached_tiny_model())
    skills = tmp_path / "skills.json"
    skills.write_text(json.dumps({"default": "Read both cards, add them if the sum hits the target, else multiply."}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    one, two = tmp_path / "one", tmp_path / "two"
    subprocess.run([sys.executable, "-m", "seed_train", *_train_args(one, model_dir, str(skills))], check=True,
                   env=env, timeout=600, capture_output=True)
    launched = subprocess.run([accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
                               str(_free_port()), "-m", "seed_train", *_train_args(two, model_dir, str(skills))],
                              env=env, timeout=600, capture_output=True, text=True)
    assert launched.returncode == 0, launched.stderr[-3000:]
    m1 = json.loads((one / "metrics.jsonl").read_text().splitlines()[0])
    m2 = json.loads((two / "metrics.jsonl").read_text().splitlines()[0])
    # Same episodes (sampling is seeded per episode, not per batch or rank), same loss, same new weights.
    assert m1["samples"] == m2["samples"] and m1["success"] == m2["success"] and m1["return"] == pytest.approx(m2["return"])
    assert m2["opd_tokens"] > 0 and m1["skill_valid_rate"] == m2["skill_valid_rate"] == 1.0
    assert m1["loss"] == pytest.approx(m2["loss"], abs=1e-5)
    w1 = load_file(str(one / "checkpoints" / "iter0000" / "trainable.safetensors"))
    w2 = load_file(str(two / "checkpoints" / "iter0000" / "trainable.safetensors"))
    assert w1.keys() == w2.keys()
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], atol=1e-5, rtol=1e-4)
    # Only the main process wrote: one trajectory log holding every rank's episodes.
    assert len((two / "trajectories.jsonl").read_text().splitlines()) == 8
