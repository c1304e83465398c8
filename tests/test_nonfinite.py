"""Non-finite values refused (issue 33 item 3): a NaN reward leaves its episode out of the update (named,
counted, still logged); a NaN loss or gradient skips that optimizer step; the weights, the saved
checkpoint and the curves stay finite."""
from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import toy_env
from seed_envs.core import Outcome
from seed_train.config import SeedConfig
from seed_train.logs import curves_figure
from seed_train.tiny import cached_tiny_model
from seed_train.trainer import load, train, update_policy
from wrappers import read_trajectories

NAN_ENV = "test/NaNEcho-v0"


class NaNEchoEnv(toy_env.EchoEnv):
    """Echo, whose episodes on every other task pay a NaN reward (a broken reward function)."""

    def _apply(self, action):
        outcome = super()._apply(action)
        if int(self.task.task_id.rsplit("/", 1)[1]) % 2:
            return Outcome(float("nan"), outcome.terminated, outcome.invalid, outcome.feedback)
        return outcome


def make_nan_env(**kwargs):
    return toy_env.make_with_time_limit(NaNEchoEnv, **kwargs)


@pytest.fixture(autouse=True, scope="module")
def registered():
    gym.register(NAN_ENV, entry_point=make_nan_env)
    yield
    del gym.registry[NAN_ENV]


def test_a_nan_reward_leaves_its_episodes_out_and_the_weights_finite(tmp_path):
    cfg = SeedConfig(env_id=NAN_ENV, model=str(cached_tiny_model(seed=0)), lora=False, template="compact", history=0,
                     action_format="plain", max_new_tokens=4, skill_max_new_tokens=8, analyzer_retries=0,
                     stage1_demos=0, iterations=1, tasks_per_iteration=4, group_size=2, lr=3e-3, minibatch_size=8,
                     kl_coef=0.0, reward_mode="env", eval_before=False, eval_after=False, checkpoint_every=0,
                     output_dir=str(tmp_path / "run"), seed=0, threads=1)
    train(cfg, say=lambda _: None)
    [metrics] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    played = list(read_trajectories(tmp_path / "run" / "trajectories.jsonl"))
    odd = [t for t in played if int(t.task_id.rsplit("/", 1)[1]) % 2]  # the tasks whose reward is NaN
    assert odd and metrics["nonfinite_episodes"] == len(odd)  # counted ...
    assert len(played) == 8 and {t.episode_id for t in played if t.meta.get("nonfinite_reward")} == {
        t.episode_id for t in odd}  # ... named in the log, which keeps every episode played
    assert math.isfinite(metrics["loss"])
    [ckpt] = (tmp_path / "run" / "checkpoints").glob("iter*")
    weights = load_file(str(ckpt / "trainable.safetensors")) if (ckpt / "trainable.safetensors").exists() else {
        k: v for f in ckpt.glob("*.safetensors") for k, v in load_file(str(f)).items()}
    assert weights and all(bool(torch.isfinite(w).all()) for w in weights.values())
    assert (tmp_path / "run" / "curves.png").stat().st_size > 1000


def test_a_nan_advantage_skips_the_step_and_keeps_the_weights():
    from seed_train.samples import StepSample

    policy = load(SeedConfig(model=str(cached_tiny_model(seed=0)), lora=False, threads=1))
    cfg = SeedConfig(model="x", lora=False, kl_coef=0.0, opd_coef=0.0, minibatch_size=4, ppo_epochs=1, lr=1e-2)
    samples = [StepSample(prompt_ids=[5, 6, 7], response_ids=[8, 9], old_logprobs=[-1.0, -1.0],
                          advantage=float("nan") if i == 0 else 1.0, teacher_prompt_ids=None, episode=i)
               for i in range(4)]
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=cfg.lr)
    stats = update_policy(policy.model, optimizer, samples, {"ref_logprobs": None, "teacher_logprobs": None}, cfg,
                          np.random.default_rng(0))
    assert stats["nonfinite_minibatches_skipped"] == 1
    assert all(torch.equal(before[n], p) for n, p in policy.model.named_parameters())


def test_curves_leave_non_finite_points_out():
    fig = curves_figure([{"iteration": 0, "loss": float("nan"), "success": 0.5},
                         {"iteration": 1, "loss": 0.2, "success": float("inf")}])
    assert fig is not None
