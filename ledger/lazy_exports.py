"""A package's public names, imported from their modules on first use (PEP 562).

Every ``gym`` command imports the packages' ``cli`` modules, and importing ``ledger.cli``
runs ``ledger/__init__`` first: if that imported every module it exports, ``gym --help``
would load SQLAlchemy, web3 and the rest before printing a line. A package ``__init__``
instead names what it exports and where each name lives; a module is imported the first
time one of its names is read (``from ledger import LogStore`` or ``ledger.LogStore``), and
the value is then kept in the package, so later reads cost a dict lookup.

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {
        "ledger.logstore": ["LogStore", "LogInfo"],
        "ledger.rfc9162": ["leaf_hash", "root as merkle_root"],  # exported under a new name
    })

``ledger`` and every package that may import it use this; ``contracts`` (which imports
nothing of ours) keeps its exports light instead.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import Any


class _LazyPackage(types.ModuleType):
    """A package whose exports win over its submodules of the same name, as they did when its
    ``__init__`` imported them eagerly (``trainer.gradient`` exports the function ``train`` of
    its module ``train``): importing the submodule later leaves the package's name alone."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}"
                and name in self.__dict__.get("_lazy_exports", ())):
            return  # the submodule stays importable, from sys.modules
        super().__setattr__(name, value)


def lazy_exports(package: str, exports: dict[str, list[str]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``package``'s ``__getattr__``, ``__dir__`` and ``__all__``: each module of ``exports``
    provides the names listed for it (``"name"``, or ``"attribute as name"``)."""
    where: dict[str, tuple[str, str]] = {}
    for module, names in exports.items():
        for spec in names:
            attribute, _, name = spec.partition(" as ")
            where[name or attribute] = (module, attribute)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = where[name]
        value = getattr(importlib.import_module(module), attribute)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    sys.modules[package].__class__ = _LazyPackage
    sys.modules[package]._lazy_exports = frozenset(where)
    return __getattr__, __dir__, sorted(where)
