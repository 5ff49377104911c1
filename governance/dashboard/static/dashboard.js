// The Gym DAO dashboard's only script: no build step, no dependencies.
//
// Everything that signs goes through an EIP-1193 provider: the wallet extension's
// window.ethereum when there is one; on the devnet without one, DevnetProvider, which sends the
// same EIP-1193 requests (eth_accounts, eth_signTypedData_v4, eth_sendTransaction, ...) to the
// dashboard's /rpc proxy, where Anvil's unlocked dev accounts answer them. No private key is
// ever in this page or on the server's path for votes.
//
// Votes: GET the EIP-712 ballot, have the provider sign it, POST the signature; the server
// relays it (castVoteBySig). Delegate / queue / execute / propose / claim rewards: POST to get
// {from, to, data}, then eth_sendTransaction from the selected account. Every POST carries the
// CSRF token.
//
// The Rewards page (main[data-rewards]) is rendered for one account (?account=): when none is
// given it shows the wallet's, and picking another wallet account shows that one's.
//
// What the voter sees: accounts and contracts by name (the body's data-names, from the
// server's address book), the full address on hover and behind a copy button; on a proposal
// page the vote buttons only when the selected account can vote (GET
// /api/proposals/{id}/voters/{address}), else one line saying why not or how it voted. The
// wallet and vote areas keep their size whatever they show (dashboard.css), so nothing moves
// when the wallet connects.
"use strict";

