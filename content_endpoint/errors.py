"""The content endpoint's errors: one base the root command prints as one line."""

from __future__ import annotations


class ContentEndpointError(RuntimeError):
    """Base of the content endpoint's errors. Messages say what is wrong and what to do."""


class PortInUseError(ContentEndpointError, OSError):
    """The port the endpoint should listen on is taken by another process."""
