"""``gym ipfs``: run the content endpoint and move files in and out of a content store.

``serve`` runs ``content_endpoint.server`` in the foreground over the local store
(``<GYM_DATA_DIR>/ipfs``, or ``--data-dir``). ``add`` and ``cat`` use whatever ``GYM_IPFS_API`` names (a Kubo
node, IPFS Cluster's proxy, or ``gym ipfs serve``), the local store when it is unset; CIDs and
verification are the same either way. ``export`` and ``import`` move CARv1 archives (the format
of ``ipfs dag export/import``); ``import`` always writes the local store.

Errors are ``LedgerError``/``ContentEndpointError`` subclasses; the root CLI prints them as one line.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from content_endpoint.errors import ContentEndpointError, PortInUseError
from content_endpoint.limits import EndpointLimits
from ledger.blockstore import LocalBlockStore
from ledger.car import write_car
from ledger.content import ContentStore, open_content_store
from ledger.errors import LedgerError
from ledger.multiformats import CID
from ledger.runtime import LedgerRuntime
from ledger.unixfs import file_cid

app = typer.Typer(help="The content endpoint every party shares (Kubo RPC + trustless "
                  "gateway) and content commands.", no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()
err_console = Console(stderr=True)

PROGRESS_FROM_BYTES = 4 * 1024 * 1024  # show a progress bar for files above this size

DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", help="Local store directory. Default: <GYM_DATA_DIR>/ipfs.")]


_RUNTIME: ContextVar[LedgerRuntime | None] = ContextVar("gym_ipfs_runtime", default=None)


@app.callback()
def _keep_runtime(ctx: typer.Context) -> None:
    # what the root command built from GYM_* settings (None when run on its own, as
    # ``python -m content_endpoint.cli``): the commands' default store and endpoint
    _RUNTIME.set(ctx.obj if isinstance(ctx.obj, LedgerRuntime) else None)


def _runtime() -> LedgerRuntime | None:
    return _RUNTIME.get()


def local_store_dir(data_dir: Path | None) -> Path:
    if data_dir is not None:
        return data_dir
    runtime = _runtime()
    if runtime is not None:
        return runtime.content_dir
    if os.environ.get("GYM_DATA_DIR"):  # on its own: the same default as `gym ipfs`
        return Path(os.environ["GYM_DATA_DIR"]) / "ipfs"
    raise ContentEndpointError("no store directory: pass --data-dir or set GYM_DATA_DIR (the "
                               "store is <GYM_DATA_DIR>/ipfs)")


def _ipfs_api() -> str | None:
    runtime = _runtime()
    return runtime.ipfs_api if runtime is not None else os.environ.get("GYM_IPFS_API") or None


def _store(data_dir: Path | None) -> ContentStore:
    runtime = _runtime()
    auth = runtime.ipfs_api_auth if runtime is not None else None  # None: GYM_IPFS_API_AUTH
    return open_content_store(_ipfs_api(), local_store_dir(data_dir), auth=auth)


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(), console=err_console,
                    transient=True)


class _CountingReader:
    """A binary file that advances a progress bar as it is read."""

    def __init__(self, stream, advance):
        self._stream = stream
        self._advance = advance

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._advance(len(data))
        return data


class _CountingWriter:
    def __init__(self, stream, advance):
        self._stream = stream
        self._advance = advance

    def write(self, data: bytes) -> int:
        self._advance(len(data))
        return self._stream.write(data)


SHUTDOWN_GRACE_S = 3


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on (loopback by default: "
                                      "without --authorizations the RPC API is open to "
                                      "whoever reaches it).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (Kubo's is 5001).")] = 5001,
    data_dir: DataDir = None,
    authorizations: Annotated[Path | None, typer.Option(
        "--authorizations", dir_okay=False,
        help="JSON file of Kubo's API.Authorizations: name -> {AuthSecret, AllowedPaths}; "
             "callers then need credentials, and their pins are their own.")] = None,
    max_block_bytes: Annotated[int, typer.Option(
        help="Largest block, even with allow-big-block.")] = EndpointLimits.max_block_bytes,
    max_upload_bytes: Annotated[int, typer.Option(
        help="Largest request body.")] = EndpointLimits.max_upload_bytes,
    stall_timeout: Annotated[float, typer.Option(
        help="Seconds headers, a body or an answer may stall before the connection is "
             "cut.")] = EndpointLimits.stall_timeout_s,
    max_connections: Annotated[int, typer.Option(
        help="Open connections at most; more are answered 503.")] = EndpointLimits.max_connections,
) -> None:
    """Serve the local store as a Kubo RPC API (/api/v0) and a trustless gateway (/ipfs/).

    Runs in the foreground; Ctrl-C stops it. Point other commands at it with
    GYM_IPFS_API=http://HOST:PORT (and GYM_IPFS_API_AUTH with --authorizations).
    See docs/content-endpoint.md for its bounds and who may unpin what.
    """
    import uvicorn

    from content_endpoint.authorizations import load_authorizations
    from content_endpoint.protocol import BoundedH11Protocol
    from content_endpoint.server import create_app

    limits = EndpointLimits(max_block_bytes=max_block_bytes, max_upload_bytes=max_upload_bytes,
                            stall_timeout_s=stall_timeout, max_connections=max_connections)
    parties = load_authorizations(authorizations) if authorizations is not None else None
    if not port_is_free(host, port):
        raise PortInUseError(f"port {port} on {host} is already in use: stop what listens "
                             "there, or pick another with `gym ipfs serve --port N`")
    store_dir = local_store_dir(data_dir)
    store = LocalBlockStore(store_dir)
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and parties is None:
        err_console.print(f"[yellow]warning:[/yellow] the RPC API on {host} lets anyone who "
                          "can reach it write to the store (they cannot unpin): pass "
                          "--authorizations to name who may")
    url = f"http://{host}:{port}"
    console.print(f"Kubo RPC API: {url}/api/v0   gateway: {url}/ipfs/{{cid}}?format=raw|car",
                  soft_wrap=True)
    who = (f"{len(parties)} authorizations ({', '.join(p.name for p in parties)})"
           if parties is not None else "no authorizations: every caller is anonymous")
    console.print(f"store: {store_dir}   {who}   (Ctrl-C stops)", soft_wrap=True)
    # on SIGTERM/Ctrl-C, requests still running after 3 s are cancelled: a long read stops
    # at its next block (content_endpoint.server), so the server exits within seconds;
    # timeout_keep_alive is also BoundedH11Protocol's deadline for headers and stalled answers
    uvicorn.run(create_app(store, limits=limits, authorizations=parties), host=host, port=port,
                log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
                http=BoundedH11Protocol, timeout_keep_alive=stall_timeout,
                limit_concurrency=max_connections)


@app.command()
def add(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True,
                                         help="File to add.")],
    only_hash: Annotated[bool, typer.Option("--only-hash", help="Print the CID, store "
                                            "nothing.")] = False,
    pin: Annotated[bool, typer.Option("--pin", help="Pin it recursively.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Add a file; print its CID (CIDv1, raw leaves, 256 KiB chunks, as `ipfs add
    --cid-version=1`). Goes through GYM_IPFS_API when it is set."""
    size = path.stat().st_size
    with open(path, "rb") as stream, _progress() as progress:
        task = progress.add_task(f"adding {path.name}", total=size,
                                 visible=size > PROGRESS_FROM_BYTES)
        source = _CountingReader(stream, lambda n: progress.advance(task, n))
        cid = file_cid(source) if only_hash else _store(data_dir).add_file(source, pin=pin)
    console.print(cid, highlight=False)


