"""`jobring workflows validate`: a save's checks from the command line, saving nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.client.adminkit import AdminEnv
from tests.client.clikit import Cli
from tests.test_cli_workflows import _write, cli, env  # noqa: F401 - the fixtures


async def test_validate_prints_ok_or_the_refusal_and_saves_nothing(
    env: AdminEnv, cli: Cli, tmp_path: Path  # noqa: F811 - the fixtures
) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    doc = {"name": "nightly", "job_group": group,
           "nodes": [{"key": "load", "job_id": job}, {"key": "extract", "job_id": job}],
           "edges": [{"from": "extract", "to": "load"}]}
    checked = await cli("workflows", "validate", "--file", _write(tmp_path / "w.json", doc))
    assert checked.code == 0, checked.err
    assert checked.out.splitlines() == ["OK: 2 nodes, 1 edge, starting at extract", "order: extract, load"]
    as_json = await cli("workflows", "validate", "--file", _write(tmp_path / "w.json", doc), "--json")
    assert json.loads(as_json.out) == {"valid": True, "nodes": 2, "edges": 1, "order": ["extract", "load"],
                                       "roots": ["extract"]}
    assert json.loads((await cli("workflows", "list", "--json")).out)["total"] == 0

    unreachable = {**doc, "nodes": [*doc["nodes"], {"key": "lost", "job_id": job}]}
    refused = await cli("workflows", "validate", "--file", _write(tmp_path / "u.json", unreachable))
    assert refused.code == 2 and refused.out == "", refused.out
    assert "nodes[2]" in refused.err and "'lost'" in refused.err and "unreachable" in refused.err, refused.err
    unknown = {**doc, "nodes": [{"key": "load", "job_id": job + 1000}, {"key": "extract", "job_id": job}]}
    refused = await cli("workflows", "validate", "--file", _write(tmp_path / "j.json", unknown))
    assert refused.code == 2 and f"job {job + 1000} does not exist" in refused.err, refused.err
    assert (await cli("workflows", "validate", "--file", _write(tmp_path / "x.json", [1]))).code == 2


async def test_validate_as_an_edit_of_a_workflow(
    env: AdminEnv, cli: Cli, tmp_path: Path  # noqa: F811 - the fixtures
) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    doc = {"name": "w", "job_group": group, "nodes": [{"key": "a", "job_id": job}], "edges": []}
    created = await cli("workflows", "create", "--file", _write(tmp_path / "w.json", doc))
    wf = created.out.split()[2]
    itself = {**doc, "nodes": [{"key": "a", "job_id": job}, {"key": "self", "kind": "subworkflow",
                                                                "workflow_id": int(wf)}],
              "edges": [{"from": "a", "to": "self"}]}
    path = _write(tmp_path / "s.json", itself)
    assert (await cli("workflows", "validate", "--file", path)).code == 0  # fine as a new workflow
    looping = await cli("workflows", "validate", "--file", path, "--workflow", wf)
    assert looping.code == 2 and "may not recurse" in looping.err and "'self'" in looping.err, looping.err
    path = _write(tmp_path / "r.json", {**doc, "name": "v"})
    renamed = await cli("workflows", "validate", "--file", path, "--workflow", wf)
    assert renamed.code == 0, renamed.err
    assert renamed.out.startswith(f"OK as a new version of workflow {wf}: 1 node, 0 edges, "), renamed.out
    shown = json.loads((await cli("workflows", "show", wf, "--json")).out)
    assert (shown["name"], shown["version"]) == ("w", 1)
