"""The console says the admin's and the executors' run messages in the reader's language by
matching their English text (console/src/lib/messageText.ts). Every message the server writes
must still match one of its patterns: a reworded message here fails this test instead of
silently showing in English."""

from __future__ import annotations

import re
from pathlib import Path

from jobring.admin.monitors import failures, monitors
from jobring.admin.services import callbacks
from jobring.admin.trigger import fires
from jobring.admin.trigger.fires import TRIGGER_TYPE_TITLES
from jobring.core import runstate, runtext
from jobring.executor import jobworker, received, runlog, worker
from jobring.executor.http import app as executor_app
from jobring.protocol import models

CATALOG = Path(__file__).parents[2] / "console" / "src" / "lib" / "messageText.ts"


def _patterns() -> list[re.Pattern[str]]:
    source = CATALOG.read_text(encoding="utf-8")
    found = re.findall(r"pattern: /(.+?)/, key:", source)
    assert len(found) > 30
    return [re.compile(p.replace("(?<", "(?P<").replace(r"\/", "/")) for p in found]


def _section(line: str) -> str:
    """A section marker's title (as the console shows it); any other line as it is."""
    title = re.fullmatch(r">{3,}\s*(.*?)\s*<{3,}", line)
    return line if title is None else title[1]


def test_every_server_message_has_a_translation() -> None:
    patterns = _patterns()
    messages = [
        worker.MSG_DISCARD_LATER, jobworker.REASON_COVER_EARLY, worker.REASON_KILL,
        jobworker.REASON_CHANGE_HANDLER, jobworker.REASON_CHANGE_SOURCE, jobworker.REASON_IDLE,
        jobworker.REASON_STOPPING, jobworker.MSG_TIMEOUT, worker.MSG_ALREADY_KILLED, worker.MSG_BUSY,
        worker.MSG_NOT_ACCEPTING, worker.msg_queue_full(1000, 1000), executor_app.MSG_NOT_STARTED,
        runlog.MSG_LOG_FILE_NOT_EXISTS,
        received.MSG_ALREADY_RECEIVED, models.MSG_TOKEN_WRONG,
        monitors.MSG_RESULT_LOST, monitors.MSG_DISPATCH_LOST, monitors.lost_message("http://h:1", 90),
        fires.MSG_ADDRESS_EMPTY, fires.msg_no_handler("app", "demo"),
        runstate.KILLED_BY_USER + " (ann)", runstate.KILLED_BY_USER + " (ann): job thread already killed.",
        _section(runtext.CHILD_HEADER), _section(failures.MSG_RETRY_MARK), "Trigger Job",
        *map(_section, callbacks.child_summary(["7"], {}).splitlines()),
    ]
    untranslated = [m for m in messages if not any(p.fullmatch(m.strip()) for p in patterns)]
    assert untranslated == []


def test_trigger_types_and_kill_suffixes_are_all_known() -> None:
    source = CATALOG.read_text(encoding="utf-8")
    for title in TRIGGER_TYPE_TITLES.values():
        assert f'"{title}"' in source, title
    for suffix in runstate.KILLED_SUFFIXES:
        assert f'["{suffix}",' in source, suffix
