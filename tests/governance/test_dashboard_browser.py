"""The dashboard in a real browser: headless Debian Chromium driven by Playwright.

``gym dashboard`` runs in a subprocess against a devnet (``gym devnet up``) with a published
log and a curation proposal made with ``gym gov propose-curation``. In the page, with no
wallet extension, the devnet's EIP-1193 provider signs with Anvil's dev accounts: account 5
delegates the tokens it was sent and is shown no vote buttons but why (its delegation came
after the snapshot), accounts 1, 2 and 3 vote with reasons and then see how they voted, time
is advanced, the proposal is queued and executed, the curated library shows the new entries
verified, and a second proposal, made from the page, is Pending: no vote buttons, and when
voting opens. A third proposal carries evidence: a local-run evaluation (`gym eval
--library-log bob/rules --publish alice/evals` on the tiny random model, a few generations) of
exactly the two experiences of log bob/rules it proposes; its page leads the evidence with the
verdict line, the "unverified: a local run" badge and the command that re-runs it.

On the way, what a voter sees: names, not raw addresses (the full one on hover and copied by
its button); "Proposal 1" and /proposals/1; the page as served to a browser without a wallet
(a plain line on how to connect, no vote buttons, no error); nothing below the wallet and vote
areas moves when the wallet connects (the page's calls to the wallet are held back while the
headings are measured, then let through); the decision first, "No measured evidence" in its
place, the proofs folded in a closed <details>. A screenshot is saved at each stage under
``$GYM_TEST_ARTIFACTS/dashboard`` (default ``tests/.artifacts/dashboard``), among them
``proposal-without-evidence.png`` and ``proposal-with-evidence.png``.

Rewards: with reward epoch 0 attested (a table that pays dev account 1 from the data and the
verification pools) and its appeal window over, the Rewards page shows the wallet's account
at once, another account when it is picked, its line with where each amount came from, and
its "Claim" button sends the claim from the wallet (``rewards.png``, ``rewards-claimed.png``).
"""

from __future__ import annotations

import json
import os
import re
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
from ledger import LocalBlockStore, LogStore

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


# Two experiences of log bob/rules (not alice/math's, whose leaves the first proposal
# curates), and a task of two problems the exact verifier scores.
RULES = ["Write the units next to every number you carry.",
         "Estimate the answer before computing it, then compare."]
