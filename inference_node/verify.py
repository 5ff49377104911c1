"""Verifying a receipt bundle (``inference_node.receipts.bundle_json``): what ``gym verify
receipt`` and ``gym demo`` run.

``verify_receipt_bundle`` checks, in order: signature (and the domain, when the verifier names
one), request and response digests, token counts; with the NodeRegistry
(``inference_node.registry``) that the signer is a registered, active node serving the
receipt's model (and that the inclusion proof is in its registered receipt log); with the chain
and content store the library (``rootAt`` equals the receipt's root; the verified fold of the
log at that size is exactly ``experience_ids``, in order), the inclusion proof and its
anchoring; with the model, its digest and the activation commitment (rebuilding the prompt with
the node's own injector, under the chat template the receipt binds, ``inference_node.chat_templates``;
for a receipt that names an adapter, the caller passes the base with that adapter merged,
``inference_node.adapters.load_verifier_adapter``).

Each check passes, is skipped (what it needs was not given) or raises ``ReceiptError`` (a
``ledger`` ``VerificationError``) whose ``reason`` is one of ``inference_node.errors.REASONS``;
``verify_receipt_bundle`` returns the checks or raises the first failure. It is a function of
its arguments; ``check_receipt_bundle`` supplies them from a ledger runtime (chain, content
store, NodeRegistry) and a model directory (``load_verifier_model``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_node.activations import prefill, verify_activations
from inference_node.chat_templates import template_for_receipt
from inference_node.errors import NodeError, ReceiptError
from inference_node.generation_checks import (
    answer_stop_ids,
    check_sampling,
    check_termination,
    eos_token_ids,
    min_tokens_stop_ids,
)
from inference_node.normalized_request import FORMAT as REQUEST_FORMAT
from inference_node.normalized_request import (
    check_normalized,
    client_body,
    constraint_of,
    normalized_request,
    request_key,
)
from inference_node.protocol import SAMPLER_KEYS
from inference_node.receipts import (
    ReceiptDomain,
    model_digest,
    parse_receipt,
    request_digest,
    response_digest,
    verify_receipt_signature,
)
from ledger.entries import ReceiptEntry, encode_entry, entry_cid
from ledger.errors import LedgerError, NotFoundError, VerificationError
from trainer.grammar import GrammarError, Grammars, replay

# A bundle file is JSON from outside (``ledger.json_input``): it holds the request body (at most
# the node's 4 MiB default) and the answer.
MAX_BUNDLE_BYTES = 16 * 1024 * 1024


def read_bundle(path: Path) -> object:
    """A receipt bundle file, parsed with `ledger.json_input` limits (size, depth);
    ``NodeError`` when it cannot be read or parsed."""
    from ledger.json_input import parse_json

    try:
        return parse_json(path.read_bytes(), max_bytes=MAX_BUNDLE_BYTES, what=str(path))
    except (OSError, ValueError) as exc:
        raise NodeError(f"cannot read {path}: {exc}") from None


@dataclass(frozen=True)
class ReceiptCheck:
    name: str  # signature, request/response, registration, library, inclusion, anchoring,
    # adapter, activations, termination, sampling
    passed: bool | None  # None: skipped
    detail: str
    near_ties: int | None = None  # sampling: positions where another token was also acceptable


def verify_receipt_bundle(bundle: Any, *, domain: ReceiptDomain | None = None,
                          contract: Any = None, content: Any = None, model: Any = None,
                          tokenizer: Any = None, model_dir: str | Path | None = None,
                          from_block: int = 0, registry: Any = None,
                          chat_template: str | None = None,
                          library_cache: dict | None = None) -> list[ReceiptCheck]:
    """Check a receipt bundle (``bundle_json``); the checks passed and skipped, or the first
    ``ReceiptError``. ``domain``: the one the verifier expects (else the bundle's is used);
    ``registry`` (``inference_node.registry.NodeRegistry``): the signer is a registered, active
    node serving the receipt's model; ``contract`` + ``content``: library root and state, log
    inclusion anchoring; ``model`` + ``tokenizer`` (+ ``model_dir`` for its digest): the
    activation commitment, the prompt re-rendered under the chat template the receipt binds
    (the model's own, a shipped one, or ``chat_template``, the text the verifier was given).
    ``library_cache``: a dict kept across calls, so that receipts of one library state replay
    its log once (what `gym verify evaluation` checks thousands of receipts with)."""
    if not isinstance(bundle, dict) or bundle.get("type") != "receipt-bundle" \
            or bundle.get("v") not in (1, 2):
        raise ReceiptError("malformed", "not a receipt-bundle v1 or v2 document")
    receipt = parse_receipt(bundle.get("receipt"))
    if receipt.v != bundle["v"]:
        raise ReceiptError("malformed", f"a v{bundle['v']} bundle holds a v{receipt.v} receipt")
    signed_domain = ReceiptDomain.from_json(bundle.get("domain"))
    if domain is not None and domain != signed_domain:
        raise ReceiptError("wrong_domain", "the receipt is signed for another deployment",
                           expected=domain, computed=signed_domain)
    signer = verify_receipt_signature(receipt, signed_domain)
    checks = [ReceiptCheck("signature", True, f"signed by {signer}")]
    request, response = bundle.get("request"), bundle.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict) \
            or not isinstance(response.get("text"), str) \
            or not isinstance(response.get("token_ids"), list):
        raise ReceiptError("malformed", "the bundle needs request {…} and response {text, "
                           "token_ids}")
    if receipt.v == 2:
        request = check_normalized(request)
        _check_sampling_params(receipt, request)
    computed = request_digest(request)
    if computed != receipt.request_digest:
        raise ReceiptError("request_digest", "the request is not the one the receipt signs",
                           expected=receipt.request_digest, computed=computed)
    token_ids = response["token_ids"]
    try:
        computed = response_digest(response["text"], token_ids)
    except ValueError as exc:  # RFC 8785 has no lone surrogate, float NaN or integer past 2**53
        raise ReceiptError("malformed", f"the response is not canonical JSON ({exc})") from None
    if computed != receipt.response_digest:
        raise ReceiptError("response_digest", "the response is not the one the receipt signs",
                           expected=receipt.response_digest, computed=computed)
    if len(token_ids) != receipt.tokens.completion:
        raise ReceiptError("token_counts", "completion token count",
                           expected=receipt.tokens.completion, computed=len(token_ids))
    checks.append(ReceiptCheck("request/response", True, "digests match"))

    receipt_log_id = None
    if registry is not None:
        check, receipt_log_id = _check_registration(receipt, registry)
        checks.append(check)
    else:
        checks.append(ReceiptCheck("registration", None, "needs the NodeRegistry"))

    texts: dict[str, str] | None = {} if not receipt.experience_ids else None
    if not receipt.library.log_id:
        if receipt.experience_ids:
            raise ReceiptError("experience_ids", "experiences named without a library (log 0)",
                               expected=[], computed=list(receipt.experience_ids))
        checks.append(ReceiptCheck("library", True, "none (log 0): no experiences injected"))
    elif contract is not None and content is not None:
        key = (receipt.library.log_id, receipt.library.size, receipt.library.root,
               tuple(receipt.experience_ids))
        if library_cache is not None and key in library_cache:
            texts = library_cache[key]
        else:
            texts = _check_library(receipt, contract, content, from_block)
            if library_cache is not None:
                library_cache[key] = texts
        checks.append(ReceiptCheck("library", True, f"log {receipt.library.log_id} at size "
                                   f"{receipt.library.size}: root anchored, "
                                   f"{len(texts)} experience{'' if len(texts) == 1 else 's'} "
                                   f"{'is' if len(texts) == 1 else 'are'} its active set"))
    else:
        checks.append(ReceiptCheck("library", None, "needs the chain and content store"))

    checks.extend(_check_inclusion(receipt, bundle.get("inclusion"), contract, receipt_log_id))

    if model is None:
        checks.append(ReceiptCheck("activations", None, "needs --model"))
        checks.extend(_skipped_answer_checks(receipt, "needs --model"))
        return checks
    if model_dir is not None and model_digest(model_dir) != receipt.model_digest:
        raise ReceiptError("model_digest", "the model given is not the receipt's",
                           expected=receipt.model_digest, computed=model_digest(model_dir))
    if texts is None:
        raise ReceiptError("experience_content", "the experiences' texts need the chain and "
                           "content store to rebuild the prompt")
    tokenizer = template_for_receipt(receipt, tokenizer, chat_template)
    if getattr(receipt, "chat_template", None) is not None:
        checks.append(ReceiptCheck("chat_template", True, f"the prompt re-rendered under "
                                   f"{receipt.chat_template}"))
    prompt_ids = _rebuild_prompt(bundle.get("route") if receipt.v == 1 else request["route"],
                                 request, receipt, texts, tokenizer)
    if len(prompt_ids) != receipt.tokens.prompt:
        raise ReceiptError("token_counts", "prompt tokens after injecting the library",
                           expected=receipt.tokens.prompt, computed=len(prompt_ids))
    _check_fits_the_model(model, prompt_ids, token_ids)
    states, logits = prefill(model, prompt_ids, token_ids, logits=receipt.v == 2)
    verify_activations(states, receipt.activation_commitment)
    checks.append(ReceiptCheck("activations", True, "one prefill matches the TOPLOC commitment"))
    if receipt.v == 1:
        checks.extend(_skipped_answer_checks(receipt, ""))
        return checks
    eos = eos_token_ids(model, tokenizer)
    how = check_termination(token_ids, response["text"], receipt.finish_reason,
                            max_tokens=request["max_tokens"], stop=request["stop"],
                            eos=answer_stop_ids(request, eos), tokenizer=tokenizer)
    checks.append(ReceiptCheck("termination", True, f"{receipt.finish_reason!r}: ends by {how},"
                               " nothing after it; the text decodes from the tokens"))
    allowed = _check_response_format(request, token_ids, model, tokenizer, checks)
    from inference_node.sampling import GREEDY_BELOW

    s = receipt.sampling
    knobs = _knobs(request, receipt, eos, tokenizer)
    result = check_sampling(logits, token_ids, temperature=s.temperature, top_p=s.top_p,
                            seed=s.seed, request_key=request_key(request), tokenizer=tokenizer,
                            allowed=allowed, knobs=knobs, prompt_ids=prompt_ids)
    mode = ("greedy" if s.temperature < GREEDY_BELOW
            else f"temperature {s.temperature:g}, top_p {s.top_p:g}, seed {s.seed}")
    if not knobs.neutral:
        mode += ", " + ", ".join(f"{k} {request[k]}" for k in SAMPLER_KEYS
                                 if k in request)
    checks.append(ReceiptCheck(
        "sampling", True, f"all {result.positions} tokens are {receipt.sampler}'s choice "
        f"({mode}); {result.near_ties} near-ties, {result.tolerated} tolerated",
        near_ties=result.near_ties))
    return checks


_GRAMMARS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> Grammars


def _check_response_format(request: dict, token_ids: list[int], model: Any, tokenizer: Any,
                           checks: list[ReceiptCheck]) -> Any:
    """With a response format: every token allowed by its grammar (``response_format``
    otherwise), and the masks the sampling check applies; None without one."""
    constraint = constraint_of(request)
    if constraint is None:
        return None
    grammars = _GRAMMARS.get(model)
    if grammars is None:
        width = model.get_output_embeddings().weight.shape[0]
        grammars = _GRAMMARS[model] = Grammars(tokenizer, width, eos_token_ids(model, tokenizer))
    try:
        allowed, bad = replay(grammars, constraint.schema_json, token_ids)
    except GrammarError as exc:
        raise ReceiptError("response_format", f"the request's response format: {exc}") from None
    if bad is not None:
        token = token_ids[bad]
        raise ReceiptError("response_format", f"completion token {bad} ({token} "
                           f"{tokenizer.decode([token])!r}) is not allowed by the request's "
                           f"{_grammar_name(request)} grammar", computed=token)
    checks.append(ReceiptCheck("response_format", True, f"all {len(token_ids)} tokens are "
                               f"allowed by the {_grammar_name(request)} grammar"))
    return allowed


def _grammar_name(request: dict) -> str:
    """What set the constraint: the response format's type, or the tool choice (a forced call,
    or auto's text-or-calls)."""
    if "response_format" in request:
        return request["response_format"]["type"]
    for name in ("guided_choice", "guided_regex"):
        if name in request:
            return name
    return "tool_choice"


def _check_fits_the_model(model: Any, prompt_ids: list[int], token_ids: list) -> None:
    """Before the prefill: every token id is one of the model's, and prompt + answer fit its
    context (a hostile bundle must not crash or exhaust the verifier)."""
    vocab = model.get_input_embeddings().num_embeddings
    bad = next((t for t in token_ids if type(t) is not int or not 0 <= t < vocab), None)
    if bad is not None:
        raise ReceiptError("malformed", f"token id {bad!r} is not one of the model's {vocab}")
    if not token_ids:
        raise ReceiptError("token_counts", "an answer has at least one token")
    context = getattr(model.config, "max_position_embeddings", None)
    if context is not None and len(prompt_ids) + len(token_ids) > context:
        raise ReceiptError("token_counts", f"prompt and answer are {len(prompt_ids)} + "
                           f"{len(token_ids)} tokens, more than the model's {context}-token "
                           "context")


def _skipped_answer_checks(receipt: ReceiptEntry, why: str) -> list[ReceiptCheck]:
    """The termination and sampling checks, skipped: a v1 receipt predates the verifiable
    sampler (its tokens cannot be re-derived), else ``why``."""
    why = why if receipt.v == 2 else ("receipt v1: its tokens were sampled before the "
                                      "verifiable sampler, so they cannot be checked")
    return [ReceiptCheck("termination", None, why), ReceiptCheck("sampling", None, why)]


def _knobs(request: dict, receipt: ReceiptEntry, eos: frozenset[int], tokenizer: Any) -> Any:
    """The normalized request's gym-sampler/2 knobs; ``ReceiptError`` sampling when the receipt
    names gym-sampler/1 for a request that sets them (an older sampler could not honour
    them)."""
    from inference_node.errors import SamplingError
    from inference_node.sampler_knobs import from_normalized

    try:
        knobs = from_normalized(request, min_tokens_stop_ids(eos, tokenizer))
    except SamplingError as exc:
        raise ReceiptError("sampling", f"the request's sampling knobs: {exc}") from None
    if receipt.sampler != knobs.sampler and not knobs.neutral:
        raise ReceiptError("sampling", "the request sets gym-sampler/2's knobs, the receipt "
                           "names another sampler", expected=knobs.sampler,
                           computed=receipt.sampler)
    return knobs


def _check_sampling_params(receipt: ReceiptEntry, request: dict) -> None:
    """A v2 receipt's sampling parameters are the normalized request's."""
    s = receipt.sampling
    signed = {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
              "seed": s.seed}
    asked = {name: request[name] for name in signed}
    if signed != asked:
        raise ReceiptError("sampling", "the receipt's sampling parameters are not the "
                           "request's", expected=asked, computed=signed)


def library_texts(receipt: ReceiptEntry, contract: Any, content: Any, from_block: int = 0
                  ) -> dict[str, str]:
    """The texts of the receipt's experiences, by CID, once the library check passes."""
    return _check_library(receipt, contract, content, from_block)


def rebuild_prompt_ids(request: dict, receipt: ReceiptEntry, texts: dict[str, str],
                       tokenizer: Any) -> list[int]:
    """The prompt a node ran for a v2 receipt's normalized ``request``, library injected."""
    return _rebuild_prompt(request["route"], request, receipt, texts, tokenizer)


def _check_library(receipt: ReceiptEntry, contract: Any, content: Any, from_block: int
                   ) -> dict[str, str]:
    from inference_node.sync import LibrarySyncError, library_at

    lib = receipt.library
    anchored = "0x" + contract.root_at(lib.log_id, lib.size).hex()
    if anchored != lib.root:
        raise ReceiptError("library_root", f"log {lib.log_id} at size {lib.size} is anchored "
                           "with another root", expected=anchored, computed=lib.root)
    kind = contract.log_info(lib.log_id).kind
    try:
        state = library_at(contract, content, lib.log_id, kind, lib.size, from_block=from_block)
    except (LibrarySyncError, NotFoundError) as exc:
        raise ReceiptError("experience_content", f"library check, replaying log {lib.log_id} "
                           f"up to size {lib.size}: {exc}") from None
    if list(state) != list(receipt.experience_ids):
        raise ReceiptError("library_state", "the experiences named are not the library's "
                           "active set at that size", expected=list(state),
                           computed=list(receipt.experience_ids))
    return state


def _check_registration(receipt: ReceiptEntry, registry: Any) -> tuple[ReceiptCheck, int]:
    """The registry's record of the receipt's signer; the check and its receipt log id."""
    from contracts.gym_token import format_gym

    operator = registry.operator_of_signer(receipt.node)
    if operator is None:
        raise ReceiptError("not_registered", f"no node in the NodeRegistry signs with "
                           f"{receipt.node}")
    node = registry.node_of(operator)
    if node is None:  # withdrawn between the two reads
        raise ReceiptError("not_registered", f"operator {operator} has no node any more")
    if node.unbonding_ends:
        raise ReceiptError("node_deregistered", f"node {operator} deregistered; its stake "
                           f"unbonds at {node.unbonding_ends} (unix time)")
    if not node.active:
        raise ReceiptError("node_slashed", f"node {operator} stakes {format_gym(node.stake)}, "
                           f"below the minimum {format_gym(registry.min_stake())}: "
                           "slashed, and not active")
    if node.model_digest != receipt.model_digest:
        raise ReceiptError("registered_model", f"node {operator} is registered serving another "
                           "model", expected=node.model_digest, computed=receipt.model_digest)
    return (ReceiptCheck("registration", True, f"active node of operator {operator}, stake "
                         f"{format_gym(node.stake)}, receipt log {node.receipt_log_id}"),
            node.receipt_log_id)


def _check_inclusion(receipt: ReceiptEntry, doc: Any, contract: Any,
                     receipt_log_id: int | None = None) -> list[ReceiptCheck]:
    from ledger.proofs import check_anchored_root, verify_proof_document, verify_proof_entry

    if doc is None:
        return [ReceiptCheck("inclusion", None, "the bundle has no receipt-log proof")]
    try:
        proof = verify_proof_document(doc)
    except VerificationError as exc:
        raise ReceiptError("not_included", str(exc)) from None
    data = encode_entry(receipt)
    cid = entry_cid(data)
    if proof.entry_cid != cid:
        raise ReceiptError("not_included", "the proof is for another entry", expected=cid,
                           computed=proof.entry_cid)
    try:  # the document's entry_cid is a claim: the proven leaf must hash from these bytes
        proof = verify_proof_entry(proof, data)
    except VerificationError as exc:
        raise ReceiptError("not_included", str(exc)) from None
    if receipt_log_id is not None and proof.log_id != receipt_log_id:
        raise ReceiptError("receipt_log", "the proof is for another log than the node's "
                           "registered receipt log", expected=receipt_log_id,
                           computed=proof.log_id)
    checks = [ReceiptCheck("inclusion", True, f"leaf {proof.index} of log {proof.log_id} at "
                           f"size {proof.size}")]
    if contract is None:
        return [*checks, ReceiptCheck("anchoring", None, "needs the chain")]
    try:
        check_anchored_root(contract, proof)
    except (VerificationError, LedgerError) as exc:
        raise ReceiptError("not_anchored", str(exc)) from None
    return [*checks, ReceiptCheck("anchoring", True, "rootAt matches")]


def _rebuild_prompt(route: Any, request: dict, receipt: ReceiptEntry, texts: dict[str, str],
                    tokenizer: Any) -> list[int]:
    from inference_node.injection import LibraryInjector
    from inference_node.library import LibrarySnapshot
    from inference_node.protocol import ChatCompletionRequest, CompletionRequest
    from inference_node.tools import chat_messages, template_has_tools

    snapshot = LibrarySnapshot("verify", str(receipt.library.log_id), receipt.library.size,
                               receipt.library.root,
                               tuple((eid, texts[eid]) for eid in receipt.experience_ids))
    injector = LibraryInjector(tokenizer)
    request = client_body(request) if request.get("v") == REQUEST_FORMAT else request
    try:
        if route == "chat":
            chat = ChatCompletionRequest.model_validate(request)
            normalized = normalized_request("chat", chat, max_tokens=1, seed=0)
            messages, tools = chat_messages(normalized, template_has_tools(tokenizer))
            injected = injector.chat(messages, snapshot, tools=tools)
        elif route == "completion":
            injected = injector.completion(CompletionRequest.model_validate(request)
                                           .prompt_text(), snapshot)
        else:
            raise ReceiptError("malformed", f"route must be 'chat' or 'completion', got {route!r}")
    except ValueError as exc:  # pydantic's ValidationError
        raise ReceiptError("malformed", f"the request is not a valid {route} request ({exc})"
                           ) from None
    return injected.prompt.all_token_ids



def load_verifier_model(model_dir: Path, *, adapter: str | None = None, content: Any = None):
    """The model and tokenizer a verifier prefills with (float32 on CPU, as CPU nodes run);
    with ``adapter`` (an adapter entry's CID), that adapter fetched from ``content``, checked
    and merged into the base in ``model_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from inference_node.adapters import load_verifier_adapter

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    if adapter is not None:
        model = load_verifier_adapter(content, adapter, model_dir, dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model.eval(), AutoTokenizer.from_pretrained(model_dir)


def check_receipt_bundle(bundle: object, rt: Any = None, *, registry: str | None = None,
                         model_dir: Path | None = None, offline: bool = False,
                         content: Any = None, loaded: tuple[Any, Any] | None = None,
                         chat_template: str | None = None) -> list[ReceiptCheck]:
    """What `gym verify receipt` runs: ``verify_receipt_bundle`` with the deployment's chain,
    content store and NodeRegistry (at ``registry``) from ``rt`` (a ``ledger.runtime.LedgerRuntime``)
    unless ``offline``, and with the model in ``model_dir`` when given: for a receipt that names
    an adapter, that base with the adapter fetched from ``content`` (default: ``rt``'s content
    store) and merged. ``loaded``: ``load_verifier_model(model_dir)``'s result, reused for
    receipts that name no adapter (`gym audit --sample` checks many). ``chat_template``: the
    text of `gym verify receipt --chat-template FILE`. The checks, or the first
    ``ReceiptError``."""
    from inference_node.registry import NodeRegistry

    kwargs: dict = {}
    if not offline:
        contract = rt.contract
        kwargs = {"contract": contract, "content": rt.content,
                  "from_block": rt.chain.deployment_block,
                  "domain": ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower())}
        if registry is not None:
            kwargs["registry"] = NodeRegistry(contract.w3, registry,
                                              from_block=rt.chain.deployment_block)
    adapter_check = None
    if model_dir is not None:
        adapter = parse_receipt(bundle.get("receipt") if isinstance(bundle, dict) else None
                                ).adapter_cid
        if adapter is None:
            model, tokenizer = loaded or load_verifier_model(model_dir)
        else:
            content = content if content is not None else getattr(rt, "content", None)
            if content is None:
                raise ReceiptError("adapter", f"the receipt names adapter {adapter}: checking "
                                   "its activations needs the content store it is in")
            model, tokenizer = load_verifier_model(model_dir, adapter=adapter, content=content)
            adapter_check = ReceiptCheck("adapter", True, f"{adapter} fetched, every file "
                                         "re-added to its CID, trained on this base; merged")
        kwargs.update(model=model, tokenizer=tokenizer, model_dir=model_dir,
                      chat_template=chat_template)
    checks = verify_receipt_bundle(bundle, **kwargs)
    if adapter_check is not None:
        at = next((i for i, c in enumerate(checks) if c.name == "activations"), len(checks))
        checks.insert(at, adapter_check)
    return checks


def checks_table(checks: list[ReceiptCheck], title: str):
    """The checks as a ``rich`` table, as `gym verify receipt` and `gym demo` print them."""
    from rich.table import Table

    table = Table("check", "result", "detail", title=title)
    for check in checks:
        result = {True: "[green]ok[/]", None: "[yellow]skipped[/]"}[check.passed]
        table.add_row(check.name, result, check.detail)
    return table
