"""`gym ledger publish` against the chain's real state: a publish that died after its anchor
transaction was mined recovers on the next run, and a log created on a chain that has since
been reset (Anvil restarted from scratch, `gym devnet up` redeployed) refuses to touch the
new chain until it is re-created there."""

from __future__ import annotations

import json

import pytest
from ledger_helpers import experience, ok, one_error_line
from sqlalchemy import update

from devnet.settings import ANVIL_DEV_KEYS
from ledger import LocalBlockStore, LogStore
from ledger.batches import BatchManifest, store_batch
from ledger.schema import logs

pytestmark = pytest.mark.anvil

LOG = "alice/math"


def entries_file(tmp_path, steps) -> str:
    path = tmp_path / f"e{steps[0]}-{steps[-1]}.jsonl"
    path.write_text("\n".join(json.dumps(experience(i)) for i in steps) + "\n")
    return str(path)


def show(gym, name=LOG, env=None) -> dict:
    return json.loads(ok(gym.run("ledger", "show", name, "--json", extra_env=env)))


def test_publish_recovers_an_anchor_that_was_mined_but_never_recorded(ledger_devnet, tmp_path):
    gym = ledger_devnet.gym
    assert "on-chain log id 2" in ok(gym.run("ledger", "create", LOG))
    ok(gym.run("ledger", "append", LOG, entries_file(tmp_path, range(3))))

    # What `publish` does up to the anchor transaction, through the library; then the process
    # "dies": the checkpoint is never recorded.
    store = LogStore(f"sqlite:///{gym.data_dir / 'ledger.sqlite'}")
    content = LocalBlockStore(gym.data_dir / "ipfs")
    batch = store_batch(content, BatchManifest(LOG, 2, 0, 3, [l.cid for l in store.leaves(LOG)]))
    lost = ledger_devnet.contract().anchor(2, 3, store.root(LOG), batch, [])
    store.engine.dispose()
    assert show(gym)["checkpoints"] == []

    out = ok(gym.run("ledger", "publish", LOG))
    assert "recovered alice/math: checkpoint at size 3 was anchored on chain" in out
    assert f"nothing more to publish: alice/math is anchored at size 3 (tx {lost.tx_hash}" in out
    assert [(c["size"], c["tx_hash"], c["batch_cid"]) for c in show(gym)["checkpoints"]] == [
        (3, lost.tx_hash, batch)]

    # It goes on as if nothing had happened; the same crash again is recovered on the way.
    ok(gym.run("ledger", "append", LOG, entries_file(tmp_path, range(3, 5))))
    assert "size 3 -> 5" in ok(gym.run("ledger", "publish", LOG))
    assert "audit clean: 2 checkpoints, 5 entries" in ok(gym.run("audit", LOG))


def test_a_log_of_a_reset_chain_refuses_until_rebound(own_ledger_devnet, tmp_path):
    ledger_devnet = own_ledger_devnet  # this test restarts the chain: a devnet of its own
    gym = ledger_devnet.gym
    assert "on-chain log id 2" in ok(gym.run("ledger", "create", LOG))
    ok(gym.run("ledger", "append", LOG, entries_file(tmp_path, range(3))))
    ok(gym.run("ledger", "publish", LOG))
    before = show(gym)
    assert before["chain"]["chain_id"] == 31337 and before["chain"]["genesis_hash"].startswith("0x")

    # A log recorded before logs were bound (migration 0003): bound on first contact, because
    # the chain's log of its id has its name and its anchored root.
    assert "on-chain log id 3" in ok(gym.run("ledger", "create", "alice/legacy"))
    ok(gym.run("ledger", "append", "alice/legacy", entries_file(tmp_path, range(10, 12))))
    ok(gym.run("ledger", "publish", "alice/legacy"))
    store = LogStore(f"sqlite:///{gym.data_dir / 'ledger.sqlite'}")

    def unbind(name: str) -> None:
        with store.engine.begin() as conn:
            conn.execute(update(logs).where(logs.c.name == name)
                         .values(chain_id=None, chain_genesis=None, chain_ledger=None))

    unbind("alice/legacy")
    assert show(gym, "alice/legacy")["chain"] is None
    ok(gym.run("ledger", "append", "alice/legacy", entries_file(tmp_path, range(12, 13))))
    assert "size 2 -> 3" in ok(gym.run("ledger", "publish", "alice/legacy"))
    assert show(gym, "alice/legacy")["chain"] == before["chain"]
    unbind("alice/legacy")

    # The chain is reset: Anvil restarted from scratch on the same port, everything redeployed
    # at the same addresses. Bob creates a log there, and it gets alice/math's id.
    port = ledger_devnet.rpc_url.rsplit(":", 1)[1]
    ok(gym.run("devnet", "down"))
    assert "deployed contracts" in ok(gym.run("devnet", "up", "--port", port))
    bob = {"GYM_DATA_DIR": str(tmp_path / "bob"), "GYM_PUBLISHER_KEY": ANVIL_DEV_KEYS[1]}
    assert "on-chain log id 2" in ok(gym.run("ledger", "create", "bob/notes", extra_env=bob))

    ok(gym.run("ledger", "append", LOG, entries_file(tmp_path, range(3, 5))))  # local: fine
    line = one_error_line(gym.run("ledger", "publish", LOG))
    assert f"log '{LOG}' is on-chain log 2 of chain 31337 (genesis " in line
    assert "the chain was restarted from scratch or replaced" in line
    assert f"`gym ledger rebind {LOG}`" in line and "Nothing was sent" in line
    line = one_error_line(gym.run("ledger", "publish", "alice/legacy"))
    assert "recorded before logs were bound to a chain, and log 3 there is not it" in line
    assert show(gym)["checkpoints"] == before["checkpoints"]  # nothing recorded either
    # Curating from it would prove its leaves against whatever log 2 is now: refused as well.
    line = one_error_line(gym.run("gov", "propose-curation", "--from-log", LOG, "--indices", "0",
                                  "--account", "0"))
    assert "the chain was restarted from scratch or replaced" in line
    assert f"`gym ledger rebind {LOG}`" in line

    # Bob's log is untouched and Bob can publish.
    contract = ledger_devnet.contract()
    info = contract.log_info(2)
    assert (info.name, info.size) == ("bob/notes", 0)
    ok(gym.run("ledger", "append", "bob/notes", entries_file(tmp_path, range(20, 22)),
               extra_env=bob))
    assert "size 0 -> 2" in ok(gym.run("ledger", "publish", "bob/notes", extra_env=bob))

    # Alice re-creates her log on the new chain and publishes all of it there.
    out = ok(gym.run("ledger", "rebind", LOG))
    assert "re-created log alice/math on chain 31337" in out and "on-chain log id 3 (was 2)" in out
    after = show(gym)
    assert after["log_id"] == 3 and after["checkpoints"] == [] and after["size"] == 5
    assert after["chain"]["genesis_hash"] != before["chain"]["genesis_hash"]
    assert "already" in one_error_line(gym.run("ledger", "rebind", LOG))
    assert "size 0 -> 5" in ok(gym.run("ledger", "publish", LOG))
    assert "audit clean: 1 checkpoints, 5 entries" in ok(gym.run("audit", LOG))
    assert "audit clean: 1 checkpoints, 2 entries" in ok(gym.run("audit", "bob/notes", extra_env=bob))
    store.engine.dispose()
