"""``seed-envs check``: the environment contract shipped as a command (issue 31), for any registered env,
in this package or out of tree; a broken env fails with the check named."""
from __future__ import annotations

import gymnasium as gym
import pytest
import sixth_env

from seed_agents.cli import main
from seed_envs.core import AgentDefaults, Outcome, SeedEnv, Task, time_limited


class EchoesJunkEnv(SeedEnv):
    """Breaks two clauses: junk is accepted as valid and echoed back whole."""

    default_max_steps = 5
    agent_defaults = AgentDefaults(prompt={"intro": "Say anything."})

    def _build_panel(self):
        return [f"echo/{self.split}/{i}" for i in range(3)]

    def _start_task(self, task_id):
        return Task(task_id, "Say anything.", "echo")

    def _apply(self, action):
        return Outcome(0.0, False, False, "You said: " + action)

    def _state_text(self, with_state):
        return "Say something."

    def _success(self):
        return False

    def make_expert(self):
        return lambda obs, info: "hello"


def test_the_sixth_env_passes_every_check_from_its_own_package(capsys):
    assert main(["check", sixth_env.ENV_ID, "--import", "sixth_env", "--episodes", "3", "--junk", "40"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 11 and "FAIL" not in out and "11/11 checks passed" in out


def test_a_broken_env_fails_naming_the_check(capsys):
    env_id = "test-check/EchoesJunk-v0"
    gym.register(env_id, entry_point=time_limited(EchoesJunkEnv))
    try:
        assert main(["check", env_id, "--only", "junk-actions", "info-keys", "--junk", "16"]) == 1
    finally:
        del gym.registry[env_id]
    out = capsys.readouterr().out
    assert "FAIL  junk-actions" in out and "not flagged invalid" in out and "PASS  info-keys" in out
    assert "failed: junk-actions" in out


@pytest.mark.parametrize("argv, message", [(["check", "nope/Nope-v0"], "not registered"),
                                           (["check", sixth_env.ENV_ID, "--import", "sixth_env", "--only", "vibes"],
                                            "unknown checks")])
def test_bad_arguments_exit_2_with_a_reason(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
