"""The dashboard in a real browser: headless Debian Chromium driven by Playwright.

``gym dashboard`` runs in a subprocess against a devnet (``gym devnet up``) with a published
log and a curation proposal made with ``gym gov propose-curation``. In the page, with no
wallet extension, the devnet's EIP-1193 provider signs with Anvil's dev accounts: account 5
delegates the tokens it was sent, is refused a vote (its delegation came after the snapshot),
accounts 1, 2 and 3 vote with reasons, time is advanced, the proposal is queued and executed,
and the curated library shows the new entries verified. A screenshot is saved at each stage
under ``$GYM_TEST_ARTIFACTS/dashboard`` (default ``tests/.artifacts/dashboard``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from eth_account import Account
from gym_helpers import gym_dashboard, send
from web3 import Web3

from contracts import load_artifact
from contracts.devnet_accounts import devnet_account_key
from devnet.deploy import Deployment
from devnet.settings import ANVIL_DEV_KEYS, DEVNET_DIR
from ledger import LogStore

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [pytest.mark.anvil, pytest.mark.browser, pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's Chromium is not installed at /usr/bin/chromium "
    "(apt-get install chromium); no browser is ever downloaded")]
SAMPLES = DEVNET_DIR / "samples" / "experiences.jsonl"
ARTIFACTS = Path(os.environ.get("GYM_TEST_ARTIFACTS", Path(__file__).parents[1] / ".artifacts"))
GYM_UNIT = 10**18
# Anvil's dev accounts; 0..4 hold 1000 GYM each, self-delegated; 5 holds none.
ACCOUNT = {i: Account.from_key(devnet_account_key(i)).address for i in range(6)}
OPTION = {i: address.lower() for i, address in ACCOUNT.items()}  # as eth_accounts lists them


@pytest.fixture
def served_dashboard(gym_env, ledger_devnet):
    """A devnet with log alice/math published, a proposal to curate leaves 0 and 2 whose
    snapshot has passed, 100 GYM sent to account 5 (not delegated), and `gym dashboard`."""
    def gym(*args: str) -> str:
        result = gym_env.run(*args)
        assert result.returncode == 0, (args, result.stderr)
        return result.stdout

    gym("devnet", "up")
    gym("ledger", "create", "alice/math")
    gym("ledger", "append", "alice/math", str(SAMPLES))
    gym("ledger", "publish", "alice/math")
    deployment = Deployment.load(gym_env.deployment_file)
    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    token = w3.eth.contract(address=deployment.contracts["GymToken"].address,
                            abi=load_artifact("GymToken").abi)
    send(w3, token.functions.transfer(ACCOUNT[5], 100 * GYM_UNIT), ANVIL_DEV_KEYS[0])
    gym("gov", "propose-curation", "--from-log", "alice/math", "--indices", "0,2",
        "--description", "Two general rules.", "--account", "1")
    gym("devnet", "mine", "--seconds", "2")  # past the snapshot: later delegations do not count

    with gym_dashboard(gym_env.env, subprocess.PIPE,
                       lambda proc: proc.stdout.read().decode()) as (_, base):
        yield base, deployment, w3, gym_env


def test_vote_queue_execute_in_the_browser(served_dashboard):
    from playwright.sync_api import expect, sync_playwright

    base, deployment, w3, gym_env = served_dashboard
    shots = ARTIFACTS / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    governor = w3.eth.contract(address=deployment.contracts["GymGovernor"].address,
                               abi=load_artifact("GymGovernor").abi)
    token = w3.eth.contract(address=deployment.contracts["GymToken"].address,
                            abi=load_artifact("GymToken").abi)
    ledger = w3.eth.contract(address=deployment.contracts["ExperienceLedger"].address,
                             abi=load_artifact("ExperienceLedger").abi)
    problems: list[str] = []

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless", "--no-sandbox", "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(30_000)
            page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
            page.on("console", lambda msg: problems.append(msg.text)
                    if "Content Security Policy" in msg.text else None)
            message = page.locator("#message")

            def ready() -> None:
                page.wait_for_selector('body[data-ready="1"]')

            def act(selector: str, expected: str, account: int | None = None) -> None:
                ready()
                if account is not None:
                    page.select_option("#account", OPTION[account])
                page.click(selector)
                expect(message).to_contain_text(expected)

            def shot(name: str) -> None:
                ready()
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

            page.goto(base + "/")
            ready()
            expect(page.locator("#proposals")).to_contain_text("Curate 2 entries from alice/math")
            expect(page.locator("#proposals")).to_contain_text("Active")
            shot("01-proposals")

            # Delegate: account 5 holds 100 GYM that do not vote until delegated.
            page.select_option("#account", OPTION[5])
            expect(page.locator("#account-info")).to_contain_text("delegates to nobody")
            act("#delegate", "delegated its votes to itself")
            expect(message).to_have_class("ok")
            expect(page.locator("#account-info")).to_contain_text("100 GYM of votes")
            assert token.functions.getVotes(ACCOUNT[5]).call() == 100 * GYM_UNIT
            shot("02-delegated")

            page.click("#proposals a")
            ready()
            expect(page.locator("#verification")).to_contain_text(
                "All 2 proposed entries VERIFIED")
            expect(page.locator("#entries")).to_contain_text(
                "Restate the question in your own words before computing anything.")
            shot("03-proposal-verified")
            proposal_id = int(page.locator("main").get_attribute("data-proposal-id"))

            # Account 5's delegation came after the snapshot: its vote would weigh nothing.
            act("button.vote[data-support=for]", "had no votes at the proposal's snapshot",
                account=5)
            expect(message).to_have_class("error")
            shot("04-no-voting-power")

            for account, support, reason in [(1, "for", "general and correct"),
                                             (2, "for", "useful"),
                                             (3, "against", "too narrow")]:
                ready()
                page.select_option("#account", OPTION[account])
                page.fill("#reason", reason)
                act(f"button.vote[data-support={support}]", f"voted {support} with 1,000 GYM")
            expect(page.locator("#tally-for")).to_have_text("2,000 GYM")
            expect(page.locator("#tally-against")).to_have_text("1,000 GYM")
            expect(page.locator("#votes")).to_contain_text("general and correct")
            expect(page.locator("#votes")).to_contain_text("too narrow")
            assert governor.functions.proposalVotes(proposal_id).call() == [
                1000 * GYM_UNIT, 2000 * GYM_UNIT, 0]
            shot("05-voted")

            act("#advance", "advanced the devnet's clock")
            expect(page.locator("#state")).to_have_text("Succeeded")
            shot("06-succeeded")
            act("#queue", "queued by", account=4)
            expect(page.locator("#state")).to_have_text("Queued")
            shot("07-queued")
            act("#advance", "advanced the devnet's clock")
            expect(page.locator("#next-step")).to_have_text("ready: execute it")
            act("#execute", "executed by", account=4)
            expect(page.locator("#state")).to_have_text("Executed")
            expect(page.locator("#entries .curated")).to_have_count(2)
            shot("08-executed")
            assert governor.functions.state(proposal_id).call() == 7  # Executed

            page.click("nav a[href='/library']")
            ready()
            expect(page.locator("#root-check")).to_contain_text(
                "VERIFIED: the RFC 9162 root of the 2 appended leaves")
            expect(page.locator("#library .verified")).to_have_count(2)
            expect(page.locator("#library")).to_contain_text(
                "When a ratio is asked for, reduce it to lowest terms at the end.")
            shot("09-library")
        finally:
            browser.close()

    store = LogStore(f"sqlite:///{gym_env.data_dir / 'ledger.sqlite'}")
    try:
        expected = [store.leaf("alice/math", i).leaf_hash for i in (0, 2)]
    finally:
        store.engine.dispose()
    curated = deployment.curated_log_id
    _, _, _, size, _ = ledger.functions.logInfo(curated).call()
    assert size == 2
    assert all(ledger.functions.isCurated(curated, h).call() for h in expected)
    assert problems == []
