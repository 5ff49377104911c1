"""dag-json (https://ipld.io/specs/codecs/dag-json/spec/) for the two codecs the store holds:
what ``ipfs dag get`` prints for a block and what ``ipfs dag put --input-codec dag-json``
reads back into one.

- a dag-pb node is ``{"Data": {"/": {"bytes": B64}}, "Links": [{"Hash": {"/": CID},
  "Name": NAME, "Tsize": N}, ...]}`` (the dag-pb data model: ``Data`` absent when the node has
  none, every link with its three fields as Kubo writes them);
- a raw block is ``{"/": {"bytes": B64}}``;

compact, map keys sorted, bytes as standard base64 without padding, links as the CID's string
(``Qm…`` for CIDv0), as go-ipld-prime's dag-json encoder writes them. ``decode_*`` refuse any
other shape with one ``DagJsonError`` naming the field, and bound what they read.
"""

from __future__ import annotations

import base64
import binascii
import json

from ledger.errors import VerificationError
from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import PBLink, PBNode, decode_pbnode, encode_pbnode

MAX_DAG_JSON_BYTES = 2 * 1024 * 1024  # a block is at most 1 MiB, its base64 a third more
MAX_LINKS = 65536


class DagJsonError(VerificationError):
    """A dag-json document that is not a dag-pb node or a raw block as this store reads it."""


def _bytes(data: bytes) -> dict:
    return {"/": {"bytes": base64.b64encode(data).decode("ascii").rstrip("=")}}


def encode_dag_json(cid: CID, block: bytes) -> bytes:
    """The dag-json of ``block`` (a dag-pb node or raw bytes, by ``cid``'s codec)."""
    if cid.codec == RAW:
        value: dict = _bytes(block)
    elif cid.codec == DAG_PB:
        node = decode_pbnode(block)
        value = {"Links": [{"Hash": {"/": str(link.cid)}, "Name": link.name or "",
                            "Tsize": link.tsize or 0} for link in node.links]}
        if node.data is not None:
            value["Data"] = _bytes(node.data)
    else:
        raise DagJsonError(f"codec 0x{cid.codec:x} has no dag-json form in this store")
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _parse(text: bytes) -> object:
    if len(text) > MAX_DAG_JSON_BYTES:
        raise DagJsonError(f"dag-json document over {MAX_DAG_JSON_BYTES} bytes")
    try:
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DagJsonError(f"not JSON: {exc}") from None


def _decode_bytes(value: object, where: str) -> bytes:
    if not (isinstance(value, dict) and value.keys() == {"/"} and isinstance(value["/"], dict)
            and value["/"].keys() == {"bytes"} and isinstance(value["/"]["bytes"], str)):
        raise DagJsonError(f'{where}: expected {{"/": {{"bytes": "<base64>"}}}}')
    text = value["/"]["bytes"]
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise DagJsonError(f"{where}: not base64") from None


def _decode_link(value: object, index: int) -> PBLink:
    where = f"Links[{index}]"
    if not isinstance(value, dict) or not value.keys() <= {"Hash", "Name", "Tsize"} \
            or "Hash" not in value:
        raise DagJsonError(f"{where}: expected an object with Hash, Name, Tsize")
    target = value["Hash"]
    if not (isinstance(target, dict) and target.keys() == {"/"} and isinstance(target["/"], str)):
        raise DagJsonError(f'{where}.Hash: expected {{"/": "<cid>"}}')
    try:
        cid = CID.parse(target["/"])
    except VerificationError as exc:
        raise DagJsonError(f"{where}.Hash: {exc}") from None
    name, tsize = value.get("Name"), value.get("Tsize")
    if name is not None and not isinstance(name, str):
        raise DagJsonError(f"{where}.Name: expected a string")
    if tsize is not None and (isinstance(tsize, bool) or not isinstance(tsize, int)
                              or not 0 <= tsize < 1 << 63):
        raise DagJsonError(f"{where}.Tsize: expected an unsigned integer")
    return PBLink(cid, name, tsize)


def decode_dag_json(text: bytes, codec: int) -> bytes:
    """The block (``codec``: dag-pb or raw) that the dag-json document ``text`` describes."""
    value = _parse(text)
    if codec == RAW:
        return _decode_bytes(value, "raw block")
    if codec != DAG_PB:
        raise DagJsonError(f"codec 0x{codec:x} cannot be stored by this store (dag-pb, raw)")
    if not isinstance(value, dict) or not value.keys() <= {"Data", "Links"}:
        raise DagJsonError("a dag-pb node is an object with Data and Links only")
    links = value.get("Links", [])
    if not isinstance(links, list) or len(links) > MAX_LINKS:
        raise DagJsonError(f"Links: expected a list of at most {MAX_LINKS} links")
    data = _decode_bytes(value["Data"], "Data") if value.get("Data") is not None else None
    node = PBNode(tuple(_decode_link(link, i) for i, link in enumerate(links)), data)
    return encode_pbnode(node)
