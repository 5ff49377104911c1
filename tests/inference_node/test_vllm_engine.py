"""`VLLMEngine` against `TransformersEngine` on the same weights, and the node served by vLLM.

Needs vLLM (`scripts/setup_vllm.sh` on a CPU machine); the tests marked `vllm` are skipped
without it. vLLM's CPU attention takes head sizes from 32 up, so these tests use the tiny test
model's tokenizer and shape with 32-dimensional heads (`vllm_model_dir`). One engine serves the
whole module (starting vLLM takes about 20 seconds here); the server tests come last because
the server's shutdown stops the engine. One slow test compares the engines on the real SmolLM2
checkpoint, compiled as a node runs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import sys

import httpx
import openai
import pytest
from node_helpers import (
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    SNAPSHOT,
    WORDS,
    answer_over_http,
    honest_requests,
    make_engine,
    needs_vllm,
    run_server,
)

from inference_node.engine import EngineError, SamplingParams
from inference_node.errors import SamplingError
from inference_node.injection import LibraryInjector
from inference_node.library import LibrarySnapshot, StaticLibrarySource
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    bundle_json,
    model_digest,
    parse_receipt,
)
from inference_node.sampling import check_completion
from inference_node.transformers_engine import TransformersEngine

BLOCK = 32  # vLLM's KV block size in these tests: prefix caching reuses whole blocks
GREEDY = SamplingParams(max_tokens=16, temperature=0.0)
KEY = hashlib.sha256(b"a normalized request").digest()  # the sampler's request key
OTHER_KEY = hashlib.sha256(b"another request").digest()
# (temperature, top_p) the sampler runs at: greedy, the full softmax, and a nucleus
SAMPLER_SETTINGS = [(0.0, 1.0), (1.0, 1.0), (0.8, 0.9)]
QUESTIONS = ["the farmer buys twelve apple , how many box ?",
             "count the red and blue box to the north",
             "verify the receipt of the node and answer with a number"]
# A library long enough to fill several KV blocks with its prefix.
BIG_LIBRARY = LibrarySnapshot("big", "0x09", 6, "cd" * 32, tuple(
    (f"bafy-{i}", " ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(12))) for i in range(6)))


def run(coro):
    return asyncio.run(coro)


async def collect(engine, prompt, params):
    return [delta async for delta in engine.stream(prompt, params)]


@pytest.fixture(scope="module")
def engine(vllm_model_dir):
    from inference_node.vllm_engine import VLLMEngine

    engine = VLLMEngine.from_pretrained(vllm_model_dir, model_name=MODEL_NAME, enforce_eager=True,
                                        block_size=BLOCK, max_batch=4, kv_cache_gib=0.25)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def reference(vllm_model_dir):
    """`TransformersEngine` on the same weights."""
    engine = make_engine(vllm_model_dir)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def injector(engine):
    return LibraryInjector(engine.tokenizer)


def prompts(injector):
    """Chat prompts under a short and a long library, and a completion prompt."""
    return [injector.chat([{"role": "user", "content": QUESTIONS[0]}], SNAPSHOT).prompt,
            injector.chat([{"role": "user", "content": QUESTIONS[1]}], BIG_LIBRARY).prompt,
            injector.completion(QUESTIONS[2], SNAPSHOT).prompt]


def sampled(temperature, top_p, seed=11, key=KEY, max_tokens=12, **kw):
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                          seed=seed, request_key=key, **kw)


def more_prompts(injector):
    """`prompts` and three more chat prompts."""
    return prompts(injector) + [
        injector.chat([{"role": "user", "content": f"{q} {WORDS[5 * i]}"}], SNAPSHOT).prompt
        for i, q in enumerate(QUESTIONS)]


def prefill_logits(model, prompt, token_ids):
    """The verifier's logits: one transformers prefill over prompt + completion, the rows that
    produced each completion token."""
    import torch

    ids = list(prompt.all_token_ids) + list(token_ids[:-1])
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    return logits[len(prompt.all_token_ids) - 1:].float()


def test_without_vllm_the_engine_says_how_to_install_it(monkeypatch, tmp_path):
    from inference_node.vllm_engine import VLLMEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(EngineError, match="setup_vllm.sh"):
        VLLMEngine.from_pretrained(tmp_path)


@needs_vllm
def test_greedy_output_equals_transformers(engine, reference, injector):
    for prompt in prompts(injector):
        ours = run(engine.generate(prompt, GREEDY))
        theirs = run(reference.generate(prompt, GREEDY))
        assert ours.token_ids == theirs.token_ids
        # Same tokens; the word-level test tokenizer has no decoder, and vLLM's incremental
        # detokenizer puts a space before the first word where `decode` does not.
        assert ours.text.lstrip() == theirs.text
        assert (ours.finish_reason, ours.prompt_tokens, ours.completion_tokens) == (
            "length", len(prompt), 16)


@pytest.mark.slow
@needs_vllm
def test_smollm2_greedy_output_equals_transformers():
    """The real checkpoint, as a node runs it (compiled, float32): same tokens, same text,
    greedy and sampled (gym-sampler/1 on both engines' logits)."""
    from inference_node.vllm_engine import VLLMEngine
    from trainer.backends import default_model_dir

    model_dir = default_model_dir()
    library = LibrarySnapshot("smol", "0x01", 2, "ab" * 32, (
        ("bafy-a", "Check units before adding."), ("bafy-b", "Re-read the question.")))
    engine = VLLMEngine.from_pretrained(model_dir)
    reference = TransformersEngine.from_pretrained(model_dir, device="cpu")
    try:
        injector = LibraryInjector(engine.tokenizer)
        for params in (SamplingParams(max_tokens=32, temperature=0.0),
                       sampled(0.8, 0.9, max_tokens=32), sampled(1.0, 1.0, max_tokens=32)):
            for question in ("What is 12 + 7?", "Name three primary colors.",
                             "A farmer has 3 boxes of 12 apples. How many apples?"):
                prompt = injector.chat([{"role": "user", "content": question}], library).prompt
                ours = run(engine.generate(prompt, params))
                theirs = run(reference.generate(prompt, params))
                assert (ours.token_ids, ours.text) == (theirs.token_ids, theirs.text)
    finally:
        engine.shutdown()
        reference.shutdown()


@needs_vllm
def test_stream_deltas_concatenate_to_the_answer(engine, injector):
    prompt = prompts(injector)[0]
    deltas = run(collect(engine, prompt, GREEDY))
    whole = run(engine.generate(prompt, GREEDY))
    assert "".join(d.text for d in deltas) == whole.text
    assert [t for d in deltas for t in d.token_ids] == whole.token_ids
    assert all(d.finish_reason is None for d in deltas[:-1])
    last = deltas[-1]
    assert (last.finish_reason, last.completion_tokens, last.prompt_tokens) == (
        "length", 16, len(prompt))
    assert len(deltas) > 1  # streamed, not handed over at the end


@needs_vllm
def test_stop_string_ends_the_answer_and_is_never_shown(engine, reference, injector):
    prompt = prompts(injector)[1]
    free = run(reference.generate(prompt, GREEDY)).text.split()
    stop = " ".join(free[4:6])  # two words from the middle of the greedy answer
    params = SamplingParams(max_tokens=16, temperature=0.0, stop=(stop,))
    deltas = run(collect(engine, prompt, params))
    text = "".join(d.text for d in deltas)
    expected = run(reference.generate(prompt, params))
    assert expected.finish_reason == deltas[-1].finish_reason == "stop"
    assert stop not in text and text.lstrip() == expected.text
    assert text.split() == free[:4]


@needs_vllm
@pytest.mark.parametrize("temperature,top_p", SAMPLER_SETTINGS)
def test_sampler_output_equals_transformers(engine, reference, injector, temperature, top_p):
    """Both engines choose every token with gym-sampler/1 on their own logits: same tokens for
    the same request (seed and request key), and a transformers prefill verifies them."""
    params = sampled(temperature, top_p)
    margins = []
    for prompt in more_prompts(injector):
        ours = run(engine.generate(prompt, params))
        theirs = run(reference.generate(prompt, params))
        check = check_completion(prefill_logits(reference.model, prompt, ours.token_ids),
                                 ours.token_ids, temperature=temperature, top_p=top_p,
                                 seed=params.seed, request_key=KEY)
        margins.append(check.min_margin)
        assert ours.token_ids == theirs.token_ids, f"smallest margin {check.min_margin}"
        assert check.ok and check.tolerated == 0
        assert ours.text.lstrip() == theirs.text
        assert ours.completion_tokens == 12
    assert min(margins) > 1e-3  # no near-tie decided these tokens


def knob_cases(eos: frozenset[int]) -> list[tuple[str, dict, dict]]:
    """gym-sampler/2's knobs, and the stopping ones, as (name, SamplingParams fields, Knobs
    fields): each changes the tiny model's answer."""
    stop_ids = frozenset(eos)
    end = min(eos)
    return [
        ("penalties", {}, {"repetition_penalty": 1.6, "frequency_penalty": 0.8,
                               "presence_penalty": 0.4}),
        ("bias and filters", {}, {"logit_bias": ((5, 3.0), (9, -50.0)), "min_p": 0.05, "top_k": 8}),
        ("min_tokens", {}, {"min_tokens": 6, "min_tokens_ids": stop_ids,
                                "logit_bias": ((end, 100.0),)}),
        ("ignore_eos", {"ignore_eos": True}, {"logit_bias": ((end, 100.0),)}),
        ("stop_token_ids", {"stop_token_ids": (7,)}, {"logit_bias": ((7, 100.0),)}),
    ]


@needs_vllm
@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (0.9, 0.9)])
def test_sampler_knobs_output_equals_transformers(engine, reference, injector, temperature,
                                                  top_p):
    """gym-sampler/2 on both engines: the same tokens, text and finish for every knob (vLLM's
    penalties read the prompt ids it hands the processor), and the verifier's check with the
    knobs passes on a transformers prefill."""
    from inference_node.sampler_knobs import Knobs

    for name, fields, knob_fields in knob_cases(reference.eos_ids):
        knobs = Knobs(**knob_fields)
        params = sampled(temperature, top_p, knobs=knobs, **fields)
        for prompt in prompts(injector):
            ours = run(engine.generate(prompt, params))
            theirs = run(reference.generate(prompt, params))
            assert ours.token_ids == theirs.token_ids, name
            assert (ours.text.lstrip(), ours.finish_reason) == (theirs.text, theirs.finish_reason)
            check = check_completion(prefill_logits(reference.model, prompt, ours.token_ids),
                                     ours.token_ids, temperature=temperature, top_p=top_p,
                                     seed=params.seed, request_key=KEY, knobs=knobs,
                                     prompt_ids=list(prompt.all_token_ids))
            assert check.ok and check.sampler == "gym-sampler/2", (name, check)
            plain = run(reference.generate(prompt, dataclasses.replace(
                params, knobs=None, ignore_eos=False, stop_token_ids=())))
            assert plain.token_ids != theirs.token_ids, name  # the knobs did something


