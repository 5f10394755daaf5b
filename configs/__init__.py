"""ml_collections config files; `get_config(arg)` in each returns a ConfigDict."""
