// A typed client of the backfill service: define a DAG, backfill March 2024, and follow the
// backfill until it is terminal. Every path, parameter, body and answer below is checked by
// tsc against src/schema.d.ts, which openapi-typescript generates from api/openapi.yaml; a
// change of the spec that breaks this code breaks CI.
//
//   BACKFILL_URL=http://localhost:8080 BACKFILL_TOKEN=... node example.js
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema.js";

type Backfill = components["schemas"]["Backfill"];
type BackfillState = components["schemas"]["BackfillState"];
type Problem = components["schemas"]["Problem"];

const TERMINAL: ReadonlySet<BackfillState> = new Set<BackfillState>(["succeeded", "failed", "canceled"]);

const baseUrl = process.env["BACKFILL_URL"] ?? "http://localhost:8080";
const token = process.env["BACKFILL_TOKEN"];

const client = createClient<paths>({ baseUrl });

// Bearer token on every request, when the server has API_TOKEN set.
const auth: Middleware = {
  onRequest({ request }) {
    if (token) {
      request.headers.set("Authorization", `Bearer ${token}`);
    }
    return request;
  },
};
client.use(auth);

/** A problem+json answer as an exception, keeping its stable code. */
class ProblemError extends Error {
  constructor(readonly problem: Problem) {
    super(`${problem.status} ${problem.code}: ${problem.detail}`);
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** How long a 503 asks us to wait (Retry-After, in seconds), or a default. */
function retryAfterMs(response: Response, fallbackMs: number): number {
  const seconds = Number(response.headers.get("Retry-After"));
  return Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : fallbackMs;
}

async function putDag(dagId: string): Promise<void> {
  const { data, error, response } = await client.PUT("/api/v1/dags/{dag_id}", {
    params: { path: { dag_id: dagId } },
    // timezone, max_active_runs and is_paused take their defaults when left out.
    body: { schedule: "0 2 * * *", timezone: "America/New_York", description: "Nightly sales rollup" },
  });
  if (error) {
    throw new ProblemError(error);
  }
  console.log(`${response.status === 201 ? "created" : "replaced"} DAG ${data.dag_id} (${data.schedule} in ${data.timezone})`);
}

/**
 * Creates the backfill, or, when the DAG already has an active one, adopts that one: a 409
 * backfill_already_running names it in active_backfill_id. The Idempotency-Key makes a retry
 * of this very request (after a timeout, say) answer the same backfill instead of a 409.
 */
async function createOrAdoptBackfill(dagId: string, idempotencyKey: string): Promise<number> {
  for (;;) {
    const { data, error, response } = await client.POST("/api/v1/backfills", {
      params: { header: { "Idempotency-Key": idempotencyKey } },
      body: {
        dag_id: dagId,
        from_date: "2024-03-01T00:00:00Z",
        to_date: "2024-03-31T00:00:00Z",
        max_active_runs: 2,
        reprocess_behavior: "failed",
        dag_run_conf: { source: "typescript-example" },
      },
    });
    if (data) {
      const replayed = response.headers.get("Idempotent-Replayed") === "true";
      console.log(`${replayed ? "replayed" : "created"} backfill ${data.id}: ${data.progress.total} slots, ${data.progress.skipped} skipped`);
      return data.id;
    }
    switch (error.code) {
      case "backfill_already_running":
        if (error.active_backfill_id === undefined) {
          throw new ProblemError(error);
        }
        console.log(`DAG ${dagId} already has backfill ${error.active_backfill_id} running; following it`);
        return error.active_backfill_id;
      case "busy":
        // The database kept refusing the transaction; nothing was created. Try again.
        await sleep(retryAfterMs(response, 1000));
        continue;
      case "invalid_request":
        for (const field of error.errors ?? []) {
          console.error(`  ${field.field}: ${field.message}`);
        }
        throw new ProblemError(error);
      default:
        throw new ProblemError(error);
    }
  }
}

function describe(b: Backfill): string {
  const p = b.progress;
  const done = p.success + p.failed + p.canceled + p.skipped;
  const percent = p.total === 0 ? 100 : Math.floor((done * 100) / p.total);
  const why = b.pause_reason ? ` (${b.pause_reason})` : "";
  return `backfill ${b.id} ${b.state}${why}: ${done}/${p.total} (${percent}%) ` +
    `queued=${p.queued} running=${p.running} success=${p.success} failed=${p.failed} ` +
    `canceled=${p.canceled} skipped=${p.skipped}`;
}

/** Polls the backfill until its state is terminal, printing progress when it changes. */
async function waitForBackfill(backfillId: number, intervalMs = 2000): Promise<Backfill> {
  let last = "";
  for (;;) {
    const { data, error, response } = await client.GET("/api/v1/backfills/{backfill_id}", {
      params: { path: { backfill_id: backfillId } },
    });
    if (error) {
      if (response.status === 503) {
        await sleep(retryAfterMs(response, intervalMs));
        continue;
      }
      throw new ProblemError(error);
    }
    const line = describe(data);
    if (line !== last) {
      console.log(line);
      last = line;
    }
    if (TERMINAL.has(data.state)) {
      return data;
    }
    await sleep(intervalMs);
  }
}

/**
 * Creates a backfill of the failed and canceled slots of a finished backfill, stopping after
 * 3 more failures; null when none failed (422 no_runs_to_create).
 */
async function retryFailed(backfillId: number): Promise<number | null> {
  const { data, error } = await client.POST("/api/v1/backfills/{backfill_id}/retry", {
    params: { path: { backfill_id: backfillId }, header: { "Idempotency-Key": `retry-of-${backfillId}` } },
    body: { max_failed_runs: 3 },
  });
  if (data) {
    console.log(`backfill ${data.id} retries ${data.progress.total} slots of backfill ${data.parent_backfill_id ?? "?"}`);
    return data.id;
  }
  if (error.code === "no_runs_to_create") {
    return null;
  }
  throw new ProblemError(error);
}

async function main(): Promise<number> {
  const dagId = "sales";
  await putDag(dagId);
  const id = await createOrAdoptBackfill(dagId, "sales-march-2024");
  const final = await waitForBackfill(id);
  console.log(`backfill ${final.id} finished ${final.state} at ${final.completed_at ?? "?"}`);
  if (final.state === "failed") {
    const retry = await retryFailed(final.id);
    if (retry !== null) {
      return (await waitForBackfill(retry)).state === "succeeded" ? 0 : 1;
    }
  }
  return final.state === "succeeded" ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 2;
  },
);
