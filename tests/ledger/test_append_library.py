"""`gym ledger append` keeps a log's library foldable (docs/design.md "3.2 Library fold": an op
whose target is unknown at that point is a validation error), all or nothing, and refuses JSON
entries with duplicate member names (I-JSON)."""

from __future__ import annotations

import json

import pytest
from ledger_helpers import experience, ok, one_error_line

from ledger.entries import entry_cid
from ledger.multiformats import raw_cid
from ledger.publish import entry_from_json

LOG = "alice/math"


@pytest.fixture
def gym(gym_env):
    ok(gym_env.run("ledger", "create", LOG, "--offline"))
    return gym_env


@pytest.fixture
def write(tmp_path):
    counter = iter(range(1000))

    def write(*entries: dict, raw: str | None = None) -> str:
        path = tmp_path / f"batch{next(counter)}.jsonl"
        path.write_text(raw if raw is not None else
                        "\n".join(json.dumps(e) for e in entries) + "\n")
        return str(path)

    return write


def append(gym, path: str) -> list[str]:
    """CIDs the append printed, in leaf order."""
    out = ok(gym.run("ledger", "append", LOG, path))
    return [line.split()[1] for line in out.splitlines()[1:]]


def size(gym) -> int:
    return json.loads(ok(gym.run("ledger", "show", LOG, "--json")))["size"]


def test_a_foldable_history_is_appended_in_several_batches(gym, write):
    first, second = append(gym, write(experience(0), experience(1)))
    updated, = append(gym, write(experience(2, "update", first, "Rule 0, revised.")))
    assert updated != first  # an update has a CID of its own; the experience keeps its id
    append(gym, write(experience(3, "delete", second),
                      experience(4, "update", first, "Rule 0, revised again.")))
    assert size(gym) == 5


def test_unknown_targets_and_double_adds_append_nothing(gym, write):
    first, second = append(gym, write(experience(0), experience(1)))
    append(gym, write(experience(2, "delete", second)))
    never = raw_cid(b"never appended")

    later = entry_cid(entry_from_json(experience(9)))
    cases = [
        (write(experience(5), experience(6, "update", never)),
         "leaf 4: update of experience " + never + ", which was never added"),
        (write(experience(7, "update", second)), "leaf 3: update of experience " + second
         + ", which was deleted"),
        (write(experience(0)), f"leaf 3: experience {first} was already added"),
        (write(experience(8), experience(8)), "leaf 4: experience"),
        # A delete before the add it names, in the same batch: unknown at that point.
        (write(experience(9, "delete", later), experience(9)), "leaf 3: delete of experience"),
    ]
    for path, message in cases:
        line = one_error_line(gym.run("ledger", "append", LOG, path))
        assert "the batch breaks the library of log 'alice/math'" in line and message in line, line
        assert "nothing was appended" in line
        assert size(gym) == 3


def test_a_delete_in_the_batch_may_name_an_add_before_it_in_the_batch(gym, write):
    path = write(experience(0))
    added, = append(gym, path)
    assert size(gym) == 1
    batch = write(experience(1), experience(2, "delete", added), experience(3, "update", added))
    assert "leaf 3: update of experience" in one_error_line(gym.run("ledger", "append", LOG, batch))
    assert size(gym) == 1


def test_duplicate_member_names_are_refused(gym, write):
    doubled = json.dumps(experience(0)).replace('"domain": "math"',
                                                '"domain": "math", "domain": "code"')
    line = one_error_line(gym.run("ledger", "append", LOG, write(raw=doubled)))
    assert "member 'domain' appears twice in one object" in line
    nested = json.dumps(experience(0)).replace('"step": 0', '"step": 0, "step": 1')
    line = one_error_line(gym.run("verify", "entry", write(raw=nested)))
    assert "member 'step' appears twice in one object" in line
    assert size(gym) == 0


def test_every_problem_of_every_bad_entry_is_listed(gym, write):
    """A file with two bad entries (one with two problems, one with one) and a good one: the
    error names each problem by line and field; nothing is appended."""
    bad_twice = {**experience(1, op="nope"), "domain": ""}
    bad_once = {**experience(2), "text": ""}
    path = write(experience(0), bad_twice, bad_once)
    result = gym.run("ledger", "append", LOG, path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "error: 3 problems in 2 entries:", result.stderr
    assert {line.split(": ")[1] for line in lines[1:3]} == {"op", "domain"}
    assert all(line.startswith(f"  {path}:2: ") for line in lines[1:3])
    assert lines[3].startswith(f"  {path}:3: text: ")
    assert len(lines) == 4 and "more problem" not in result.stderr
    assert size(gym) == 0


def test_the_listing_stops_at_twenty_problems(gym, write):
    path = write(*(experience(i, op="nope") for i in range(25)))
    lines = gym.run("ledger", "append", LOG, path).stderr.strip().splitlines()
    assert lines[0] == "error: 25 problems in 25 entries:"
    assert [line.split(":")[1] for line in lines[1:21]] == [str(n) for n in range(1, 21)]
    assert lines[21:] == ["  and 5 more"]


def test_a_single_problem_stays_one_error_line(gym, write):
    line = one_error_line(gym.run("ledger", "append", LOG, write(experience(0, op="nope"))))
    assert line.startswith("error: ") and ":1: op: " in line
