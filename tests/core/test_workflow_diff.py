"""What an edit changed in a workflow's graph (for the audit log)."""

from __future__ import annotations

from jobring.core.workflow import definition_changes, definition_summary
from jobring.core.workflow.diff import LISTED_CHANGES


def test_changes_by_node_key_and_edge() -> None:
    before = {"nodes": [{"key": "a", "job_id": 1}, {"key": "b", "job_id": 1}],
              "edges": [{"from": "a", "to": "b"}]}
    after = {"nodes": [{"key": "a", "job_id": 2}, {"key": "c", "job_id": 1}],
             "edges": [{"from": "a", "to": "c"}]}
    assert definition_changes(before, after) == {
        "nodes_added": ["c"], "nodes_removed": ["b"], "nodes_changed": ["a"],
        "edges_added": ["a -> c"], "edges_removed": ["a -> b"],
    }
    assert definition_changes(before, before) == {}
    summary = definition_summary(before)
    assert (summary["nodes"], summary["edges"], len(summary["sha256"])) == (2, 1, 64)
    reordered = {"edges": before["edges"], "nodes": before["nodes"]}
    assert definition_summary(reordered) == summary  # canonical: key order does not matter


def test_long_lists_are_cut_and_counted() -> None:
    many = {"nodes": [{"key": f"n{i}", "job_id": 1} for i in range(LISTED_CHANGES + 7)], "edges": []}
    changes = definition_changes({"nodes": [], "edges": []}, many)
    assert len(changes["nodes_added"]) == LISTED_CHANGES
    assert changes["nodes_added_count"] == LISTED_CHANGES + 7
