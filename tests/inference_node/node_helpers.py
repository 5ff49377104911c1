"""Helpers for the inference-node tests: a tiny random model and real uvicorn servers on loopback.

The model is a tiny random Llama with a word-level tokenizer, built offline. Its words are readable
and its larger-than-usual initialisation makes greedy output depend on the prompt (a
default-initialised tiny model repeats one token whatever it is asked), which the tests of stop
sequences and of concurrent requests need. Every server runs in a thread of the test process on a
free port and is stopped when its `with` block ends.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gym_forkserver
import httpx
import pytest
import uvicorn

from devnet.anvil import free_port
from devnet.settings import ANVIL_DEV_KEYS
from inference_node import verify
from inference_node.library import LibrarySnapshot, StaticLibrarySource
from inference_node.receipts import ReceiptDomain, bundle_json, library_ref, parse_receipt
from inference_node.server import create_app
from inference_node.settings import NodeSettings
from inference_node.transformers_engine import TransformersEngine

VLLM_MISSING = importlib.util.find_spec("vllm") is None


# Response-format schemas the structured-output tests run (every keyword family the grammar
# enforces), shared by both engines' tests.
SHORT_STRING = {"type": "string", "maxLength": 8}
SCHEMAS = [
    {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
     "additionalProperties": False},
    {"type": "object", "properties": {"verdict": {"enum": ["yes", "no", "unsure"]},
                                      "why": SHORT_STRING}, "required": ["verdict", "why"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": SHORT_STRING, "minItems": 2,
                                               "maxItems": 3}}, "required": ["tags"]},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": False}},
     "required": ["user"], "additionalProperties": False},
    {"type": "object", "properties": {"operations": {"type": "array", "maxItems": 2, "items": {
        "anyOf": [{"type": "object", "properties": {"op": {"const": "ADD"}, "text": SHORT_STRING},
                   "required": ["op", "text"], "additionalProperties": False},
                  {"type": "object", "properties": {"op": {"const": "DELETE"},
                                                    "id": {"enum": ["G0", "G1"]}},
                   "required": ["op", "id"], "additionalProperties": False},
                  {"type": "object", "properties": {"op": {"const": "NONE"}},
                   "required": ["op"], "additionalProperties": False}]}}},
     "required": ["operations"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "score": {
        "type": "number", "minimum": 0, "maximum": 1}, "note": {"type": ["string", "null"],
                                                                "maxLength": 5}},
     "required": ["ok", "score", "note"]},
    {"type": "object", "properties": {"point": {"type": "array", "prefixItems": [
        {"type": "integer"}, {"type": "integer"}], "items": False}}, "required": ["point"]},
    {"type": "object", "$defs": {"step": {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1, "maximum": 9}, "do": SHORT_STRING},
        "required": ["n", "do"], "additionalProperties": False}},
     "properties": {"steps": {"type": "array", "items": {"$ref": "#/$defs/step"},
                              "minItems": 1, "maxItems": 3}}, "required": ["steps"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                                      "level": {"type": "integer", "exclusiveMinimum": 0,
                                                "exclusiveMaximum": 4}},
     "required": ["code", "level"], "additionalProperties": False},
    {"type": "object", "properties": {"matrix": {"type": "array", "maxItems": 2, "items": {
        "type": "array", "items": {"enum": [0, 1]}, "minItems": 2, "maxItems": 2}},
        "label": {"const": "grid"}}, "required": ["matrix", "label"]},
]


def needs_vllm(test):
    """Mark `test` `vllm` and skip it, saying how to install vLLM, where vLLM is missing."""
    skip = pytest.mark.skipif(VLLM_MISSING, reason="vLLM is not installed: run "
                              "scripts/setup_vllm.sh (CPU) or pip install -e '.[vllm]' (GPU)")
    return pytest.mark.vllm(skip(test))


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORD_LIST = ("apple banana cherry river mountain seven three twelve box farmer buys sells count add "
         "check each step answer number units question problem experiences earlier practice "
         "apply those that fit this from the a an of to and or is are was were be green blue "
         "red fast slow north south east west one two four five six eight nine ten hundred "
         "system user assistant library node ledger proof root leaf hash chain block token "
         "model train serve verify receipt stake vote curate publish anchor gym zoo")
WORDS = WORD_LIST.split()


def build_tiny_model(directory: str | Path, seed: int = 0, max_positions: int = 4096) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory = Path(directory)
    if (directory / "config.json").is_file():
        return directory
    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    punctuation = list(".,:;!?[]()0123456789\n") + ["].", "G0", "G1", "G2", "G3", "Experiences",
                                                            "with"]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(specials + punctuation + WORDS))}
    word_level = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split("\n", "isolated"), pre_tokenizers.Whitespace()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, pad_token="<pad>",
                                        unk_token="<unk>", eos_token="<|im_end|>",
                                        bos_token="<|im_start|>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=max_positions, initializer_range=0.3,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # rarely end on its own: replies run to max_tokens or a stop string
        model.lm_head.weight[tokenizer.eos_token_id] = 0.0
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


MODEL_NAME = "tiny-llama"
NODE_KEY = ANVIL_DEV_KEYS[1]  # a public devnet key: signs the test nodes' receipts
GYM = Path(sys.executable).parent / "gym"
DOMAIN = ReceiptDomain()  # unbound receipts (no chain)
CIDS = ["bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy",
        "bafkreidvbhs33ighmljlvr7zbv2ywwzcmp5adtf4kqvlly67cy56bdtmve"]
SNAPSHOT = LibrarySnapshot("v", "0x07", 2, "ab" * 32,
                           ((CIDS[0], "check each step"), (CIDS[1], "answer with a number")))
LIBRARY = {
    "log_id": "0x01", "size": 3, "root": "ab" * 32,
    "experiences": [{"id": "bafy-a", "text": "check each step and count the units"},
                    {"id": "bafy-b", "text": "answer with a number"},
                    {"id": "bafy-c", "text": "the farmer buys seven box of apple"}],
}


def make_engine(model_dir: Path, **kwargs) -> TransformersEngine:
    return TransformersEngine.from_pretrained(model_dir, model_name=MODEL_NAME, device="cpu",
                                              **kwargs)


@dataclass
class RunningServer:
    base_url: str  # ends in /v1
    root_url: str
    source: StaticLibrarySource
    engine: object
    app: object  # the FastAPI app (`app.state.serving`: its OpenAIServing)


@contextlib.contextmanager
def node_process(command: list[str], env: dict[str, str], *, fork: bool = True
                 ) -> Iterator[subprocess.Popen]:
    """`gym node serve` (``command``) as a process of its own, output captured; killed if still
    running when the block ends (a test stops it itself with `stop_node`). With ``fork`` it is
    forked from the worker's gym fork server (tests/support/gym_forkserver.py: torch and the
    rest already imported), else started afresh."""
    if fork and command[0] == str(GYM):
        proc = gym_forkserver.popen(GYM, command[1:], env)
    else:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def node_env(data_dir: Path) -> dict[str, str]:
    """The environment of a `gym node serve` subprocess: this one's without its GYM_ settings,
    its data under `data_dir`, NODE_KEY in GYM_NODE_KEY, one OpenMP thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(data_dir), GYM_NODE_KEY=NODE_KEY, OMP_NUM_THREADS="1",
               COLUMNS="200")
    return env


