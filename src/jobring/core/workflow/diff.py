"""What an edit changed in a workflow's graph, for the audit log: the stored definitions
(:meth:`WorkflowGraph.to_json`) compared node by node (by key) and edge by edge."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["LISTED_CHANGES", "definition_changes", "definition_summary"]

LISTED_CHANGES = 50
"""Keys (or edges) listed per kind of change; more are counted, not listed (the audit record
stays small whatever the edit)."""


def definition_summary(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A definition in short: its sha256 (of canonical JSON) and how many nodes and edges."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {"sha256": hashlib.sha256(canonical.encode()).hexdigest(),
            "nodes": len(doc.get("nodes", ())), "edges": len(doc.get("edges", ()))}


def definition_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Node keys added, removed and changed, and edges (``"a -> b"``) added, removed and
    changed (a condition), between two definitions; empty kinds are left out."""
    old_nodes = {n["key"]: n for n in before.get("nodes", ())}
    new_nodes = {n["key"]: n for n in after.get("nodes", ())}
    old_edges = {_edge(e): e for e in before.get("edges", ())}
    new_edges = {_edge(e): e for e in after.get("edges", ())}
    changes = {
        "nodes_added": [k for k in new_nodes if k not in old_nodes],
        "nodes_removed": [k for k in old_nodes if k not in new_nodes],
        "nodes_changed": [k for k, n in new_nodes.items() if k in old_nodes and old_nodes[k] != n],
        "edges_added": [k for k in new_edges if k not in old_edges],
        "edges_removed": [k for k in old_edges if k not in new_edges],
        "edges_changed": [k for k, e in new_edges.items() if k in old_edges and old_edges[k] != e],
    }
    out: dict[str, Any] = {}
    for kind, keys in changes.items():
        if keys:
            out[kind] = keys[:LISTED_CHANGES]
            if len(keys) > LISTED_CHANGES:
                out[f"{kind}_count"] = len(keys)
    return out


def _edge(edge: Mapping[str, Any]) -> str:
    return f"{edge['from']} -> {edge['to']}"
