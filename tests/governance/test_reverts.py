"""How the governor's custom errors read to the person who ran the command."""

from __future__ import annotations

from contracts.gym_token import GYM
from governance.errors import GovernorRevertError
from governance.reverts import format_revert_value, governance_error
from ledger.evm import ContractRevertError

UINT = {"type": "uint256"}


def test_insufficient_proposer_votes_reads_in_gym():
    error = "GovernorInsufficientProposerVotes"
    values = {name: format_revert_value(error, {**UINT, "name": name}, amount)
              for name, amount in (("votes", GYM // 2), ("threshold", GYM))}
    values["proposer"] = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
    explained = governance_error(ContractRevertError(error, values))
    assert isinstance(explained, GovernorRevertError)
    assert ("0x70997970C51812dc3A010C7d01b50e0d17dc79C8 has 0.5 GYM of votes, proposing needs "
            "1 GYM: delegate first") in str(explained)


def test_other_errors_keep_their_plain_values():
    # a uint256 named "votes" in another error is not a GYM amount
    assert format_revert_value("SomeOtherError", {**UINT, "name": "votes"}, 7) == 7


def test_a_second_slash_of_a_receipt_names_the_challenge_it_was_slashed_for():
    values = {"operator": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
              "receiptHash": "0x" + "ab" * 32, "challengeId": 3}
    explained = governance_error(ContractRevertError("NodeRegistryReceiptSlashed", values))
    assert isinstance(explained, GovernorRevertError)
    assert (f"receipt 0x{'ab' * 32} of node 0x70997970C51812dc3A010C7d01b50e0d17dc79C8 was "
            "already slashed for challenge #3: a receipt is slashed once") in str(explained)
