"""Errors of the inference node: one base, ``InferenceNodeError``, that the ``gym`` root prints
as one ``error: ...`` line (exit 1), as it does the other packages' bases.

- ``NodeError``: the node cannot start or run as configured (a missing engine, a bad option, a
  key that does not decrypt); the message says what to change.
- ``ReceiptError``: a receipt does not check out; its ``reason`` is one of ``REASONS``. It is
  also a ``ledger`` ``VerificationError`` (expected and computed values), as every verifier's
  error in this repository is.
- ``SamplingError``: a sampler input is out of its domain (``inference_node.sampling``: a
  temperature, top-p, seed, request key, position or logits row the spec does not define).
- ``EngineError`` (``inference_node.engine``): an engine failed while running a request.
- ``APIError`` (``inference_node.serving``): an error answer, HTTP status and OpenAI's fields.
"""

from __future__ import annotations

from ledger.errors import VerificationError


class InferenceNodeError(Exception):
    """Base of every error the inference node raises on purpose."""


class NodeError(InferenceNodeError, RuntimeError):
    """The node cannot start or run as configured; the message says what to change."""


class KeyLoadError(NodeError):
    """The node's signing key cannot be read; ``option`` names the option to fix."""

    def __init__(self, message: str, *, option: str | None = None):
        super().__init__(message)
        self.option = option


class SamplingError(InferenceNodeError, ValueError):
    """A sampler input is outside the domain ``docs/sampling.md`` defines."""


REASONS = (
    "malformed",  # not a receipt / bundle, or a field is unusable
    "bad_signature",  # absent or not a valid secp256k1 signature over the typed data
    "wrong_signer",  # valid signature, but by another address than ``node``
    "wrong_domain",  # signed for another chain or contract than the verifier's
    "request_digest",  # the request does not hash to ``request_digest``
    "response_digest",  # the response does not hash to ``response_digest``
    "token_counts",  # prompt / completion token counts disagree with the evidence
    "experience_ids",  # the experiences offered are not the ones the receipt names
    "experience_content",  # an experience's text cannot be fetched or is not its CID's
    "library_root",  # ``library`` is not the root anchored on chain at that size
    "library_state",  # the experiences are not the active set of the library at that size
    "not_included",  # the receipt-log inclusion proof fails or is for another entry
    "not_anchored",  # the receipt log's root at that size is not the one on chain
    "model_digest",  # the model given to the verifier is not the receipt's model
    "chat_template",  # the verifier's chat template is not the one the receipt binds
    "adapter",  # the receipt's adapter cannot be fetched, fails its CIDs, or has another base
    "response_format",  # a completion token the request's response-format grammar forbids
    "activation_mismatch",  # the prefill's top-k activations disagree with the commitment
    "not_registered",  # no node in the NodeRegistry signs with the receipt's key
    "node_deregistered",  # the signer's node has left the registry (unbonding)
    "node_slashed",  # the signer's node was slashed below the minimum stake: not active
    "registered_model",  # the node is registered with another model digest
    "receipt_log",  # the inclusion proof is not in the node's registered receipt log
    "sampling",  # a token is not the verifiable sampler's choice, or the parameters disagree
    "termination",  # the answer does not end where it says (EOS, stop string, max_tokens)
    "response_text",  # the text is not the decoding of the completion's token ids
)


class ReceiptError(InferenceNodeError, VerificationError):
    """A receipt does not check out; ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str, message: str, *, expected: object = None,
                 computed: object = None):
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {message}", expected=expected, computed=computed)
        self.reason = reason
