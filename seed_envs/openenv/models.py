"""What the server and the client share: the OpenEnv models of a seed env, and an observation's wire form.

An observation travels as text plus, in image modes, a base64 PNG (lossless: the client's array equals
the env's); ``info`` travels whole (the contract's keys and the env's own), as JSON (numpy values as
Python ones, non-finite floats as null). openenv-core's
serializer leaves ``metadata`` out of what it sends, so the info rides in a field of its own.
"""
from __future__ import annotations

import base64
import io
from typing import Any, Optional

import numpy as np
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from seed_envs.openenv import MAX_ACTION_CHARS


class SeedAction(Action):
    """One action: the string a seed env's ``step`` takes (anything else is passed on too: the env answers
    it as an invalid action, as in process)."""

    text: Any = Field(description=f"the action, e.g. 'go to fridge 1' or 'up' (at most {MAX_ACTION_CHARS} characters)")


class SeedObservation(Observation):
    """One ``reset`` or ``step`` result: ``reward`` and ``done`` (= terminated or truncated) are OpenEnv's own."""

    text: str = Field(description="the text observation (obs['text'])")
    image: Optional[str] = Field(default=None, description="obs['image'] as a base64 PNG, in image modes")
    terminated: bool = Field(default=False, description="the episode ended in the env (solved, failed)")
    truncated: bool = Field(default=False, description="the episode hit the step budget (max_steps)")
    info: dict[str, Any] = Field(default_factory=dict,
                                 description="the info contract (task_id, category, admissible_actions, "
                                             "invalid_action, success, score, ...) and the env's own keys")


class SeedState(State):
    """The session's episode: which env and task, how many steps so far."""

    env_id: str = Field(default="", description="the served env's registered id")
    task_id: Optional[str] = Field(default=None, description="the current task (None before the first reset)")


def encode_image(image: np.ndarray) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_image(data: str) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(data, validate=True))) as image:
        return np.array(image.convert("RGB"), dtype=np.uint8)
