"""The one transaction path (``ledger.evm``): every contract's custom errors decoded by its ABI,
at gas estimation and after a mined transaction reverted, with and without the node's tracer."""

from __future__ import annotations

import pytest
from eth_abi import encode as abi_encode
from eth_account import Account
from eth_utils import function_abi_to_4byte_selector
from web3 import Web3

from contracts import load_artifact
from devnet.deploy import CONTRACT_NAMES, Deployment
from devnet.settings import ANVIL_DEV_KEYS
from ledger.evm import (
    ZERO_ADDRESS,
    ChainError,
    ContractRevertError,
    ErrorTable,
    EvmConnection,
    padded_gas,
)

SENDER = Account.from_key(ANVIL_DEV_KEYS[0])  # deployer and token holder on the devnet
OTHER = Account.from_key(ANVIL_DEV_KEYS[1]).address
NO_OPERATION = b"\0" * 32


def _error_data(abi: list[dict], name: str, values: list) -> bytes:
    item = next(i for i in abi if i["type"] == "error" and i["name"] == name)
    return function_abi_to_4byte_selector(item) + abi_encode(
        [i["type"] for i in item["inputs"]], values)


def test_error_table_decodes_each_contract_and_solidity_builtins():
    abis = {name: load_artifact(name).abi for name in CONTRACT_NAMES}
    table = ErrorTable(abis.values())
    cases = [
        ("ExperienceLedger", "ExperienceLedgerStaleCheckpoint", [1, 5, 5],
         {"logId": 1, "size": 5, "anchoredSize": 5}),
        ("GymToken", "ERC20InsufficientBalance", [OTHER, 1, 2],
         {"sender": OTHER, "balance": 1, "needed": 2}),
        ("TimelockController", "TimelockUnexpectedOperationState", [b"\1" * 32, b"\0" * 32],
         {"operationId": "0x" + "01" * 32, "expectedStates": "0x" + "00" * 32}),
        ("GymGovernor", "GovernorNonexistentProposal", [7], {"proposalId": 7}),
        ("NodeRegistry", "NodeRegistryStakeBelowMinimum", [1, 100], {"stake": 1, "minStake": 100}),
    ]
    for contract, name, values, shown in cases:
        error = table.decode(_error_data(abis[contract], name, values))
        assert isinstance(error, ContractRevertError), contract
        assert (error.name, error.values) == (name, shown)
    assert str(table.decode(_error_data(abis["GymGovernor"], "GovernorNonexistentProposal", [7]))
               ) == "the contract refused: GovernorNonexistentProposal(proposalId=7)"
    refused = table.decode(bytes.fromhex("08c379a0") + abi_encode(["string"], ["no"]))
    assert (refused.name, refused.values) == ("Error", {"message": "no"})
    panic = table.decode(bytes.fromhex("4e487b71") + abi_encode(["uint256"], [0x11]))
    assert (panic.name, panic.values) == ("Panic", {"code": "0x11"})
    assert "unknown error data 0xdeadbeef" in str(table.decode("0xdeadbeef"))
    truncated = _error_data(abis["GymGovernor"], "GovernorNonexistentProposal", [7])[:20]
    assert "malformed error data" in str(table.decode(truncated))
    assert str(table.decode(b"")) == "the contract reverted without reason data"


def test_a_value_formatter_shows_values_its_own_way():
    abi = load_artifact("NodeRegistry").abi
    table = ErrorTable([abi], lambda error, item, value: f"{value} units" if item["type"] ==
                       "uint256" else value)
    error = table.decode(_error_data(abi, "NodeRegistryStakeBelowMinimum", [1, 100]))
    assert error.values == {"stake": "1 units", "minStake": "100 units"}


@pytest.fixture
def devnet(ledger_devnet):
    deployment = Deployment.load(ledger_devnet.gym.deployment_file)
    w3 = Web3(Web3.HTTPProvider(ledger_devnet.rpc_url))
    contracts = {name: w3.eth.contract(address=c.address, abi=load_artifact(name).abi)
                 for name, c in deployment.contracts.items()}
    evm = EvmConnection(w3, [load_artifact(name).abi for name in CONTRACT_NAMES])
    return w3, contracts, evm


# A call each contract refuses from SENDER, with the custom error and values it answers.
REFUSALS = [
    ("ExperienceLedger", "transferLogOwnership", [999, OTHER], "ExperienceLedgerUnknownLog",
     {"logId": 999}),
    ("GymToken", "transfer", [OTHER, 10**30], "ERC20InsufficientBalance",
     {"sender": SENDER.address, "balance": 1000 * 10**18, "needed": 10**30}),
    ("TimelockController", "execute", [ZERO_ADDRESS, 0, b"", NO_OPERATION, NO_OPERATION],
     "TimelockUnexpectedOperationState", None),
    ("GymGovernor", "castVote", [12345, 1], "GovernorNonexistentProposal", {"proposalId": 12345}),
    ("NodeRegistry", "deregister", [], "NodeRegistryNotRegistered", {"operator": SENDER.address}),
]


def _call(contracts, contract: str, function: str, args: list):
    return contracts[contract].get_function_by_name(function)(*args)


