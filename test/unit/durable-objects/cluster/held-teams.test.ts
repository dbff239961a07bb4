// What an agent session holds of a team-scoped set (durable-objects/cluster/held-teams.ts): an
// intent leaves only once its team is in what the agent has and in the send in flight; whether a
// set must go again follows what the agent will hold (review 27 final M1, M3, L5).
import { describe, expect, it } from "vitest";
import { HeldTeams } from "../../../../durable-objects/cluster/held-teams.ts";

const sentWith = (...teams: string[]) => {
  const held = new HeldTeams();
  held.reading(new Set(teams));
  held.delivered();
  return held;
};

describe("HeldTeams", () => {
  it("knows nothing at first (a hello, a wake): no intent leaves without a send, and every set may hold any team", () => {
    const held = new HeldTeams();
    expect(held.present("acme")).toBe(false);
    expect(held.holds("acme")).toBe("unknown");
    expect(held.teams()).toBeNull();
  });

  it("a team in a send still reading is not present yet: its intent must not leave before that frame (M1)", () => {
    const held = sentWith("old");
    held.reading(new Set(["old", "acme"]));
    expect(held.present("acme")).toBe(false);
    expect(held.holds("acme")).toBe("yes");
    held.delivered();
    expect(held.present("acme")).toBe(true);
  });

  it("a team the send in flight drops is not present, though the agent has it now (H1)", () => {
    const held = sentWith("old", "acme");
    held.reading(new Set(["old"]));
    expect(held.present("acme")).toBe(false);
    expect(held.holds("acme")).toBe("no");
    expect(held.present("old")).toBe(true);
  });

  it("a failed send leaves it unknown: nothing is present, any team may be held", () => {
    const held = sentWith("acme");
    held.reading(new Set(["acme", "beta"]));
    held.failed();
    expect(held.present("acme")).toBe(false);
    expect(held.holds("beta")).toBe("unknown");
  });

  it("the sole cluster's set holds every team", () => {
    const held = new HeldTeams();
    held.reading("every");
    held.delivered();
    expect(held.present("anyone")).toBe(true);
    expect(held.holds("anyone")).toBe("yes");
    held.reset();
    expect(held.holds("anyone")).toBe("unknown");
  });
});
