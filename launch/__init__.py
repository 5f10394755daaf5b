"""Thin absl + ml_collections entry points (`python -m launch.<name>`)."""