@pytest.mark.anvil
def test_send_refuses_each_contracts_custom_error_at_estimation(devnet):
    w3, contracts, evm = devnet
    head = w3.eth.block_number
    for contract, function, args, name, values in REFUSALS:
        with pytest.raises(ContractRevertError) as refused:
            evm.send(_call(contracts, contract, function, args), SENDER)
        assert refused.value.name == name, contract
        if values is not None:
            assert refused.value.values == values
    assert w3.eth.block_number == head  # nothing was sent


def _mine_with_gas(w3: Web3, call, gas: int) -> dict:
    tx = call.build_transaction({"from": SENDER.address, "gas": gas, "chainId": w3.eth.chain_id,
                                 "nonce": w3.eth.get_transaction_count(SENDER.address, "pending")})
    tx_hash = w3.eth.send_raw_transaction(SENDER.sign_transaction(tx).raw_transaction)
    return w3.eth.wait_for_transaction_receipt(tx_hash)


@pytest.mark.anvil
def test_padded_gas_covers_an_estimate_the_clock_made_stale(devnet):
    """GymToken's clock is the timestamp, and Anvil mines blocks of the same second with the
    same timestamp. Estimated in the second of the holders' last vote checkpoints, a transfer
    updates them in place; mined in the next second it pushes new ones. The bare estimate then
    runs out of gas (what failed a CI run once, on a busy machine); the padded one does not."""
    w3, contracts, evm = devnet
    transfer = contracts["GymToken"].functions.transfer(OTHER, 10**18)

    def next_second() -> dict:
        latest = w3.eth.get_block("latest")
        w3.provider.make_request("evm_setNextBlockTimestamp", [latest["timestamp"] + 1])
        return latest

    next_second()
    evm.send(transfer, SENDER)  # checkpoints of SENDER and OTHER in this block's second
    stale = transfer.estimate_gas({"from": SENDER.address}, block_identifier="latest")
    latest = next_second()
    assert _mine_with_gas(w3, transfer, stale)["status"] == 0  # out of gas, a second later
    next_second()
    receipt = _mine_with_gas(w3, transfer, padded_gas(stale, latest["gasLimit"]))
    assert receipt["status"] == 1 and receipt["gasUsed"] > stale
    sent = evm.send(transfer, SENDER)  # the layer pads the same way
    tx = w3.eth.get_transaction(sent["transactionHash"])
    assert tx["gas"] > sent["gasUsed"] and tx["gas"] >= padded_gas(21_000, latest["gasLimit"])
    assert padded_gas(10**9, 30_000_000) == 30_000_000  # never above the block's limit


def _mine_reverted(w3: Web3, call) -> dict:
    """Send ``call`` with a fixed gas limit, skipping estimation, so it is mined and reverts."""
    tx = call.build_transaction({"from": SENDER.address, "gas": 500_000, "chainId": w3.eth.chain_id,
                                 "nonce": w3.eth.get_transaction_count(SENDER.address, "pending")})
    tx_hash = w3.eth.send_raw_transaction(SENDER.sign_transaction(tx).raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash)
    assert receipt["status"] == 0
    return receipt


@pytest.mark.anvil
@pytest.mark.parametrize("tracer", [True, False], ids=["call-tracer", "eth_call-at-its-block"])
def test_a_mined_revert_is_decoded_from_each_contract(devnet, monkeypatch, tracer):
    w3, contracts, evm = devnet
    if not tracer:  # a node without debug_traceTransaction: the call is replayed instead
        forward = w3.provider.make_request

        def no_tracer(method, params):
            if method == "debug_traceTransaction":
                return {"jsonrpc": "2.0", "id": 0,
                        "error": {"code": -32601, "message": "method not found"}}
            return forward(method, params)

        monkeypatch.setattr(w3.provider, "make_request", no_tracer)
    for contract, function, args, name, values in REFUSALS:
        call = _call(contracts, contract, function, args)
        receipt = _mine_reverted(w3, call)
        # With the tracer the receipt alone tells; without it, the call is replayed.
        error = (evm.why_reverted(receipt) if tracer
                 else evm.why_reverted(receipt, call, SENDER.address))
        assert isinstance(error, ContractRevertError), (contract, str(error))
        assert error.name == name
        if values is not None:
            assert error.values == values
    if not tracer:  # without the tracer and the call, nothing tells why
        receipt = _mine_reverted(w3, _call(contracts, *REFUSALS[0][:3]))
        error = evm.why_reverted(receipt)
        assert type(error) is ChainError
        assert str(error) == (f"transaction {receipt['transactionHash'].to_0x_hex()} reverted "
                              f"in block {receipt['blockNumber']}")


@pytest.mark.anvil
def test_ledger_contract_reads_is_curated_and_decodes_through_the_layer(ledger_devnet):
    deployment = Deployment.load(ledger_devnet.gym.deployment_file)
    contract = ledger_devnet.contract()
    assert contract.is_curated(deployment.curated_log_id, b"\1" * 32) is False
    with pytest.raises(ContractRevertError, match=r"ExperienceLedgerUnknownLog\(logId=999\)"):
        contract.transfer_log_ownership(999, OTHER)
