"""CodeLock: the trainer's positive-control env. Each lock family has one fixed code the observation
never shows; an episode enters a code one letter a step, and a failed try reveals the family's code.

``seed/CodeLock-v0`` is :class:`seed_envs.codelock.env.CodeLockEnv`, wrapped in ``TimeLimit``. Not one
of the SEED paper's benchmarks: an instrument built so that a hindsight skill carries information the
policy cannot get from the observation (docs/codelock.md).
"""
