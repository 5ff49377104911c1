"""`gym verify receipt` from what a client has, through the real `gym` command: the openai SDK's
answer saved as JSON with the request body sent (chat, completion with echo, a streamed answer
saved as its chunks), or a receipt CID and the node that keeps its bundle. An equivalent
request verifies, another one fails with `request_digest`; the checks table names the
termination and sampling checks, skipped with their reason without --model."""

from __future__ import annotations

import json
from pathlib import Path

import gym_forkserver
import openai
import pytest
from node_helpers import GYM, MODEL_NAME, node_env
from test_bundle_store import node_with

from inference_node.bundle_sources import bundle_from_response
from inference_node.bundle_store import BundleStore
from inference_node.errors import ReceiptError
from inference_node.library import StaticLibrarySource

CHAT = {"model": MODEL_NAME, "temperature": 0.7, "max_tokens": 6, "seed": 5,
        "messages": [{"role": "user", "content": "the farmer buys twelve apple"}]}
COMPLETION = {"model": MODEL_NAME, "prompt": "seven apple and three banana is", "max_tokens": 5,
              "temperature": 0, "echo": True}


@pytest.fixture(scope="module")
def node(tiny_model_dir, tmp_path_factory):
    from node_helpers import make_engine

    store = BundleStore(tmp_path_factory.mktemp("bundles") / "b.sqlite", retention_s=3600)
    # no library: `--offline` rebuilds the prompt without the chain's experience texts
    with node_with(make_engine(tiny_model_dir), tiny_model_dir, store,
                   source=StaticLibrarySource()) as running:
        yield running


@pytest.fixture(scope="module")
def client(node):
    return openai.OpenAI(base_url=node.base_url, api_key="unused")


def gym_verify(tmp_path: Path, *args: str) -> gym_forkserver.Completed:
    return gym_forkserver.run(GYM, ["verify", "receipt", *args, "--offline"],
                              node_env(tmp_path), timeout=300)


def save(tmp_path: Path, name: str, obj) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return str(path)


def row(output: str, check: str) -> str:
    return next(line for line in output.splitlines() if f" {check} " in line)