TASK = [{"problem": "What is 2 + 2?", "answer": "4"}, {"problem": "What is 3 + 4?", "answer": "7"}]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A ~100k-parameter random Llama (``trainer.backends.tiny_random_model``; no download)."""
    from trainer.backends import tiny_random_model

    return tiny_random_model(tmp_path_factory.mktemp("tiny") / "model")


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


def test_vote_queue_execute_in_the_browser(served_dashboard, tiny_model_dir, tmp_path):
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

            page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
            page.goto(base + "/")
            ready()
            proposals = page.locator("#proposals")
            expect(proposals).to_contain_text("Curate 2 entries from alice/math")
            expect(proposals).to_contain_text("Active")
            expect(proposals).to_contain_text("Proposal 1")
            expect(proposals).to_contain_text("by dev account 1")  # its proposer
            assert ACCOUNT[1] not in proposals.inner_text()
            expect(proposals.locator(".addr")).to_have_attribute("title", ACCOUNT[1])
            expect(page.locator(".chain")).to_contain_text(
                "signed ballots relayed by dev account 0 (deployer)")
            expect(page.locator("#account option").nth(5)).to_have_text("dev account 5")
            shot("01-proposals")

            # Delegate: account 5 holds 100 GYM that do not vote until delegated.
            page.select_option("#account", OPTION[5])
            expect(page.locator("#account-info")).to_contain_text("delegates to nobody")
            act("#delegate", "delegated its votes to itself")
            expect(message).to_have_class("ok")
            expect(page.locator("#account-info")).to_contain_text("100 GYM of votes")
            assert token.functions.getVotes(ACCOUNT[5]).call() == 100 * GYM_UNIT
            shot("02-delegated")

            expect(page.locator("#proposals a")).to_have_attribute("href", "/proposals/1")
            vote_buttons = page.locator("button.vote")

            # Served to a browser without a wallet (a chain that is not the devnet, no
            # extension): a plain line on how to connect, no vote buttons, no error.
            def without_wallet(route) -> None:
                served = route.fetch()
                route.fulfill(response=served, body=served.text().replace(
                    'data-devnet="1"', 'data-devnet="0"'))

            page.route(base + "/proposals/1", without_wallet)
            page.goto(base + "/proposals/1")
            page.wait_for_selector('body[data-wallet="none"]')
            expect(page.locator("#account-info")).to_contain_text("No wallet")
            expect(page.locator("#vote-status")).to_contain_text("To vote, connect a wallet")
            for button in vote_buttons.all():
                expect(button).to_be_hidden()
            expect(message).to_be_hidden()
            assert "is not an address" not in page.content()
            shot("03-no-wallet")
            page.unroute(base + "/proposals/1")

            # The wallet connects while the headings below its area and the vote area are
            # measured: the page's calls to the wallet (/rpc) wait until they have been.
            held: list = []
            holding = [True]
            page.route(base + "/rpc", lambda route: held.append(route) if holding[0]
                       else route.continue_())
            page.goto(base + "/proposals/1")
            expect(page.locator("#account-info")).to_have_text("Connecting to your wallet…")
            below = ("h1", "#votes h2", "#timeline h2")
            before = [page.locator(selector).bounding_box() for selector in below]
            for button in vote_buttons.all():
                expect(button).to_be_hidden()
            holding[0] = False
            for route in held:
                route.continue_()
            ready()
            page.unroute(base + "/rpc")
            # Account 5 (selected on the index) delegated after the snapshot: told why it
            # cannot vote, and shown no vote buttons.
            expect(page.locator("#account-info")).to_contain_text("100 GYM of votes")
            expect(page.locator("#vote-status")).to_contain_text(
                "dev account 5 cannot vote on this proposal: it had no votes at the snapshot")
            expect(page.locator("#vote-status")).to_contain_text(
                "delegated to it after the snapshot")
            assert [page.locator(selector).bounding_box() for selector in below] == before
            for button in vote_buttons.all():
                expect(button).to_be_hidden()
            shot("04-no-voting-power")

            expect(page.locator("#number")).to_have_text("Proposal 1")
            expect(page.locator("#verification")).to_contain_text(
                "All 2 proposed entries VERIFIED")
            expect(page.locator("#entries")).to_contain_text(
                "Restate the question in your own words before computing anything.")
            expect(page.locator("#evidence")).to_contain_text(
                "No measured evidence: this proposal carries no evaluation.")
            expect(page.locator("#description")).to_contain_text("Two general rules.")
            proofs = page.locator("details#proofs")
            assert proofs.get_attribute("open") is None
            expect(proofs.locator(".leaf").first).to_be_hidden()  # folded ...
            shot("proposal-without-evidence")
            proofs.locator("> summary").click()  # ... one click away
            expect(proofs.locator(".leaf .verdict")).to_have_text(["VERIFIED", "VERIFIED"])
            proofs.locator("> summary").click()
            proposal_id = int(page.locator("main").get_attribute("data-proposal-id"))

            for account, support, reason in [(1, "for", "general and correct"),
                                             (2, "for", "useful"),
                                             (3, "against", "too narrow")]:
                ready()
                page.select_option("#account", OPTION[account])
                page.fill("#reason", reason)
                act(f"button.vote[data-support={support}]", f"voted {support} with 1,000 GYM")
            expect(page.locator("#tally-for")).to_have_text("2,000 GYM")
            expect(page.locator("#tally-against")).to_have_text("1,000 GYM")
            votes = page.locator("#votes")
            expect(votes).to_contain_text("general and correct")
            expect(votes).to_contain_text("too narrow")
            expect(votes).to_contain_text("dev account 1")
            assert ACCOUNT[1] not in votes.inner_text()
            assert governor.functions.proposalVotes(proposal_id).call() == [
                1000 * GYM_UNIT, 2000 * GYM_UNIT, 0]
            # Account 3 has voted: it sees how, and no vote buttons.
            expect(page.locator("#vote-status")).to_have_text(
                "dev account 3 voted Against with 1,000 GYM: \u201ctoo narrow\u201d")
            for button in vote_buttons.all():
                expect(button).to_be_hidden()
            shot("05-voted")
            votes.locator("button.copy").first.click()  # the full address, copied
            expect(message).to_contain_text(ACCOUNT[1])
            assert page.evaluate("navigator.clipboard.readText()") == ACCOUNT[1]

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
            expect(page.locator("main")).to_contain_text("owned by the timelock "
                                                         "TimelockController")
            shot("09-library")

            # A second proposal, from the page: Pending, so no vote buttons, and when voting
            # opens (no block is mined before this is checked, so it stays Pending).
            page.click("nav a[href='/']")
            ready()
            page.fill("#propose [name=log]", "alice/math")
            page.fill("#propose [name=indices]", "1")
            page.fill("#propose [name=description]", "One more rule.")
            act("#propose button", "proposed by dev account 2", account=2)
            page.goto(base + "/proposals/2")
            ready()
            expect(page.locator("#state")).to_have_text("Pending")
            expect(page.locator("#vote-status")).to_contain_text(
                "Voting opens with the first block after")
            expect(vote_buttons).to_have_count(0)
            shot("10-pending")

            # A third proposal, with evidence: log bob/rules' two experiences, evaluated on the
            # tiny model here (a local run: no receipts), proposed with that evaluation.
            evidence_cid, log_id = evaluate_rules(gym_env, tiny_model_dir, tmp_path)
            page.goto(base + "/proposals/3")
            ready()
            evidence = page.locator("#evidence")
            verdict = evidence.locator(".evidence-verdict")
            expect(verdict).to_have_text(re.compile(
                r"^Measured: the library (helps|does not clearly help|hurts) \u2014 "
                r"Mean@1 [+-]\d\.\d{3} \u00b1 \d\.\d{3} over 2 seeds$"))
            expect(evidence.locator(".badge")).to_have_text("unverified: a local run")
            expect(evidence).to_contain_text("a run on the evaluator's own model, without "
                                             "receipts")
            expect(evidence.locator("table.seeds tbody tr")).to_have_count(2)
            expect(evidence).to_contain_text(f"Evaluation {evidence_cid}")
            expect(evidence.locator("pre code")).to_have_text(
                f"gym eval --dataset TASK.jsonl --limit 2 --verifier exact --library-log "
                f"{log_id} --model MODEL_DIR -k 1 --seeds 2 --temperature 0.7 "
                "--max-new-tokens 4")
            # the verdict first: above the proposer's reason, the tally and the vote
            top = verdict.bounding_box()["y"]
            assert all(top < page.locator(selector).bounding_box()["y"]
                       for selector in ("#description", "#tally", "#actions"))
            expect(page.locator("#verification")).to_contain_text(
                "All 2 proposed entries VERIFIED")
            # the description's evidence record is folded with the proofs, not the reason
            expect(page.locator("#description")).to_have_text(re.compile(
                r"Two rules, measured on the tiny model\.\s*$"))
            shot("proposal-with-evidence")
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


def evaluate_rules(gym_env, model_dir: Path, tmp_path: Path) -> tuple[str, int]:
    """Log bob/rules (two experiences) published, evaluated on ``model_dir`` against the
    baseline (`gym eval --library-log bob/rules --publish alice/evals`: 2 arms x 2 seeds x 2
    problems x k=1, 4 tokens each) and proposed with that evaluation as its evidence: the
    evaluation's CID and bob/rules' on-chain log id."""
    def gym(*args: str) -> str:
        result = gym_env.run(*args, timeout=300)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    rules = tmp_path / "rules.jsonl"
    rules.write_text("".join(json.dumps({
        "type": "experience", "v": 1, "op": "add", "domain": "math", "text": text,
        "provenance": {"method": "tfgrpo", "base_model": "tiny", "step": step}}) + "\n"
        for step, text in enumerate(RULES)))
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps(row) + "\n" for row in TASK))
    gym("ledger", "create", "bob/rules")
    gym("ledger", "append", "bob/rules", str(rules))
    gym("ledger", "publish", "bob/rules")
    out = gym("eval", "--dataset", str(task), "--verifier", "exact", "--library-log",
              "bob/rules", "--model", str(model_dir), "-k", "1", "--seeds", "2",
              "--max-new-tokens", "4", "--publish", "alice/evals")
    cid = out.split("evaluation entry ")[1].split(":")[0]
    gym("gov", "propose-curation", "--from-log", "bob/rules", "--indices", "0,1", "--evidence",
        cid, "--description", "Two rules, measured on the tiny model.", "--account", "1")
    store = LogStore(f"sqlite:///{gym_env.data_dir / 'ledger.sqlite'}")
    try:
        return cid, store.get_log("bob/rules").chain_log_id
    finally:
        store.engine.dispose()


@pytest.fixture
def rewards_dashboard(gym_env, ledger_devnet):
    """Reward epoch 0 attested, its table paying dev account 1 (40 GYM of data, 7.5 GYM of
    verification) in the content store `gym dashboard` reads, the appeal window over; and
    `gym dashboard`."""
    from committee_world import register_verifiers
    from reward_epochs import attest_table

    from committee.rewards.table import Settlement, Use

    deployment = Deployment.load(gym_env.deployment_file)
    world = register_verifiers(deployment)
    author, signer, node = ACCOUNT[1], ACCOUNT[2], ACCOUNT[3]
    table = attest_table(world, LocalBlockStore(gym_env.data_dir / "ipfs"), 0,
                         stakes={node: 300 * GYM_UNIT},
                         uses=(Use(node, "bafkreiexperience", author, 5),),
                         settlements=(Settlement(1, (author, signer)),))
    world.w3.provider.make_request("evm_increaseTime", [deployment.governance.reward_appeal_window
                                                        + 1])
    world.w3.provider.make_request("evm_mine", [])
    with gym_dashboard(gym_env.env, subprocess.PIPE,
                       lambda proc: proc.stdout.read().decode()) as (_, base):
        yield base, deployment, world.w3, table


def test_an_account_sees_its_rewards_and_claims_them_with_its_wallet(rewards_dashboard):
    from playwright.sync_api import expect, sync_playwright

    base, deployment, w3, table = rewards_dashboard
    shots = ARTIFACTS / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    token = w3.eth.contract(address=deployment.contracts["GymToken"].address,
                            abi=load_artifact("GymToken").abi)
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

            # No account asked for: the wallet's first account (dev account 0), which earned
            # nothing in epoch 0.
            page.goto(base + "/rewards")
            page.wait_for_url(f"{base}/rewards?account={OPTION[0]}")
            page.wait_for_selector('body[data-ready="1"]')
            line = page.locator("article.reward-line[data-epoch='0']")
            expect(line).to_contain_text("Epoch 0: 0 GYM")
            expect(line).to_contain_text("Nothing in this epoch's table.")
            expect(page.locator("#epochs tr[data-epoch='0']")).to_contain_text(
                "final: claims open")

            # Another wallet account picked: its rewards, and where they came from.
            page.select_option("#account", OPTION[1])
            page.wait_for_url(f"{base}/rewards?account={OPTION[1]}")
            page.wait_for_selector('body[data-ready="1"]')
            expect(line).to_contain_text("Epoch 0: 47.5 GYM")
            sources = line.locator("ul.sources li")
            expect(sources).to_have_text([
                re.compile(r"^data 40 GYM: experience bafkreiexperience, curated from this "
                           r"account's log, named in 5 of the 5 counted uses of node dev "
                           r"account 3 \(stake 300 GYM\)$"),
                re.compile(r"^verification 7\.5 GYM: signed the settlement of committee "
                           r"challenge 1, finalized$")])
            expect(line).to_contain_text(f"its root is the attested root 0x{table.root.hex()}")
            page.screenshot(path=str(shots / "rewards.png"), full_page=True)

            before = token.functions.balanceOf(ACCOUNT[1]).call()
            line.locator("button.claim").click()
            expect(page.locator("#message")).to_contain_text(
                "claimed 47.5 GYM of epoch 0 for dev account 1 (sent by dev account 1, tx 0x")
            expect(line.locator(".claim-status")).to_have_text("Claimed.")
            expect(line.locator("button.claim")).to_have_count(0)
            assert token.functions.balanceOf(ACCOUNT[1]).call() - before == \
                table.total(ACCOUNT[1])
            page.screenshot(path=str(shots / "rewards-claimed.png"), full_page=True)

            # An injected wallet (window.ethereum, as a browser extension provides it) holding
            # dev account 2 only: the page asks it for its accounts, and the claim is its
            # eth_sendTransaction, which the wallet forwards to the chain.
            asked: list[str] = []

            def wallet(payload: str) -> str:
                call = json.loads(payload)
                asked.append(call["method"])
                if call["method"] in ("eth_requestAccounts", "eth_accounts"):
                    return json.dumps([OPTION[2]])
                reply = w3.provider.make_request(call["method"], call.get("params") or [])
                if "error" in reply:
                    raise RuntimeError(reply["error"]["message"])
                return json.dumps(reply["result"])

            injected = browser.new_page(viewport={"width": 1280, "height": 1000})
            injected.set_default_timeout(30_000)
            injected.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
            injected.expose_function("gymTestWallet", wallet)
            injected.add_init_script("""window.ethereum = {
                request: async (args) => JSON.parse(await window.gymTestWallet(
                    JSON.stringify(args))),
                on() {}, removeListener() {}};""")
            injected.goto(base + "/rewards")
            injected.wait_for_url(f"{base}/rewards?account={OPTION[2]}")
            injected.wait_for_selector('body[data-ready="1"]')
            mine = injected.locator("article.reward-line[data-epoch='0']")
            expect(mine).to_contain_text("Epoch 0: 7.5 GYM")
            before = token.functions.balanceOf(ACCOUNT[2]).call()
            mine.locator("button.claim").click()
            expect(injected.locator("#message")).to_contain_text(
                "claimed 7.5 GYM of epoch 0 for dev account 2 (sent by dev account 2, tx 0x")
            assert token.functions.balanceOf(ACCOUNT[2]).call() - before == \
                table.total(ACCOUNT[2])
            assert "eth_requestAccounts" in asked and "eth_sendTransaction" in asked, asked
        finally:
            browser.close()
    assert problems == []
