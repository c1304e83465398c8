"""A sixth env that lives outside seed_envs (docs/adding-an-environment.md): importing this package
registers it, as ``import seed_envs`` registers the five."""
import gymnasium as gym

ENV_ID = "test/WordReverse-v0"

if ENV_ID not in gym.registry:  # the registration line
    gym.register(id=ENV_ID, entry_point="sixth_env.env:make")
