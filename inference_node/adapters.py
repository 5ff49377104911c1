"""An adapter published on the ledger, served by a node and re-checked by a verifier.

``gym node serve --model BASE --adapter CID`` serves one PEFT adapter (from ``gym train``,
published with ``gym adapter publish``) over its base model. `prepare_adapter`:

1. fetches the ``adapter`` entry by its CID from the content store (local, or the Kubo node in
   ``GYM_IPFS_API``) and every file it lists, each re-added to exactly its listed CID
   (``trainer.adapters.fetch_adapter``); with a proof document (``--adapter-log/--adapter-index``
   or ``--adapter-proof``), also the entry's inclusion in a log whose root is anchored on chain;
2. checks that ``BASE`` is the model the adapter was trained on: its weights digest must equal
   the entry's ``base_model.weights_digest``;
3. merges the adapter into the base weights (``trainer.adapters.merge_adapter``) in a working
   directory, which either engine then loads as a plain model.

Any failure (a CID the store does not have, a corrupt block, another base, a bad proof) is a
`NodeError` naming the adapter, raised before the node serves anything. Receipts of such a node
carry the base's digest as ``modelDigest`` and the adapter entry's CID as ``adapterCid``. A
verifier rebuilds the same weights with `load_verifier_adapter` (fetch, the same checks, merge
in memory) before its prefill, so a node that names an adapter it does not serve fails the
activation check.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_node.errors import NodeError, ReceiptError
from ledger.entries import AdapterEntry


@dataclass(frozen=True)
class PreparedAdapter:
    cid: str  # the adapter entry's CID (a receipt's adapterCid)
    entry: AdapterEntry
    model_dir: Path  # base + adapter, merged: what the engine loads
    base_digest: str  # the base's weights digest (a receipt's modelDigest)
    inclusion: Any = None  # ledger.proofs.VerifiedProof, when a proof was checked


def prepare_adapter(content: Any, cid: str, base_dir: str | Path, workdir: str | Path, *,
                    proof: object = None, contract: Any = None) -> PreparedAdapter:
    """Fetch and verify adapter ``cid``, check ``base_dir`` is its base, merge it into
    ``workdir/merged``; ``NodeError`` on any failure. ``proof`` (+ ``contract``): an inclusion
    proof document of the entry to check first, against the root anchored on chain."""
    from trainer.adapters import AdapterError, fetch_adapter, merge_adapter

    workdir = Path(workdir)
    try:
        fetched = fetch_adapter(content, cid, workdir / "adapter", proof=proof,
                                contract=contract)
        merged = merge_adapter(fetched.directory, base_dir, workdir / "merged")
    except AdapterError as exc:
        raise NodeError(f"adapter {cid} cannot be served: {exc}") from None
    return PreparedAdapter(cid, fetched.entry, merged.output, merged.base.digest,
                           fetched.inclusion)


def load_verifier_adapter(content: Any, cid: str, base_dir: str | Path, dtype: Any) -> Any:
    """The base in ``base_dir`` with adapter ``cid`` merged, as a verifier prefills with it
    (``dtype``); raises ``ReceiptError`` ``adapter`` when the adapter cannot be fetched,
    fails its CIDs, or was trained on another base."""
    from trainer.adapters import AdapterError, check_base_model, fetch_adapter
    from trainer.adapters.merge import load_adapted

    try:
        with tempfile.TemporaryDirectory(prefix="gym-verify-adapter-") as tmp:
            fetched = fetch_adapter(content, cid, Path(tmp) / "adapter")
            check_base_model(fetched.directory, base_dir)
            return load_adapted(base_dir, fetched.directory, dtype).merge_and_unload().eval()
    except AdapterError as exc:
        raise ReceiptError("adapter", f"the receipt's adapter {cid}: {exc}") from None
