"""Environments and tools for multi-turn rollouts: tokens in, tokens out (docs/tools.md).

  rl.envs.environment   `ToolEnvironment` (a turn in, a reply's tokens or the episode's
                        end out) and `Episodes` (an environment as the sampler's
                        `respond`, `sampling.generate_turns`)
  rl.envs.parsers       tool-call parsers by name (`hermes`)
  rl.envs.tools         tools by name (`calculator`, `python`)
  rl.envs.observations  the chat template's text around tool outputs, found once
  rl.envs.sandbox       untrusted Python in a fresh, confined interpreter
  rl.envs.confine       the confinement itself (rlimits, capabilities, Landlock, seccomp)
"""
