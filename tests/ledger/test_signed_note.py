"""C2SP signed notes and tlog-checkpoint notes (`ledger.signed_note`, `ledger.checkpoint_note`).

The keys, text and signatures are the test vectors of Go's golang.org/x/mod/sumdb/note, the
reference implementation the signed-note spec comes from: our keys, key IDs and Ed25519
signatures must reproduce them byte for byte.
"""

from __future__ import annotations

import base64

import pytest

from ledger.checkpoint_note import (
    CheckpointNote,
    decode_checkpoint,
    default_origin,
    encode_checkpoint,
    verify_checkpoint_note,
)
from ledger.signed_note import (
    NoteError,
    NoteSignature,
    NoteSigner,
    NoteVerifier,
    generate_key,
    open_note,
    sign_note,
)

# golang.org/x/mod/sumdb/note, note_test.go
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = ("If you think cryptography is the answer to your problem,\n"
        "then you don't know what your problem is.\n")
PETER_SIG = ("\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSN"
             "XgKvqfqdngotpRZb6KE6RyyBwJnAM=\n")
ENOCH_SIG = ("\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG0"
             "1oOTGwnWLox33WWd1RvMc+QQ=\n")


def test_signing_reproduces_the_go_reference_signature():
    signer = NoteSigner(PETER_SKEY)
    assert signer.vkey == PETER_VKEY and signer.key_id == 0xC74F20A3
    assert sign_note(TEXT, signer) == TEXT + "\n" + PETER_SIG
    # an existing signature by the same key is replaced, others are kept
    stale = NoteSignature("PeterNeumann", 0xC74F20A3, "BADSIGN=")
    enoch = open_note(TEXT + "\n" + ENOCH_SIG, NoteVerifier(ENOCH_VKEY)).verified[0]
    assert sign_note(TEXT, signer, existing=(stale, enoch)) == TEXT + "\n" + ENOCH_SIG + PETER_SIG
    assert "PRIVATE" not in repr(signer)


def test_open_verifies_known_keys_and_lists_the_others():
    peter, enoch = NoteVerifier(PETER_VKEY), NoteVerifier(ENOCH_VKEY)
    opened = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, peter)
    assert opened.text == TEXT
    assert [s.name for s in opened.verified] == ["PeterNeumann"]
    assert [(s.name, s.key_id) for s in opened.unverified] == [("EnochRoot", 0xAF0CFE78)]
    both = open_note((TEXT + "\n" + PETER_SIG + ENOCH_SIG).encode(), peter, enoch)
    assert [s.name for s in both.verified] == ["PeterNeumann", "EnochRoot"]
    with pytest.raises(NoteError, match="no verifiable signatures"):
        open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG)
    with pytest.raises(NoteError, match="ambiguous key EnochRoot\\+af0cfe78"):
        open_note(TEXT + "\n" + ENOCH_SIG, enoch, peter, enoch)
    forged = TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(NoteError, match="invalid signature for key PeterNeumann\\+c74f20a3"):
        open_note(forged, peter)
    edited = TEXT.replace("answer", "answers") + "\n" + PETER_SIG
    with pytest.raises(NoteError, match="invalid signature"):
        open_note(edited, peter)


@pytest.mark.parametrize("note", [
    TEXT, TEXT + "\n", TEXT + "\n" + PETER_SIG[:-1], "\x01" + TEXT + "\n" + PETER_SIG,
    TEXT + "\n" + "\u2014 Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZS"
    "NXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n",
    TEXT + "\n" + PETER_SIG + "Unexpected line.\n", TEXT + "\n" + PETER_SIG * 101,
])
def test_malformed_notes_are_refused(note):
    with pytest.raises(NoteError):
        open_note(note, NoteVerifier(PETER_VKEY))


def test_mangled_keys_are_refused():
    for i in range(len(PETER_VKEY)):
        mangled = PETER_VKEY[:i] + chr(ord(PETER_VKEY[i]) + 1) + PETER_VKEY[i + 1:]
        with pytest.raises(NoteError):
            NoteVerifier(mangled)
    for cut in (PETER_VKEY[:-1], PETER_VKEY[1:], "PeterNeumann+c74f20a3"):
        with pytest.raises(NoteError):
            NoteVerifier(cut)
    with pytest.raises(NoteError):  # wrong-length key with a matching-looking ID
        NoteVerifier("PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==")
    with pytest.raises(NoteError):
        NoteSigner(PETER_SKEY.replace("PRIVATE+KEY+", ""))
    with pytest.raises(NoteError):
        NoteSigner(PETER_SKEY[:-2] + "z=")


def test_generated_keys_sign_and_verify():
    skey, vkey = generate_key("witness.example")
    signer, verifier = NoteSigner(skey), NoteVerifier(vkey)
    assert signer.vkey == vkey
    note = sign_note(TEXT, signer)
    assert open_note(note, verifier).verified[0].name == "witness.example"
    with pytest.raises(NoteError):
        generate_key("two words")


def test_checkpoint_text_round_trips_strictly():
    root = bytes(range(32))
    cp = CheckpointNote(default_origin("alice/math", 31337, "0xABCDEF" + "0" * 34, 2), 8, root)
    assert cp.origin == "gym-ledger/31337/0xabcdef" + "0" * 34 + "/2"
    text = encode_checkpoint(cp)
    assert text == f"{cp.origin}\n8\n{base64.b64encode(root).decode()}\n"
    assert decode_checkpoint(text) == cp
    assert default_origin("alice/math") == "gym-ledger/local/alice/math"
    with_ext = CheckpointNote("example.com/log", 0, root, ("batch bafkrei-x",))
    assert decode_checkpoint(encode_checkpoint(with_ext)) == with_ext
    b64 = base64.b64encode(root).decode()
    for bad in (f"o\n08\n{b64}\n", f"o\n8\n{b64[:-4]}\n", "o\n8\n", f"o\n8\n{b64}",
                f"o o\n8\n{b64}\n", f"o\n-1\n{b64}\n", f"o\n8\n{b64}\n\n"):
        with pytest.raises(NoteError):
            decode_checkpoint(bad)
    with pytest.raises(NoteError):
        encode_checkpoint(CheckpointNote("a+b", 1, root))


def test_a_signed_checkpoint_note_verifies_and_a_changed_one_does_not():
    skey, vkey = generate_key("alice.example")
    text = encode_checkpoint(CheckpointNote("gym-ledger/local/alice/math", 6, b"\x07" * 32))
    note = sign_note(text, NoteSigner(skey))
    checkpoint, opened = verify_checkpoint_note(note, NoteVerifier(vkey))
    assert (checkpoint.size, checkpoint.root) == (6, b"\x07" * 32)
    assert opened.verified[0].name == "alice.example"
    with pytest.raises(NoteError, match="invalid signature"):
        verify_checkpoint_note(note.replace("\n6\n", "\n7\n"), NoteVerifier(vkey))
