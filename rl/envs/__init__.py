"""Environments and tools for multi-turn rollouts: tokens in, tokens out.

- `rl.envs.sandbox`: run untrusted Python in a fresh, confined interpreter.
"""
