"""Fetch a published adapter by the CID of its ``adapter`` entry, and verify every byte.

``fetch_adapter`` reads the entry from the content store (the local store or a Kubo node: both
re-hash every block against its CID), checks that the bytes are the entry its CID names and a
valid ``adapter`` entry, then fetches each file it lists and checks that

- the bytes add up to the listed ``size``, and
- re-adding them as UnixFS gives exactly the listed CID (``ledger.unixfs.file_cid``, Kubo's
  ``ipfs add --cid-version=1``): a DAG with other chunking, or a store that hands back other
  bytes, is refused even when every block it served hashes correctly.

Files land in a temporary sibling directory that is renamed to the target only when all of
them verified, with the entry's canonical bytes as ``adapter_entry.json`` beside them (so
``entry_cid(adapter_entry.json) == CID``). On any failure the temporary directory is removed:
nothing partial is ever left behind. The target must not exist or be empty.

Optionally, an inclusion proof document (``ledger.proofs``: from ``gym ledger proof --json``,
or built from the local log index) ties the entry to a log: its audit path must lead from the
entry's leaf hash to the document's root, the document must be about this CID, and, given the
contract, that root must be the root anchored on chain at that size (``rootAt``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.entries import AdapterEntry, AdapterFile, decode_entry, entry_cid
from ledger.errors import (
    ContentIntegrityError,
    EntryError,
    NotFoundError,
    VerificationError,
)
from ledger.multiformats import CID, RAW, SHA2_256, MultiformatError
from ledger.unixfs import file_cid
from trainer.adapters.errors import AdapterEntryError, AdapterError, AdapterIntegrityError

if TYPE_CHECKING:
    from ledger.chain import LedgerContract
    from ledger.proofs import VerifiedProof

ENTRY_FILE = "adapter_entry.json"


@dataclass(frozen=True)
class FetchedAdapter:
    directory: Path
    entry_cid: str
    entry: AdapterEntry
    inclusion: VerifiedProof | None  # the checked proof, when one was given


def fetch_adapter_entry(content, cid: str) -> tuple[bytes, AdapterEntry]:
    """The canonical bytes and the decoded ``adapter`` entry named by ``cid``."""
    try:
        parsed = CID.parse(cid)
    except MultiformatError as exc:
        raise AdapterEntryError(f"{cid!r} is not a CID ({exc})") from None
    if parsed.codec != RAW or parsed.hash_code != SHA2_256:
        raise AdapterEntryError(f"{cid} is not an entry CID: entries are raw-codec sha2-256 CIDv1 "
                                "(bafkrei...); pass the CID of the adapter entry, not of a file")
    try:
        data = content.cat(cid)
    except NotFoundError as exc:
        raise AdapterEntryError(f"fetching adapter entry {cid}: {exc}") from None
    except VerificationError as exc:
        raise AdapterIntegrityError(f"entry {cid}: the content store returned corrupt data "
                                    f"({exc})", expected=exc.expected,
                                    computed=exc.computed) from None
    computed = entry_cid(data)
    if computed != cid:
        raise AdapterIntegrityError(f"the bytes served for entry {cid} have CID {computed}",
                                    expected=cid, computed=computed)
    return data, _adapter_entry(data, cid)


def _adapter_entry(data: bytes, where: object) -> AdapterEntry:
    """``data`` decoded as an ``adapter`` entry; ``AdapterEntryError`` naming ``where``."""
    try:
        entry = decode_entry(data)
    except EntryError as exc:
        raise AdapterEntryError(f"{where} is not a valid entry: {exc}") from None
    if not isinstance(entry, AdapterEntry):
        raise AdapterEntryError(f"{where} is a {entry.type!r} entry, not an adapter entry")
    return entry


def verify_entry_inclusion(proof_doc: object, cid: str,
                           contract: LedgerContract | None = None, *,
                           data: bytes | None = None) -> VerifiedProof:
    """Check that the inclusion proof document ``proof_doc`` proves entry ``cid`` and, given
    ``contract``, that its root is the root anchored on chain at its size.

    A proof proves a leaf hash; the document's ``entry_cid`` is bound to it only by the
    entry's bytes: those in the document, or ``data`` (the entry ``cid``'s bytes, fetched and
    checked against ``cid`` by the caller). With neither, ``AdapterEntryError``: the CID is
    then a claim nothing checked."""
    from ledger.proofs import check_anchored_root, verify_proof_document, verify_proof_entry

    try:
        proof = verify_proof_document(proof_doc)
        if proof.entry_cid != cid:
            raise AdapterEntryError(f"the inclusion proof is about entry {proof.entry_cid}, not "
                                    f"{cid}")
        if not proof.entry_checked:
            if data is None:
                raise AdapterEntryError(f"the inclusion proof carries no entry and the bytes of "
                                        f"{cid} were not given: nothing binds {cid} to its leaf")
            proof = verify_proof_entry(proof, data)
        if contract is not None:
            if proof.anchor is None:
                raise AdapterEntryError(f"leaf {proof.index} of log {proof.log!r} is not anchored "
                                        f"at size {proof.size}: publish the log first "
                                        f"(`gym ledger publish {proof.log}`)")
            check_anchored_root(contract, proof)
    except VerificationError as exc:
        detail = f" (expected {exc.expected}, computed {exc.computed})" if exc.expected else ""
        raise AdapterEntryError(f"entry {cid}: inclusion proof does not verify: {exc}{detail}"
                                ) from None
    return proof


def _check_target(directory: Path, files: list[AdapterFile]) -> None:
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise AdapterError(f"{directory} already exists and is not an empty directory: choose "
                           "a new one (nothing is overwritten)")
    if any(f.path == ENTRY_FILE for f in files):
        raise AdapterEntryError(f"the entry lists a file named {ENTRY_FILE}, which the fetch "
                                "writes itself")
    folders = {"/".join(f.path.split("/")[:i]) for f in files
               for i in range(1, f.path.count("/") + 1)}
    clash = sorted(folders & {f.path for f in files})
    if clash:
        raise AdapterEntryError(f"the entry lists {clash[0]!r} both as a file and as a folder")


def _fetch_file(content, file: AdapterFile, dest: Path,
                on_bytes: Callable[[int], None] | None) -> None:
    """Write ``file`` to ``dest`` and check its size and CID; raises AdapterIntegrityError."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        with open(dest, "xb") as out:
            for chunk in content.cat_iter(file.cid):
                out.write(chunk)
                written += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
    except NotFoundError as exc:
        raise AdapterIntegrityError(f"fetching adapter file {file.path} ({file.cid}): {exc}",
                                    path=file.path) from None
    except (ContentIntegrityError, VerificationError) as exc:
        raise AdapterIntegrityError(f"{file.path}: the content store holds corrupt blocks for "
                                    f"{file.cid} ({exc})", path=file.path, expected=exc.expected,
                                    computed=exc.computed) from None
    if written != file.size:
        raise AdapterIntegrityError(f"{file.path}: got {written} bytes, the entry says "
                                    f"{file.size}", path=file.path, expected=file.size,
                                    computed=written)
    computed = file_cid(dest)
    if computed != file.cid:
        raise AdapterIntegrityError(f"{file.path}: its bytes re-add to CID {computed}, the "
                                    f"entry says {file.cid}", path=file.path, expected=file.cid,
                                    computed=computed)


