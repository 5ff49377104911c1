"""The node's defaults, shared by ``NodeSettings`` and the ``gym node serve`` options (whose
``--help`` shows them without importing pydantic)."""

DEFAULT_HOST = "127.0.0.1"  # loopback: a node is exposed on purpose, never by default
DEFAULT_PORT = 8000
DEFAULT_MAX_QUEUE = 64
