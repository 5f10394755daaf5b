"""Token-level analysis of what RL changed: two-model scoring, summaries, reports."""

from rl.analysis.scoring import FIELDS, ScoreOptions, check_pair, score_pair

__all__ = ["FIELDS", "ScoreOptions", "check_pair", "score_pair"]
