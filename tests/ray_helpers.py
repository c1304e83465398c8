"""Helpers for the tests that run on a local Ray instance."""
from __future__ import annotations

import time


def wait_until_dead(ray, actor, timeout_s: float = 60.0) -> None:
    """Block until a killed actor answers calls with RayActorError: ``ray.kill`` is asynchronous, and on a
    loaded machine the next call could still run on the actor."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.call.remote("spec", (), {}), timeout=10)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")
