"""Sweep files that rerun the papers' ablations on the demo's tiny model (launch.sweep)."""
