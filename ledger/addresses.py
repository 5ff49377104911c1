"""Listen versus announce: the address a server binds is never what it tells other hosts.

A party that listens on a wildcard (``0.0.0.0``, ``::``) accepts connections on every interface,
but ``http://0.0.0.0:PORT`` is no address another host can dial; a loopback address
(``127.0.0.1``, ``localhost``) reaches only the machine it is said on. Every URL that leaves a
process for another party (the deployment manifest, a NodeRegistry entry, a printed hint) goes
through ``announce_url``: an explicit public URL wins; otherwise a wildcard listener announces the
one address of this host's interfaces (and says it derived it), a named interface announces
itself, and a loopback listener announces loopback with a note that only this machine reaches it.
``check_public_url`` refuses a wildcard outright and flags loopback where others must connect.

    announced = announce_url(listen_host="0.0.0.0", port=8545, option="GYM_ANNOUNCE_HOST")
    announced.url    # 'http://10.1.2.3:8545'
    announced.note   # 'announcing 10.1.2.3, the address of eth0 (... set GYM_ANNOUNCE_HOST ...)'
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ledger.errors import LedgerError

WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})


class AddressError(LedgerError, ValueError):
    """An address meant for other hosts that no other host can use."""


@dataclass(frozen=True)
class Announced:
    """A URL for other parties, and a line that says where it came from (None: said by the user)."""

    url: str
    note: str | None = None
    loopback: bool = False  # only this machine can use it


def is_wildcard(host: str) -> bool:
    return host.strip() in WILDCARDS


def is_loopback(host: str) -> bool:
    host = host.strip().strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str:
    """The host part of ``url`` (brackets of an IPv6 literal removed)."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def interface_addresses() -> dict[str, list[str]]:
    """This host's non-loopback, non-link-local addresses, by interface (IPv4 first)."""
    import psutil  # a dependency of the stack already (accelerate, hivemind)

    found: dict[str, list[str]] = {}
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        for addr in addrs:
            try:
                ip = ipaddress.ip_address(addr.address.split("%")[0])
            except ValueError:
                continue  # a MAC address (AF_PACKET)
            if ip.is_loopback or ip.is_link_local or ip.is_unspecified:
                continue
            found.setdefault(name, []).append(str(ip))
    for addresses in found.values():
        addresses.sort(key=lambda a: (":" in a, a))
    return found


def default_route_interface(route_table: str = "/proc/net/route") -> str | None:
    """The interface of this host's IPv4 default route (Linux), or None."""
    try:
        lines = Path(route_table).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return fields[0]
    return None


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def announce_url(*, listen_host: str, port: int, option: str, scheme: str = "http",
                 path: str = "", explicit: str | None = None) -> Announced:
    """The URL other hosts use for a server on ``listen_host:port``; see the module docstring.
    ``option`` names the setting that overrides it (it appears in every note and error).
    ``AddressError`` when the listener is a wildcard and the host has no single address to
    announce, or ``explicit`` itself is a wildcard."""
    if explicit:
        explicit = explicit.strip().rstrip("/")
        host = url_host(explicit) if "://" in explicit else explicit.strip("[]")
        if "://" not in explicit and ":" in host and not _is_ipv6(host):
            raise AddressError(f"{option}={explicit} is a host name or IP address, without a "
                               "port or path (a whole URL goes in the *_PUBLIC_URL settings)")
        if is_wildcard(host) or not host:
            raise AddressError(f"{option}={explicit} is not an address another host can use: "
                               "give this host's name or IP address")
        url = explicit if "://" in explicit else f"{scheme}://{_host_for_url(host)}:{port}{path}"
        return Announced(url, None, is_loopback(host))
    if not is_wildcard(listen_host):
        url = f"{scheme}://{_host_for_url(listen_host)}:{port}{path}"
        if is_loopback(listen_host):
            return Announced(url, f"{listen_host} is loopback: only this machine reaches "
                                  f"{url}; for other hosts listen on 0.0.0.0 or this host's "
                                  f"address, or set {option}", True)
        return Announced(url)
    candidates = [(name, addrs[0]) for name, addrs in interface_addresses().items()]
    ipv4 = [(name, a) for name, a in candidates if ":" not in a]
    chosen = ipv4 if ipv4 else candidates
    routed = default_route_interface()
    if len(chosen) > 1 and any(name == routed for name, _ in chosen):
        chosen = [(name, a) for name, a in chosen if name == routed]  # the way out of this host
    if len(chosen) != 1:
        listing = ", ".join(f"{a} ({name})" for name, a in chosen) or "none"
        raise AddressError(f"listening on {listen_host} (every interface), but which address do "
                           f"other hosts use? this host has {listing}: set {option} to the one "
                           "they reach")
    name, address = chosen[0]
    url = f"{scheme}://{_host_for_url(address)}:{port}{path}"
    how = " (the default route's)" if name == routed and len(candidates) > 1 else ""
    return Announced(url, f"announcing {url}: {address} is {name}'s address{how} (listening "
                          f"on every interface); set {option} to announce another")


def listening_urls(host: str, port: int, path: str = "") -> str:
    """For a server's "listening on" line: the URL(s) other hosts use (each of this host's
    addresses for a wildcard listener), never a wildcard."""
    if not is_wildcard(host):
        return f"http://{_host_for_url(host)}:{port}{path}"
    addresses = [a for addrs in interface_addresses().values() for a in addrs] or ["127.0.0.1"]
    return " or ".join(f"http://{_host_for_url(a)}:{port}{path}" for a in addresses)


def check_public_url(url: str, *, what: str, option: str) -> str | None:
    """Refuse (``AddressError``) a ``url`` for other hosts whose host is a wildcard or missing;
    return a one-line warning when it is loopback (only this machine can use it), else None."""
    host = url_host(url)
    if not host or is_wildcard(host):
        raise AddressError(f"{what} {url} names no address another host can reach: set "
                           f"{option} to a URL with this host's name or IP address")
    if is_loopback(host):
        return (f"{what} {url} is loopback: only this machine can reach it (set {option} for "
                "other hosts)")
    return None


def without_credentials(url: str) -> str:
    """``url`` without a ``user:password@`` part: what may be written where others read it (a
    published manifest); the credentials stay in the party's own settings."""
    split = urlsplit(url)
    if "@" not in split.netloc:
        return url
    return split._replace(netloc=split.netloc.rsplit("@", 1)[1]).geturl()


def local_url(url: str) -> str:
    """``url`` as this machine dials it: a wildcard host becomes loopback."""
    host = url_host(url)
    if not is_wildcard(host):
        return url
    split = urlsplit(url)
    loop = "[::1]" if ":" in host else "127.0.0.1"
    netloc = split.netloc.replace(f"[{host}]" if ":" in host else host, loop, 1)
    return split._replace(netloc=netloc).geturl()


__all__ = ["AddressError", "Announced", "announce_url", "check_public_url", "interface_addresses",
           "is_loopback", "is_wildcard", "listening_urls", "local_url", "url_host",
           "without_credentials"]