def test_saved_chat_answer_and_request(client, tmp_path, tiny_model_dir):
    answer = client.chat.completions.create(**CHAT).model_dump()
    response = save(tmp_path, "response.json", answer)
    equivalent = dict(reversed(list({**CHAT, "stream": False}.items())))
    done = gym_verify(tmp_path, "--response", response, "--request",
                      save(tmp_path, "request.json", equivalent), "--model", str(tiny_model_dir),
                      "--save-bundle", str(tmp_path / "bundle.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    for check in ("signature", "activations", "termination", "sampling"):
        assert "ok" in row(done.stdout, check), done.stdout
    saved = json.loads((tmp_path / "bundle.json").read_text())
    assert saved["receipt"] == answer["receipt"] and saved["request"]["v"] == "gym-request/1"

    wrong = {**CHAT, "messages": [{"role": "user", "content": "the farmer sells twelve apple"}]}
    failed = gym_verify(tmp_path, "--response", response, "--request",
                        save(tmp_path, "wrong.json", wrong))
    assert failed.returncode == 1 and "request_digest" in failed.stderr, failed.stderr

    without_model = gym_verify(tmp_path, str(tmp_path / "bundle.json"))
    assert without_model.returncode == 0, without_model.stderr
    for check in ("termination", "sampling"):
        assert "skipped" in row(without_model.stdout, check)
        assert "needs --model" in row(without_model.stdout, check)

    as_json = gym_verify(tmp_path, str(tmp_path / "bundle.json"), "--json")
    assert as_json.returncode == 0, as_json.stderr
    checks = json.loads(as_json.stdout)
    assert checks["ok"] and checks["receipt"] == "bundle.json"
    results = {c["check"]: (c["result"], c["detail"]) for c in checks["checks"]}
    assert results["signature"][0] == "ok" and results["signature"][1].startswith("signed by 0x")
    assert results["sampling"] == ("skipped", "needs --model")
    failed = gym_verify(tmp_path, "--response", response, "--request",
                        save(tmp_path, "wrong.json", wrong), "--json")
    assert failed.returncode == 1
    failure = json.loads(failed.stdout)
    assert (failure["ok"], failure["reason"]) == (False, "request_digest")


def test_completion_with_echo_and_a_streamed_chat(client, tmp_path, tiny_model_dir):
    completion = client.completions.create(**COMPLETION).model_dump()
    assert completion["choices"][0]["text"].startswith(COMPLETION["prompt"])
    chunks = [chunk.model_dump() for chunk in client.chat.completions.create(
        **CHAT, stream=True, stream_options={"include_usage": True})]
    assert "receipt" in chunks[-1] and not chunks[-1]["choices"]  # on the usage chunk
    for name, answer, request in (("completion", completion, COMPLETION),
                                  ("stream", chunks, {**CHAT, "stream": True})):
        done = gym_verify(tmp_path, "--response", save(tmp_path, f"{name}.json", answer),
                          "--request", save(tmp_path, f"{name}-request.json", request),
                          "--model", str(tiny_model_dir))
        assert done.returncode == 0, name + done.stdout + done.stderr
        assert "ok" in row(done.stdout, "sampling"), done.stdout


def test_by_cid_from_the_node(client, node, tmp_path, tiny_model_dir):
    answer = client.chat.completions.create(**{**CHAT, "seed": 9}).model_dump()
    cid, token = (answer["receipt_evidence"][k] for k in ("receipt_cid", "bundle_token"))
    done = gym_verify(tmp_path, "--cid", cid, "--token", token, "--node", node.base_url,
                      "--model", str(tiny_model_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in row(done.stdout, "inclusion") or "skipped" in row(done.stdout, "inclusion")
    assert "ok" in row(done.stdout, "termination")
    # the bundle holds the user's request and answer: without the answer's token, or with
    # another receipt's, the node does not serve it
    anonymous = gym_verify(tmp_path, "--cid", cid, "--node", node.root_url)
    assert anonymous.returncode == 1 and "answered 401" in anonymous.stderr, anonymous.stderr
    assert "bundle_token" in anonymous.stderr
    other = "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy"
    missing = gym_verify(tmp_path, "--cid", other, "--token", token, "--node", node.root_url)
    assert missing.returncode == 1 and "answered 403" in missing.stderr, missing.stderr
    both = gym_verify(tmp_path, "--cid", cid, "--node", node.root_url, "--response",
                      save(tmp_path, "r.json", answer))
    assert both.returncode == 2 and "exactly one receipt source" in both.stderr


def test_hostile_answers_are_one_clear_error(client):
    answer = client.chat.completions.create(**CHAT).model_dump()
    for bad in ([], [1], {**answer, "receipt": None}, {"choices": []},
                {**answer, "receipt_evidence": {**answer["receipt_evidence"],
                                                "receipt_cid": "bafy-other"}}):
        with pytest.raises(ReceiptError) as failure:
            bundle_from_response(bad, CHAT)
        assert failure.value.reason == "malformed"
    echoed = {**answer, "object": "text_completion",
              "choices": [{"text": "not the prompt", "index": 0}]}
    with pytest.raises(ReceiptError, match="echo"):
        bundle_from_response(echoed, COMPLETION)



def test_an_answer_with_sampler_knobs_verifies_through_the_cli(client, tmp_path, tiny_model_dir):
    """gym-sampler/2: the openai SDK sends vLLM's knobs in `extra_body`; `gym verify receipt
    --model` replays them (the sampling row names the sampler and the knobs), and the same
    answer offered for the request without them fails its digest."""
    knobs = {"top_k": 4, "min_p": 0.01, "frequency_penalty": 1.5, "repetition_penalty": 1.3,
             "logit_bias": {"7": 2.5}}
    answer = client.chat.completions.create(**CHAT, extra_body=knobs).model_dump()
    assert answer["receipt"]["sampler"] == "gym-sampler/2"
    response = save(tmp_path, "response.json", answer)
    done = gym_verify(tmp_path, "--response", response, "--request",
                      save(tmp_path, "request.json", {**CHAT, **knobs}),
                      "--model", str(tiny_model_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    sampling = row(done.stdout, "sampling")
    assert "ok" in sampling and "gym-sampler/2" in sampling and "top_k 4" in sampling, done.stdout
    failed = gym_verify(tmp_path, "--response", response, "--request",
                        save(tmp_path, "plain.json", CHAT))
    assert failed.returncode == 1 and "request_digest" in failed.stderr, failed.stderr
