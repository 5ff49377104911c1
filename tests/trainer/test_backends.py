"""Backends: seeded batched generation on a tiny random model; HTTP retries and counting."""

import json

import httpx
import pytest

from trainer.backends import BackendError, OpenAIBackend, derive_seed

PROMPTS = [[{"role": "user", "content": "What is 2 + 2?"}],
           [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]]


def test_derive_seed_is_stable():
    assert derive_seed(0, "rollout", 1, 2) == derive_seed(0, "rollout", 1, 2)
    assert derive_seed(0, "rollout", 1, 2) != derive_seed(0, "rollout", 2, 1)
    assert 0 <= derive_seed("x") < 2**63


def test_generation_is_seeded_per_row_and_independent_of_the_batch(tiny_backend):
    both = tiny_backend.generate(PROMPTS, n=3, max_new_tokens=8, seed=5)
    alone = tiny_backend.generate(PROMPTS[:1], n=3, max_new_tokens=8, seed=5)
    assert len(both) == 2 and all(len(row) == 3 for row in both)
    assert alone[0] == both[0]  # same prompt, same seed, different batch company
    assert tiny_backend.generate(PROMPTS, n=3, max_new_tokens=8, seed=5) == both
    assert tiny_backend.generate(PROMPTS, n=3, max_new_tokens=8, seed=6) != both
    assert len(set(both[0])) > 1  # the samples of one prompt differ


def test_usage_counts_calls_and_tokens(tiny_backend):
    before = tiny_backend.usage.snapshot()
    tiny_backend.generate(PROMPTS, n=2, max_new_tokens=4, seed=0)
    after = tiny_backend.usage.snapshot()
    assert after["calls"] - before["calls"] == 4
    assert 0 < after["completion_tokens"] - before["completion_tokens"] <= 16
    assert after["prompt_tokens"] > before["prompt_tokens"]


