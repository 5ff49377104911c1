"""Unsigned transactions for the connected wallet: delegate, propose, queue, execute.

The server never signs these: it returns ``{from, to, data}`` and the page sends it with
EIP-1193 ``eth_sendTransaction`` from the account the user picked. Each one is first tried as
an ``eth_call`` from that account, so a transaction the chain would refuse (queue before the
vote ends, execute before the timelock delay, a bad proof at execution) is refused here with
the contract's named error instead of failing in the wallet.
"""

from __future__ import annotations

from collections.abc import Sequence

from eth_utils import to_checksum_address

from governance.client import CurationProposal, GovernanceClient
from governance.devnet_time import ensure_time_after, is_devnet
from ledger.content import ContentStore
from ledger.logstore import LogStore


def _tx(sender: str, contract, function: str, args: list) -> dict:
    data = contract.encode_abi(function, args=args)
    return {"from": to_checksum_address(sender), "to": contract.address, "data": data}


def _preflight(client: GovernanceClient, call, sender: str) -> None:
    with client.rpc_errors():
        call.call({"from": to_checksum_address(sender)})


def delegate_tx(client: GovernanceClient, sender: str, to: str | None = None) -> dict:
    """``GymToken.delegate(to)``; ``to`` defaults to the sender (self-delegation)."""
    target = to_checksum_address(to or sender)
    _preflight(client, client.token.functions.delegate(target), sender)
    return _tx(sender, client.token, "delegate", [target])


def queue_tx(client: GovernanceClient, sender: str, proposal_id: int) -> dict:
    _preflight(client, client.governor.functions.queue(proposal_id), sender)
    return _tx(sender, client.governor, "queue", [proposal_id])


def execute_tx(client: GovernanceClient, sender: str, proposal_id: int) -> dict:
    _preflight(client, client.governor.functions.execute(proposal_id), sender)
    return _tx(sender, client.governor, "execute", [proposal_id])


def propose_curation_tx(client: GovernanceClient, store: LogStore, content: ContentStore,
                        sender: str, log_name: str, indices: Sequence[int], description: str
                        ) -> tuple[dict, CurationProposal]:
    """A curation proposal built from local publisher log ``log_name`` (``build_curation``:
    ``CurationError`` for an unknown log, an unanchored index, ...), as a ``propose`` call.

    The proposer's votes are checked first, so a refused proposal stores nothing."""
    sender = to_checksum_address(sender)
    client.check_can_propose(sender, "hold GYM and delegate first")
    plan = client.build_curation(store, content, log_name, indices, description)
    if is_devnet(client.w3):  # as GovernanceClient.propose: the governor reads the proposer's
        ensure_time_after(client.w3, client.now())  # votes a second before the block's time
    targets, values, calldatas = plan.actions
    args = [targets, values, calldatas, plan.description]
    _preflight(client, client.governor.functions.propose(*args), sender)
    return _tx(sender, client.governor, "propose", args), plan
