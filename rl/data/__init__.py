"""Task data: procedural tasks with disjoint splits (`rl.data.tasks`).

The grain pipelines of the trainer issue build on these.
"""
