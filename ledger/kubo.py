"""``KuboStore``: the content store backed by a Kubo node (or an IPFS Cluster proxy) over the
Kubo RPC API (https://docs.ipfs.tech/reference/kubo/rpc/), trusting the node for nothing.

- ``add_file`` asks for the layout the ledger's CIDs are defined by (``cid-version=1``,
  ``raw-leaves``, ``chunker=size-262144``) and checks the CID the node returns against the one
  computed locally with ``ledger.unixfs``. A node that lays files out differently (another
  chunker, trickle DAGs, an Import config that overrides the request) is an error, never a
  CID silently accepted.
- ``cat``/``cat_iter`` never use the node's ``cat``: they fetch each block with ``block/get``,
  re-hash it against the CID that named it, and walk the DAG locally (``iter_file_bytes``), so
  a wrong byte anywhere raises ``ContentIntegrityError`` before it reaches the caller.
- ``has`` asks ``block/stat`` with ``offline=true``: a missing block answers at once instead of
  being searched for on the network.
- ``put_block`` stores one raw or dag-pb block (``block/put``) and checks the CID the node
  answers; ``export_dag`` streams a DAG as a CAR (``dag/export``) and re-hashes every block as
  it arrives, bounded in blocks and bytes (an auditor's thousand entries in one request).

The client is ``ipfshttpclient.Client`` built directly: ``ipfshttpclient.connect()`` refuses
every Kubo from 0.8 on by its version check, while the RPC calls used here are unchanged since.
Connection failures raise ``ContentStoreUnreachableError`` naming ``GYM_IPFS_API``; error
answers from the node raise ``KuboError``.

Credentials (a node with Kubo's ``API.Authorizations``, or ``gym ipfs serve --authorizations``)
go in every request's ``Authorization`` header: from ``auth``, a secret in Kubo's own syntax
(``bearer:TOKEN`` or ``basic:USER:PASSWORD``, what ``GYM_IPFS_API_AUTH`` holds), or from the
URL's userinfo (``http://user:password@host:5001`` is Basic). Messages name the URL without
its userinfo: a secret is never printed.
"""

from __future__ import annotations

import base64
import io
import ipaddress
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import Self, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import ipfshttpclient
import ipfshttpclient.exceptions as ipfs_errors

from ledger.errors import (
    ContentIntegrityError,
    ContentStoreConfigError,
    ContentStoreError,
    ContentStoreUnreachableError,
)
from ledger.multiformats import CID, DAG_PB, RAW, verify_block
from ledger.unixfs import (
    CHUNK_SIZE,
    DEFAULT_CAT_MAX_BYTES,
    Source,
    file_cid,
    iter_chunks,
    iter_file_bytes,
    walk_dag,
)

# What `add` must be asked for so that the node's CIDs are the ledger's (see ledger/unixfs.py).
ADD_OPTIONS = {"cid_version": 1, "raw_leaves": True, "chunker": f"size-{CHUNK_SIZE}"}
DEFAULT_TIMEOUT_S = 120.0
_SPOOL_IN_MEMORY = 8 * 1024 * 1024  # streams up to this size are spooled in memory, not on disk

T = TypeVar("T")

# ipfshttpclient 0.7 passes urllib3 a parameter that urllib3 2 only warns about, on every call
warnings.filterwarnings("ignore", message="The 'strict' parameter is no longer needed",
                        category=FutureWarning)


class KuboError(ContentStoreError, RuntimeError):
    """The node answered with an error, or broke off an answer."""


