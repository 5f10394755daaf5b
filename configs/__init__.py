"""configs package."""
