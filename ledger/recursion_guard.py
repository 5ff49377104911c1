"""Keep the interpreter's recursion limit sane when py_ecc is imported, without importing it.

py_ecc (imported by web3 and eth-account) raises the recursion limit to 100,000 on import,
which lets C code such as the JSON decoder recurse past the C stack: deeply nested input then
kills the process with SIGSEGV instead of raising RecursionError (``ledger.json_input``).
Importing py_ecc eagerly to put the limit back would cost every ``gym`` command web3's import
time, so ``install()`` (run by ``ledger/__init__``) adds an import hook instead: whenever
py_ecc is imported later, by anyone, the limit is put back right after py_ecc's own code ran.
"""

from __future__ import annotations

import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

CEILING = 10_000  # deep enough for any Python code of ours; shallow enough for the C stack


class _RestoringLoader(Loader):
    """py_ecc's own loader, followed by putting the recursion limit back."""

    def __init__(self, loader: Loader):
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        before = sys.getrecursionlimit()
        try:
            self._loader.exec_module(module)
        finally:
            sys.setrecursionlimit(min(before, CEILING))

    def __getattr__(self, name: str):  # resource readers and the like: py_ecc's loader's
        return getattr(self._loader, name)


class _PyEccGuard(MetaPathFinder):
    def find_spec(self, name, path=None, target=None) -> ModuleSpec | None:
        if name != "py_ecc":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RestoringLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Guard every later import of py_ecc; if it is already imported, lower the limit now."""
    if "py_ecc" in sys.modules:
        sys.setrecursionlimit(min(sys.getrecursionlimit(), CEILING))
    elif not any(isinstance(finder, _PyEccGuard) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PyEccGuard())
