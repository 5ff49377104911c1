"""Streamed answers carry their receipt on the last chunk before `data: [DONE]`, read here through
the official `openai` SDK (unknown chunk fields land in `model_extra`), and it verifies like the
receipt of the same request not streamed."""

from __future__ import annotations

import httpx
import openai
import pytest
from node_helpers import MODEL_NAME
from test_receipts import bundle_of, offline_verify

from inference_node.errors import ReceiptError
from inference_node.receipts import ReceiptDomain, bundle_json, parse_receipt

MESSAGES = [{"role": "user", "content": "the farmer buys twelve apple"}]


@pytest.fixture(scope="module")
def client(signing_node):
    return openai.OpenAI(base_url=signing_node.base_url, api_key="unused", max_retries=0)


def streamed_chat(client, **kwargs) -> tuple[dict, str, list]:
    """The request body the SDK sends, the streamed text, the chunks."""
    request = {"model": MODEL_NAME, "messages": MESSAGES, "temperature": 0, "max_tokens": 8,
               **kwargs, "stream": True}
    chunks = list(client.chat.completions.create(**request))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return request, text, chunks


def test_last_chunk_carries_a_receipt_that_verifies(client, signing_node, tiny_model_dir):
    request, text, chunks = streamed_chat(client)
    *earlier, last = chunks
    assert all("receipt" not in (c.model_extra or {}) for c in earlier)
    assert last.choices[0].finish_reason == "length"
    receipt, evidence = last.model_extra["receipt"], last.model_extra["receipt_evidence"]
    bundle = bundle_json(parse_receipt(receipt), ReceiptDomain.from_json(evidence["domain"]),
                         route="chat", request=request, text=text,
                         completion_token_ids=evidence["completion_token_ids"])
    checks = offline_verify(bundle, tiny_model_dir, model_dir=tiny_model_dir)
    assert [c.name for c in checks if c.passed] == ["signature", "request/response", "library",
                                                   "activations", "termination", "sampling"]

    plain_request = {k: v for k, v in request.items() if k != "stream"}
    plain = httpx.post(f"{signing_node.base_url}/chat/completions", json=plain_request,
                       timeout=60).json()
    assert plain["choices"][0]["message"]["content"] == text
    assert plain["receipt"]["response_digest"] == receipt["response_digest"]
    assert plain["receipt"]["request_digest"] != receipt["request_digest"]  # `stream` differs
    offline_verify(bundle_of(plain, plain_request), tiny_model_dir)

    bundle["response"]["text"] += " seven"
    with pytest.raises(ReceiptError) as failure:
        offline_verify(bundle, tiny_model_dir)
    assert failure.value.reason == "response_digest"


def test_with_include_usage_the_usage_chunk_carries_it(client, tiny_model_dir):
    request, text, chunks = streamed_chat(client, stream_options={"include_usage": True},
                                          max_tokens=5)
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 5
    assert "receipt" not in (chunks[-2].model_extra or {})
    evidence = last.model_extra["receipt_evidence"]
    bundle = bundle_json(parse_receipt(last.model_extra["receipt"]),
                         ReceiptDomain.from_json(evidence["domain"]), route="chat",
                         request=request, text=text,
                         completion_token_ids=evidence["completion_token_ids"])
    assert offline_verify(bundle, tiny_model_dir)[-1].passed


def test_streamed_completion_receipt(client, tiny_model_dir):
    request = {"model": MODEL_NAME, "prompt": "seven apple and three banana is",
               "max_tokens": 6, "temperature": 0, "stream": True}
    chunks = list(client.completions.create(**request))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    extra = chunks[-1].model_extra
    bundle = bundle_json(parse_receipt(extra["receipt"]),
                         ReceiptDomain.from_json(extra["receipt_evidence"]["domain"]),
                         route="completion", request=request, text=text,
                         completion_token_ids=extra["receipt_evidence"]["completion_token_ids"])
    checks = offline_verify(bundle, tiny_model_dir, model_dir=tiny_model_dir)
    assert [c.name for c in checks[-3:]] == ["activations", "termination", "sampling"]
    assert all(c.passed for c in checks[-3:])


def test_plain_node_streams_without_receipts(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES,
                                                 max_tokens=4, stream=True))
    assert all("receipt" not in (c.model_extra or {}) for c in chunks)
