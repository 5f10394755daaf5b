"""Learning: advantage estimators, policy losses, KL, rewards, learner, trainer.

Lands with the algorithm-library and trainer issues; depends on `models` and
`sampling`.
"""