@needs_vllm
def test_seeded_sampling_depends_on_seed_and_request_key_only(engine, injector):
    """Same seed and key: the same tokens. Another seed or another key: other tokens (on at
    least one prompt; each is a fresh draw, so a single prompt could coincide)."""
    def sample(prompt, **kw):
        return run(engine.generate(prompt, sampled(1.0, 0.95, **kw))).token_ids

    cases = more_prompts(injector)
    first = [sample(p) for p in cases]
    assert [sample(p) for p in cases] == first
    assert [sample(p, seed=12) for p in cases] != first
    assert [sample(p, key=OTHER_KEY) for p in cases] != first
    greedy = [run(engine.generate(p, sampled(0.0, 1.0))).token_ids for p in cases]
    assert first != greedy  # sampling at temperature 1 is not greedy decoding


@needs_vllm
def test_an_unseeded_request_gets_a_seed_of_its_own(engine):
    """vLLM never sees a seed; the sampler's comes from `resolve_seed` when the request has
    none, and travels in extra_args with the request key."""
    unseeded = engine._vllm_params(SamplingParams(max_tokens=4, temperature=0.7, top_p=0.9))
    assert (unseeded.temperature, unseeded.top_p, unseeded.seed) == (0.0, 1.0, None)
    args = unseeded.extra_args["gym_sampler"]
    assert (args["temperature"], args["top_p"], args["key"]) == (0.7, 0.9, bytes(32).hex())
    assert 0 <= int(args["seed"], 16) < 2**52
    seeded = engine._vllm_params(sampled(0.7, 0.9, seed=2**64 - 1))
    assert seeded.extra_args["gym_sampler"]["seed"] == "f" * 16
    assert seeded.extra_args["gym_sampler"]["key"] == KEY.hex()


