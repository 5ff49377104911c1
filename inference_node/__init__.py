"""Inference node: an OpenAI-compatible server over a frozen model that injects a verified
experience library into every prompt.

Modules: `protocol` (OpenAI request/response shapes), `engine` (the `Engine` interface),
`transformers_engine` (`TransformersEngine`, which also captures the activations receipts commit
to), `vllm_engine` (the vLLM engine), `injection` (library rendering and prefix KV reuse),
`library` (the `LibrarySource` interface and a static JSON source), `sync`
(`ChainLibrarySource`: follows a log on chain, verifies every leaf and the root before use),
`receipts` (EIP-712 signed proof-of-inference receipts, their wire format), `activations` (the
TOPLOC activation commitment they carry), `verify` (checking a receipt bundle), `receipt_log`
(the node's own receipt log, appended in the background and anchored periodically),
`receipt_wal` (its write-ahead file: a receipt is on disk before its answer leaves),
`bundle_store` (bundle retention: what a verifier needs beside each receipt, served by CID),
`bundle_sources` (bundles from a client's saved answer and request, or fetched from a node),
`receipt_audit` (`gym audit` of a receipt log: signatures, one signer, a sample), `registry`
(the NodeRegistry contract: registration, challenges), `challenges` (challenge evidence),
`serving` + `server` (the FastAPI app), `launch` (`start_node`: engine, signer, receipt log,
registration, app), `metrics`, `settings`, `errors` (one base, `InferenceNodeError`), `cli`
(`gym node serve|list|challenge`, `gym verify receipt`), `demo` (the node step of `gym demo`).
docs/node.md shows them at work.

    >>> from inference_node import LibrarySnapshot, library_block
    >>> snapshot = LibrarySnapshot("v1", "0x01", 2, "00" * 32,
    ...                            (("bafy-a", "Check units."), ("bafy-b", "Re-read the question.")))
    >>> print(library_block(snapshot))
    Experiences from earlier practice; apply those that fit this problem:
    [G0]. Check units.
    [G1]. Re-read the question.

Serving it (needs the `serve` extra)::

    engine = TransformersEngine.from_pretrained("path/to/model")
    app = create_app(engine, StaticLibrarySource.from_file("library.json"), NodeSettings())
"""

from ledger.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "inference_node.injection": ["LibraryInjector", "library_block"],
    "inference_node.library": ["LibrarySnapshot", "LibrarySource", "LibraryStatus",
        "StaticLibrarySource"],
    "inference_node.settings": ["NodeSettings"],
})
