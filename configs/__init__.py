"""ml_collections config files; `get_config(arg)` in each returns a ConfigDict."""

import importlib.util
from types import ModuleType


def import_file(path: str, name: str = "_config_file") -> ModuleType:
    """The Python file at `path` imported as a module (config and sweep files are
    named by path, not by package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
