// A desktop-app-shaped client of the generated types: it must type-check
// against the types openapi-typescript generates from docs/openapi.json, and
// it handles what a newer daemon may send (an unknown event kind or error
// code) without a type error.
import type { components, paths } from "./api";

type Event = components["schemas"]["Event"];
type Health = paths["/v1/health"]["get"]["responses"]["200"]["content"]["application/json"];
type ErrorBody = components["schemas"]["ErrorBody"];
type Budget = components["schemas"]["Budget"];

export function describe(ev: Event): string {
  switch (ev.event) {
    case "done":
      return `done: ${ev.text ?? ""} cost ${ev.usage && typeof ev.usage === "object" ? ev.usage.cost ?? "?" : "unknown"}`;
    case "error":
      return `error ${ev.code}: ${ev.message}`;
    case "keepalive":
      return "";
    default:
      // A kind this client does not know: a newer daemon's; ignored.
      return `(${ev.event})`;
  }
}

export function startable(h: Health): string[] {
  return h.binding_commands.filter((b) => b.startable).map((b) => b.binding_id);
}

export function isAgentForbidden(e: ErrorBody): boolean {
  const code: string = e.error.code;
  return code === "agent_forbidden";
}

// Money is a decimal string: parse it on purpose.
export function spentShare(b: Budget): number {
  const spent: string = b.spent;
  const limit: string = b.limit;
  return parseFloat(spent) / parseFloat(limit);
}

const newer: Event = JSON.parse('{"event":"agent_mood","run_id":"r","seq":1,"at":"2026-12-04T10:00:00Z"}');
describe(newer);
