"""Names a package exports but loads on first use (PEP 562), so that importing it stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``exports[name]`` (a module) on
    first access of ``name`` and returns the attribute of that name.

    Parameters
    ----------
    package
        The package's name, for the error message.
    exports
        Exported name -> the module that defines it.
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