@needs_vllm
def test_logprobs_are_the_models_own_when_sampling(engine, reference, injector):
    """The processor leaves only the chosen token finite, after vLLM took the logprobs from the
    raw logits: they are still the model's (as transformers computes them), not 0."""
    prompt = prompts(injector)[1]
    params = sampled(1.0, 1.0, max_tokens=6, logprobs=True, top_logprobs=3)
    ours = run(engine.generate(prompt, params))
    theirs = run(reference.generate(prompt, params))
    assert ours.token_ids == theirs.token_ids
    for mine, ref in zip(ours.logprobs, theirs.logprobs, strict=True):
        assert mine.logprob == pytest.approx(ref.logprob, abs=1e-3) and mine.logprob < -0.01
        assert [t for t, _ in mine.top] == [t for t, _ in ref.top]
        assert [v for _, v in mine.top] == pytest.approx([v for _, v in ref.top], abs=1e-3)
    assert any(m.top[0][0] != m.token for m in ours.logprobs)  # sampled, not the argmax


@needs_vllm
def test_logprobs_agree_with_transformers(engine, reference, injector):
    prompt = prompts(injector)[0]
    params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=True, top_logprobs=3)
    ours = run(engine.generate(prompt, params))
    theirs = run(reference.generate(prompt, params))
    assert len(ours.logprobs) == len(ours.token_ids) == 6
    for mine, ref, token in zip(ours.logprobs, theirs.logprobs, ours.token_ids, strict=True):
        assert mine.token_id == token == ref.token_id and mine.token == ref.token
        assert mine.logprob == pytest.approx(ref.logprob, abs=1e-3)
        assert [t for t, _ in mine.top] == [t for t, _ in ref.top]
        assert [v for _, v in mine.top] == pytest.approx([v for _, v in ref.top], abs=1e-3)
        assert mine.top[0] == (mine.token, pytest.approx(mine.logprob))  # greedy: the best


