"""`response_format` on the local backend: grammar-constrained decoding with xgrammar.

The tiny random model writes garbage when left free, so every completion that parses and
validates here does so because of the grammar.
"""

import json

import jsonschema
import pytest

from trainer.grammar import GrammarError, grammar_text, schema_text

PROMPTS = [[{"role": "user", "content": "What is 2 + 2?"}],
           [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "Hi"}]]
SCHEMA = {
    "type": "object",
    "properties": {
        "op": {"type": "string", "enum": ["ADD", "DELETE", "KEEP"]},
        "meta": {"type": "object",
                 "properties": {"why": {"type": "string", "maxLength": 12},
                                "score": {"type": "integer", "minimum": 0, "maximum": 99}},
                 "required": ["why", "score"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                 "minItems": 1, "maxItems": 3},
    },
    "required": ["op", "meta", "tags"], "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "op", "schema": SCHEMA, "strict": True}}


def valid(text: str) -> bool:
    jsonschema.validate(json.loads(text), SCHEMA)
    return True


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sampled_completions_follow_the_schema(tiny_backend, seed):
    out = tiny_backend.generate(PROMPTS, n=4, temperature=1.0, max_new_tokens=160, seed=seed,
                                response_format=FORMAT)
    assert all(valid(text) for row in out for text in row)
    assert len({text for row in out for text in row}) > 1  # still sampled, not one answer
    assert tiny_backend.last_receipts == [[None] * 4, [None] * 4]


def test_greedy_and_seeded_completions_follow_the_schema(tiny_backend):
    greedy = tiny_backend.generate(PROMPTS, n=1, temperature=0, max_new_tokens=160,
                                   response_format=FORMAT)
    assert all(valid(row[0]) for row in greedy)
    sampled = tiny_backend.generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=160, seed=7,
                                    response_format=FORMAT)
    # Same prompt index 0 -> same row seeds; the grammar does not couple the rows of a batch.
    assert tiny_backend.generate(PROMPTS[:1], n=2, temperature=1.0, max_new_tokens=160, seed=7,
                                 response_format=FORMAT)[0] == sampled[0]
    assert all(valid(text) for row in sampled for text in row)


def test_json_object_and_free_output(tiny_backend):
    out = tiny_backend.generate(PROMPTS, n=3, temperature=1.0, max_new_tokens=200, seed=1,
                                response_format={"type": "json_object"})
    ended = [text for row in out for text in row if text.endswith(("}", "]"))]
    assert ended and all(isinstance(json.loads(text), dict | list) for text in ended)
    free = tiny_backend.generate(PROMPTS, n=3, temperature=1.0, max_new_tokens=40, seed=1)
    assert not any(text.startswith("{") and text.endswith("}") for row in free for text in row)


def test_a_grammar_is_compiled_once_per_schema(tiny_backend):
    tiny_backend.generate(PROMPTS[:1], max_new_tokens=160, response_format=FORMAT)
    cache = tiny_backend._grammars
    before = dict(cache._cache)
    reordered = {"json_schema": {"strict": True, "schema": SCHEMA, "name": "op"},
                 "type": "json_schema"}
    tiny_backend.generate(PROMPTS[:1], max_new_tokens=160, response_format=reordered)
    assert cache._cache.keys() == before.keys()


def test_unsupported_formats_are_refused(tiny_backend):
    with pytest.raises(GrammarError, match="json_object or json_schema"):
        tiny_backend.generate(PROMPTS[:1], response_format={"type": "regex"})
    with pytest.raises(GrammarError, match="schema object"):
        tiny_backend.generate(PROMPTS[:1], response_format={"type": "json_schema"})


def test_string_characters_exclude_control_characters_and_invalid_utf8(tiny_backend):
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string as accepts

    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3},
                                               "b": {"type": "string"}}}
    grammar = xgr.Grammar.from_ebnf(grammar_text(schema_text(schema)))
    assert accepts(grammar, b'{"a": "ok\xc3\xa9"}')
    assert not accepts(grammar, b'{"a": "\x12"}')  # raw control character
    ebnf = str(xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False))
    assert accepts(xgr.Grammar.from_ebnf(ebnf), b'{"a": "\x12"}')  # what xgrammar 0.2.8 allows
    # the byte-level tokenizer spells a surrogate (ED A0 80) or an overlong "/" (C0 AF) byte by
    # byte; xgrammar alone accepts the shape, the mask refuses the second byte
    tiny_backend.generate(PROMPTS[:1], max_new_tokens=4, response_format=FORMAT)
    grammars = tiny_backend._grammars
    byte_token = {raw: i for i, raw in enumerate(grammars.xgr.TokenizerInfo.from_huggingface(
        tiny_backend.tokenizer).decoded_vocab) if len(raw) == 1}
    for bad in (b"\xed\xa0", b"\xf0\x80", b"\xf4\x90"):
        mask = grammars.mask(schema_text(schema))
        assert all(mask.accept(byte_token[bytes([c])]) for c in b'{"b": "')
        assert mask.accept(byte_token[bad[:1]])
        assert not mask.allowed()[byte_token[bad[1:]]] and not mask.accept(byte_token[bad[1:]])


@pytest.mark.slow
def test_smollm2_writes_operations_that_follow_the_schema():
    from trainer.backends import TransformersBackend, default_model_dir

    schema = {"type": "object", "properties": {"operations": {
        "type": "array", "maxItems": 2, "items": {
            "type": "object",
            "properties": {"option": {"type": "string", "enum": ["add", "modify", "delete"]},
                           "experience": {"type": "string", "maxLength": 40}},
            "required": ["option", "experience"], "additionalProperties": False}}},
        "required": ["operations"], "additionalProperties": False}
    backend = TransformersBackend(default_model_dir(), batch_size=2, device="cpu")
    prompts = [[{"role": "user", "content": "Suggest one lesson for solving arithmetic word "
                 "problems, as JSON operations."}],
               [{"role": "user", "content": "Delete the lesson 'guess'. Reply in JSON."}]]
    out = backend.generate(prompts, n=1, temperature=0.7, max_new_tokens=80, seed=0,
                           response_format={"type": "json_schema", "json_schema": {
                               "name": "operations", "schema": schema, "strict": True}})
    for (text,) in out:
        jsonschema.validate(json.loads(text), schema)
