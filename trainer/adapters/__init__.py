"""PEFT adapters on the ledger: publish, fetch and verify, merge, delta-compress.

Modules: ``publish`` (a gradient-training run becomes ``run`` + ``adapter`` entries, anchored),
``fetch`` (download by entry CID, every file re-added and checked against its CID and size,
optional inclusion proof against the anchored root), ``merge`` (PEFT ``merge_and_unload`` with
a base weights-digest check), ``compress`` (1-8 bit weight deltas, BitDelta-style at 1 bit;
imports torch) and ``perplexity`` (the held-out quality measure). See docs/adapters.md.
Importing this package does not import torch.

>>> import pathlib, tempfile
>>> from ledger import AdapterEntry, LocalBlockStore, encode_entry, entry_cid
>>> scratch = tempfile.TemporaryDirectory()
>>> content = LocalBlockStore(pathlib.Path(scratch.name) / "blocks")
>>> weights = bytes(300_000)  # two UnixFS chunks: a dag-pb root, as Kubo builds it
>>> files = [{"path": "adapter_model.safetensors", "cid": content.add_file(weights),
...           "size": len(weights)}]
>>> entry = encode_entry(AdapterEntry(
...     base_model={"name": "tiny", "weights_digest": "sha256:" + "0" * 64}, method="sft",
...     files=files, config={"r": 8}, dataset_digest="sha256:" + "1" * 64, metrics={},
...     run_cid=entry_cid(b"a run entry")))
>>> cid = content.add_file(entry)
>>> fetched = fetch_adapter(content, cid, pathlib.Path(scratch.name) / "adapter")
>>> sorted(p.name for p in fetched.directory.iterdir())
['adapter_entry.json', 'adapter_model.safetensors']
>>> scratch.cleanup()
"""

from ledger.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "trainer.adapters.errors": ["AdapterEntryError", "AdapterError", "AdapterIntegrityError",
        "AdapterRunError", "BaseModelMismatchError", "DeltaFormatError"],
    "trainer.adapters.fetch": ["FetchedAdapter", "fetch_adapter", "fetch_adapter_entry"],
    "trainer.adapters.merge": ["check_base_model", "merge_adapter"],
    "trainer.adapters.publish": ["PublishedAdapter", "build_adapter_entries",
        "publish_adapter_run"],
})
