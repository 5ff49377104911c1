"""Reward functions: math-verify equivalences, exact match, user callables, the LLM judge."""

import pytest

from trainer.backends import Usage
from trainer.verifiers import (
    VerifierError,
    exact_match,
    final_answer,
    load_verifier,
    math_verify,
)


@pytest.mark.parametrize(("answer", "response", "reward"), [
    ("1/2", "0.5", 1.0),
    ("0.5", "The result is \\frac{1}{2}", 1.0),
    ("12", "3 + 4 = 7, then 7 + 5 = 12.\nAnswer: 12", 1.0),
    ("12", "\\boxed{12}", 1.0),
    ("12", "Answer: 13", 0.0),
    ("12", "The answer is 12, or maybe 13", 1.0),
    ("12", "", 0.0),
    ("1000", "Answer: 1,000", 1.0),
])
def test_math_verify(answer, response, reward):
    assert math_verify({"problem": "p", "answer": answer, "response": response})["reward"] == reward


@pytest.mark.parametrize(("answer", "response", "reward"), [
    ("Paris", "  paris. ", 1.0),
    ("42", "so the answer is 42.", 1.0),
    ("42", "$\\boxed{42}$", 1.0),
    ("1000", "Answer: 1,000", 1.0),
    ("42", "Answer: 43", 0.0),
    ("0.5", "1/2", 0.0),  # exact means exact: no numeric equivalence
    # string answers, as a researcher's own task writes them
    ("tac", "The answer is: tac", 1.0),  # once read as ': tac'
    ("tac", 'Reversed, cat reads "tac".', 1.0),
    ("tac", "Reversing c-a-t.\nAnswer: **tac**", 1.0),
    ("tac", "I think the answer is tac. It was easy.", 1.0),
    ("tac", "The answer is 'tac'", 1.0),
    ("tac", "Final answer: `tac`", 1.0),
    ("tac", "Answer: cat", 0.0),
    ("tac", "blah blah cat tac", 0.0),  # a sentence is not its last word
])
def test_exact_match(answer, response, reward):
    assert exact_match({"problem": "p", "answer": answer, "response": response})["reward"] == reward


@pytest.mark.parametrize(("response", "how"), [
    ("\\boxed{x}", "boxed"), ("Answer: x", "answer line"), ("so the answer is x.", "answer phrase"),
    ("it is **x**", "emphasis in the last line"), ("x", "last line"),
    (" ".join(["word"] * 20), "nothing that reads as an answer"),
])
def test_exact_match_says_what_it_extracted_and_how(response, how):
    reasoning = exact_match({"problem": "p", "answer": "x", "response": response})["reasoning"]
    assert f"({how})" in reasoning, reasoning


def test_final_answer_prefers_box_then_answer_line_then_last_number():
    assert final_answer("\\boxed{7} then Answer: 8") == "7"
    assert final_answer("Answer: 8. Later 9") == "8"
    assert final_answer("first 3 then 4") == "4"


def test_python_verifier_is_loaded_by_name():
    verify = load_verifier("python:tfgrpo_fakes:length_parity")
    assert verify({"problem": "p", "answer": "1", "response": "abc"})["reward"] == 1.0
    with pytest.raises(VerifierError, match="cannot import no_such_module_here"):
        load_verifier("python:no_such_module_here:f")  # a TrainerError: one line in the CLI
    with pytest.raises(VerifierError, match="unknown verifier 'regex'"):
        load_verifier("regex")


def test_llm_judge_reads_the_verdict():
    class Judge:
        usage = Usage()

        def generate(self, prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=64, seed=0):
            user = prompts[0][-1]["content"]
            return [["CORRECT: it matches." if "Response: 4" in user else "INCORRECT: no."]]

    judge = load_verifier("llm-judge", judge_backend=Judge())
    assert judge({"problem": "2+2", "answer": "4", "response": "4"})["reward"] == 1.0
    assert judge({"problem": "2+2", "answer": "4", "response": "5"})["reward"] == 0.0