def _server(statuses: list[int]):
    """A mock endpoint answering with `statuses` in turn (200 = a completion)."""
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        status = statuses[min(len(calls) - 1, len(statuses) - 1)]
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "busy"}})
        return httpx.Response(200, json={
            "choices": [{"message": {"role": "assistant", "content": " Answer: 4 "}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3}})

    return httpx.MockTransport(handler), calls


def test_openai_backend_retries_429_and_5xx_then_counts():
    transport, calls = _server([429, 503, 200])
    backend = OpenAIBackend("http://test/v1", "m", api_key="k", max_concurrency=1,
                            backoff_s=0, transport=transport)
    assert backend.generate(PROMPTS[:1], n=1, seed=3) == [["Answer: 4"]]
    assert len(calls) == 3 and backend.usage.retries == 2
    assert backend.usage.snapshot() == {"calls": 1, "prompt_tokens": 11, "completion_tokens": 3,
                                        "retries": 2, "format_fallbacks": 0}
    body = httpx.Request("POST", "http://x", content=calls[-1].content).read()
    assert b'"seed"' in body and calls[-1].headers["authorization"] == "Bearer k"


def test_openai_backend_gives_up_and_does_not_retry_client_errors():
    transport, calls = _server([503])
    backend = OpenAIBackend("http://test/v1", "m", max_retries=2, backoff_s=0,
                            transport=transport)
    with pytest.raises(BackendError, match="3 attempts"):
        backend.generate(PROMPTS[:1])
    transport, calls = _server([400])
    backend = OpenAIBackend("http://test/v1", "m", backoff_s=0, transport=transport)
    with pytest.raises(BackendError, match="HTTP 400"):
        backend.generate(PROMPTS[:1])
    assert len(calls) == 1


def test_openai_backend_retries_timeouts():
    attempts = []

    def handler(request):
        attempts.append(1)
        if len(attempts) == 1:
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    backend = OpenAIBackend("http://test/v1", "m", backoff_s=0,
                            transport=httpx.MockTransport(handler))
    assert backend.generate(PROMPTS, n=2) == [["ok", "ok"], ["ok", "ok"]]
    assert backend.usage.calls == 4 and backend.usage.retries == 1


FORMAT = {"type": "json_schema", "json_schema": {
    "name": "answer", "strict": True,
    "schema": {"type": "object", "properties": {"answer": {"type": "integer"}},
               "required": ["answer"]}}}
CID = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"


def _format_server(refuse: bool, evidence=None):
    """A mock endpoint that refuses `response_format` with a 400 (if `refuse`) and attaches
    `evidence` as the reply's `receipt_evidence` (absent if None)."""
    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if refuse and "response_format" in body:
            return httpx.Response(400, json={"error": {
                "message": "Unsupported parameter: 'response_format'", "type": "invalid_request_error",
                "param": "response_format", "code": None}})
        reply = {"choices": [{"message": {"content": '{"answer": 4}'}}],
                 "usage": {"prompt_tokens": 5, "completion_tokens": 4}}
        if evidence is not None:
            reply.update(receipt={"v": 2}, receipt_evidence=evidence)
        return httpx.Response(200, json=reply)

    return httpx.MockTransport(handler), bodies


def test_openai_backend_sends_response_format_and_collects_receipt_cids():
    transport, bodies = _format_server(refuse=False, evidence={"receipt_cid": CID})
    backend = OpenAIBackend("http://test/v1", "m", backoff_s=0, transport=transport)
    out = backend.generate(PROMPTS, n=2, response_format=FORMAT)
    assert out == [['{"answer": 4}'] * 2] * 2
    assert all(body["response_format"] == FORMAT for body in bodies) and len(bodies) == 4
    assert backend.last_receipts == [[CID, CID], [CID, CID]]
    assert backend.usage.format_fallbacks == 0
    backend.generate(PROMPTS[:1])
    assert "response_format" not in bodies[-1]


def test_openai_backend_falls_back_to_the_prompt_when_the_format_is_refused():
    transport, bodies = _format_server(refuse=True)
    backend = OpenAIBackend("http://test/v1", "m", max_concurrency=1, backoff_s=0,
                            transport=transport)
    assert backend.generate(PROMPTS, n=1, response_format=FORMAT) == [['{"answer": 4}']] * 2
    # One refused request, then prompt-only: the refusal is remembered for later calls.
    assert ["response_format" in body for body in bodies] == [True, False, False]
    assert backend.usage.format_fallbacks == 2 and backend.usage.retries == 0
    assert backend.usage.snapshot()["format_fallbacks"] == 2
    backend.generate(PROMPTS[:1], response_format=FORMAT)
    assert "response_format" not in bodies[-1] and backend.usage.format_fallbacks == 3
    assert backend.last_receipts == [[None]]


def test_a_400_that_does_not_name_the_format_is_an_error():
    transport, calls = _server([400])
    backend = OpenAIBackend("http://test/v1", "m", backoff_s=0, transport=transport)
    with pytest.raises(BackendError, match="HTTP 400"):
        backend.generate(PROMPTS[:1], response_format=FORMAT)
    assert len(calls) == 1 and backend.usage.format_fallbacks == 0


@pytest.mark.parametrize("evidence", [
    "bafy", ["bafy"], 7, {}, {"receipt_cid": None}, {"receipt_cid": 12},
    {"receipt_cid": ["bafy"]}, {"receipt_cid": "b" * 100_000}, {"receipt_cid": ""},
    {"receipt_cid": "bafy/../../etc"}, {"receipt_cid": "bafy\n"}])
def test_hostile_receipt_evidence_counts_as_absent(evidence):
    transport, _ = _format_server(refuse=False, evidence=evidence)
    backend = OpenAIBackend("http://test/v1", "m", backoff_s=0, transport=transport)
    assert backend.generate(PROMPTS[:1]) == [['{"answer": 4}']]
    assert backend.last_receipts == [[None]]
