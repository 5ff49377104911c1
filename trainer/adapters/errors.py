"""Exceptions of ``trainer.adapters``: one base, each also the builtin it refines."""

from __future__ import annotations

from trainer.errors import TrainerError


class AdapterError(TrainerError):
    """Base of the adapter commands' expected errors; the CLI prints them as one line."""


class AdapterRunError(AdapterError, ValueError):
    """A run directory cannot be published (missing or malformed run.json, adapter files)."""


class AdapterEntryError(AdapterError, ValueError):
    """A CID does not name a valid adapter entry, or a proof does not place it in a log."""


class AdapterIntegrityError(AdapterError, ValueError):
    """Fetched bytes are not what the adapter entry promises; nothing was written.

    ``path`` is the file inside the adapter, ``expected`` and ``computed`` the two values
    (CIDs or sizes) that disagree, when there are two to show.
    """

    def __init__(self, message: str, *, path: str | None = None, expected: object = None,
                 computed: object = None):
        super().__init__(message)
        self.path, self.expected, self.computed = path, expected, computed


class BaseModelMismatchError(AdapterError, ValueError):
    """The base model given is not the one the adapter was trained on (weights digest)."""


class DeltaFormatError(AdapterError, ValueError):
    """A compressed delta directory is malformed or does not match its base model."""
