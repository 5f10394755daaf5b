"""Task data for the trainer.

  rl.data.tasks    procedural tasks (countdown, arithmetic) with disjoint
                   train / held-out splits and verified solutions
  rl.data.sources  random-access prompt sources (procedural tasks, JSONL,
                   Parquet, prepared TFDS datasets in array_record format,
                   read without TensorFlow) and the grain batch iterator
                   (seeded; `get_state`/`set_state` capture and restore its
                   position, which the trainer checkpoints)
  rl.data.from_config  the sources a config's `data` section describes
"""
