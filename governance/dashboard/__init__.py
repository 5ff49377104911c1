"""The DAO's web dashboard (``gym dashboard``): FastAPI, server-rendered pages, one script.

- ``indexer``: the governor's events (proposals, votes, queue, execute, cancel) and the
  curated library's appends, indexed incrementally from the deployment block.
- ``curation``: a proposal's calldata decoded back into its proposed leaves, and each leaf
  verified without trusting the proposer (entry fetched by CID and re-hashed, inclusion proof
  checked against the root the ExperienceLedger anchored).
- ``committee``: the VerifierCommittee's verifiers and latest challenges (verdict, reason,
  appeal window, what finalizing moved), read through ``committee.client``, bounded.
- ``rewards``: the RewardDistributor's latest epochs; one account's line of each attested
  table (fetched by its attested CID, checked against the attested root, with the source
  lines that paid it) and the unsigned ``claim`` its wallet sends, the proof computed from
  that table.
- ``ballots``: EIP-712 ballots for the voter's wallet (``eth_signTypedData_v4``), relayed by
  the server (``castVoteBySig``; with a reason, ``castVoteWithReasonAndParamsBySig``).
- ``transactions``: unsigned delegate / propose / queue / execute transactions for the
  wallet's ``eth_sendTransaction``, each tried first so a refusal comes back named.
- ``rpc_proxy``: on the devnet, the whitelisted JSON-RPC proxy that lets the page use Anvil's
  unlocked accounts through the same EIP-1193 calls.
- ``names``: addresses as a voter reads them: the DAO's contracts by name, on the devnet
  Anvil's accounts as ``dev account N``, any other address shortened (``0x1234…abcd``).
- ``evidence``: the evaluations a curation proposal cites, checked against its calldata and
  re-verified from the chain and the content store (``governance.evidence``), each outcome
  kept per evaluation CID for a while (``VerificationCache``).
- ``views``: what a page shows of a proposal: state, quorum, next step, what an account may do
  on it (``voter_status``), the proposer's reason as paragraphs, the evidence it carries
  (verdict line, badge, figures per seed, command).
- ``security``: Host and Origin checks, CSRF tokens bound to the session cookie, CSP.
- ``app``, ``pages``, ``api``: the FastAPI application (``create_app``, imported from
  ``governance.dashboard.app``: it needs Jinja2, which nothing else here does, so ``gym`` starts
  without it) and its routes; ``cli``: the command.

>>> from governance.dashboard import served_origins
>>> served_origins("127.0.0.1", 8600)
('http://127.0.0.1:8600', 'http://localhost:8600')
"""

from ledger.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "governance.dashboard.curation": ["CuratedLeafCheck", "LeafCheck", "ProposedAction",
        "check_curated_leaves", "check_leaf", "decode_action"],
    "governance.dashboard.indexer": ["CuratedLeaf", "GovernorIndexer", "IndexedProposal",
        "IndexedVote"],
    "governance.dashboard.names": ["AddressBook", "address_book"],
    "governance.dashboard.runtime": ["DashboardRuntime"],
    "governance.dashboard.security": ["served_origins"],
})
