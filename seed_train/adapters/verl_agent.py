"""verl-agent adapter: any ``seed/`` env behind verl-agent's ``EnvironmentManagerBase`` interface.

verl-agent (https://github.com/langfengQ/verl-agent) drives environments through a manager with
``reset(kwargs) -> (observations, infos)`` and ``step(text_actions) -> (observations, rewards, dones,
infos)``, where observations are ``{'text': [prompt per env], 'image': ..., 'anchor': [raw obs]}``
and each step's info carries ``won`` (success) and ``is_action_valid``. Envs come in consecutive
blocks of ``rollout.n`` (a GRPO group) that start from the same task and seed.

:class:`SeedEnvironmentManager` implements that contract with our own wrapper stack (PromptRenderer
builds the prompt with history, LLMActionParser does verl-agent's "projection" of free text to an
action), so no verl code is imported. To use it inside verl-agent, patch its factory once before the
trainer starts::

    from seed_train.adapters.verl_agent import patch_verl_agent
    patch_verl_agent()        # env.env_name=seed/Sokoban-v0 now builds seed envs; others unchanged

or call :func:`make_envs` from your own ``make_envs``.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import seed_envs  # noqa: F401  (registers the ids)
from wrappers import make_agent_env

_ENDED = "The episode has ended."


class SeedEnvironmentManager:
    """``num_groups * group_n`` envs of one ``seed/`` id with verl-agent's manager interface.

    Args:
        env_id: a registered ``seed/`` id.
        num_groups: tasks per batch (verl-agent's ``data.train_batch_size``).
        group_n: rollouts per task (``env.rollout.n``); envs ``[g*n, (g+1)*n)`` share task and seed.
        seed: base reset seed; reset number ``r`` gives group ``g`` the seed
            ``seed + r * num_groups + g``, so every reset draws fresh tasks, reproducibly.
        split, history, template, action_format, format_penalty, max_steps, env_kwargs: the env stack,
            :func:`wrappers.make_agent_env` (None: the env's own agent defaults, as the SEED trainer uses).
    """

    def __init__(self, env_id: str, num_groups: int, group_n: int = 1, *, seed: int = 0, split: str = "train",
                 history: int | None = None, template: str | None = None, action_format: str | None = None,
                 format_penalty: float = 0.1, max_steps: int | None = None, env_kwargs: dict | None = None):
        if num_groups < 1 or group_n < 1:
            raise ValueError(f"num_groups and group_n must be >= 1, got {num_groups}, {group_n}")
        self.env_id = env_id
        self.num_groups = num_groups
        self.group_n = group_n
        self.seed = seed
        self.envs: list[gym.Env] = [
            make_agent_env(env_id, split=split, template=template, history=history, max_steps=max_steps,
                           action_format=action_format, format_penalty=format_penalty, env_kwargs=env_kwargs)
            for _ in range(num_groups * group_n)
        ]
        self._resets = 0
        self._done = np.zeros(len(self.envs), dtype=bool)
        self._last_obs: list[dict] = [{} for _ in self.envs]
        self._last_info: list[dict] = [{} for _ in self.envs]

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    def group_seeds(self) -> list[int]:
        """The reset seed of each env at the next reset (equal within a block of ``group_n``)."""
        base = self.seed + self._resets * self.num_groups
        return [base + i // self.group_n for i in range(self.num_envs)]

    def reset(self, kwargs: dict | None = None) -> tuple[dict[str, Any], list[dict]]:
        """Start new tasks in every env; ``kwargs`` may hold ``task_ids`` (one per group) to pick them."""
        kwargs = dict(kwargs or {})
        task_ids = kwargs.get("task_ids")
        if task_ids is not None and len(task_ids) != self.num_groups:
            raise ValueError(f"reset: task_ids needs one id per group ({self.num_groups}), got {len(task_ids)}")
        seeds = self.group_seeds()
        self._resets += 1
        infos = []
        for i, env in enumerate(self.envs):
            options = {"task_id": task_ids[i // self.group_n]} if task_ids is not None else None
            obs, info = env.reset(seed=seeds[i], options=options)
            self._last_obs[i] = obs
            info = self._verl_info(info, valid=True)
            self._last_info[i] = info
            infos.append(info)
        self._done[:] = False
        return self._observations(), infos

    def step(self, text_actions: Sequence[str]) -> tuple[dict[str, Any], np.ndarray, np.ndarray, list[dict]]:
        """Step every env with the model's raw text; envs already done stay done (reward 0)."""
        if len(text_actions) != self.num_envs:
            raise ValueError(f"step: expected {self.num_envs} actions, got {len(text_actions)}")
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        infos = []
        for i, (env, text) in enumerate(zip(self.envs, text_actions)):
            if self._done[i]:
                # verl-agent keeps stepping finished envs (their samples are masked): answer without touching them.
                infos.append({**self._last_info[i], "is_action_valid": np.array(True), "ended": True})
                continue
            obs, reward, terminated, truncated, info = env.step(text)
            valid = not (info.get("format_error", False) or info.get("invalid_action", False))
            info = self._verl_info(info, valid=valid)
            rewards[i] = float(reward)
            self._done[i] = bool(terminated or truncated)
            self._last_obs[i], self._last_info[i] = obs, info
            infos.append(info)
        return self._observations(), rewards, self._done.copy(), infos

    def _observations(self) -> dict[str, Any]:
        images = [o.get("image") for o in self._last_obs]
        return {
            "text": [o["prompt"] for o in self._last_obs],
            "image": None if all(im is None for im in images) else images,
            # GiGPO groups identical states by the anchor: the raw observation, without history or prompt.
            "anchor": [o["text"] for o in self._last_obs],
        }

    @staticmethod
    def _verl_info(info: dict, *, valid: bool) -> dict:
        info = dict(info)
        info.pop("prompt_parts", None)  # large and only for our own recorder
        info["won"] = bool(info.get("success", False))
        info["is_action_valid"] = np.array(valid)
        return info

    def build_text_obs(self) -> list[str]:
        """The current prompt of every env (PromptRenderer already renders task, history and observation)."""
        return [o["prompt"] for o in self._last_obs]

    def success_evaluator(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """verl-agent's default: ``won`` of each episode's last active step."""
        total_infos, total_batch_list = kwargs["total_infos"], kwargs["total_batch_list"]
        success: dict[str, list[float]] = defaultdict(list)
        for b, batch in enumerate(total_batch_list):
            for i in reversed(range(len(batch))):
                if batch[i]["active_masks"]:
                    success["success_rate"].append(float(total_infos[b][i]["won"]))
                    break
        return {k: np.array(v) for k, v in success.items()}

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    """``config.a.b`` for OmegaConf, dataclasses, namespaces or plain dicts."""
    node = config
    for key in dotted.split("."):
        if node is None:
            return default
        node = node.get(key) if isinstance(node, dict) else getattr(node, key, None)
    return default if node is None else node


def make_envs(config: Any) -> tuple[SeedEnvironmentManager, SeedEnvironmentManager]:
    """verl-agent's ``make_envs`` hook: ``(train_envs, val_envs)`` for ``env.env_name`` = a ``seed/`` id.

    Reads ``env.env_name``, ``env.seed``, ``env.rollout.n``, ``data.train_batch_size``,
    ``data.val_batch_size`` and, when set, ``env.max_steps``, ``env.history_length``, ``env.split``,
    ``env.val_split``, ``env.action_format``, ``env.env_kwargs``. Validation uses one rollout per task
    and seeds offset by 1000, as verl-agent's own managers do.
    """
    env_id = _get(config, "env.env_name")
    if not isinstance(env_id, str) or not env_id.startswith("seed/"):
        raise ValueError(f"make_envs: env.env_name must be a seed/ id, got {env_id!r}")
    group_n = int(_get(config, "env.rollout.n", 1) or 1)
    seed = int(_get(config, "env.seed", 0))
    common = dict(history=_get(config, "env.history_length"), max_steps=_get(config, "env.max_steps"),
                  action_format=_get(config, "env.action_format"),
                  env_kwargs=dict(_get(config, "env.env_kwargs", {}) or {}))
    train = SeedEnvironmentManager(env_id, int(_get(config, "data.train_batch_size")), max(group_n, 1), seed=seed,
                                   split=_get(config, "env.split", "train"), **common)
    val = SeedEnvironmentManager(env_id, int(_get(config, "data.val_batch_size")), 1, seed=seed + 1000,
                                 split=_get(config, "env.val_split", "test"), **common)
    return train, val


def patch_verl_agent() -> None:
    """Route verl-agent's ``make_envs`` to :func:`make_envs` for ``seed/`` ids (others go to the original)."""
    import agent_system.environments as environments  # verl-agent's package; ImportError without it

    original = environments.make_envs

    def make_envs_with_seed(config: Any):
        if str(_get(config, "env.env_name", "")).startswith("seed/"):
            return make_envs(config)
        return original(config)

    environments.make_envs = make_envs_with_seed
    env_manager = getattr(environments, "env_manager", None)
    if env_manager is not None and hasattr(env_manager, "make_envs"):
        env_manager.make_envs = make_envs_with_seed