(() => {
  const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
  const devnet = document.body.dataset.devnet === "1";
  const names = JSON.parse(document.body.dataset.names || "{}");
  const $ = (selector) => document.querySelector(selector);
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  class RequestError extends Error {
    constructor(message, code) {
      super(message);
      this.code = code;
    }
  }

  // EIP-1193 provider over the dashboard's same-origin JSON-RPC proxy to Anvil.
  class DevnetProvider {
    constructor() {
      this.nextId = 1;
    }

    async request({ method, params = [] }) {
      const response = await fetch("/rpc", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken },
        body: JSON.stringify({ jsonrpc: "2.0", id: this.nextId++, method, params }),
      });
      const answer = await response.json();
      if (!response.ok) throw new RequestError(answer.error?.message || response.statusText);
      if (answer.error) throw new RequestError(answer.error.message, answer.error.code);
      return answer.result;
    }
  }

  const provider = window.ethereum || (devnet ? new DevnetProvider() : null);

  // -- messages -----------------------------------------------------------------------------

  function show(message, kind = "error") {
    const box = $("#message");
    box.textContent = message;
    box.className = kind;
    box.hidden = false;
  }

  function reloadWith(message) {
    sessionStorage.setItem("gym.flash", message);
    window.location.reload();
  }

  const flash = sessionStorage.getItem("gym.flash");
  if (flash) {
    sessionStorage.removeItem("gym.flash");
    show(flash, "ok");
  }

  // -- server calls ---------------------------------------------------------------------------

  async function call(path, { method = "GET", json } = {}) {
    const init = { method, credentials: "same-origin", headers: {} };
    if (method !== "GET") {
      init.headers["X-CSRF-Token"] = csrfToken;
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(json || {});
    }
    const response = await fetch(path, init);
    const text = await response.text();
    if (!response.ok) {
      let message = `${response.status} ${response.statusText}`;
      try {
        message = JSON.parse(text).error.message;
      } catch (_) { /* not our JSON: keep the status line */ }
      throw new RequestError(message, response.status);
    }
    return text;
  }

  const getJSON = async (path) => JSON.parse(await call(path));
  const postJSON = async (path, json) => JSON.parse(await call(path, { method: "POST", json }));

  // -- amounts: base units (decimal strings) to GYM, with BigInt -------------------------------

  // contracts/gym_token.py format_gym(rounded=True), the same rule: from 1,000 GYM whole GYM
  // with separators; below, 4 significant digits and at most 4 decimals; "<0.0001 GYM".
  function gym(units) {
    const one = 10n ** 18n;
    let value = BigInt(units);
    const sign = value < 0n ? "-" : "";
    if (value < 0n) value = -value;
    if (value === 0n) return "0 GYM";
    if (value < one / 10000n) return `${sign}<0.0001 GYM`;
    if (value >= 1000n * one) {
      return `${sign}${((2n * value + one) / (2n * one)).toLocaleString("en-US")} GYM`;
    }
    const digits = value >= one ? (value / one).toString().length : 0;
    const places = Math.min(4, 4 - digits);
    const scale = 10n ** BigInt(places);
    const scaled = (2n * value * scale + one) / (2n * one);
    const whole = (scaled / scale).toLocaleString("en-US");
    const fraction = places
      ? (scaled % scale).toString().padStart(places, "0").replace(/0+$/, "") : "";
    return `${sign}${whole}${fraction ? "." + fraction : ""} GYM`;
  }

  // -- addresses: names where the server knows one, else 0x1234…abcd ----------------------------

  const label = (address) =>
    names[address.toLowerCase()] || `${address.slice(0, 6)}…${address.slice(-4)}`;

  // Every button.copy (the server renders one beside each address) copies its data-copy.
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button.copy");
    if (!button) return;
    const text = button.dataset.copy;
    try {
      await navigator.clipboard.writeText(text);
      show(`copied ${text}`, "info");
    } catch (_) { // no clipboard (a page not served over https or localhost): show it to copy
      show(`the address, to copy: ${text}`, "info");
    }
  });

  // -- accounts -------------------------------------------------------------------------------

  const select = $("#account");
  const selected = () => (select.disabled ? "" : select.value);
  const accountInfo = $("#account-info");
  const main = document.querySelector("main[data-proposal-id]");
  const proposalId = main ? main.dataset.proposalId : null; // a uint256: kept as a string
  const rewardsPage = document.querySelector("main[data-rewards]");

  // The Rewards page for another account (a navigation: the server renders its lines).
  function showRewardsOf(address) {
    window.location.replace(`/rewards?account=${encodeURIComponent(address)}`);
  }

  // The account every action is sent from; an action without one says how to get one.
  function account() {
    const address = selected();
    if (!address) throw new RequestError("no account: connect a wallet first (see the top right)");
    return address;
  }

  function setInfo(text) {
    accountInfo.textContent = text;
    accountInfo.title = text;
  }

  async function describeAccount() {
    const address = selected();
    if (!address) return;
    const info = await getJSON(`/api/accounts/${address}`);
    const delegate = !info.delegate ? "nobody (its tokens do not vote)"
      : info.delegate.toLowerCase() === address.toLowerCase() ? "itself" : label(info.delegate);
    setInfo(`${gym(info.votes)} of votes · holds ${gym(info.balance)} · ` +
      `delegates to ${delegate}`);
  }

  // The vote form shows only when the selected account can vote; it keeps its place hidden.
  function setVoting(canVote) {
    const form = $("#vote");
    if (!form) return;
    form.classList.toggle("unavailable", !canVote);
    form.querySelectorAll("button, textarea").forEach((element) => {
      element.disabled = !canVote;
    });
  }

  async function describeVoter() {
    const status = $("#vote-status");
    const address = selected();
    if (!status || !proposalId || !address) return;
    setVoting(false);
    const voter = await getJSON(`/api/proposals/${proposalId}/voters/${address}`);
    if (selected() !== address) return; // another account was picked meanwhile
    status.textContent = voter.message;
    setVoting(voter.can_vote);
  }

  function noWallet(line) {
    select.replaceChildren(new Option("no wallet", ""));
    setInfo(line);
    const status = $("#vote-status");
    if (status && $("#vote")) {
      status.textContent = "To vote, connect a wallet: install an EIP-1193 wallet extension " +
        "(such as MetaMask), unlock it, and reload this page. Without one this page shows the " +
        "proposal but cannot sign a vote.";
    }
    document.body.dataset.wallet = "none";
    document.body.dataset.ready = "1";
  }

  async function connect() {
    if (!provider) {
      noWallet("No wallet: install a wallet extension and reload to vote");
      return;
    }
    const chainId = Number(await provider.request({ method: "eth_chainId" }));
    if (chainId !== Number(document.body.dataset.chainId)) {
      noWallet(`Your wallet is on chain ${chainId}: ` +
        `switch it to chain ${document.body.dataset.chainId}`);
      return;
    }
    const method = window.ethereum ? "eth_requestAccounts" : "eth_accounts";
    const accounts = await provider.request({ method });
    if (!accounts.length) {
      noWallet("The wallet shares no account: unlock it and reload");
      return;
    }
    select.replaceChildren(...accounts.map((address) => {
      const option = new Option(label(address), address);
      option.title = address;
      return option;
    }));
    const saved = localStorage.getItem("gym.account");
    if (saved && accounts.some((a) => a.toLowerCase() === saved.toLowerCase())) {
      select.value = accounts.find((a) => a.toLowerCase() === saved.toLowerCase());
    }
    select.disabled = false;
    $("#delegate").disabled = false;
    document.querySelectorAll("button.needs-account").forEach((button) => {
      button.disabled = false;
    });
    if (rewardsPage && !rewardsPage.dataset.account) {
      showRewardsOf(selected()); // no account asked for: the wallet's
      return;
    }
    await Promise.all([describeAccount(), describeVoter()]).catch((error) => show(error.message));
    document.body.dataset.wallet = "connected";
    document.body.dataset.ready = "1";
  }

  select.addEventListener("change", () => {
    localStorage.setItem("gym.account", selected());
    if (rewardsPage) {
      showRewardsOf(selected());
      return;
    }
    Promise.all([describeAccount(), describeVoter()]).catch((error) => show(error.message));
  });

  // -- transactions ---------------------------------------------------------------------------

  async function waitForReceipt(hash) {
    for (let i = 0; i < 240; i++) {
      const receipt = await provider.request({ method: "eth_getTransactionReceipt", params: [hash] });
      if (receipt) return receipt;
      await sleep(250);
    }
    throw new RequestError(`no receipt for ${hash} after 60 s`);
  }

  // Gas as ledger/evm.py pads it (estimate * 5/4 + 30000): GymToken's clock is the timestamp,
  // so an estimate made in one second can fall short of the block mined in the next.
  async function send(tx) {
    const call = { from: tx.from, to: tx.to, data: tx.data };
    const estimate = BigInt(await provider.request({ method: "eth_estimateGas", params: [call] }));
    const gas = "0x" + ((estimate * 5n) / 4n + 30000n).toString(16);
    const hash = await provider.request({
      method: "eth_sendTransaction",
      params: [{ ...call, gas }],
    });
    const receipt = await waitForReceipt(hash);
    if (receipt.status !== "0x1") throw new RequestError(`transaction ${hash} reverted`);
    return hash;
  }

  // Run one action with its button disabled; show its error, if any, in the message box.
  function action(button, work) {
    if (!button) return;
    button.addEventListener("click", async (event) => {
      event.preventDefault();
      button.disabled = true;
      show("working…", "info");
      try {
        reloadWith(await work());
      } catch (error) {
        show(error.message);
        button.disabled = false;
      }
    });
  }

  action($("#delegate"), async () => {
    const tx = await postJSON("/api/delegate", { from: account() });
    const hash = await send(tx);
    return `${label(tx.from)} delegated its votes to itself (tx ${hash})`;
  });

  document.querySelectorAll("button.vote").forEach((button) => action(button, async () => {
    const voter = account();
    const support = button.dataset.support;
    const reason = $("#reason").value.trim();
    const query = new URLSearchParams({ voter, support, reason });
    // Passed to the wallet as text: the proposal id must not go through a JS number.
    const typedData = await call(`/api/proposals/${proposalId}/ballot?${query}`);
    const signature = await provider.request({
      method: "eth_signTypedData_v4", params: [voter, typedData],
    });
    const relayed = await postJSON(`/api/proposals/${proposalId}/relay`,
      { voter, support, reason, signature });
    return `${label(voter)} voted ${support} with ${gym(relayed.weight)} ` +
      `(signed ballot relayed by ${label(relayed.relayer)}, tx ${relayed.tx_hash})`;
  }));

  for (const step of ["queue", "execute"]) {
    action($(`#${step}`), async () => {
      const tx = await postJSON(`/api/proposals/${proposalId}/${step}`, { from: account() });
      const hash = await send(tx);
      return `${step === "queue" ? "queued" : "executed"} by ${label(tx.from)} (tx ${hash})`;
    });
  }

  // Claim an account's line of an epoch: the server computes the proof from the attested
  // table; the selected account sends it; the tokens go to the account.
  document.querySelectorAll("button.claim").forEach((button) => action(button, async () => {
    const tx = await postJSON(`/api/rewards/${button.dataset.epoch}/claim`,
      { from: account(), account: button.dataset.account });
    const hash = await send(tx);
    return `claimed ${gym(tx.amount)} of epoch ${tx.epoch} for ${label(tx.account)} ` +
      `(sent by ${label(tx.from)}, tx ${hash})`;
  }));

  async function advance(seconds) {
    const head = await postJSON("/api/devnet/advance", { seconds: Number(seconds) });
    return `advanced the devnet's clock by ${seconds} s (block ${head.block})`;
  }

  action($("#advance"), () => advance($("#advance").dataset.seconds));

  const advanceForm = $("#advance-form");
  if (advanceForm) {
    action(advanceForm.querySelector("button"), () => advance(advanceForm.seconds.value));
  }

  const proposeForm = $("#propose");
  if (proposeForm) {
    action(proposeForm.querySelector("button"), async () => {
      const indices = proposeForm.indices.value.split(",").map((s) => s.trim()).filter(Boolean);
      if (!indices.every((s) => /^\d+$/.test(s))) {
        throw new RequestError(`leaf indices are numbers separated by commas, not "${proposeForm.indices.value}"`);
      }
      const tx = await postJSON("/api/proposals", {
        from: account(), log: proposeForm.log.value.trim(), indices: indices.map(Number),
        description: proposeForm.description.value,
      });
      const hash = await send(tx);
      return `proposed by ${label(tx.from)} (tx ${hash}); ` +
        `proposal document ipfs://${tx.document_cid}`;
    });
  }

  connect().catch((error) => {
    noWallet("Cannot reach the wallet: see the message above");
    show(`cannot connect to the wallet: ${error.message}`);
  });
})();
