"""Library injection and prefix KV reuse: rendering, identity with and without reuse, isolation."""

from __future__ import annotations

import asyncio
import gc

import openai
import pytest
from node_helpers import MODEL_NAME, make_engine, run_server

from inference_node.engine import SamplingParams
from inference_node.injection import LIBRARY_INTRO, LibraryInjector, library_block
from inference_node.library import EMPTY_LIBRARY, LibrarySnapshot, StaticLibrarySource
from inference_node.transformers_engine import _find_stop, _pending_stop

QUESTIONS = ["the farmer buys twelve apple", "count seven box and three box",
             "verify the receipt root", "north south east west"]


def snapshot(*texts: str, version: str = "v1") -> LibrarySnapshot:
    return LibrarySnapshot(version, "0x01", len(texts), "00" * 32,
                           tuple((f"id{i}", t) for i, t in enumerate(texts)))


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    reuse = make_engine(tiny_model_dir)
    fresh = make_engine(tiny_model_dir, prefix_reuse=False)
    yield reuse, fresh
    reuse.shutdown()
    fresh.shutdown()


def test_library_block_matches_trainer_format():
    block = library_block(snapshot("check units", "re read the question"))
    assert block == f"{LIBRARY_INTRO}\n[G0]. check units\n[G1]. re read the question"
    assert library_block(EMPTY_LIBRARY) == ""


def test_chat_prompt_is_prefix_plus_rest(engines):
    tokenizer = engines[0].tokenizer
    injector = LibraryInjector(tokenizer)
    lib = snapshot("check each step", "answer with a number")
    messages = [{"role": "system", "content": "be fast"}, {"role": "user", "content": "one two"}]
    injected = injector.chat(messages, lib)
    prompt = injected.prompt
    assert prompt.prefix is not None and prompt.prefix.library_version == "v1"
    assert prompt.prefix.text.endswith("[G0]. check each step\n[G1]. answer with a number")
    text = tokenizer.decode(prompt.all_token_ids)
    assert "<unk>" not in text
    assert text.index("G1") < text.index("be fast") < text.index("one two")
    # one prefix object per library version and kind: what the KV cache is keyed on
    assert injector.chat([{"role": "user", "content": "x"}], lib).prompt.prefix is prompt.prefix
    assert injector.chat(messages, snapshot("other", version="v2")).prompt.prefix \
        is not prompt.prefix
    assert injector.chat(messages, EMPTY_LIBRARY).prompt.prefix is None
    completion = injector.completion("seven apple", lib).prompt
    assert completion.prefix.text == library_block(lib) + "\n\n"
    assert completion.all_token_ids[-2:] == list(tokenizer("seven apple")["input_ids"])


def test_greedy_identical_with_and_without_prefix_reuse(engines):
    reuse, fresh = engines
    injector = LibraryInjector(reuse.tokenizer)
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    lib = snapshot(*(f"experience {w} check each step and count the units" for w in words))
    params = SamplingParams(max_tokens=16, temperature=0, logprobs=True)

    async def run(engine):
        prompts = [injector.chat([{"role": "user", "content": q}], lib).prompt
                   for q in QUESTIONS]
        prompts.append(injector.completion("seven apple", lib).prompt)
        return await asyncio.gather(*(engine.generate(p, params) for p in prompts))

    before = reuse.prefix_cache.computations
    with_reuse, without = asyncio.run(run(reuse)), asyncio.run(run(fresh))
    assert [g.token_ids for g in with_reuse] == [g.token_ids for g in without]
    assert [g.text for g in with_reuse] == [g.text for g in without]
    for a, b in zip(with_reuse, without, strict=True):
        assert [x.logprob for x in a.logprobs] == pytest.approx([x.logprob for x in b.logprobs],
                                                                abs=1e-4)
    assert reuse.prefix_cache.computations == before + 2  # chat and completion prefixes, once
    assert fresh.prefix_cache.computations == 0


def test_shared_prefix_cache_is_never_extended(engines):
    """Copy-on-use: requests extend private copies; the cached prefix stays prefix-long."""
    reuse, _ = engines
    injector = LibraryInjector(reuse.tokenizer)
    lib = snapshot("answer with a number")
    prompts = [injector.chat([{"role": "user", "content": q}], lib).prompt for q in QUESTIONS]
    params = SamplingParams(max_tokens=8, temperature=0)

    async def run():
        first = await reuse.generate(prompts[0], params)
        await asyncio.gather(*(reuse.generate(p, params) for p in prompts[1:]))
        again = await reuse.generate(prompts[0], params)
        return first, again

    first, again = asyncio.run(run())
    assert first.token_ids == again.token_ids
    prefix = prompts[0].prefix
    cache = reuse.prefix_cache._entries[prefix]
    assert cache.get_seq_length() == len(prefix.token_ids)


def test_prefix_cache_follows_library_version(engines):
    reuse, _ = engines
    injector = LibraryInjector(reuse.tokenizer)
    params = SamplingParams(max_tokens=2, temperature=0)

    async def ask(lib):
        await reuse.generate(injector.chat([{"role": "user", "content": "one"}], lib).prompt,
                             params)

    start = reuse.prefix_cache.computations
    asyncio.run(ask(snapshot("red", version="a")))
    asyncio.run(ask(snapshot("red", version="a")))
    assert reuse.prefix_cache.computations == start + 1
    asyncio.run(ask(snapshot("blue", version="b")))
    assert reuse.prefix_cache.computations == start + 2
    gc.collect()
    assert len(reuse.prefix_cache) == 1  # version a's cache went with its prefix


def test_stop_helpers():
    assert _find_stop("one two three", ("two",), 0) == 4
    assert _find_stop("one two three", ("zzz",), 0) is None
    assert _pending_stop("one tw", ("two",)) == 2
    assert _pending_stop("one tw", ("xyz",)) == 0
    assert _pending_stop("ab", ("abc", "b")) == 2


def test_library_swap_keeps_in_flight_requests_on_their_snapshot(tiny_model_dir):
    old, new = snapshot("check each step", version="old"), snapshot("blue red", version="new")
    source = StaticLibrarySource(snapshot=old)
    messages = [{"role": "user", "content": "the farmer buys twelve apple"}]
    engine = make_engine(tiny_model_dir)
    with run_server(engine, source) as server, \
            openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        def ask(**kwargs):
            return client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                                  temperature=0, max_tokens=300, **kwargs)

        reference = ask().choices[0].message.content
        stream = ask(stream=True)
        chunks = [next(stream), next(stream)]
        source.replace(new)  # mid-flight
        chunks += list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text == reference
        assert {c.system_fingerprint for c in chunks} == {"library-old"}
        after = ask()
        assert after.system_fingerprint == "library-new"
        assert after.choices[0].message.content != reference
        assert engine.prefix_cache.computations == 2
