"""A whole curation on the devnet in one call: what `gym demo` shows of the DAO.

``curate_on_devnet`` takes leaves of a local publisher log through the governance pipeline
with Anvil's public dev accounts (``contracts.devnet_accounts``): it builds the curation
(proofs checked locally, document stored), proposes it (account 0), votes for it with a reason
(account 1), abstains (account 2) and votes for it by an EIP-712 ballot that account 3 signs
and account 0 relays; then it skips the voting period, queues, skips the timelock delay and
executes. Finally it reads the curated library back: its on-chain state, and the RFC 9162 root
of the leaves its ``LeafAppended`` events name, for the caller to compare with that state's
root. Devnet only: the votes need the dev keys and the clock moves by ``evm_increaseTime``
(``governance.devnet_time``).

``uncurated_indices`` picks the leaves of a local log that the curated library lacks (a kept
devnet that curated them before already holds them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eth_account import Account

from contracts.devnet_accounts import ANVIL_DEV_KEYS
from governance.client import GovernanceClient, Proposal
from governance.curation import CurationProposal
from ledger.chain import LogState
from ledger.rfc9162 import root as merkle_root

if TYPE_CHECKING:
    from ledger.content import ContentStore
    from ledger.logstore import LogStore

PROPOSER_KEY, FOR_KEY, ABSTAIN_KEY, BALLOT_KEY = ANVIL_DEV_KEYS[:4]
RELAYER_KEY = PROPOSER_KEY  # relays account 3's signed ballot


@dataclass(frozen=True)
class DevnetCuration:
    plan: CurationProposal
    proposal_id: int
    tally: Proposal  # the proposal as read after the three votes
    library: LogState | None  # the curated log after execution; None: voted down
    leaves_root: bytes | None  # RFC 9162 root of the leaves its LeafAppended events name

    @property
    def executed(self) -> bool:
        return self.library is not None


def uncurated_indices(client: GovernanceClient, store: LogStore, log_name: str) -> list[int]:
    """Indices of local log ``log_name``'s leaves that the curated library does not hold."""
    return [leaf.index for leaf in store.leaves(log_name)
            if not client.ledger.is_curated(client.curated_log_id, leaf.leaf_hash)]


def curate_on_devnet(client: GovernanceClient, store: LogStore, content: ContentStore,
                     log_name: str, indices: list[int], description: str, *,
                     voting_period: int, timelock_delay: int, evidence: Sequence[str] = (),
                     support: str = "for", reason: str = "clear and general"
                     ) -> DevnetCuration:
    """Propose (naming ``evidence``, evaluation CIDs), vote (``support`` with ``reason``,
    abstain, ``support`` by relayed signature), and for a proposal voted "for" queue and
    execute the curation of leaves ``indices`` of ``log_name``; ``voting_period`` and
    ``timelock_delay`` (seconds) are skipped on the devnet's clock. Voted "against", the
    proposal is left Defeated (``library`` None)."""
    plan = client.build_curation(store, content, log_name, indices, description, evidence)
    proposal_id, _ = client.propose(plan, key=PROPOSER_KEY)
    client.vote(proposal_id, support, reason, key=FOR_KEY)
    client.vote(proposal_id, "abstain", key=ABSTAIN_KEY)
    voter = Account.from_key(BALLOT_KEY)
    typed = client.ballot_typed_data(proposal_id, support, voter.address)
    signature = Account.sign_typed_data(voter.key, full_message=typed).signature
    client.cast_vote_by_sig(proposal_id, support, voter.address, signature, key=RELAYER_KEY)
    tally = client.proposal(proposal_id)
    client.advance_time(voting_period + 1)
    if support != "for":
        return DevnetCuration(plan, proposal_id, tally, None, None)
    client.queue(proposal_id, key=PROPOSER_KEY)
    client.advance_time(timelock_delay + 1)
    client.execute(proposal_id, key=PROPOSER_KEY)
    curated = client.curated_log_id
    appended = client.ledger.leaves_appended(curated, from_block=client.from_block)
    return DevnetCuration(plan, proposal_id, tally, client.ledger.log_info(curated),
                          merkle_root([event.leaf_hash for event in appended]))


__all__ = ["DevnetCuration", "curate_on_devnet", "uncurated_indices"]