def fetch_adapter(content, cid: str, directory: str | Path, *, proof: object = None,
                  contract: LedgerContract | None = None,
                  on_bytes: Callable[[int], None] | None = None) -> FetchedAdapter:
    """Fetch and verify the adapter entry ``cid`` and all its files into ``directory``.

    ``proof``: an inclusion proof document to check first (``verify_entry_inclusion``, with
    ``contract`` for the on-chain root). ``on_bytes(n)`` is called as file bytes arrive.
    Raises ``AdapterEntryError`` or ``AdapterIntegrityError``; ``directory`` is then untouched.
    """
    directory = Path(directory)
    data, entry = fetch_adapter_entry(content, cid)
    _check_target(directory, entry.files)
    inclusion = (verify_entry_inclusion(proof, cid, contract, data=data)
                 if proof is not None else None)
    tmp = directory.parent / f".{directory.name}.fetch-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for file in entry.files:
            _fetch_file(content, file, tmp / file.path, on_bytes)
        (tmp / ENTRY_FILE).write_bytes(data)
        if directory.is_dir():
            directory.rmdir()  # empty (checked above); rename needs it gone
        tmp.rename(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return FetchedAdapter(directory, cid, entry, inclusion)


def read_adapter_entry(adapter_dir: str | Path) -> tuple[str, AdapterEntry] | None:
    """``(cid, entry)`` from ``adapter_dir/adapter_entry.json`` if the directory has one."""
    path = Path(adapter_dir) / ENTRY_FILE
    if not path.is_file():
        return None
    data = path.read_bytes()
    return entry_cid(data), _adapter_entry(data, path)
