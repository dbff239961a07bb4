/**
 * What one agent session holds of a team-scoped set the ClusterDO sends whole (its
 * TrafficPolicies, its SecurityProfiles): the teams the last frame that left carried (`sent`),
 * and those of the send in flight, which has read its teams and not yet sent (`pending`). Kept
 * apart because they answer different questions: an intent may leave only once its team is in
 * what the agent has (a send in flight that carries the team may still fail, or be behind the
 * intent), while whether a set must go again (a team left, was unbound, its secret changed)
 * depends on what the agent will hold once the send in flight lands. `null`: unknown (none sent
 * this session as far as this memory knows: after a hello, a wake, or a failed send).
 */
export type Teams = Set<string> | "every" | null;

export class HeldTeams {
  private sent: Teams = null;
  private pending: Teams = null;

  /** A new session (hello) or a wake: nothing is known. */
  reset(): void {
    this.sent = this.pending = null;
  }

  /** A send has read the teams it carries; it is reading their entries. Sends of one kind run
   * one at a time (their chain), so there is at most one in flight. */
  reading(teams: Set<string> | "every"): void {
    this.pending = teams;
  }

  /** The frame left: the agent holds these teams' entries. */
  delivered(): void {
    this.sent = this.pending;
    this.pending = null;
  }

  /** The send failed mid-read: the agent keeps the previous set, but this memory no longer knows
   * which (the caller resends). */
  failed(): void {
    this.sent = this.pending = null;
  }

  /** Whether an intent of `team` may leave now without its team's entries going first: the agent
   * has them, and the send in flight (if any) keeps them. */
  present(team: string): boolean {
    return has(this.sent, team) && (this.pending === null || has(this.pending, team));
  }

  /** Whether the agent holds, or will once the send in flight lands, `team`'s entries ("unknown":
   * this memory does not know what it holds; readers treat it as "may"). */
  holds(team: string): "yes" | "no" | "unknown" {
    const teams = this.pending ?? this.sent;
    return teams === null ? "unknown" : has(teams, team) ? "yes" : "no";
  }

  /** The teams the agent holds, or will once the send in flight lands (see holds). */
  teams(): Teams {
    return this.pending ?? this.sent;
  }
}

function has(teams: Teams, team: string): boolean {
  return teams === "every" || (teams !== null && teams.has(team));
}
