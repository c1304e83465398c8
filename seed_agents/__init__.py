"""seed_agents: agents that play the seed_envs environments, and the ``seed-envs`` command.

It sits above both :mod:`seed_envs` (the environments) and :mod:`wrappers` (prompts, action parsing,
trajectories), so neither of those imports the other; it never imports the trainer (``seed_train``) or torch.

- :mod:`seed_agents.agents`: the agent protocol, the expert and random agents.
- :mod:`seed_agents.openai_endpoint`: :class:`~seed_agents.openai_endpoint.OpenAIChatAgent`, any
  OpenAI-compatible chat-completions endpoint (the optional ``openai`` extra, imported lazily).
- :mod:`seed_agents.runner`: play episodes and whole panels, with bounded concurrency across tasks.
- :mod:`seed_agents.cli`: ``seed-envs list/play/eval/record/view/make-alfworld``.
"""
from seed_agents.agents import Agent, AgentError, make_agent
from seed_agents.runner import EpisodeResult, evaluate, play_panel, run_episode

__all__ = ["Agent", "AgentError", "EpisodeResult", "evaluate", "make_agent", "play_panel", "run_episode"]
