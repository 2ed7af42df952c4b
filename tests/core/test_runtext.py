"""Run messages and logs as text: XXL-JOB's <br>, span colouring and section markers."""

from __future__ import annotations

from jobring.cli.runs import run_summary
from jobring.core.runtext import log_text, message_lines, message_summary

TRIGGER = ("Trigger type: Cron trigger\nAdmin node: a\n\n>>>>>>>>>>> Trigger Job <<<<<<<<<<<\n"
           "address: http://x:9999\ncode: 500\nmsg: connection refused")
RETRIED = TRIGGER + "\n\n>>>>>>>>>>> Fail retry trigger <<<<<<<<<<<"


def test_breaks_become_lines_and_markers_titles() -> None:
    assert log_text("a<br>----------- start<BR/>b\n") == "a\n----------- start\nb\n"
    adopted = 'x<br><span style="color:#00c0ef;" > >>>>>>>>>>>Trigger<<<<<<<<<<< </span><br>y'
    assert message_lines(adopted) == ["x", "-- Trigger --", "y"]
    assert message_lines("<img src=x>") == ["<img src=x>"]  # other markup stays text


def test_a_retry_marker_does_not_hide_the_failure_reason() -> None:
    assert message_summary(RETRIED, last=True) == "msg: connection refused"
    handled = "<br>----------- Result: handle fail<br>more"
    assert message_summary(handled, last=False) == "----------- Result: handle fail"
    assert message_summary(">>>>>>>>>>> only <<<<<<<<<<<", last=True) is None
    failed = {"state": "failed", "trigger_code": 500, "handle_code": 0, "trigger_msg": RETRIED}
    assert run_summary(failed) == "msg: connection refused"
