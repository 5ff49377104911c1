"""One error base for the inference node, printed by the `gym` root as one line."""

from __future__ import annotations

import pytest

from inference_node.engine import EngineError
from inference_node.errors import REASONS, InferenceNodeError, NodeError, ReceiptError
from inference_node.serving import APIError
from inference_node.sync import LibrarySyncError
from ledger.errors import LedgerError, VerificationError


@pytest.mark.parametrize("error", [NodeError("x"), EngineError("x"), APIError(400, "x"),
                                   ReceiptError("malformed", "x"), LibrarySyncError("x")])
def test_every_node_error_has_the_package_base(error):
    assert isinstance(error, InferenceNodeError)


def test_node_error_is_no_ledger_error_and_receipt_error_still_a_verification_error():
    assert not issubclass(NodeError, LedgerError) and issubclass(NodeError, RuntimeError)
    failure = ReceiptError("token_counts", "completion", expected=3, computed=4)
    assert isinstance(failure, VerificationError)
    assert (failure.reason, failure.expected, failure.computed) == ("token_counts", 3, 4)
    assert str(failure) == "token_counts: completion"
    with pytest.raises(AssertionError):
        ReceiptError("no such reason", "x")
    assert "activation_mismatch" in REASONS


def test_the_root_prints_the_node_base_as_one_line():
    from devnet.cli import EXPECTED_ERRORS

    assert InferenceNodeError in EXPECTED_ERRORS
