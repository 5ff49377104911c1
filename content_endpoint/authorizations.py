"""Kubo's RPC authorizations (``API.Authorizations``) for ``gym ipfs serve --authorizations``.

The file is the map Kubo keeps in its config (https://github.com/ipfs/kubo/blob/master/docs/
config.md#apiauthorizations), name → ``{"AuthSecret", "AllowedPaths"}``::

    {"alice": {"AuthSecret": "bearer:alice-token", "AllowedPaths": ["/api/v0"]},
     "bob": {"AuthSecret": "basic:bob:pw", "AllowedPaths": ["/api/v0/add", "/api/v0/pin/add"]}}

``AuthSecret`` is Kubo's syntax (``ledger.kubo.authorization_header``); a request whose
``Authorization`` header is that value acts as that name, on paths that start with one of its
``AllowedPaths`` (a plain prefix, as Kubo matches; ``/api/v0/version`` always). As in Kubo,
only ``/api/v0`` is guarded: the trustless gateway (``/ipfs/``) stays open for reading.

Beyond Kubo: the answers are Kubo's error JSON with 401 (no or unknown credentials) or 403 (a
path the name is not allowed), not Kubo's 403 for both; and an entry named ``anonymous``
without ``AuthSecret`` lets unauthenticated callers use its ``AllowedPaths`` (Kubo has no
such entry: with Authorizations set it answers no one without credentials).

Without ``--authorizations`` every caller is ``anonymous`` on every path. Who may remove what
is ``content_endpoint.pins``'s rule: a pin belongs to the names that pinned it, and
``anonymous`` removes nothing.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from pathlib import Path

from fastapi.responses import JSONResponse

from content_endpoint.errors import ContentEndpointError
from ledger.blockstore import LOCAL_OWNER, OWNER_NAME
from ledger.errors import ContentStoreConfigError
from ledger.kubo import authorization_header

ANONYMOUS = "anonymous"  # the caller without credentials; owns the pins it makes, removes none
API_PREFIX = "/api/"
ALWAYS_ALLOWED = "/api/v0/version"  # Kubo lets any valid credential ask the version
_MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Authorization:
    """One entry: its name (the pin owner it acts as), the header value that identifies it
    (``None`` for the anonymous entry) and the path prefixes it may call."""

    name: str
    header: str | None
    allowed_paths: tuple[str, ...]

    def allows(self, path: str) -> bool:
        return path == ALWAYS_ALLOWED or any(path.startswith(p) for p in self.allowed_paths)


def load_authorizations(path: Path) -> tuple[Authorization, ...]:
    """Read and check an authorizations file; any problem is one ``ContentEndpointError``
    line naming the file and the entry (never a secret)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ContentEndpointError(f"cannot read the authorizations file {path}: "
                                   f"{exc.strerror}") from None
    if len(raw) > _MAX_FILE_BYTES:
        raise ContentEndpointError(f"{path}: an authorizations file is at most 1 MiB")
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise ContentEndpointError(f"{path} is not JSON: {exc}") from None
    if not isinstance(document, dict) or not document:
        raise ContentEndpointError(f"{path} must be a JSON object of name → {{\"AuthSecret\", "
                                   "\"AllowedPaths\"}, as Kubo's API.Authorizations")
    entries, headers = [], set()
    for name, scope in document.items():
        entry = _entry(path, name, scope)
        if entry.header is not None and entry.header in headers:
            raise ContentEndpointError(f"{path}: {name!r} has the AuthSecret of another entry")
        headers.add(entry.header)
        entries.append(entry)
    return tuple(entries)


def _entry(path: Path, name: str, scope: object) -> Authorization:
    where = f"{path}: entry {name!r}"
    if not OWNER_NAME.fullmatch(name) or name == LOCAL_OWNER:
        raise ContentEndpointError(f"{where}: a name is 1-64 letters, digits and ._@- (not "
                                   f"{LOCAL_OWNER!r}, this host's own pins)")
    if not isinstance(scope, dict) or set(scope) - {"AuthSecret", "AllowedPaths"}:
        raise ContentEndpointError(f"{where} must be an object with AuthSecret and AllowedPaths")
    paths = scope.get("AllowedPaths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/")
                                              for p in paths):
        raise ContentEndpointError(f"{where}: AllowedPaths must be a list of paths such as "
                                   "\"/api/v0/add\"")
    secret = scope.get("AuthSecret")
    if name == ANONYMOUS:
        if secret is not None:
            raise ContentEndpointError(f"{where}: the anonymous entry has no AuthSecret (it "
                                       "names what callers without credentials may do)")
        return Authorization(name, None, tuple(paths))
    if not isinstance(secret, str):
        raise ContentEndpointError(f"{where} has no AuthSecret (bearer:TOKEN or "
                                   "basic:USER:PASSWORD)")
    try:
        return Authorization(name, authorization_header(secret), tuple(paths))
    except ContentStoreConfigError as exc:
        raise ContentEndpointError(f"{where}: {exc}") from None


def _denied(status: int, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="gym ipfs", Basic realm="gym ipfs"'} \
        if status == 401 else {}
    return JSONResponse({"Message": f"Kubo RPC Access Denied: {message}", "Code": 0,
                         "Type": "error"}, status_code=status, headers=headers)


class AuthorizationGate:
    """ASGI middleware: names each RPC caller (``scope["state"]["party"]``) or answers 401/403.

    ``authorizations=None`` (no ``--authorizations``): every caller is ``anonymous``."""

    def __init__(self, app, authorizations: tuple[Authorization, ...] | None):
        self.app = app
        self.authorizations = authorizations
        self.anonymous = next((a for a in authorizations or () if a.header is None), None)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})["party"] = ANONYMOUS
            if self.authorizations is not None and scope["path"].startswith(API_PREFIX):
                denied = self._check(scope)
                if denied is not None:
                    await denied(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    def _check(self, scope) -> JSONResponse | None:
        header = next((value for key, value in scope["headers"] if key == b"authorization"), None)
        path = scope["path"]
        caller = self.anonymous if header is None else self._match(header)
        if caller is None or (header is None and not caller.allows(path)):
            return _denied(401, "provide a valid authorization token as defined in the "
                                "API.Authorizations configuration")
        if not caller.allows(path):
            return _denied(403, f"{caller.name!r} may not call {path} (its AllowedPaths)")
        scope["state"]["party"] = caller.name
        return None

    def _match(self, header: bytes) -> Authorization | None:
        found = None
        for entry in self.authorizations:  # every entry compared, in constant time each
            if entry.header is not None and hmac.compare_digest(entry.header.encode(), header):
                found = entry
        return found


def party_of(request) -> str:
    """The name the caller of ``request`` acts as (``AuthorizationGate``)."""
    return request.scope.get("state", {}).get("party", ANONYMOUS)