@needs_vllm
def test_library_prefix_is_served_from_the_prefix_cache(engine, injector):
    first, second = (injector.chat([{"role": "user", "content": q}], BIG_LIBRARY).prompt
                     for q in QUESTIONS[1:])
    assert first.prefix is second.prefix and len(first.prefix.token_ids) >= 3 * BLOCK
    reusable = len(first.prefix.token_ids) // BLOCK * BLOCK

    def cached_tokens(prompt):
        before = engine.prompt_tokens_cached
        result = run(engine.generate(prompt, GREEDY))
        return engine.prompt_tokens_cached - before, result

    cached_tokens(first)  # the library's blocks are in the cache from here on
    hits, answer = cached_tokens(second)
    assert reusable <= hits < len(second)
    again, repeated = cached_tokens(second)
    assert again >= hits
    assert repeated.token_ids == answer.token_ids  # same greedy answer from cached blocks


@needs_vllm
def test_concurrent_requests_queue_and_keep_their_own_answers(engine, injector):
    batch = [injector.chat([{"role": "user", "content": f"{q} {WORDS[i]}"}], SNAPSHOT).prompt
             for i, q in enumerate(QUESTIONS * 4)]  # 12 requests, max_batch 4
    alone = [run(engine.generate(p, GREEDY)).token_ids for p in batch]

    async def together():
        tasks = [asyncio.create_task(engine.generate(p, GREEDY)) for p in batch]
        depths = []
        while not all(t.done() for t in tasks):
            depths.append(engine.queue_depth())
            await asyncio.sleep(0.01)
        return [t.result() for t in tasks], depths

    results, depths = run(together())
    assert [r.token_ids for r in results] == alone
    assert max(depths) >= len(batch) - 4  # beyond max_batch they waited for a free slot
    assert engine.queue_depth() == 0


@needs_vllm
def test_sampled_requests_in_one_batch_get_the_tokens_they_get_alone(engine, injector):
    """Rows join, leave and move in vLLM's batch; each request still gets its own sampler
    inputs and positions: requests of different settings, seeds, keys and lengths, together."""
    cases = [(prompt, sampled(temperature, top_p, seed=seed, key=key, max_tokens=length))
             for prompt, (temperature, top_p), seed, key, length in zip(
                 more_prompts(injector) * 2, SAMPLER_SETTINGS * 4, range(1, 13),
                 [KEY, OTHER_KEY] * 6, [5, 9, 14, 7] * 3, strict=False)]
    alone = [run(engine.generate(p, params)).token_ids for p, params in cases]

    async def together():
        return await asyncio.gather(*(engine.generate(p, params) for p, params in cases))

    assert [r.token_ids for r in run(together())] == alone
    assert [len(a) for a in alone] == [params.max_tokens for _, params in cases]


