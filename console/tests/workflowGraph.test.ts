import { describe, expect, it } from "vitest";
import {
  blankNode, edgeForm, freeKey, graphBody, itemCounts, layout, nodeForm, parseParams, refusedAt,
} from "../src/lib/workflowGraph";

describe("workflow graph layout", () => {
  it("puts a diamond in three layers, the join after both branches", () => {
    const placed = layout(["a", "b", "c", "d"], [{ from: "a", to: "b" }, { from: "a", to: "c" }, { from: "b", to: "d" }, { from: "c", to: "d" }]);
    expect([..."abcd"].map((k) => placed.nodes.get(k)!.layer)).toEqual([0, 1, 1, 2]);
    expect(placed.nodes.get("b")!.row).not.toBe(placed.nodes.get("c")!.row);
    expect(placed.width).toBeGreaterThan(placed.nodes.get("d")!.x);
  });

  it("layers by the longest path and draws what a cycle or an unknown key leaves", () => {
    const placed = layout(["a", "b", "c", "x", "y"], [
      { from: "a", to: "b" }, { from: "b", to: "c" }, { from: "a", to: "c" }, { from: "x", to: "y" }, { from: "y", to: "x" },
      { from: "a", to: "ghost" },
    ]);
    expect(placed.nodes.get("c")!.layer).toBe(2);
    expect(placed.nodes.get("x")!.layer).toBe(3);
    expect(placed.nodes.size).toBe(5);
  });

  it("lays out 1,000 nodes", () => {
    const keys = Array.from({ length: 1000 }, (_, i) => `n${i}`);
    const edges = keys.slice(1).map((k, i) => ({ from: `n${Math.floor(i / 3)}`, to: k }));
    expect(layout(keys, edges).nodes.size).toBe(1000);
  });
});

describe("workflow form", () => {
  it("sends only the fields of a node's kind, numbers as numbers", () => {
    const job = { ...blankNode("extract"), job_id: "12", retries: "2", params: "--day={{ day }}", result_json: true };
    const decide = { ...blankNode("route", "decision"), job_id: "99", on_failure: "skip_descendants" };
    const fan = { ...blankNode("big", "fanout"), job_id: "13", items: " files ", parallelism: "4", join: "any_success" };
    const body = graphBody([job, decide, fan], [
      { from: "extract", to: "route", when: "ignored", otherwise: false },
      { from: "route", to: "big", when: "rows > 10", otherwise: false },
    ]);
    expect(body.nodes).toEqual([
      { key: "extract", job_id: 12, params: "--day={{ day }}", retries: 2, result_json: true },
      { key: "route", kind: "decision", on_failure: "skip_descendants" },
      { key: "big", kind: "fanout", job_id: 13, items: "files", parallelism: 4, join: "any_success" },
    ]);
    expect(body.edges).toEqual([{ from: "extract", to: "route" }, { from: "route", to: "big", when: "rows > 10" }]);
  });

  it("passes a number field that is not a number on, for the API to name", () => {
    expect(graphBody([{ ...blankNode("a"), retries: "two" }], []).nodes[0]).toMatchObject({ retries: "two" });
  });

  it("reads a stored graph back into the form", () => {
    expect(nodeForm({ key: "b", kind: "fanout", job_id: 3, items: "xs", parallelism: 2 })).toMatchObject(
      { key: "b", kind: "fanout", job_id: "3", items: "xs", parallelism: "2", join: "all_success", on_failure: "stop" });
    expect(edgeForm({ from: "a", to: "b", else: true })).toEqual({ from: "a", to: "b", when: "", otherwise: true });
    expect(graphBody([blankNode("a", "decision")], [{ from: "a", to: "b", when: "", otherwise: true }]).edges)
      .toEqual([{ from: "a", to: "b", else: true }]);
  });

  it("finds free keys, parses the starting context and points at what the API refused", () => {
    expect(freeKey(["node", "node_2"])).toBe("node_3");
    expect(parseParams("")).toEqual({});
    expect(parseParams('{"day": 1}')).toEqual({ day: 1 });
    expect(parseParams("[1]")).toBeNull();
    expect(parseParams("{")).toBeNull();
    expect(refusedAt("nodes[2].job_id")).toEqual({ node: 2, edge: null, name: "job_id" });
    expect(refusedAt("edges[1]")).toEqual({ node: null, edge: 1, name: "" });
    expect(refusedAt("name")).toEqual({ node: null, edge: null, name: "name" });
    expect(itemCounts([{ state: "success" }, { state: "running" }, { state: "success" }])).toEqual([["running", 1], ["success", 2]]);
  });
});
