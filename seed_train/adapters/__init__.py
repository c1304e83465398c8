"""Adapters that let other RL trainers train on any ``seed/`` env.

- :mod:`seed_train.adapters.trl`: TRL's ``GRPOTrainer`` multi-turn hooks (``rollout_func`` for
  free-text actions, ``environment_factory`` for tool-calling models).
- :mod:`seed_train.adapters.verl_agent`: an environment manager with verl-agent's
  ``EnvironmentManagerBase`` interface, plus the ``make_envs`` hook.
- :mod:`seed_train.adapters.verifiers_env`: a ``verifiers`` 0.4 environment (``load_environment``) for
  prime-rl and the Environments Hub (it imports verifiers at import: import it only to use it).

Nothing heavy is imported here: each module imports its trainer's package (trl, datasets) only when
one of its functions needs it, and the verl-agent adapter does not import verl at all.
"""