@needs_vllm
def test_closing_a_stream_aborts_the_request(engine, injector):
    prompt = prompts(injector)[0]

    async def first_delta_then_close():
        stream = engine.stream(prompt, SamplingParams(max_tokens=200, temperature=0.0))
        delta = await anext(stream)
        await stream.aclose()
        return delta

    assert run(first_delta_then_close()).finish_reason is None
    assert engine.queue_depth() == 0
    assert run(engine.generate(prompt, GREEDY)).completion_tokens == 16  # still serving


@needs_vllm
@pytest.mark.parametrize("bad,match", [
    ({"seed": 2**64}, "seed"), ({"seed": -1}, "seed"), ({"top_p": 0.0}, "top_p"),
    ({"temperature": -0.5}, "temperature"), ({"request_key": b"short"}, "request_key")])
def test_sampler_inputs_outside_its_domain_fail_alone(engine, injector, bad, match):
    """vLLM's engine core once failed every request scheduled with a seed beyond 64 bits; the
    sampler's inputs are now checked when vLLM admits the request (GymSampler.validate_params)
    or before, and a bad one fails its own request only."""
    prompt = prompts(injector)[0]

    async def together():
        good = [engine.generate(prompt, sampled(1.0, 0.9, seed=i, max_tokens=4))
                for i in range(3)]
        wrong = engine.generate(prompt, dataclasses.replace(sampled(1.0, 0.9, max_tokens=4),
                                                           **bad))
        return await asyncio.gather(*good, wrong, return_exceptions=True)

    *answers, failure = run(together())
    assert [a.completion_tokens for a in answers] == [4, 4, 4]
    assert isinstance(failure, EngineError) and match in str(failure)
    assert "refused" in str(failure)
    assert run(engine.generate(prompt, GREEDY)).completion_tokens == 16  # still serving


@needs_vllm
def test_batched_greedy_rows_get_the_samplers_own_tokens():
    """`greedy_tokens` (one argmax for a step's greedy rows) picks what `choose` picks row by
    row, ties (the lowest id) and -inf included; a row `choose` refuses is left to it."""
    import torch

    from inference_node.sampling import choose
    from inference_node.vllm_sampler import greedy_tokens

    generator = torch.Generator().manual_seed(49)
    logits = torch.randn(9, 300, generator=generator).round(decimals=1)  # many exact ties
    logits[2, :150] = float("-inf")
    logits[3, 7] = logits[3, 200] = logits[3].max() + 1  # a tie for the top: id 7 wins
    logits[5, 11] = float("nan")
    logits[6] = float("-inf")
    rows = [0, 2, 3, 4, 5, 6, 8]
    picked = greedy_tokens(logits, rows)
    assert set(picked) == {0, 2, 3, 4, 8} and picked[3] == 7
    for row, token in picked.items():
        assert token == choose(logits[row], temperature=0.0, top_p=1.0, seed=1,
                               request_key=KEY, position=0).token
    for row in (5, 6):
        with pytest.raises(SamplingError):
            choose(logits[row], temperature=0.0, top_p=1.0, seed=1, request_key=KEY,
                   position=0)
    assert greedy_tokens(logits, [4]) == {}  # one row: choose itself


@needs_vllm
def test_the_processor_checks_its_extra_args():
    """What `GymSampler.validate_params` refuses (a ValueError: vLLM answers 400), and that a
    request without the sampler's extra argument is left alone."""
    from vllm import SamplingParams as VLLMSamplingParams

    from inference_node.vllm_engine import SAMPLER_PROCESSOR
    from inference_node.vllm_sampler import GymSampler, sampler_args

    module, name = SAMPLER_PROCESSOR.split(":")
    assert getattr(__import__(module, fromlist=[name]), name) is GymSampler
    good = sampler_args(0.8, 0.9, 2**64 - 1, KEY)
    GymSampler.validate_params(VLLMSamplingParams(extra_args=good))
    GymSampler.validate_params(VLLMSamplingParams())
    for broken in ({**good["gym_sampler"], "seed": "zz"}, {**good["gym_sampler"], "key": "ab"},
                   {**good["gym_sampler"], "top_p": 1.5}, {"temperature": 1.0}, "x"):
        with pytest.raises(ValueError):
            GymSampler.validate_params(VLLMSamplingParams(extra_args={"gym_sampler": broken}))
    with pytest.raises(SamplingError):
        sampler_args(1.0, 1.0, 1.5, KEY)


