"""Our envs over the OpenEnv protocol: a server for any registered env, and a gymnasium client for it.

OpenEnv (``openenv-core``, the ``serve`` extra) is the protocol TRL, SkyRL, torchforge and Verifiers use to
reach environments served elsewhere: a WebSocket session per episode stream, ``reset`` / ``step`` /
``state`` messages carrying typed Action / Observation / State models. Two halves:

- ``seed_agents.openenv_server``: ``seed-envs serve ENV_ID`` (or its ``make_app``) serves one registered
  env, its make arguments fixed when the server starts, one env instance per session, with
  openenv-core's own server (FastAPI + uvicorn). It lives beside the other env runners in
  ``seed_agents``, since it runs each env inside ``wrappers.EnvDeadline`` (this package imports no
  ``wrappers``);
- :mod:`seed_envs.openenv.client`: :class:`~seed_envs.openenv.client.RemoteEnv`, registered as
  ``seed/Remote-v0``: a ``gymnasium.Env`` that plays a served env through openenv-core's own client,
  so our wrappers, recorder, ``seed-envs eval`` and the trainer run against it unchanged.

:mod:`seed_envs.openenv.models` holds what both sides share: the pydantic models and the wire form of
an observation (text, image as base64 PNG, the info contract as JSON). Nothing here is imported by
``import seed_envs``; openenv-core is imported only when a server or client is made.
"""

#: The longest action a server takes (characters). An action is a line the env parses; anything this long
#: is junk the env would flag invalid, so the client sends its first this many characters instead.
MAX_ACTION_CHARS = 100_000
