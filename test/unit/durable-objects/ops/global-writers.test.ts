// Which clusters may write a global object (operations/team-clusters.ts `globalWriterRefusal`).
import { describe, expect, it } from "vitest";
import { globalWriterRefusal } from "../../../../durable-objects/operations/team-clusters.ts";

const refusal = (vars: { GLOBAL_POLICY_CLUSTERS?: string; SINGLE_CLUSTER?: string }, cluster: string) => globalWriterRefusal(vars, cluster, "GlobalTrafficPolicy", "/admin/global-traffic-policies");

describe("GLOBAL_POLICY_CLUSTERS", () => {
  it("names clusters by their ids, which are lower case: an id written with capitals still names its cluster (review 27 L5)", () => {
    expect(refusal({ GLOBAL_POLICY_CLUSTERS: " Platform-A ,platform-b" }, "platform-a")).toBeNull();
    expect(refusal({ GLOBAL_POLICY_CLUSTERS: " Platform-A ,platform-b" }, "platform-b")).toBeNull();
    expect(refusal({ GLOBAL_POLICY_CLUSTERS: "Platform-A" }, "platform-c")).toMatchObject({ code: "forbidden", message: expect.stringContaining("GLOBAL_POLICY_CLUSTERS") });
    expect(refusal({}, "platform-a")).toMatchObject({ code: "forbidden" });
    expect(refusal({ SINGLE_CLUSTER: "only" }, "only")).toBeNull();
  });
});

describe("SINGLE_CLUSTER", () => {
  it("names the install's only cluster by its id, read lower-cased as GLOBAL_POLICY_CLUSTERS is (review 27 final L4)", () => {
    expect(refusal({ SINGLE_CLUSTER: " Default " }, "default")).toBeNull();
    expect(refusal({ SINGLE_CLUSTER: "Default" }, "other")).toMatchObject({ code: "forbidden" });
  });
});