@needs_vllm
def test_openai_sdk_against_a_node_served_by_vllm(engine, injector, library_file):
    source = StaticLibrarySource.from_file(library_file)
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    direct = run(engine.generate(injector.chat(messages, source.current()).prompt, GREEDY))
    with run_server(engine, source, keep_engine=True) as node, openai.OpenAI(
            base_url=node.base_url, api_key="x", max_retries=0) as client:
        assert [m.id for m in client.models.list().data] == [MODEL_NAME]
        reply = client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                               max_tokens=16, temperature=0)
        assert reply.choices[0].message.content == direct.text
        assert reply.usage.completion_tokens == 16
        stream = client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                                max_tokens=16, temperature=0, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream
                       if c.choices) == direct.text
        health = httpx.get(f"{node.root_url}/health").json()
        assert health["status"] == "ok" and health["queue_depth"] == 0


@needs_vllm
def test_concurrent_receipts_are_signed_from_vllms_own_decode_states(engine, vllm_model_dir,
                                                                     gym_env, tmp_path,
                                                                     monkeypatch):
    """Issue 49: sixteen concurrent answers (chat and completion, greedy and sampled, streamed
    and not, stop strings; batched four at a time) signed by a node whose signer holds no
    model: each commitment is built from the states vLLM's own forward passes computed (the
    signer never loads the transformers copy, and vLLM recorded every state), and each receipt
    verifies with the verifier's prefill, in full, and one with `gym verify receipt --model`.
    The share of TOPLOC's tolerance each commitment uses is printed."""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from inference_node import verify
    from inference_node.activations import tolerance_used

    loads: list[int] = []
    signer = ReceiptSigner(NODE_KEY, DOMAIN, None, model_digest(vllm_model_dir),
                           model_loader=lambda: loads.append(1) or engine.model)
    recomputed = engine.activations_recomputed
    requests = list(honest_requests(16))
    with run_server(engine, StaticLibrarySource(), receipts=signer, keep_engine=True) as node, \
            ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(lambda r: answer_over_http(node.base_url, *r), requests))
        metrics = node.app.state.serving.metrics.render().decode()
    for stage in ("commitment", "signature", "receipt"):  # itemized in /metrics, off the path
        assert f'gym_node_stage_seconds_count{{stage="{stage}"}} 16.0' in metrics, stage
    assert loads == [] and signer.model is None  # no second copy of the weights for signing
    assert engine.activations_recomputed == recomputed

    used: list[float] = []
    checked = verify.verify_activations

    def measured(states, commitment):
        used.append(tolerance_used(states, commitment))
        return checked(states, commitment)

    monkeypatch.setattr(verify, "verify_activations", measured)
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(vllm_model_dir)
    bundles = []
    for (route, body, _), (receipt, evidence, text) in zip(requests, answers, strict=True):
        bundle = bundle_json(parse_receipt(receipt), ReceiptDomain.from_json(
            evidence["domain"]), route=route, request=body, text=text,
            completion_token_ids=evidence["completion_token_ids"])
        checks = verify.verify_receipt_bundle(bundle, model=model, tokenizer=tokenizer,
                                              model_dir=vllm_model_dir)
        assert all(c.passed for c in checks[-3:]), (route, body)
        bundles.append(bundle)
    assert len(used) == len(requests) and max(used) < 1
    print(f"\n{len(used)} vLLM-captured commitments use at most {max(used):.2%} of TOPLOC's "
          f"tolerance (mean {sum(used) / len(used):.2%}): "
          + ", ".join(f"{u:.2%}" for u in used))
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundles[1]))
    done = gym_env.run("verify", "receipt", str(path), "--offline", "--model",
                       str(vllm_model_dir), timeout=300)
    assert done.returncode == 0 and "activations" in done.stdout, done.stdout + done.stderr


