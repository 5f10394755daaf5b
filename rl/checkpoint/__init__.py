"""Fault tolerance in two tiers, and the step loop that uses them.

  rl.checkpoint.persistent  Orbax checkpoints of a run's full state, resumed exactly
  rl.checkpoint.storage     its errors: a failed write's storage cause on one line, the
                            free space a checkpoint needs, Orbax's logging kept quiet
  rl.checkpoint.snapshot    in-memory snapshots on the host, for rollback
  rl.checkpoint.loop        `fit(job, ...)`: resume, snapshots, rollback of failed
                            steps, persistent checkpoints, preemption
  rl.checkpoint.preemption  SIGTERM / SIGINT: finish or abandon the step, checkpoint
  rl.checkpoint.agreement   the same fault decisions in every process of a multi-process
                            run (rollback, preemption, time-based saves, a lost process)
  rl.checkpoint.faults      fault injection for the tests (`config.fault`)

Design and measurements: docs/fault_tolerance.md.
"""
