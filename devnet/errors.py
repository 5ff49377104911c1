"""Exceptions of the devnet package: one base, each also a builtin where one fits."""


class DevnetError(RuntimeError):
    """Base of the devnet package's errors. Messages say what is wrong and what to run."""


class PortInUseError(DevnetError, OSError):
    """The port Anvil should listen on is taken by another process."""


class RpcUnreachableError(DevnetError, ConnectionError):
    """The EVM RPC endpoint does not answer."""


class DeploymentFileError(DevnetError, ValueError):
    """``deployment.json`` is missing, unreadable or malformed."""