@app.command()
def cat(
    cid: Annotated[str, typer.Argument(help="CID of a file.")],
    data_dir: DataDir = None,
) -> None:
    """Write a file's bytes to stdout, every block verified against its CID."""
    out = sys.stdout.buffer
    for chunk in _store(data_dir).cat_iter(CID.parse(cid)):
        out.write(chunk)
    out.flush()


@app.command(name="export")
def export_car(
    cid: Annotated[str, typer.Argument(help="Root CID of the DAG.")],
    out: Annotated[Path, typer.Argument(dir_okay=False, help="CAR file to write.")],
    data_dir: DataDir = None,
) -> None:
    """Write the DAG under CID to a CARv1 file (as `ipfs dag export`), every block verified.

    Reads from GYM_IPFS_API when it is set (block by block), else from the local store.
    """
    root = CID.parse(cid)
    store = _store(data_dir)
    tmp = out.with_name(out.name + ".partial")
    try:
        with open(tmp, "wb") as handle, _progress() as progress:
            task = progress.add_task(f"exporting {cid}", total=None)
            writer = _CountingWriter(handle, lambda n: progress.advance(task, n))
            if isinstance(store, LocalBlockStore):
                store.export_car(root, writer)
            else:
                write_car([root], store.iter_dag(root), writer)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    console.print(f"wrote {out} ({out.stat().st_size} bytes)", highlight=False)


@app.command(name="import")
def import_car(
    car: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True,
                                        help="CARv1 file to import.")],
    pin: Annotated[bool, typer.Option("--pin/--no-pin", help="Pin its roots.")] = True,
    data_dir: DataDir = None,
) -> None:
    """Import every block of a CARv1 file into the local store (each verified); print its
    roots. With GYM_IPFS_API set, use `ipfs dag import` on that node instead."""
    if _ipfs_api():
        raise ContentEndpointError("gym ipfs import writes the local store; GYM_IPFS_API is set, so "
                          "import into that node with `ipfs dag import`, or unset it")
    store = LocalBlockStore(local_store_dir(data_dir))
    size = car.stat().st_size
    with open(car, "rb") as stream, _progress() as progress:
        task = progress.add_task(f"importing {car.name}", total=size,
                                 visible=size > PROGRESS_FROM_BYTES)
        roots = store.import_car(_CountingReader(stream, lambda n: progress.advance(task, n)),
                                 pin_roots=pin)
    for root in roots:
        console.print(root, highlight=False)


def main() -> None:
    """Run ``gym ipfs`` on its own (``python -m content_endpoint.cli``), errors as one line."""
    try:
        app()
    except (LedgerError, ContentEndpointError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
