"""The limits of ``seed-envs serve`` (:mod:`seed_agents.openenv_server`), apart so the command line shows
their defaults without importing the server's optional dependencies."""
from __future__ import annotations

from dataclasses import dataclass

from seed_envs.openenv import MAX_ACTION_CHARS

#: The most bytes an action takes as JSON: a character escaped as ``\\uXXXX`` (6 bytes), 12 for one
#: outside the basic plane (a surrogate pair), plus the message's own few hundred.
LONGEST_ACTION_BYTES = 12 * MAX_ACTION_CHARS + 4096


@dataclass(frozen=True)
class ServeLimits:
    """What one server allows (see :mod:`seed_agents.openenv_server`)."""

    max_sessions: int = 32
    idle_timeout_s: float = 600.0
    request_timeout_s: float = 300.0
    max_message_bytes: int = 2 << 20

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_message_bytes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {getattr(self, name)!r}")
        for name in ("idle_timeout_s", "request_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected seconds > 0, got {getattr(self, name)!r}")
        if self.max_message_bytes < LONGEST_ACTION_BYTES:
            raise ValueError(f"max_message_bytes: must hold the longest action ({LONGEST_ACTION_BYTES} bytes as "
                             f"JSON), got {self.max_message_bytes}")
