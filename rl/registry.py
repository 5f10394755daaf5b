"""String-keyed registries: advantage estimators, losses, KL kinds, rewards.

A config names a component by string (`config.rl.loss = "gspo"`); the registry
turns the string into the function. An unknown name raises one `KeyError`
that lists the registered names, so a typo in a config fails before compute.
Keyword arguments from the config are checked against the function's
signature the same way (`check_kwargs`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

F = TypeVar("F")


class RegistryError(KeyError):
    """An unknown component name or keyword argument.

    `str()` gives the plain message (KeyError would quote it).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry(Generic[F]):
    """A name -> component map with a decorator to fill it.

    Example:
        LOSSES = Registry("policy loss")

        @LOSSES.register("ppo")
        def ppo(...): ...

        LOSSES.get("ppo")
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, F] = {}

    def register(self, *names: str) -> Callable[[F], F]:
        """Decorator registering the object under each of `names`."""
        if not names:
            raise ValueError("register() needs at least one name")

        def add(obj: F) -> F:
            for name in names:
                if name in self._entries:
                    raise ValueError(f"{self.kind} '{name}' is registered twice")
                self._entries[name] = obj
            return obj

        return add

    def get(self, name: str) -> F:
        """The object registered as `name`; RegistryError listing the names if none."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise RegistryError(
                f"unknown {self.kind} {name!r} (registered: {', '.join(self.names())})"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def set_options(section: Any, exclude: tuple[str, ...] = ("name",)) -> dict[str, Any]:
    """The keys of a config section (a ConfigDict or mapping) whose value is not None,
    minus `exclude`: the options a component is given (None keeps its default)."""
    items = section.items() if hasattr(section, "items") else dict(section).items()
    return {k: v for k, v in items if v is not None and k not in exclude}


def check_kwargs(kind: str, name: str, fn: Callable[..., Any], kwargs: Mapping[str, Any],
                 reserved: tuple[str, ...] = ()) -> None:
    """Raises RegistryError naming any key of `kwargs` that `fn` does not accept.

    `reserved` names positional inputs that may not be passed as options.
    """
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = [p for p, v in params.items()
                if v.kind is inspect.Parameter.KEYWORD_ONLY and p not in reserved]
    for key in kwargs:
        if key not in accepted:
            raise RegistryError(
                f"{kind} {name!r} has no option {key!r} "
                f"(options: {', '.join(accepted) or 'none'})"
            )