@needs_vllm
def test_states_of_chunked_prefills_and_preempted_requests_are_the_last_recorded(
        vllm_model_dir, injector, capsys):
    """A prompt longer than the step's token budget is prefilled in chunks, each of which
    records a state for position 0: the state kept is the last chunk's, the one that chose the
    first token. On a KV cache too small for two answers at once, vLLM preempts one (its own
    counter says so) and, with no prefix cache to resume from, recomputes prompt and answer so
    far: every state of the preempted answers is still captured (none re-computed by the
    node) and verifies against the verifier's prefill. The margins are printed."""
    from prometheus_client import REGISTRY
    from transformers import AutoModelForCausalLM

    from inference_node.activations import (
        commit_activations,
        decode_hidden_states,
        tolerance_used,
    )
    from inference_node.vllm_engine import VLLMEngine

    def preemptions():
        return sum(sample.value for metric in REGISTRY.collect() for sample in metric.samples
                   if sample.name == "vllm:num_preemptions_total")

    question = " ".join(QUESTIONS * 8)
    long_prompt = injector.completion(question, BIG_LIBRARY).prompt
    assert len(long_prompt.all_token_ids) > 8 * 32  # nine chunks or more
    # two answers of 200 + 100 tokens need 20 blocks of 32 at their end; the cache holds 17
    pair = [injector.completion(" ".join(QUESTIONS[i:] + QUESTIONS[:i]) * 6, BIG_LIBRARY).prompt
            for i in range(2)]
    pair = [dataclasses.replace(p, token_ids=p.token_ids[:200 - len(p.prefix.token_ids)])
            for p in pair]
    assert [len(p.all_token_ids) for p in pair] == [200, 200]
    config = json.loads((vllm_model_dir / "config.json").read_text())
    token_bytes = config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * 32 * 4
    small = VLLMEngine.from_pretrained(vllm_model_dir, model_name=MODEL_NAME,
                                       enforce_eager=True, block_size=BLOCK, max_batch=2,
                                       max_model_len=512, max_num_batched_tokens=32,
                                       kv_cache_gib=17 * BLOCK * token_bytes / (1 << 30),
                                       prefix_reuse=False, disable_log_stats=False)
    before = preemptions()
    try:
        params = dataclasses.replace(sampled(0.0, 1.0, max_tokens=2), capture_activations=True)
        chunked = run(small.generate(long_prompt, params))

        async def both():
            return await asyncio.gather(*(small.generate(p, dataclasses.replace(
                sampled(0.8, 0.95, seed=i, max_tokens=100), capture_activations=True,
                ignore_eos=True)) for i, p in enumerate(pair)))

        preempted = run(both())
        assert small.activations_recomputed == 0
    finally:
        small.shutdown()
    assert preemptions() > before
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir).eval()
    used = []
    for prompt, result in [(long_prompt, chunked), *zip(pair, preempted)]:
        assert result.activations is not None
        assert len(result.activations) == len(result.token_ids)
        states = decode_hidden_states(model, prompt.all_token_ids, result.token_ids)
        used.append(tolerance_used(states, commit_activations(result.activations)))
    assert max(used) < 1
    with capsys.disabled():
        print(f"\nchunked prefill and preempted answers' commitments use "
              f"{', '.join(f'{u:.2%}' for u in used)} of TOPLOC's tolerance")


