"""The dashboard's request guards: served origins, host check, CSRF tokens, security headers.

- **Origins.** The dashboard knows the origins it is served under (``http://HOST:PORT``, plus
  the ``localhost``/``127.0.0.1`` alias on loopback, plus ``--origin`` behind a proxy). A
  request whose ``Host`` is not one of them is refused (DNS rebinding: a page on another
  name that resolves to this server is not this origin), and so is any state-changing request
  whose ``Origin`` (or, lacking it, ``Referer``) is not one of them. CORS answers only those
  origins, never ``*``.
- **CSRF.** The first page view sets a random session cookie (``HttpOnly``,
  ``SameSite=Strict``); the page carries ``HMAC(server secret, session)`` in a ``<meta>`` tag
  and every POST must send it back in ``X-CSRF-Token``. The server recomputes it from the
  cookie, so a token is good only with the cookie it was made for, and the secret is new each
  time the server starts.
- **Headers.** A strict Content-Security-Policy (scripts, styles and connections from this
  origin only; no inline script, no framing), ``nosniff`` and ``Referrer-Policy``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from urllib.parse import urlsplit

from ledger import addresses

SESSION_COOKIE = "gym_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_ALIASES = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                           "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                           "base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def served_origins(host: str, port: int, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The origins a dashboard bound to ``host:port`` answers: itself, its loopback alias
    (``localhost`` for ``127.0.0.1`` and back), and ``extra`` (``--origin``: a reverse proxy's,
    or the name other hosts use). Bound to a wildcard (``0.0.0.0``, ``::``), it answers under
    each of this host's addresses and loopback, never ``0.0.0.0`` itself: those are the names a
    browser elsewhere can reach it by, and a rebinding page's own name is still none of them.
    The first ``extra``, else the first origin, is the one to tell other hosts."""
    if addresses.is_wildcard(host):
        hosts = [a for addrs in addresses.interface_addresses().values() for a in addrs]
        hosts += ["127.0.0.1", "localhost"]
        origins = [f"http://{f'[{h}]' if ':' in h else h}:{port}" for h in hosts]
    else:
        origins = [f"http://{host}:{port}"]
        if host in LOOPBACK_ALIASES:
            origins.append(f"http://{LOOPBACK_ALIASES[host]}:{port}")
    origins += [origin_of(url) for url in extra]
    return tuple(dict.fromkeys(o.lower() for o in origins))


def allowed_hosts(origins: Iterable[str]) -> list[str]:
    """Host names (``Host`` without its port) that belong to ``origins``."""
    return sorted({urlsplit(origin).hostname or "" for origin in origins} - {""})


def request_origin(headers) -> str | None:
    """The origin a request says it comes from: ``Origin``, else the origin of ``Referer``."""
    origin = headers.get("origin")
    if origin and origin != "null":
        return origin.lower()
    referer = headers.get("referer")
    return origin_of(referer) if referer else None


class CsrfTokens:
    """Session ids and the CSRF tokens bound to them (HMAC-SHA256 under a server secret)."""

    def __init__(self, secret: bytes | None = None):
        self._secret = secret or secrets.token_bytes(32)

    @staticmethod
    def new_session() -> str:
        return secrets.token_urlsafe(32)

    def token_for(self, session: str) -> str:
        return hmac.new(self._secret, session.encode(), hashlib.sha256).hexdigest()

    def check(self, session: str | None, token: str | None) -> bool:
        """Whether ``token`` is the CSRF token of ``session`` (constant-time compare)."""
        if not session or not token:
            return False
        return hmac.compare_digest(self.token_for(session), token)
