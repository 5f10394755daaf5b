"""Optional dependencies: import them where needed, fail with the pip command that adds them.

    pq = extras.require("pyarrow.parquet", "parquet", "data.source=parquet")
    if not extras.available("tensorboard"): ...   # start-up check, imports nothing

The core install (`pip install rlvr-jax`) runs the procedural tasks with the
built-in byte tokenizer. Each optional feature names the setup.py extra that
installs its package; a missing one raises `MissingExtra` (an `ImportError`)
with a one-line message saying which feature needs which package and how to
install it:

    data.source=parquet needs pyarrow, which is not installed:
    pip install 'rlvr-jax[parquet]' (or pip install -e '.[parquet]' in a clone)
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

PROJECT = "rlvr-jax"
# Import name -> distribution name, where they differ.
_DISTRIBUTIONS = {"tensorflow_datasets": "tensorflow-datasets", "array_record": "array-record"}


class MissingExtra(ImportError):
    """An optional package is not installed; the message names the extra to install."""


def _top(module: str) -> str:
    return module.partition(".")[0]


def message(module: str, extra: str, feature: str, problem: str = "which is not installed") -> str:
    """The one-line explanation `require` and `check` raise with."""
    package = _DISTRIBUTIONS.get(_top(module), _top(module))
    return (f"{feature} needs {package}, {problem}: pip install '{PROJECT}[{extra}]' "
            f"(or pip install -e '.[{extra}]' in a clone)")


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Imports and returns `module`, or raises `MissingExtra` naming `extra`.

    Args:
      module: import name, possibly dotted ("pyarrow.parquet").
      extra: the setup.py extra that installs it ("parquet").
      feature: what needs it, as the user would recognise it ("data.source=parquet").
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = getattr(e, "name", None)
        if isinstance(e, ModuleNotFoundError) and missing and _top(missing) == _top(module):
            raise MissingExtra(message(module, extra, feature), name=missing) from e
        # Installed but broken (e.g. one of its own dependencies is missing).
        detail = " ".join(str(e).split())
        raise MissingExtra(message(module, extra, feature,
                                   f"which cannot be imported ({type(e).__name__}: {detail})"),
                           name=missing) from e


def available(module: str) -> bool:
    """Whether the top-level package of `module` is installed; imports nothing."""
    try:
        return importlib.util.find_spec(_top(module)) is not None
    except (ImportError, ValueError):  # ValueError: in sys.modules with no __spec__
        return False


def check(module: str, extra: str, feature: str) -> None:
    """Raises `MissingExtra` (as `require` would) if `module` is not installed; imports nothing."""
    if not available(module):
        raise MissingExtra(message(module, extra, feature), name=_top(module))