def api_multiaddr(api_url: str) -> str:
    """``http://127.0.0.1:5001`` → ``/ip4/127.0.0.1/tcp/5001/http`` (what ipfshttpclient takes).

    Hosts may be IPv4, IPv6 (``http://[::1]:5001``) or names (``/dns/…``); without a port the
    scheme's default (80 or 443) is used, as in any URL. A string that already is a multiaddr
    (starts with ``/``) is returned unchanged. Only an empty path or ``/api/v0`` is accepted:
    the client always talks to ``<base>/api/v0``.
    """
    if api_url.startswith("/"):
        return api_url
    parts = urlsplit(api_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ContentStoreConfigError(
            f"GYM_IPFS_API must look like http://127.0.0.1:5001, got {api_url!r}")
    if parts.path.rstrip("/") not in ("", "/api/v0"):
        raise ContentStoreConfigError(
            f"GYM_IPFS_API must name the node (http://host:port), not a path: {api_url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ContentStoreConfigError(f"bad port in GYM_IPFS_API {api_url!r}") from exc
    try:
        address = ipaddress.ip_address(parts.hostname)
        host = f"/ip{address.version}/{address}"
    except ValueError:
        host = f"/dns/{parts.hostname}"
    return f"{host}/tcp/{port}/{parts.scheme}"


def authorization_header(secret: str) -> str:
    """The ``Authorization`` header that a Kubo ``AuthSecret`` stands for, as Kubo's
    ``config.ConvertAuthSecret`` reads it: ``bearer:TOKEN`` → ``Bearer TOKEN``;
    ``basic:USER:PASSWORD`` → ``Basic`` + base64 of ``USER:PASSWORD``; ``basic:B64`` (already
    encoded) → ``Basic B64``; a secret with no ``:`` → ``Bearer SECRET``. Any other type, or
    an empty value, is refused (Kubo drops such an entry silently). The message never
    repeats the secret."""
    kind, colon, value = secret.partition(":")
    if not colon and secret:
        return f"Bearer {secret}"
    if kind == "bearer" and value:
        return f"Bearer {value}"
    if kind == "basic" and value:
        return "Basic " + (base64.b64encode(value.encode()).decode() if ":" in value else value)
    raise ContentStoreConfigError(
        "an authorization secret must be bearer:TOKEN or basic:USER:PASSWORD (Kubo's "
        "API.Authorizations syntax); this one is empty or of another type")


def split_credentials(api_url: str) -> tuple[str, str | None]:
    """``http://user:pass@host:5001`` → (``http://host:5001``, the ``basic:user:pass`` secret);
    a URL without userinfo → (the URL, None)."""
    parts = urlsplit(api_url)
    if api_url.startswith("/") or (parts.username is None and parts.password is None):
        return api_url, None
    netloc = parts.netloc.rpartition("@")[2]
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return bare, f"basic:{unquote(parts.username or '')}:{unquote(parts.password or '')}"


class KuboStore:
    """A Kubo node's blocks, read through local verification; see the module docstring."""

    def __init__(self, api_url: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                 auth: str | None = None):
        api_url, from_url = split_credentials(api_url)
        if auth and from_url:
            raise ContentStoreConfigError(
                f"GYM_IPFS_API ({api_url}) carries credentials and GYM_IPFS_API_AUTH is set "
                "too: give them once")
        secret = auth or from_url
        self.api_url = api_url  # without userinfo: safe to print
        self.timeout = timeout
        self._headers = {"Authorization": authorization_header(secret)} if secret else {}
        self._http = None  # httpx.Client for streamed answers, made on first use
        self._client = ipfshttpclient.Client(addr=api_multiaddr(api_url), session=True,
                                             timeout=timeout, headers=self._headers)

    def close(self) -> None:
        """Close the pooled HTTP connections (the store stays usable; they reopen on demand)."""
        self._client.close()
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- calls --------------------------------------------------------------------------------

    def _call(self, endpoint: str, call: Callable[..., T], *args, **kwargs) -> T:
        """Run one RPC call, turning the client's exceptions into the ledger's."""
        try:
            return call(*args, **kwargs)
        except (ipfs_errors.ConnectionError, ipfs_errors.TimeoutError) as exc:
            raise ContentStoreUnreachableError(
                f"cannot reach the IPFS RPC API at {self.api_url} (GYM_IPFS_API): "
                f"{_unreachable_reason(exc)}. Start it (`gym devnet up` "
                "runs one, `gym ipfs serve` alone), or unset GYM_IPFS_API to use the local store"
            ) from exc
        except ipfs_errors.Error as exc:
            raise KuboError(f"the IPFS node at {self.api_url} failed {endpoint}: "
                            f"{_first_line(exc)}") from exc

    def get_block(self, cid: CID | str) -> bytes:
        """Block ``cid`` from the node, re-hashed here: ``ContentIntegrityError`` if it lies."""
        cid = CID.coerce(cid)
        block = self._call("block/get", self._client.block.get, str(cid))
        verify_block(cid, block)
        return block

    # --- ContentStore -------------------------------------------------------------------------

    def add_file(self, source: Source, *, pin: bool = False) -> str:
        """Add ``source`` through the node and return its CIDv1, checked against ``file_cid``.

        Bytes and paths are hashed here and then uploaded; a stream or iterable is spooled to
        a temporary file while it is hashed, so it is read once and never held in memory.
        """
        with _rewindable(source) as (upload, expected):
            answer = self._call("add", self._client.add, upload, pin=pin, **ADD_OPTIONS)
        got = answer.get("Hash") if hasattr(answer, "get") else None
        if got != expected:
            raise ContentIntegrityError(
                f"the IPFS node at {self.api_url} returned CID {got} for a file whose CIDv1 "
                f"(raw leaves, 256 KiB chunks) is {expected}: it ignores the requested import "
                "settings (check its Import.* config) or changed the bytes",
                expected=expected, computed=got,
            )
        return expected

    def cat_iter(self, cid: CID | str, *, max_bytes: int | None = None) -> Iterator[bytes]:
        """Yield file ``cid``'s bytes, fetching and verifying each block with ``block/get``;
        bounded as ``LocalBlockStore.cat_iter`` is."""
        return iter_file_bytes(cid, self.get_block, max_bytes=max_bytes)

    def cat(self, cid: CID | str, *, max_bytes: int = DEFAULT_CAT_MAX_BYTES) -> bytes:
        return b"".join(self.cat_iter(cid, max_bytes=max_bytes))

    def has(self, cid: CID | str) -> bool:
        """Whether the node holds block ``cid`` locally (``block/stat`` with ``offline``)."""
        cid = CID.coerce(cid)
        try:
            self._call("block/stat", self._client.block.stat, str(cid), offline=True)
        except KuboError as exc:
            if isinstance(exc.__cause__, ipfs_errors.ErrorResponse):
                return False  # the node said no (Kubo: "block was not found locally")
            raise
        return True

    def pin_add(self, cid: CID | str) -> str:
        """Pin ``cid`` recursively on the node; returns the CID string."""
        cid = CID.coerce(cid)
        answer = self._call("pin/add", self._client.pin.add, str(cid))
        pins = answer.get("Pins", []) if hasattr(answer, "get") else []
        if not any(_same_cid(pinned, cid) for pinned in pins):
            raise KuboError(f"the IPFS node at {self.api_url} did not confirm the pin of {cid} "
                            f"(it answered {pins!r})")
        return str(cid)

    def put_block(self, cid: CID | str, block: bytes) -> CID:
        """Store ``block`` (raw or dag-pb) on the node; the CID it answers must be ``cid``."""
        cid = CID.coerce(cid)
        verify_block(cid, block)
        codec = {RAW: "raw", DAG_PB: "dag-pb"}.get(cid.codec)
        if codec is None:
            raise KuboError(f"cannot store {cid}: only raw and dag-pb blocks are stored")
        answer = self._call("block/put", self._client.block.put, io.BytesIO(block),
                            opts={"cid-codec": codec, "mhtype": "sha2-256"})
        got = answer.get("Key") if hasattr(answer, "get") else None
        if not _same_cid(got, cid):
            raise ContentIntegrityError(
                f"the IPFS node at {self.api_url} stored a block as {got}, expected {cid}",
                expected=str(cid), computed=got)
        return cid

    # --- beyond the protocol ------------------------------------------------------------------

    def iter_dag(self, cid: CID | str) -> Iterator[tuple[CID, bytes]]:
        """Every block under ``cid``, verified, parents first (the order of a CAR export)."""
        return walk_dag(cid, self.get_block)

    def export_dag(self, cid: CID | str, *, max_blocks: int, max_bytes: int
                   ) -> list[tuple[CID, bytes]]:
        """The blocks of ``dag/export`` of ``cid``, in the node's order (parents first), each
        re-hashed against its CID. More than ``max_blocks`` blocks or ``max_bytes`` bytes, or
        a CAR whose root is not ``cid``, raises ``KuboError``; an archive cut short gives the
        blocks before the cut (Kubo reports a missing block after its 200: the caller checks
        what it still lacks)."""
        import httpx

        from ledger.car import read_car_bytes

        cid = CID.coerce(cid)
        url = f"{self.api_url.rstrip('/')}/api/v0/dag/export"
        if self._http is None:  # one pool: a client per call would cost ~0.1 s of TLS setup
            self._http = httpx.Client(timeout=self.timeout, headers=self._headers)
        body = bytearray()
        try:
            with self._http.stream("POST", url, params={"arg": str(cid), "progress": "false"}
                                   ) as answer:
                if answer.status_code != 200:
                    answer.read()
                    raise KuboError(f"the IPFS node at {self.api_url} failed dag/export of "
                                    f"{cid}: {_kubo_message(answer)}")
                for piece in answer.iter_raw():
                    body += piece
                    if len(body) > max_bytes:
                        raise KuboError(f"dag/export of {cid} from {self.api_url} sent more "
                                        f"than the {max_bytes} bytes its DAG can hold")
        except httpx.TransportError as exc:
            if not body:
                raise ContentStoreUnreachableError(
                    f"cannot reach the IPFS RPC API at {self.api_url} (GYM_IPFS_API): "
                    f"{_unreachable_reason(exc)}") from exc
            # cut mid-answer: use what arrived
        roots, blocks = read_car_bytes(bytes(body))
        if [root.to_v1() for root in roots] != [cid.to_v1()]:
            raise KuboError(f"dag/export of {cid} from {self.api_url} names the roots "
                            f"{[str(root) for root in roots]}")
        if len(blocks) > max_blocks:
            raise KuboError(f"dag/export of {cid} from {self.api_url} holds {len(blocks)} "
                            f"blocks, more than the {max_blocks} its DAG has")
        return blocks


def _kubo_message(answer) -> str:
    """The ``Message`` of a Kubo error answer, else its status and first line."""
    try:
        return str(answer.json()["Message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {answer.status_code} {answer.text.splitlines()[0][:200] if answer.text else ''}"


class _rewindable:
    """Context manager giving ``(file object to upload, expected CID)`` for any ``Source``."""

    def __init__(self, source: Source):
        self._source = source
        self._opened: io.IOBase | None = None

    def __enter__(self) -> tuple[io.IOBase | _Unnamed, str]:
        source = self._source
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            return io.BytesIO(data), file_cid(data)
        if isinstance(source, (str, os.PathLike)):
            expected = file_cid(source)
            self._opened = open(source, "rb")
            return self._opened, expected
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)
        self._opened = spool

        def pieces() -> Iterator[bytes]:
            for chunk in iter_chunks(source):
                spool.write(chunk)
                yield chunk

        expected = file_cid(pieces())
        spool.seek(0)
        # ipfshttpclient names the upload after `.name`, an int for a spool on disk: hide it
        return _Unnamed(spool), expected

    def __exit__(self, *exc_info) -> None:
        if self._opened is not None:
            self._opened.close()


class _Unnamed:
    """A readable stream without a ``name`` (Kubo's answer then names the file ``""``)."""

    def __init__(self, stream: io.IOBase):
        self.read = stream.read


def _same_cid(text: str, cid: CID) -> bool:
    try:
        return CID.parse(str(text).removeprefix("/ipfs/")).to_v1() == cid.to_v1()
    except ValueError:  # MultiformatError is one
        return False


def _unreachable_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words: the OS error at the root of the client's
    exception chain (``Connection refused``, ``timed out``), else its first line."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, TimeoutError) or "timed out" in str(cause).lower():
            return "timed out"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__ or next(
            (arg for arg in getattr(cause, "args", ()) if isinstance(arg, BaseException)), None)
    return _first_line(exc)[:200]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