@needs_vllm
def test_receipt_of_a_vllm_answer_verifies_with_gym_verify_receipt(engine, vllm_model_dir,
                                                                   gym_env, tmp_path):
    """The node signs what vLLM generated, its commitment computed by a transformers prefill;
    `gym verify receipt --model` repeats that prefill and accepts it. (No library: its texts
    would need the chain, which test_receipts and test_sync cover for every engine.)"""

    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(vllm_model_dir))
    request = {"model": MODEL_NAME, "temperature": 0, "max_tokens": 8,
               "messages": [{"role": "user", "content": QUESTIONS[0]}]}
    with run_server(engine, StaticLibrarySource(), receipts=signer,
                    keep_engine=True) as node:
        body = httpx.post(f"{node.base_url}/chat/completions", json=request, timeout=120).json()
    evidence = body["receipt_evidence"]
    bundle = bundle_json(parse_receipt(body["receipt"]), ReceiptDomain.from_json(
        evidence["domain"]), route="chat", request=request,
        text=body["choices"][0]["message"]["content"],
        completion_token_ids=evidence["completion_token_ids"])
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(bundle))
    bundle["response"]["text"] += " seven"
    bad.write_text(json.dumps(bundle))
    verified = gym_env.run("verify", "receipt", str(good), "--offline", "--model",
                           str(vllm_model_dir), timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "activations" in verified.stdout and "FAILS" not in verified.stdout
    tampered = gym_env.run("verify", "receipt", str(bad), "--offline", timeout=300)
    assert tampered.returncode == 1 and "response_digest" in tampered.stdout + tampered.stderr


@needs_vllm
def test_abandoned_requests_are_aborted_in_vllm(engine):
    """A non-streamed request whose client leaves is aborted in vLLM: the engine is idle again
    without having finished it, the server counts it as 499 and answers the next request."""
    with run_server(engine, StaticLibrarySource(), keep_engine=True) as node:
        serving = node.app.state.serving

        async def scenario() -> str:
            async with httpx.AsyncClient(base_url=node.base_url, timeout=300) as client:
                body = {"model": MODEL_NAME, "max_tokens": 3000, "ignore_eos": True,
                        "messages": [{"role": "user", "content": QUESTIONS[0]}]}
                tasks = [asyncio.create_task(client.post("/chat/completions", json=body))
                         for _ in range(4)]
                while engine.running() + serving.queue_depth() < 4 or engine.running() == 0:
                    assert not any(t.done() for t in tasks)
                    await asyncio.sleep(0.01)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                while engine.running() or serving.queue_depth():
                    await asyncio.sleep(0.05)
                reply = await client.post("/chat/completions", json={**body, "max_tokens": 4})
                assert reply.status_code == 200
                return (await client.get(f"{node.root_url}/metrics")).text

        metrics = run(asyncio.wait_for(scenario(), 300))
    assert 'route="/v1/chat/completions",status="499"} 4.0' in metrics
    assert "gym_node_generation_tokens_total 4.0" in metrics  # only the last request


@needs_vllm
def test_honest_receipts_of_a_vllm_node_verify(engine, vllm_model_dir):
    """Sixty varied answers of a signing vLLM node (chat and completion, streamed and not,
    greedy and sampled, stop strings): each receipt verifies in full with a transformers
    prefill (activations, termination, every token's sampling); near-ties are counted."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from inference_node.verify import verify_receipt_bundle

    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(vllm_model_dir))
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(vllm_model_dir)
    near_ties = tokens = 0
    endings = set()
    with run_server(engine, StaticLibrarySource(), receipts=signer,
                    keep_engine=True) as node:
        for route, body, stream in honest_requests(60):
            receipt, evidence, text = answer_over_http(node.base_url, route, body, stream)
            bundle = bundle_json(parse_receipt(receipt), ReceiptDomain.from_json(
                evidence["domain"]), route=route, request=body, text=text,
                completion_token_ids=evidence["completion_token_ids"])
            checks = verify_receipt_bundle(bundle, model=model, tokenizer=tokenizer,
                                           model_dir=vllm_model_dir)
            assert [c.name for c in checks[-3:]] == ["activations", "termination", "sampling"]
            assert all(c.passed for c in checks[-3:]), (route, body, stream)
            near_ties += checks[-1].near_ties
            tokens += len(evidence["completion_token_ids"])
            endings.add(parse_receipt(receipt).finish_reason)
    assert endings == {"stop", "length"}
    print(f"\n60 honest vLLM receipts, {tokens} tokens: {near_ties} near-ties")


@needs_vllm
def test_a_node_whose_vllm_engine_process_died_answers_503_on_health(vllm_model_dir):
    """The engine process killed under a running node: /health turns 503 with the reason (it
    said "ok" while every request failed), and a request fails at once instead of hanging."""
    import os
    import signal
    import time

    import psutil

    from inference_node.vllm_engine import VLLMEngine

    def engine_processes() -> set[int]:
        return {p.pid for p in psutil.Process().children(recursive=True)
                if p.name().startswith("VLLM::EngineCor")}

    before = engine_processes()
    engine = VLLMEngine.from_pretrained(vllm_model_dir, model_name=MODEL_NAME, enforce_eager=True,
                                        block_size=BLOCK, max_batch=2, kv_cache_gib=0.25)
    try:
        with run_server(engine, StaticLibrarySource()) as node:
            assert httpx.get(f"{node.root_url}/health").status_code == 200
            mine = engine_processes() - before
            assert len(mine) == 1
            os.kill(mine.pop(), signal.SIGKILL)
            deadline = time.monotonic() + 60
            while (health := httpx.get(f"{node.root_url}/health")).status_code == 200:
                assert time.monotonic() < deadline, "/health still 200 a minute after the kill"
                time.sleep(0.5)
            assert health.status_code == 503
            body = health.json()
            assert body["status"] == "failed"
            assert body["engine_error"].startswith("the vLLM engine process died")
            reply = httpx.post(f"{node.base_url}/chat/completions", timeout=30, json={
                "model": MODEL_NAME, "max_tokens": 4,
                "messages": [{"role": "user", "content": QUESTIONS[0]}]})
            assert reply.status_code == 500
    finally:
        engine.shutdown()