def signing_node_command(model_dir: Path, port: int) -> list[str]:
    """`gym node serve` of `model_dir` on CPU, as MODEL_NAME on `port`, signing unbound receipts
    (`--offline`) with the key in GYM_NODE_KEY (see `node_env`)."""
    return [str(GYM), "node", "serve", "--model", str(model_dir), "--device", "cpu",
            "--served-model-name", MODEL_NAME, "--port", str(port), "--key-env", "GYM_NODE_KEY",
            "--offline"]


def stop_node(proc: subprocess.Popen, timeout_s: float = 120) -> str:
    """SIGTERM, as an operator stops a node; its whole output once it has exited."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=timeout_s)[0].decode()


def wait_for_health(proc, port: int, timeout_s: float) -> dict:
    """Poll a `gym node serve` subprocess's /health until it answers; fail if it exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, proc.stdout.read().decode()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health").json()
        except httpx.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.2)


@contextlib.contextmanager
def run_server(engine, source, settings: NodeSettings | None = None, *,
               keep_engine: bool = False, **app_kwargs) -> Iterator[RunningServer]:
    """Serve `create_app(engine, source, settings, **app_kwargs)` (receipts=, receipt_log=)
    with uvicorn on loopback until the block ends. The app stops the engine when it stops;
    `keep_engine` leaves it running for the next test (a module's vLLM engine: a restart is
    half a minute)."""
    if keep_engine:
        engine.shutdown = lambda: None  # this instance only; the class's comes back below
    try:
        yield from _serve(engine, source, settings, **app_kwargs)
    finally:
        if keep_engine:
            del engine.shutdown


