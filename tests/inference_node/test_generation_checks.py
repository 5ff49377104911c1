"""``check_termination`` on the tiny model's word-level tokenizer: each way an answer may end,
and each way a forged ending fails."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from inference_node.errors import ReceiptError
from inference_node.generation_checks import check_termination, eos_token_ids


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def ids(tok, words: str) -> list[int]:
    return tok.convert_tokens_to_ids(words.split())


def end(tok, tokens, text, finish, *, max_tokens=8, stop=()):
    return check_termination(tokens, text, finish, max_tokens=max_tokens, stop=stop,
                             eos=frozenset([tok.eos_token_id]), tokenizer=tok)


def reason(call) -> str:
    with pytest.raises(ReceiptError) as failure:
        call()
    return failure.value.reason


def test_each_honest_ending(tok):
    eos = tok.eos_token_id
    assert end(tok, [*ids(tok, "one two"), eos], "one two", "stop") == "eos"
    assert end(tok, ids(tok, "one two three four"), "one two three four", "length",
               max_tokens=4) == "max_tokens"
    # the stop string ends in the last token; the text is cut before it
    assert end(tok, ids(tok, "one two three"), "one two ", "stop", stop=("three",)) \
        == "stop string"
    # an EOS at the last allowed position is "stop", not "length"
    assert end(tok, [*ids(tok, "one"), eos], "one", "stop", max_tokens=2) == "eos"
    # vLLM's detokenizer of a decoder-less tokenizer starts with a space
    assert end(tok, ids(tok, "one two"), " one two", "length", max_tokens=2) == "max_tokens"


def test_each_forged_ending_fails(tok):
    eos = tok.eos_token_id
    two = ids(tok, "one two")
    assert reason(lambda: end(tok, two, "one two", "stop")) == "termination"  # truncated
    assert reason(lambda: end(tok, two, "one two", "length")) == "termination"
    assert reason(lambda: end(tok, [*two, eos], "one two", "length")) == "termination"
    assert reason(lambda: end(tok, [two[0], eos, two[1]], "one two", "stop")) == "termination"
    assert reason(lambda: end(tok, ids(tok, "one two three four"), "one two", "stop",
                              stop=("two",))) == "termination"  # goes on past its stop
    assert reason(lambda: end(tok, ids(tok, "one two three"), "one two three", "stop",
                              stop=("three",))) == "response_text"  # the stop string shown
    assert reason(lambda: end(tok, two, "one three", "length", max_tokens=2)) == "response_text"
    assert reason(lambda: end(tok, ids(tok, "one two three"), "one two three", "length",
                              max_tokens=2)) == "termination"  # longer than max_tokens
    assert reason(lambda: end(tok, [], "", "stop")) == "termination"


def test_eos_ids_come_from_the_generation_config_first(tok):
    class Config:
        eos_token_id = (5, 7)

    class Model:
        generation_config = Config()

    assert eos_token_ids(Model(), tok) == {5, 7}
    assert eos_token_ids(object(), tok) == {tok.eos_token_id}


def test_an_answer_cut_mid_character_may_leave_its_replacement_character_out():
    """A byte-level tokenizer's answer that stops inside a multi-byte character decodes to a
    trailing U+FFFD; vLLM's detokenizer leaves it out, transformers' decode keeps it. Both
    are the answer; any other text is not."""

    pieces = {1: "S", 2: " \U0001f333", 3: "\ufffd"}

    class Bytes:
        def decode(self, ids, skip_special_tokens=True):
            return "".join(pieces[i] for i in ids)

    def end(text):
        return check_termination([1, 2, 3], text, "length", max_tokens=3, stop=(),
                                 eos=frozenset([0]), tokenizer=Bytes())

    assert end("S \U0001f333\ufffd") == end("S \U0001f333") == "max_tokens"
    with pytest.raises(ReceiptError) as failure:
        end("S")
    assert failure.value.reason == "response_text"
