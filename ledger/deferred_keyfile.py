"""Import eth-keyfile, and BLS12-381 with it, only when a keystore is read or written.

eth-account imports eth-keyfile when it is imported, and eth-keyfile imports py_ecc's
BLS12-381 (for EIP-2335 validator keystores), whose import computes pairing tables: about
0.9 s of every process that imports web3, for a curve the project never uses (the committee
signs on BN254, ``committee.bls``). ``install()`` (run by ``ledger/__init__``, before anything
imports eth-account) puts stand-ins in place of ``eth_keyfile`` and ``eth_keyfile.keyfile``.
They carry the names eth-account binds when it is imported; calling one of them, or reading
any other name, imports the real package and hands over to it. Keystores behave exactly as
before: ``Account.encrypt`` and ``Account.decrypt`` run eth-keyfile's own code
(tests/ledger/test_deferred_keyfile.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal

PACKAGE = "eth_keyfile"
MODULE = "eth_keyfile.keyfile"
FUNCTIONS = ("create_keyfile_json", "decode_keyfile_json", "extract_key_from_keyfile",
             "load_keyfile")
# eth-keyfile 0.10's ``keyfile.KDFType``, which eth-account imports as a name; the test
# compares it with the real one.
KDFType = Literal["pbkdf2", "scrypt"]

_lock = threading.RLock()
_real: dict[str, ModuleType] = {}


def real_module(name: str = MODULE) -> ModuleType:
    """The real ``eth_keyfile`` or ``eth_keyfile.keyfile``, imported on the first call."""
    with _lock:
        if not _real:
            stand_ins = {n: sys.modules.pop(n) for n in (PACKAGE, MODULE)
                         if isinstance(sys.modules.get(n), _StandIn)}
            try:
                keyfile = importlib.import_module(MODULE)
            except BaseException:
                sys.modules.update(stand_ins)
                raise
            _real[MODULE] = keyfile
            _real[PACKAGE] = sys.modules[PACKAGE]
        return _real[name]


class _StandIn(ModuleType):
    """A module whose unknown names are the real module's, imported on first use."""

    def __getattr__(self, attr: str) -> Any:
        if attr == "__path__":  # the import system asks every module; only a package has one
            raise AttributeError(attr)
        return getattr(real_module(self.__name__), attr)


def _handing_over(name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(real_module(MODULE), name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"eth_keyfile.{name}, imported on the first call."
    return call


def install() -> bool:
    """Put the stand-ins in place unless eth-keyfile is imported already (or missing)."""
    with _lock:
        spec = None if PACKAGE in sys.modules else importlib.util.find_spec(PACKAGE)
        if spec is None:
            return installed()
        package, keyfile = _StandIn(PACKAGE), _StandIn(MODULE)
        # ``from eth_keyfile import ...`` asks a package for its __path__ first
        package.__path__ = list(spec.submodule_search_locations or [])
        for name in FUNCTIONS:
            setattr(package, name, _handing_over(name))
            setattr(keyfile, name, getattr(package, name))
        keyfile.KDFType = KDFType
        package.keyfile = keyfile
        sys.modules[PACKAGE], sys.modules[MODULE] = package, keyfile
        return True


def installed() -> bool:
    """True while the stand-ins are in place (the real eth-keyfile not imported yet)."""
    return isinstance(sys.modules.get(PACKAGE), _StandIn)
