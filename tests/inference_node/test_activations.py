"""Activation commitments from the engine's own decoding: the hidden states captured while
generating match the verifier's single prefill, in a batch and behind a cached library prefix,
and a different model, prompt or response still fails the check."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch
from node_helpers import MODEL_NAME, make_engine
from test_receipts import SNAPSHOT, bundle_of, offline_verify

from inference_node.activations import commit_activations, decode_hidden_states, verify_activations
from inference_node.engine import SamplingParams
from inference_node.errors import ReceiptError
from inference_node.injection import LibraryInjector

QUESTIONS = ["the farmer buys twelve apple", "count seven box and three box and one box",
             "verify", "north south east west and the red block of the chain"]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = make_engine(tiny_model_dir)
    yield engine
    engine.shutdown()


def generate_all(engine, prompts, capture=True, max_tokens=40):
    async def run():
        return await asyncio.gather(*[engine.generate(p, SamplingParams(
            max_tokens=max_tokens, temperature=0, capture_activations=capture))
            for p in prompts])

    return asyncio.run(run())


def prompts_of(engine, questions=QUESTIONS):
    injector = LibraryInjector(engine.tokenizer)
    return [injector.chat([{"role": "user", "content": q}], SNAPSHOT).prompt for q in questions]


def test_captured_states_are_the_prefill_states_in_a_batch(engine):
    """Four requests of different lengths decoded together (left padding, the library prefix
    from the KV cache): each one's captured states match one prefill over its own tokens."""
    prompts = prompts_of(engine)
    before = sum(n for size, n in engine.batch_sizes.items() if size > 1)
    results = generate_all(engine, prompts)
    assert sum(n for size, n in engine.batch_sizes.items() if size > 1) > before  # batched
    for prompt, result in zip(prompts, results, strict=True):
        assert prompt.prefix is not None
        assert len(result.activations) == len(result.token_ids) == 40
        assert result.activations[0].dtype == torch.bfloat16
        prefill = decode_hidden_states(engine.model, prompt.all_token_ids, result.token_ids)
        gap = (torch.stack(result.activations).float() - torch.stack(prefill).float()).abs()
        assert gap.max() < 0.05  # float rounding of cached, padded decoding, nothing more
        verify_activations(prefill, commit_activations(result.activations))


def test_no_capture_unless_asked(engine):
    (result,) = generate_all(engine, prompts_of(engine)[:1], capture=False, max_tokens=4)
    assert result.activations is None


def test_captured_commitment_still_rejects_other_model_prompt_and_response(
        engine, other_model_dir):
    from transformers import AutoModelForCausalLM

    prompt, other_prompt, third = prompts_of(engine, ["the farmer buys twelve apple",
                                                      "the farmer sells twelve apple",
                                                      "north south east west"])
    result, other_answer = generate_all(engine, [prompt, third])
    commitment = commit_activations(result.activations)
    ids, completion = prompt.all_token_ids, result.token_ids
    other_model = AutoModelForCausalLM.from_pretrained(other_model_dir)
    # One word of the prompt changed; another response of the same length. (TOPLOC's
    # tolerances let a one-token edit of the response pass the commitment: the signed
    # response digest is what binds the exact text.)
    for states in (decode_hidden_states(other_model, ids, completion),
                   decode_hidden_states(engine.model, other_prompt.all_token_ids, completion),
                   decode_hidden_states(engine.model, ids, other_answer.token_ids)):
        with pytest.raises(ReceiptError) as failure:
            verify_activations(states, commitment)
        assert failure.value.reason == "activation_mismatch"


def test_concurrent_signed_answers_verify(signing_node, tiny_model_dir):
    """Receipts of requests the node batched: each verifies with the model (one prefill)."""
    requests = [{"model": MODEL_NAME, "temperature": 0, "max_tokens": 6 + 3 * i,
                 "messages": [{"role": "user", "content": q}]} for i, q in enumerate(QUESTIONS)]

    async def ask_all():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*[client.post(
                f"{signing_node.base_url}/chat/completions", json=r) for r in requests])

    replies = asyncio.run(ask_all())
    for request, reply in zip(requests, replies, strict=True):
        assert reply.status_code == 200, reply.text
        checks = offline_verify(bundle_of(reply.json(), request), tiny_model_dir,
                                model_dir=tiny_model_dir)
        assert [c.name for c in checks[-3:]] == ["activations", "termination", "sampling"]
        assert all(c.passed for c in checks[-3:])


def test_verifying_keeps_torch_threads(engine):
    """toploc's verify sets torch to one thread per core; a verifier (or a node running one)
    must keep the thread count it chose."""
    (result,) = generate_all(engine, prompts_of(engine)[:1], max_tokens=4)
    before = torch.get_num_threads()
    verify_activations(result.activations, commit_activations(result.activations))
    assert torch.get_num_threads() == before == 1