def _serve(engine, source, settings, **app_kwargs) -> Iterator[RunningServer]:
    port = free_port()
    app = create_app(engine, source, settings, **app_kwargs)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        root = f"http://127.0.0.1:{port}"
        yield RunningServer(f"{root}/v1", root, source, engine, app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


# --------------------------------------------------------------------------- honest receipts

PROMPTS = ["the farmer buys twelve apple", "count the banana and check each step",
           "seven river and three mountain", "what is the answer", "train serve verify receipt",
           "north south east west", "one two four five six", "the model is fast or slow"]
SAMPLINGS = [{"temperature": 0}, {"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9},
             {"temperature": 1.3, "top_p": 0.95}, {"temperature": 0.4, "top_p": 0.5}]


def honest_requests(count: int):
    """``count`` varied requests: route, prompt, sampling, length, stop strings, streaming."""
    for i in range(count):
        prompt, sampling = PROMPTS[i % len(PROMPTS)], SAMPLINGS[(i // 3) % len(SAMPLINGS)]
        body = {"model": MODEL_NAME, "max_tokens": 1 + (i * 7) % 24, **sampling}
        if i % 4:
            body["seed"] = i
        if i % 5 == 0:
            body["stop"] = [WORDS[i % 40], WORDS[(i + 9) % 40]]
        route = "chat" if i % 3 else "completion"
        if route == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        yield route, body, i % 2 == 1


def answer_over_http(base_url: str, route: str, body: dict, stream: bool
                     ) -> tuple[dict, dict, str]:
    """The receipt, its evidence and the text of one answer, streamed or not."""
    path = "/chat/completions" if route == "chat" else "/completions"
    if not stream:
        reply = httpx.post(base_url + path, json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        data = reply.json()
        choice = data["choices"][0]
        return data["receipt"], data["receipt_evidence"], (
            choice["message"]["content"] if route == "chat" else choice["text"])
    text, last = [], None
    with httpx.stream("POST", base_url + path, json={**body, "stream": True},
                      timeout=60) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            for choice in event["choices"]:
                text.append(choice["delta"].get("content") or "" if route == "chat"
                            else choice["text"])
            if "receipt" in event:
                last = event
    return last["receipt"], last["receipt_evidence"], "".join(text)


# --------------------------------------------------------------------------- verifying answers


def offline_checks(bundle: dict, verifier: tuple, model_dir: Path, monkeypatch) -> dict:
    """``verify_receipt_bundle`` with ``verifier`` (model, tokenizer), the library's texts taken
    as `SNAPSHOT`'s (the chain's part of that check is test_sync's); the checks by name."""
    model, tokenizer = verifier
    monkeypatch.setattr(verify, "_check_library", lambda *a: dict(SNAPSHOT.experiences))
    checks = verify.verify_receipt_bundle(bundle, contract=object(), content=object(),
                                          model=model, tokenizer=tokenizer, model_dir=model_dir)
    return {check.name: check for check in checks}


def answer_bundle(route: str, body: dict, fields: dict, text: str) -> dict:
    """The bundle a client builds from an answer: the body it sent, the answer's ``receipt``
    and ``receipt_evidence`` fields (top level, or a choice's) and its text."""
    evidence = fields["receipt_evidence"]
    return bundle_json(parse_receipt(fields["receipt"]),
                       ReceiptDomain.from_json(evidence["domain"]), route=route, request=body,
                       text=text, completion_token_ids=evidence["completion_token_ids"])


def signed_bundle(signer, body: dict, normalized: dict, prompt_ids: list[int],
                  generation) -> dict:
    """The bundle of a receipt ``signer`` issues for ``generation`` (an engine's output for
    chat request ``body``, run as ``normalized`` with the `SNAPSHOT` library), whatever
    decoding produced it: how the tests play a dishonest node."""
    receipt = signer.issue(
        library=library_ref(SNAPSHOT.log_id, SNAPSHOT.size, SNAPSHOT.root),
        experience_ids=SNAPSHOT.experience_ids, request_json=normalized, prompt_ids=prompt_ids,
        text=generation.text, completion_ids=generation.token_ids,
        temperature=normalized["temperature"], top_p=normalized["top_p"],
        max_tokens=normalized["max_tokens"], seed=normalized["seed"],
        finish_reason=generation.finish_reason)
    return bundle_json(receipt, DOMAIN, route="chat", request=body, text=generation.text,
                       completion_token_ids=generation.token_ids)


class Wire:
    """The last chat request and answer a client sent and got (an httpx event hook)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.answers: list[dict] = []

    def client(self) -> httpx.Client:
        def on_request(request: httpx.Request) -> None:
            if request.url.path.endswith("/chat/completions"):
                self.requests.append(json.loads(request.content))

        def on_response(response: httpx.Response) -> None:
            if response.request.url.path.endswith("/chat/completions"):
                response.read()
                self.answers.append(response.json())

        return httpx.Client(event_hooks={"request": [on_request], "response": [on_response]},
                            timeout=120)

    def verify_last(self, verifier, model_dir, monkeypatch) -> dict:
        """The last answer's receipt, verified on ``verifier`` (model, tokenizer) of
        ``model_dir``: every check that ran passed, the grammar's and the sampler's included."""
        body, answer = self.requests[-1], self.answers[-1]
        text = answer["receipt_evidence"].get("completion_text") or \
            answer["choices"][0]["message"]["content"]
        checks = offline_checks(answer_bundle("chat", body, answer, text), verifier,
                                model_dir, monkeypatch)
        assert all(c.passed for c in checks.values() if c.passed is not None), checks
        assert checks["response_format"].passed and checks["sampling"].passed, checks
        return checks


# Two tools' parameter schemas, shared by the tool tests (test_tools, test_tools_auto).
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 8},
    "unit": {"enum": ["C", "F"]}}, "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False}
