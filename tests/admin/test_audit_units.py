"""The audit trail's pure parts: redaction, change lists, details encoding, actors."""

from __future__ import annotations

import orjson

from jobring.admin.security.principal import AuthMethod, Principal
from jobring.admin.services.audit import (
    MAX_DETAILS_CHARS,
    REDACTED,
    Actor,
    ActorKind,
    Outcome,
    _encoded,
    changes,
    redact,
    source_digest,
)
from jobring.admin.store.records import User


def test_redact_hides_secret_names_at_any_depth_and_digests_glue() -> None:
    value = {
        "password": "p",
        "new_password": "p2",
        "token": "jr_x",
        "access_token": "t",
        "password_hash": "$argon2id$",
        "session_secret": "s",
        "must_change_password": True,
        "token_id": 3,
        "nested": [{"csrf_token": "c", "name": "ok"}],
        "glue_source": "echo secret",
    }
    assert redact(value) == {
        "password": REDACTED,
        "new_password": REDACTED,
        "token": REDACTED,
        "access_token": REDACTED,
        "password_hash": REDACTED,
        "session_secret": REDACTED,
        "must_change_password": True,
        "token_id": 3,
        "nested": [{"csrf_token": REDACTED, "name": "ok"}],
        "glue_source": source_digest("echo secret"),
    }
    assert source_digest(None) is None


def test_changes_keep_only_what_differs() -> None:
    before = {"a": 1, "b": [1], "password": "old", "gone": "x", "token": "same"}
    after = {"a": 1, "b": [1, 2], "password": "new", "added": None, "token": "same"}
    # A changed secret is listed, masked on both sides: the real values were compared.
    assert changes(before, after) == {
        "b": {"before": [1], "after": [1, 2]},
        "password": {"before": REDACTED, "after": REDACTED, "secret_changed": True},
        "gone": {"before": "x", "after": None},
    }


def test_details_that_cannot_be_stored_are_replaced_by_a_note() -> None:
    assert orjson.loads(_encoded({"a": 1})) == {"a": 1}
    huge = orjson.loads(_encoded({"blob": "x" * (MAX_DETAILS_CHARS + 1)}))
    assert huge["keys"] == ["blob"] and "characters" in huge["unrecorded"]
    broken = orjson.loads(_encoded({"name": "bad \ud800 surrogate"}))
    assert "not encodable" in broken["unrecorded"]


def test_actor_of_a_principal_and_outcome_of_a_code() -> None:
    user = User(id=4, username="alice", role=0)
    by_token = Principal(user, AuthMethod.TOKEN, token_id=9)
    assert Actor.of(by_token) == Actor("alice", ActorKind.API_TOKEN, 4, 9)
    assert Actor.of(Principal(user, AuthMethod.SESSION)) == Actor("alice", ActorKind.SESSION, 4, None)
    assert (Outcome.of_code(200), Outcome.of_code(500)) == (Outcome.SUCCESS, Outcome.FAILURE)
