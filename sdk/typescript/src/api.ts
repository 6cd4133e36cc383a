// Generated from openapi.yaml by scripts/gen-api.mjs (openapi-typescript); do not edit.
// Regenerate with `npm run gen` after changing the spec.

export interface paths {
    "/v1/tasks/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get a task
         * @description The task's definition (secrets removed) with its read-only fields, including `next_fire_at`.
         */
        get: operations["getTask"];
        /**
         * Create or replace a task (declarative)
         * @description Creates the task (`201`) or replaces its definition (`200`). Sending the same definition
         *     again is a `200` no-op that does not bump the version. Every omitted field gets its
         *     default; the response shows the complete definition. `If-Match` makes the write
         *     conditional on the current version.
         *
         *     Checks, in order: the token (`401`) and its role (`403`: `admin` only); an empty or
         *     `null` body is `400`; the definition is validated (`422`, every problem reported); the
         *     hosts of `dispatch.url` and the `notify` URLs are checked against
         *     `outbound_allowed_hosts` when it is set, and literal addresses in them against the
         *     refused ranges (`422`, every such URL reported); `If-Match` is
         *     parsed (`412` if it is not a version or `*`); an `after` trigger's upstream must exist
         *     and must not close a cycle (`422`); the limits named in `execution.limits` must exist
         *     and admit their entries (`422`, the first problem); the version must match `If-Match`
         *     (`412`).
         *
         *     `dispatch.secret` and `notify.secret` are write-only: accepted and stored, never
         *     returned.
         */
        put: operations["putTask"];
        post?: never;
        /**
         * Delete a task
         * @description Removes the task. Its PENDING and FAILED instances become CANCELLED (`error_kind:
         *     cancelled`, `error: "task deleted"`); RUNNING instances finish under their leases; all
         *     instances and their events are kept. Tasks that run `after` it are paused with
         *     `paused_reason: "upstream task <id> was deleted"`.
         */
        delete: operations["deleteTask"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tasks": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List tasks
         * @description Tasks in ascending `id` order, one page at a time.
         */
        get: operations["listTasks"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tasks/{id}/pause": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Pause a task
         * @description While a task is paused no windows are materialised and none of its instances can be
         *     claimed. The body is optional (empty, `null` or `{}` all mean the default reason
         *     `paused by operator`). Pausing a paused task replaces its `paused_reason` (and, for a
         *     task paused by its circuit breaker, cancels the automatic cooldown resume). Every pause
         *     bumps the version.
         */
        post: operations["pauseTask"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tasks/{id}/resume": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Resume a task
         * @description Clears the pause (and `paused_reason`) and recomputes `next_fire_at` as the first window
         *     strictly after now, so paused time is not "missed". A `once` task whose instant passed
         *     while paused does not fire (`next_fire_at: null`). Resets `consecutive_failures` to 0,
         *     closing an open circuit breaker. Held PENDING instances become claimable again. Resuming
         *     a task that is not paused changes nothing (no version bump). No request body is read.
         */
        post: operations["resumeTask"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tasks/{id}/trigger": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Run a task now, later, or under a chosen key (manual or delayed run)
         * @description Creates one PENDING instance of the task (`source: manual`, creating event by actor
         *     `api` with reason `manual`), whatever its trigger type and even while it is paused (the
         *     instance is then held until the task is resumed). `scheduled_at` and `available_at` are
         *     `run_at`, or the database's now plus `delay_seconds`, or now; an instance available now
         *     wakes its agent's waiting claims. `context` is stored with the instance and merged over
         *     the task's `context` (top-level keys; the trigger's value wins) when the instance is
         *     claimed.
         *
         *     **Idempotent by key.** The window key is `window_key`, or `manual:<uuid>` when absent.
         *     A `window_key` that is an RFC 3339 instant is stored in the schedule's own spelling, UTC
         *     with seconds (`2026-12-01T08:00:00+08:00` and `2026-12-01T00:00:00.000Z` both become
         *     `2026-12-01T00:00:00Z`; a fraction of a second is kept, e.g. `…T00:00:00.500Z`), so one
         *     instant is one window however it is written; any other key is kept as given. The insert is `ON CONFLICT (task_id, window_key) DO NOTHING`: a new key answers `201`
         *     with the new instance; a key the task already has (from an earlier trigger, a schedule
         *     window, a backfill…) answers `200` with that existing instance unchanged, whatever its
         *     status, and the rest of the body is ignored. Retrying a trigger with the same key is
         *     therefore safe.
         *
         *     Manual runs are **not subject to the overlap policy**: they are never recorded SKIPPED
         *     and cancel nothing. The task's `concurrency_limit` still caps RUNNING instances at claim
         *     time. When the run succeeds, tasks that run `after` this one get the same window key.
         *
         *     **Debounced.** For a task with `execution.debounce` (`{seconds, max_wait_seconds}`), a
         *     trigger **without** `window_key` joins the task's waiting instance of its
         *     `debounce_key` (default: the task's id): the one such instance that is PENDING, was
         *     never claimed and is not yet available. It moves that instance's `available_at` (and
         *     `scheduled_at`) to now + `seconds`, never past its first trigger (`created_at`) +
         *     `max_wait_seconds` and never earlier than it was, gives it this trigger's `context`
         *     (its shared-limit keys are rendered anew), and answers `200` with it and
         *     `"debounced": true`. When there is no such instance (none yet, or the last one became
         *     available, was claimed or finished) it makes a new one (`manual:<uuid>` key, available
         *     and scheduled `seconds` from now, waking one of its agent's waiting claims, which then
         *     waits for it) and answers `201` with `"debounced": false`. Concurrent triggers on any
         *     number of replicas coalesce into one instance: a unique index on (task, debounce key)
         *     decides, so each of them answers with that instance. `run_at` and `delay_seconds` are
         *     `422` on a debounced trigger (the debounce decides when it runs); a trigger with a
         *     `window_key` is never debounced (and `debounce_key` beside it is `422`); a
         *     `debounce_key` for a task without `execution.debounce` is `422` on `debounce_key`.
         *     `kairos_debounced_triggers_total` counts the triggers an instance took.
         *
         *     Every answer carries `debounced`: `true` only for a trigger taken by a waiting
         *     debounced instance, `false` for a new instance and for an existing `window_key`.
         *
         *     The body is optional (empty, `null` or `{}`: run now under a fresh `manual:<uuid>` key).
         *     Unknown fields are all reported (`422`); otherwise the first invalid value is reported.
         *     The body is validated before the task is looked up (`404`). A `window_key` that is an
         *     RFC 3339 instant, or a `run_at`, more than `retention_days` before now is `422` on that
         *     field: such a window may have been pruned, so its uniqueness could not be guaranteed
         *     (see Retention). A `window_key` instant more than `retention_days` after the run's own
         *     time (now, now + `delay_seconds`, or `run_at`) is `422` on `window_key`: the run's row
         *     could be pruned before the schedule reaches that window, which would then run again.
         */
        post: operations["triggerTask"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tasks/{id}/backfill": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Materialise the schedule's windows in a past (or future) range
         * @description Computes the task's schedule windows in `[from, to)` (`from` inclusive, `to` exclusive;
         *     both truncated to whole seconds) and inserts one instance per window that does not exist
         *     yet (`source: backfill`, window key = the scheduled instant, `available_at =
         *     scheduled_at`, creating event by actor `backfill`). Windows that already have an
         *     instance, in any status, are left alone and counted in `existing`, so a backfill is
         *     idempotent: running it again (or twice at once) creates nothing more. It does not move
         *     the task's `next_fire_at`. A paused task can be backfilled; its windows are held until it
         *     is resumed.
         *
         *     The task row is locked for the backfill's transaction: concurrent backfills of the same
         *     task and the trigger loop take turns. New windows obey the task's **overlap policy**, as
         *     one pass in window order next to the task's unfinished instances: under `skip` a window
         *     finding ≥ `concurrency_limit` unfinished instances (stored ones or windows of this
         *     backfill) is inserted SKIPPED with `skip_reason: "overlap: window <key> still
         *     unfinished"`, so with the defaults (`skip`, limit 1) only the first window runs — use
         *     `overlap: queue` to run every window in order; under `replace` older unfinished
         *     instances are CANCELLED (counted in `cancelled`) and windows of this backfill superseded
         *     by a newer one are inserted SKIPPED with `skip_reason: "overlap: replaced by window
         *     <key>"`; under `queue` every window is PENDING. `overlap` in the body applies another
         *     policy to this backfill only.
         *
         *     Existing windows are left alone unless `reprocess: failed`: then those that are DEAD,
         *     FAILED or CANCELLED get an operator retry in the same transaction (counted in
         *     `reprocessed`); SUCCESS windows never run again.
         *
         *     `created` counts every inserted row, including those recorded SKIPPED (which are also
         *     counted in `skipped`). With `dry_run: true` nothing is written: the counts say what
         *     would happen (`cancelled` is always 0) and `windows` lists every window of the range with
         *     its outcome.
         *
         *     At most 10,000 windows per call: a larger range is `422` on `to` (backfill it in parts).
         *     A `from` more than `retention_days` before now is `422` on `from`, dry run included:
         *     windows that old may have been pruned, so their uniqueness could not be guaranteed
         *     (see Retention).
         *     `manual` and `after` tasks have no schedule to backfill: `422` with field `""` (use
         *     `POST /v1/tasks/{id}/trigger`). A `once` task has at most its one window. The body is
         *     validated before the task is looked up; the unknown task (`404`), the trigger type and
         *     the window count are checked after.
         */
        post: operations["backfillTask"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/tasks/{id}/preview": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Preview a task's next windows
         * @description Up to `count` windows of the task's schedule strictly after `from`, each with its
         *     `window_key`, `scheduled_at` and `available_at` (with `trigger.jitter_seconds`, the
         *     jittered instant its instance will be claimable at; the same on every call and every
         *     replica). `manual` and `after` tasks have no windows of their own (empty list); a
         *     `once` task has at most one. A cron schedule that stops firing (e.g. `0 0 30 2 *`)
         *     yields fewer windows than asked. The pause state is not taken into account.
         */
        get: operations["previewTask"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/cron/preview": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Evaluate a cron expression
         * @description Evaluates any cron expression in a time zone and returns up to `count` fire times
         *     strictly after `from`, with the contract's day-field (Vixie OR/AND) and DST (cronie)
         *     rules. 5 fields (`min hour dom mon dow`, second 0) or 6 fields (leading seconds); names,
         *     lists, ranges, steps, `L`, `W`, `#`, `?`, and `@hourly @daily @midnight @weekly @monthly
         *     @yearly @annually` (`@midnight` = `@daily`). 7-field (year) expressions, the `+`
         *     day-of-week prefix and `@reboot` (kairos has no boot event; use a manual trigger) are
         *     invalid (`422` with the reason, on field `expr`); an unknown zone is `422` on field
         *     `timezone`. An expression with no fire time within 5 years after `from` (`0 0 30 2 *`)
         *     is `422` on `expr`, as at registration. Fewer than `count` times are returned when the
         *     expression stops firing later (no further fire time within 5 years).
         */
        get: operations["previewCron"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/instances": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Query instances
         * @description Instances newest first by `scheduled_at` (then by id, descending), filtered by every
         *     given parameter (AND). Instances of deleted tasks are included.
         */
        get: operations["listInstances"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/instances/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get an instance with its history
         * @description The instance and every transition it went through, oldest first; a PENDING or FAILED
         *     instance also says why it is waiting (`waiting_on`). An id that is not a UUID is `404`.
         */
        get: operations["getInstance"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/claims": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Claim instances under fresh leases (long poll)
         * @description Takes up to `max_instances` PENDING instances of `agent_id` whose `available_at` has come,
         *     of poll-mode tasks (`dispatch.mode: poll`; webhook tasks are pushed by kairos, never
         *     claimed here) that exist and are not paused, never letting a task exceed its
         *     `execution.concurrency_limit` RUNNING instances; oldest `available_at` first, then window
         *     order. Each becomes RUNNING with a fresh `lease_token`, `worker_id`, `started_at = now()`,
         *     `lease_expires_at = now() + lease_seconds` and a timeout deadline of `started_at +` the
         *     task's current `timeout_seconds`. Each claimed instance is returned with its
         *     `lease_token` and the `context` to run with (the task's `context`, with a manual
         *     trigger's `context` merged over it by top-level key); pass `idempotency_key` downstream.
         *
         *     **Shared limits.** An instance whose task draws on shared limits (`execution.limits`) is
         *     taken only when every budget it draws on has room now (not held, its `concurrency` and
         *     its `rate` allowing the entry's `cost`); otherwise it stays PENDING and is passed over,
         *     and the claim takes other claimable work in its place. Such a claim's `started_at` is
         *     the instant the budgets were tested at. See Shared limits.
         *
         *     **Long poll.** When nothing can be taken and `wait_seconds` > 0, the request waits (holding
         *     no database connection) and answers as soon as it takes at least one instance: it is woken
         *     by new work for its agent (a window becoming due, a retry, an operator retry, a finished
         *     run freeing a concurrency slot), by the next `available_at` of its agent's delayed work,
         *     by the end of a hold or the next start a rate allows when one of those alone keeps its
         *     agent's work back, or by a poll at least every second while work exists that cannot be
         *     taken yet. After
         *     `wait_seconds` without work, or at once when the server shuts down, it answers `200` with
         *     `{"instances": []}`. Waiters of one agent do not wake as a herd: new work wakes the
         *     longest-waiting one, and a waiter whose claim came back full wakes the next.
         *
         *     **Limits.** At most `claim_max_waiters` (default 1024) long polls wait at once in one
         *     replica; past it, a claim that found nothing and would wait answers `429` with
         *     `Retry-After` (a claim that finds work, or does not wait, is served as usual). After the
         *     replica begins to shut down (SIGTERM), new claims answer `503` with `Retry-After: 1` at
         *     once (problem type `shutting-down`): another replica can serve them. The replica keeps
         *     accepting connections for at least `shutdown_drain_ms` (default 1000) after the signal, so a
         *     claim sent meanwhile gets this answer rather than a refused connection. Heartbeats,
         *     completions and failures are still served until the replica stops.
         *
         *     Bounds depend on configuration: `lease_seconds` 1–`max_lease_seconds` (default 3600),
         *     default `default_lease_seconds` (60); `wait_seconds` 0–`claim_max_wait_seconds`
         *     (default 30). Out-of-range values are `422` naming the field (only the first invalid
         *     field is reported; unknown fields are all reported). An empty body counts as `{}` (so
         *     `agent_id` is missing: `422`).
         *
         *     **Access.** An `agent` or `admin` token. An `agent` token limited to some agent ids may
         *     claim only for one of them: another `agent_id` is `403` (checked after the body is
         *     validated).
         */
        post: operations["claimInstances"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/instances/{id}/heartbeat": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Extend a lease
         * @description Sets `lease_expires_at = now() + lease_seconds` (default `default_lease_seconds`, 60;
         *     at most `max_lease_seconds`, 3600) for the RUNNING instance held by `lease_token`. It
         *     does not move the attempt's timeout deadline. Succeeds even after `lease_expires_at` has
         *     passed as long as the reaper has not yet taken the instance. If the token no longer holds
         *     the instance (reaped, cancelled, finished, or a newer attempt) the answer is `409`: stop
         *     working and do not report.
         *
         *     **Access** (also for complete and fail): an `agent` token allowed for the instance's
         *     `agent_id`, or an `admin` token. The instance is looked up first (`404`), then its agent
         *     is checked (`403`), then the body is validated.
         */
        post: operations["heartbeatInstance"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/instances/{id}/complete": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Report success
         * @description RUNNING → SUCCESS under the lease token: stores `result` (any JSON value, at most 65536
         *     bytes serialized; absent or `null` stores `null`), sets `finished_at`, clears the lease,
         *     `error` and `error_kind`, and resets the task's `consecutive_failures` to 0. A stale
         *     token is `409` and nothing is written. A `result` over 64 KiB is `413` (store large
         *     outputs elsewhere and return a reference); that check comes before the lease check.
         *     Access: an `agent` token allowed for the instance's `agent_id` (else `403`), or `admin`.
         */
        post: operations["completeInstance"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/completions": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Report many successes in one request and one commit
         * @description The batch form of `POST /v1/instances/{id}/complete`. An agent that claimed a batch
         *     (`max_instances` up to 100) reports it in **one request and one database commit**
         *     instead of one request and one commit per instance; paying the round trip and the
         *     commit once per batch rather than once per instance is what makes a high
         *     claim → complete throughput possible. The fence is not weakened: inside that one
         *     transaction **each item is its own compare-and-swap** on (`id`, RUNNING, `lease_token`),
         *     exactly as the single complete, so a stale token fails only its own item (`409`, nothing
         *     written for it, never overwriting a newer attempt) while the other items commit.
         *
         *     **Body.** `{"completions": [{"id", "lease_token", "result"?, "traceparent"?}, …]}` with 1–500 items (items
         *     from several claims may be combined). Validation stops at the first problem (one entry in
         *     `errors`), items in order and, within an item, unknown field, then `id`, then
         *     `lease_token`, then `result`:
         *     - `completions` missing, not an array, empty or longer than 500: `422` on `completions`;
         *       an item that is not an object: `422` on `completions[n]`; an empty body counts as `{}`
         *       (`422` on `completions`), and unknown top-level fields are all reported.
         *     - an unknown field in an item: `422` on `completions[n].<field>`;
         *     - an `id` that is missing or not a UUID: `422` on `completions[n].id` (not a per-item
         *       `404`); a `lease_token` that is missing or not a UUID: `422` on
         *       `completions[n].lease_token`;
         *     - a `result` holding U+0000 anywhere (a string or a key): `422` naming its path
         *       (`completions[n].result…`); the whole request is refused, like any other invalid item,
         *       so nothing is written for the other items either;
         *     - a `result` (any JSON value; absent or `null` stores `null`) over 65536 bytes serialized:
         *       `413` naming `completions[n].result`. The whole body is still bounded by
         *       `max_body_bytes` (default 262144): larger is `413`.
         *
         *     Nothing is written when the request is refused (`400`, `401`, `403`, `413`, `415`, `422`,
         *     or a database failure before the commit: `503`/`500`).
         *
         *     **Access.** An `agent` or `admin` token (a `viewer` token is `403` before the body is
         *     read). After the body is validated, every listed instance that exists is looked up: an
         *     instance of another agent than an `agent` token is limited to is refused **in its own
         *     item** (`403`, detail `instance <id> belongs to an agent this token may not act for`;
         *     nothing is written for it, even with the right lease token), and the other items go on.
         *     Ids that do not exist answer `404` in their item.
         *
         *     **Answer.** `200` with one entry in `results` per item, **in request order**, even when no
         *     item succeeded:
         *     - `{"id", "status": 200, "instance": <Instance>}`: the instance is now SUCCESS;
         *     - `{"id", "status": 409, "detail"}`: stale lease (the instance is not RUNNING under that
         *       token; the detail names its status and attempt, as the single complete's `409`), counted
         *       in `kairos_fence_rejections_total` and logged as a warning;
         *     - `{"id", "status": 404, "detail"}`: no instance with that id;
         *     - `{"id", "status": 403, "detail"}`: an instance of an agent the token may not act for.
         *
         *     **Side effects per success**, all in the same transaction as the others and the same as
         *     the single complete: RUNNING → SUCCESS with `result` and `finished_at`, lease, `error` and
         *     `error_kind` cleared; an event row; the task's `consecutive_failures` reset to 0; the
         *     windows of unpaused dependent tasks (`after`) created with the upstream's result digest;
         *     an `instance.succeeded` notification for the task's `notify.on_success` URLs; and a
         *     wake-up of the agent's waiting claims where the task has PENDING work queued (a freed
         *     slot may unblock it). The event actor is `agent:<worker_id>` of each instance, as for a single
         *     complete.
         *
         *     An instance listed several times gets each of its items tried in request order, as
         *     successive single completes would be: after an item completed it, a later one under the
         *     same lease token is answered as a repeat (`200` with the instance as the first left it,
         *     its `result` unchanged) and one under another token is `409`; after an item with a stale
         *     token, a later one holding the current token succeeds.
         */
        post: operations["completeInstances"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/instances/{id}/fail": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Report failure
         * @description Ends the attempt held by `lease_token` with `error_kind: agent` and `error` (stored cut to
         *     4096 bytes). The instance becomes **DEAD** (with `finished_at`) when `retryable` is
         *     `false`, when no attempts remain (`attempt >= max_attempts`) or when its task has been
         *     deleted; otherwise **FAILED** with `available_at = now() +` min(base_seconds ·
         *     2^(attempt−1), max_seconds) ± jitter·delay (`now()` with `retry_at_once`), after which
         *     the retry scanner makes it PENDING with `attempt + 1`. Either way the task's `consecutive_failures` grows by one. The
         *     response shows the resulting `status` and `available_at`. With `retry_after_seconds` the
         *     attempt is **throttled** instead: PENDING again at `now() + retry_after_seconds` with the
         *     same `attempt`, `error_kind: throttled`, no failure counted (see the field); with
         *     `hold_limit` as well, the shared limit the quota belongs to is held until the same
         *     instant for every task. A stale token is `409` and
         *     nothing is written (but see `hold_limit`). Access: an `agent` token allowed for the instance's `agent_id` (else
         *     `403`), or `admin`.
         */
        post: operations["failInstance"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/instances/{id}/retry": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Retry an instance (operator)
         * @description DEAD, FAILED, CANCELLED or SKIPPED → PENDING with `attempt + 1` and `max_attempts + 1`,
         *     claimable at once (`available_at = now()`, no backoff). Clears `result`, `error`,
         *     `error_kind`, `skip_reason`, `started_at`, `finished_at`, `worker_id` and any lease; keeps
         *     `source`. The agent's waiting claims are woken. The body is optional (empty, `null` or
         *     `{}`); `reason` (default `retried by operator`) is recorded on the event. From PENDING,
         *     RUNNING or SUCCESS it is `409`. An instance of a deleted task can be retried but is
         *     never claimed.
         */
        post: operations["retryInstance"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/instances/{id}/cancel": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Cancel an instance (operator)
         * @description PENDING, RUNNING or FAILED → CANCELLED with `finished_at`, `error_kind: cancelled` and
         *     `error` set to the reason (default `cancelled by operator`). A running lease is fenced
         *     out: the agent's next heartbeat, complete or fail gets `409`. The body is optional
         *     (empty, `null` or `{}`). From SUCCESS, DEAD, SKIPPED or CANCELLED it is `409`.
         */
        post: operations["cancelInstance"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/limits/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get a shared limit with its live usage
         * @description The limit's definition and its usage now: `running` units, the starts its `rate`
         *     allows now (`available_rate`) and its hold, or, for a `per_key` limit, those of its
         *     busiest keys (`keys`). Any token may read it.
         */
        get: operations["getLimit"];
        /**
         * Create or replace a shared limit (declarative)
         * @description Creates the limit (`201`) or replaces its definition (`200`). Sending the same definition
         *     again (after defaults are filled in) is a `200` no-op that does not bump the version.
         *     The response is the limit's view, with its live usage. `If-Match` makes the write
         *     conditional on the current version.
         *
         *     Checks, in order: the token (`401`) and its role (`403`: `admin` only); a `name` that
         *     does not match the pattern is `422` on `name`; an empty or `null` body is `400`; the
         *     definition is validated (`422`, every problem reported); `If-Match` is parsed (`412` if
         *     it is not a version or `*`); the version must match `If-Match` (`412`; `*` needs the
         *     limit to exist). Then a change that would leave a task that draws on the limit unable
         *     ever to start is `409` naming the task, and nothing is written: a `concurrency` below
         *     the task's `cost`, a `rate` whose `burst + 1` is below it, or `per_key: true` while the
         *     task draws on the limit without a `key`. Change the task first. Turning `per_key` on or
         *     off while a budget of the limit is held is `409` too (it changes which budgets there
         *     are): release the holds, or let them end, first.
         *
         *     A changed `rate` applies from the change on (the budget's rate state is kept). A lower
         *     `concurrency` stops nothing that runs: new starts wait until the running units fit.
         */
        put: operations["putLimit"];
        post?: never;
        /**
         * Delete a shared limit
         * @description Removes the limit with its budgets' state (rate, holds, and the units its running
         *     instances hold: a limit created again under the name starts from nothing, and those
         *     instances run on, drawing on nothing). Refused with `409` while any task draws on it
         *     (the detail names up to 10 of them): change those tasks first.
         */
        delete: operations["deleteLimit"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/limits": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List shared limits
         * @description One page of limits with their live usage, in `name` order; follow `next_cursor` for the rest. Unknown query parameters are `422`. Any token may read them.
         */
        get: operations["listLimits"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/limits/{name}/hold": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Hold a shared limit
         * @description Nothing starts on the limit's budget until now + `seconds` (database clock), for any
         *     task; RUNNING instances are not touched. For a `per_key` limit only the budget of `key`
         *     is held, and `key` is required (`422` on `key`); for a limit without `per_key`, `key` is
         *     ignored. A hold never shortens a later one already in place (that one and its reason
         *     stay). `reason` (default `held by operator`) is shown as `held_reason`. The body is
         *     validated first (`422`), then the limit looked up (`404`).
         */
        post: operations["holdLimit"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/limits/{name}/release": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Lift a shared limit's holds
         * @description Lifts the hold of `key`'s budget (for a `per_key` limit), or every hold of the limit
         *     when no `key` is given; for a limit without `per_key`, its one hold either way. Lifting
         *     a hold that is not there changes nothing. The body is optional (empty, `null` or `{}`);
         *     it is validated first (`422`), then the limit looked up (`404`).
         */
        post: operations["releaseLimit"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/healthz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Liveness
         * @description The process is up and serving HTTP. Does not touch the database.
         */
        get: operations["healthz"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/readyz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Readiness
         * @description Needs no token. Ready (`200`) when the database answers, every migration is applied, and
         *     every background loop of this replica (`trigger`, `retry_scanner`, `timeout_reaper`,
         *     `webhook_dispatcher`, `notifier`, `pruner`, `stats`; those that run) completed a pass
         *     within three times its interval and at least 15 seconds, and the replica is not shutting
         *     down; otherwise `503` with the reasons in `problems` (e.g. `notifier loop has not ticked
         *     for 47.2 s`, or `shutting down: this replica takes no new work` from SIGTERM until it
         *     exits, so load balancers stop sending it work while it drains).
         */
        get: operations["readyz"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Prometheus metrics
         * @description Prometheus text exposition of every kairos metric (see Metrics in the description):
         *     `kairos_windows_created_total`, `kairos_windows_staged_total`,
         *     `kairos_window_conflicts_total`, `kairos_debounced_triggers_total`, `kairos_fence_rejections_total`, `kairos_instances{status}`,
         *     `kairos_schedule_lag_seconds` (histogram, 1 ms – 60 s), `kairos_retries_total`,
         *     `kairos_reaped_total{kind}`, `kairos_skipped_total{reason}`,
         *     `kairos_loop_last_tick_timestamp{loop}`, `kairos_webhook_pushes_total{outcome}`,
         *     `kairos_notifications_total{outcome}`, `kairos_catchup_not_recorded_total`,
         *     `kairos_circuit_opened_total`, `kairos_pruned_total{table}`. Needs a token of any role;
         *     an agent token limited to some agents reads the series labelled by agent
         *     (`kairos_agent_last_claim_seconds{agent_id}`) of those agents only, as it reads only
         *     their tasks and instances.
         */
        get: operations["metrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/openapi.yaml": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** This document */
        get: operations["openapi"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Redirect to the console */
        get: operations["uiRoot"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Console overview
         * @description Instances by status and task counts (sampled by the stats loop into `console_gauges`;
         *     terminal statuses of a large table are estimates, marked ≈), fire lag p50/p99 and windows
         *     created, succeeded and skipped per minute over the last hour (`console_minutes`), open
         *     circuit breakers, and each loop's last tick on this node. No page counts over history.
         */
        get: operations["uiOverview"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/login": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The login form (open mode redirects to the overview) */
        get: operations["uiLoginForm"];
        put?: never;
        /**
         * Start a console session with a token
         * @description `csrf` must equal the `kairos_ui_login` cookie that `GET /ui/login` set (`403` and a
         *     fresh form otherwise); an unknown token is `401` and a fresh form.
         */
        post: operations["uiLogin"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/logout": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** End the console session */
        post: operations["uiLogout"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/tasks": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Tasks, filtered by agent, paused and trigger type
         * @description Each row shows the next fire time in the task's zone and in UTC, and a strip of its last
         *     30 windows coloured by status. Keyset-paged by task id (`after`).
         */
        get: operations["uiTasks"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/tasks/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * One task
         * @description The definition, the next 10 fire times with the DST rule that shifted or folded any of
         *     them, a timeline of the last 240 windows (hover: status, attempt, start lag, skip reason),
         *     and for admins pause/resume with a reason, trigger now, and backfill with a dry-run
         *     preview first.
         */
        get: operations["uiTask"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/tasks/{id}/{action}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Pause, resume, trigger or backfill a task (admin)
         * @description `action` is `pause` (field `reason`), `resume`, `trigger`, `backfill-preview` (a dry run
         *     rendered as a page with an apply button) or `backfill` (fields `from`, `to`, `overlap`,
         *     `reprocess`, as `POST /v1/tasks/{id}/backfill`).
         */
        post: operations["uiTaskAction"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/instances": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Instances, filtered by task, status, window and time range (cursor-paged) */
        get: operations["uiInstances"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/instances/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One instance with its event timeline, result, error and upstream */
        get: operations["uiInstance"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/instances/{id}/{action}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Operator retry or cancel of one instance (admin) */
        post: operations["uiInstanceAction"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/limits": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Shared limits with their live usage, holds and busiest keys
         * @description Every limit as `GET /v1/limits` shows it: concurrency in use, the starts its rate allows
         *     now, holds (with their reasons), a `per_key` limit's busiest keys, and (for tokens not
         *     limited to agents) how many due PENDING instances draw on it. Admins get hold and
         *     release buttons. `done` (`held`, `released`) shows the outcome of the last action.
         */
        get: operations["uiLimits"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/limits/{name}/{action}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Hold or release a shared limit (admin)
         * @description `hold`: fields `seconds` (1–86400), `key` (required for a `per_key` limit) and `reason`,
         *     as `POST /v1/limits/{name}/hold`. `release`: field `key` (optional), as
         *     `POST /v1/limits/{name}/release`. An unknown limit or action is `404`; an invalid field
         *     is `422`.
         */
        post: operations["uiLimitAction"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/dead": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The DEAD queue, newest first, with bulk retry and cancel for admins */
        get: operations["uiDeadQueue"];
        put?: never;
        /**
         * Retry or cancel selected DEAD instances (admin, at most 500)
         * @description Fields `ids` (repeated), `action` (`retry`|`cancel`) and `reason`; or `only` =
         *     `<id>:retry|cancel` for one row. Instances that are no longer DEAD are counted as not
         *     done; the redirect reports both counts.
         */
        post: operations["uiDeadAction"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/playground": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Cron playground
         * @description The next 10 fire times of `expr` in `tz` after `from`, each in the zone and in UTC, with
         *     the DST rule that shifted or folded it; a bad expression or zone names the field.
         */
        get: operations["uiPlayground"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/assets/app.css": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The console's stylesheet */
        get: operations["uiCss"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/ui/assets/app.js": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The console's script (UTC/local switch, select all) */
        get: operations["uiJs"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /**
         * Format: date-time
         * @description RFC 3339 in UTC with a `Z` suffix.
         * @example 2026-11-29T00:30:00Z
         */
        Timestamp: string;
        /** @example daily_report_001 */
        TaskId: string;
        /**
         * @description 1–128 characters of letters, digits, `_`, `.`, `-`, `:`.
         * @example report_agent
         */
        AgentId: string;
        /** @description When the task's windows occur. */
        Trigger: components["schemas"]["CronTrigger"] | components["schemas"]["IntervalTrigger"] | components["schemas"]["OnceTrigger"] | components["schemas"]["AfterTrigger"] | components["schemas"]["ManualTrigger"];
        /**
         * @description Windows at the expression's fire times in `timezone` (see `GET /v1/cron/preview` for the
         *     syntax, day-field and DST rules). `expr` is stored trimmed.
         */
        CronTrigger: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            type: "cron";
            /**
             * @description 5 or 6 fields, or a macro (`@midnight` = `@daily`; `@reboot` is refused); invalid, or with no fire time within 5 years after registration in `timezone` (`0 0 30 2 *`), is `422` on `trigger.expr`.
             * @example 0 30 8 * * *
             */
            expr: string;
            /**
             * @description IANA zone name; unknown is `422` on `trigger.timezone`. Always present in responses.
             * @default UTC
             * @example Asia/Shanghai
             */
            timezone?: string;
            jitter_seconds?: components["schemas"]["JitterSeconds"];
        };
        /** @description Windows at `start_at + k·every_seconds` (k ≥ 0); without `start_at` the grid is aligned to the Unix epoch. */
        IntervalTrigger: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            type: "interval";
            /** @description Period in seconds, at most 366 days. */
            every_seconds: number;
            /** @description Origin of the grid (truncated to whole seconds). Absent in responses when not given. */
            start_at?: components["schemas"]["Timestamp"];
            jitter_seconds?: components["schemas"]["JitterSeconds"];
        };
        /**
         * @description Spread the task's windows: each window becomes claimable (`available_at`) at its
         *     instant plus an offset in `[0, jitter_seconds)`, so many tasks on one schedule do not
         *     all start at the top of the minute. The offset is fixed per task and window, with
         *     millisecond resolution: the first 8 bytes of `SHA-256("<task id>\n<window key>")` read
         *     as a big-endian unsigned integer, modulo `jitter_seconds × 1000` milliseconds. Every
         *     replica, every pass and every preview (`GET /v1/tasks/{id}/preview`) computes the same
         *     one. The window keeps its nominal instant: `window_key` and `scheduled_at` are
         *     unchanged, the window is written (and, with `trigger_lead_ms`, published) at its
         *     instant, and catch-up and misfire decisions (`misfire_grace_seconds`) and the overlap
         *     policy work on nominal instants. Backfilled windows get the same offsets.
         *
         *     Must be less than the shortest gap between two windows of the trigger, else `422` on
         *     `trigger.jitter_seconds` (a window is then always claimable before the next one's
         *     instant): for an `interval` trigger that is `every_seconds`; for a `cron` trigger it
         *     is measured at registration over its next 1,000 fire times or the year after
         *     registration, whichever ends first (and at least two fire times), plus the fire times
         *     within six hours of every change of the zone's UTC offset in that year (DST can bring
         *     two fire times of a fixed-time job closer: `55 1,2 * * *` in America/New_York fires at
         *     01:55 and, for the missing 02:55, at 03:00, five minutes later). Only `cron` and
         *     `interval` triggers take it (`422` on `trigger.jitter_seconds` for the others). Always
         *     present in responses of `cron` and `interval` triggers.
         * @default 0
         * @example 300
         */
        JitterSeconds: number;
        /** @description One window at `at`. */
        OnceTrigger: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            type: "once";
            /** @description The instant (truncated to whole seconds). May be in the past; then `misfire_grace_seconds` and the catch-up policy decide. */
            at: components["schemas"]["Timestamp"];
        };
        /**
         * @description Dependency: runs the same window once the upstream task's instance for that window
         *     succeeds. In the transaction of each upstream SUCCESS the task (when not paused) gets one
         *     instance with the upstream's `window_key` and `scheduled_at`, `source: dependency`,
         *     `upstream_instance_id` and `upstream_result_digest`; the unique window key means a
         *     re-run of that upstream window triggers nothing more. No windows of its own (backfill is
         *     `422`; a manual trigger works). The upstream task must exist and the edge must not close
         *     a cycle (a task cannot depend on itself), else `422` on `trigger.task`. Deleting the
         *     upstream pauses this task (`paused_reason: "upstream task <id> was deleted"`).
         */
        AfterTrigger: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            type: "after";
            task: components["schemas"]["TaskId"];
            /**
             * @default success
             * @enum {string}
             */
            on?: "success";
        };
        /** @description No schedule; instances are created only by `POST /v1/tasks/{id}/trigger` (a backfill is `422`). */
        ManualTrigger: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            type: "manual";
        };
        /** @description delay = min(base_seconds · 2^(attempt−1), max_seconds), then ± jitter·delay, uniformly. */
        RetryBackoff: {
            /** @default 10 */
            base_seconds?: number;
            /**
             * @description Must be ≥ `base_seconds` (else `422`). When omitted it is 600, or `base_seconds` if that is larger.
             * @default 600
             */
            max_seconds?: number;
            /** @default 0.2 */
            jitter?: number;
        };
        /** @description How instances run. Every field is optional in requests and always present in responses. */
        Execution: {
            /**
             * @description Longest a RUNNING attempt may take since `started_at` before the reaper fails it (`error_kind = timeout`).
             * @default 600
             */
            timeout_seconds?: number;
            /**
             * @description `max_attempts = max_retries + 1`.
             * @default 3
             */
            max_retries?: number;
            retry_backoff?: components["schemas"]["RetryBackoff"];
            /**
             * @description Most unfinished (PENDING/RUNNING/FAILED) instances the overlap policy allows.
             * @default 1
             */
            concurrency_limit?: number;
            /**
             * @description Applies to scheduled, catch-up and backfilled windows (not to manual triggers or
             *     dependency instances). `skip`: a new window finding ≥ limit unfinished instances is
             *     recorded SKIPPED with `skip_reason: "overlap: window <key> still unfinished"`;
             *     `queue`: inserted PENDING, run in window order; `replace`: the oldest unfinished
             *     instance is CANCELLED and the new window runs (a window written in the same pass and
             *     then superseded is recorded SKIPPED with `skip_reason: "overlap: replaced by window
             *     <key>"`).
             * @default skip
             * @enum {string}
             */
            overlap?: "skip" | "queue" | "replace";
            /**
             * @description Windows missed by more than `misfire_grace_seconds`: `skip` records them SKIPPED
             *     (`source: catchup`, `skip_reason: missed`); `latest` runs only the newest missed window
             *     and records the older ones SKIPPED (on-time windows inside the grace run normally);
             *     `all` runs every missed window inside `catchup_window_seconds` and records older ones
             *     SKIPPED. At most 1,000 missed rows are written per catch-up (the newest); the rest are
             *     counted in the log and `kairos_catchup_not_recorded_total`.
             * @default skip
             * @enum {string}
             */
            catchup?: "skip" | "latest" | "all";
            /**
             * @description How far back `catchup: all` reaches (at most 30 days).
             * @default 86400
             */
            catchup_window_seconds?: number;
            /**
             * @description How late a window may be materialised and still count as on time (at most one day).
             *     The trigger loop's own lateness (it writes a window a little after its instant) is
             *     never held against a window: a grace below one second counts as one second, so `0`
             *     means "run a window only when kairos reaches it on time; record every window
             *     missed while it was down or more than a second behind as missed".
             * @default 60
             */
            misfire_grace_seconds?: number;
            /**
             * @description Shared limits every instance of the task draws on (see Shared limits): an instance
             *     starts only when each of them has room. At most 8 entries, each naming a distinct
             *     limit (a limit named twice is `422`). When the task is written each entry's limit
             *     must exist (`422` on `execution.limits[i].name`), a `per_key` limit needs a `key`
             *     (`422` on `.key`), and the `cost` must be one the limit can ever admit: at most its
             *     `concurrency` and its `rate.burst + 1` (`422` on `.cost`); these checks against the
             *     limits report the first problem only. Changing the list (or `context`, while the
             *     list is not empty) renders the keys of the task's PENDING and FAILED instances anew.
             * @default []
             */
            limits?: components["schemas"]["LimitDraw"][] | null;
            /**
             * @description How urgent the task's instances are: 0 most urgent, 9 least. A claim (and the webhook
             *     dispatcher) takes every claimable instance of a more urgent priority first; within
             *     one priority the fairness rule holds (each task's oldest first, a backlogged task one
             *     slot a round). Strict: less urgent work waits while more urgent work is claimable
             *     (its `waiting_on` says `priority`). Work waiting on a limit or on its task's
             *     `concurrency_limit` is not claimable, so it never holds less urgent work back.
             *     Instances take the task's priority when they are created; a change applies to
             *     instances created after it.
             * @default 5
             */
            priority?: number;
            /**
             * @description Debounce the task's manual runs (see `POST /v1/tasks/{id}/trigger`); `null` when not
             *     set. Applies to triggers without a `window_key`, whatever the trigger type.
             * @default null
             */
            debounce?: components["schemas"]["Debounce"] | null;
        };
        /**
         * @description A manual trigger without a `window_key` finds the task's waiting instance of its
         *     `debounce_key` (PENDING, never claimed, `available_at` still to come) and moves it to
         *     now + `seconds` (never past its first trigger + `max_wait_seconds`) with the trigger's
         *     `context`, instead of making another run; when there is none it makes one, available
         *     `seconds` from now. A burst of triggers thus runs once, `seconds` after the last of
         *     them.
         */
        Debounce: {
            /**
             * @description How long the run waits after the latest trigger.
             * @example 30
             */
            seconds: number;
            /**
             * @description At most this long after the first trigger of the run (at most 7 days; at least
             *     `seconds`, else `422` on `execution.debounce.max_wait_seconds`). `null` (absent):
             *     no bound, a steady stream of triggers postpones the run for as long as it lasts.
             * @default null
             * @example 300
             */
            max_wait_seconds?: number | null;
        };
        /**
         * @description How instances reach the agent: `poll` (the default; agents claim them with
         *     `POST /v1/claims`) or `webhook` (kairos claims each due instance and POSTs it to `url`,
         *     signed with `secret`; see Webhook push). An absent or `null` `dispatch` or `mode` means
         *     `poll`; another `mode` is `422` on `dispatch.mode`.
         */
        DispatchInput: components["schemas"]["PollDispatchInput"] | components["schemas"]["WebhookDispatchInput"];
        /** @description Agents poll. `url`, `secret` and `timeout_seconds` are refused (`422`, "only allowed with mode webhook"). */
        PollDispatchInput: {
            /**
             * @default poll
             * @constant
             */
            mode?: "poll";
        };
        /**
         * @description kairos pushes each instance to `url` (see Webhook push). Missing `url` or `secret` is
         *     `422` on `dispatch.url` / `dispatch.secret`.
         */
        WebhookDispatchInput: {
            /** @constant */
            mode: "webhook";
            /**
             * @description The agent's endpoint. `http://` or `https://`, naming a host, without credentials, at
             *     most 2048 characters; a host outside `outbound_allowed_hosts` (when set) is `422`.
             * @example https://agents.example/kairos/run
             */
            url: components["schemas"]["OutboundUrl"];
            /**
             * @description Required. Key of the `Kairos-Signature` HMAC-SHA256 on every push (1–1024 characters).
             *     Write-only: stored, never returned.
             * @example 7f3b9c2e-push-signing-key
             */
            secret: string;
            /**
             * @description How long a push waits for the receiver's answer (seconds), separate from
             *     `execution.timeout_seconds`, which bounds the whole run; the shorter of the two
             *     applies. The push's lease is this wait plus 10 seconds; a `202` answer then holds a
             *     lease of `execution.timeout_seconds`. No answer in time is a failed attempt
             *     (`error_kind: dispatch`).
             * @default 30
             */
            timeout_seconds?: number;
        };
        /** @description The dispatch as the API shows it (`secret` removed). */
        Dispatch: {
            /** @constant */
            mode: "poll";
        } | {
            /** @constant */
            mode: "webhook";
            /** @example https://agents.example/kairos/run */
            url: string;
            /** @example 30 */
            timeout_seconds?: number;
        };
        /**
         * @description URLs to notify (see Notifications): `on_success` receives `instance.succeeded`;
         *     `on_failure` receives `instance.failed`, `instance.dead`, `circuit.opened` and
         *     `windows.missed`. Each event is written to an outbox in the transition's transaction
         *     and delivered at least once (de-duplicate on `Kairos-Event-Id`). A URL naming a host
         *     outside `outbound_allowed_hosts` (when set) is `422`.
         */
        NotifyInput: {
            /** @default [] */
            on_success?: components["schemas"]["OutboundUrl"][];
            /** @default [] */
            on_failure?: components["schemas"]["OutboundUrl"][];
            /**
             * @description Optional. When set, every delivery carries `Kairos-Signature: t=<unix>,v1=<hex
             *     HMAC-SHA256(secret, "<t>.<body>")>`; without it deliveries are unsigned. 1–1024 characters.
             *     Write-only: stored, never returned.
             */
            secret?: string;
        };
        Notify: {
            on_success: string[];
            on_failure: string[];
        };
        /**
         * @description An `http://` or `https://` URL naming a host, without credentials (`user:password@`), at most 2048 characters; when `outbound_allowed_hosts` is set its host must be in that list (else `422`); a literal link-local, unspecified, multicast or broadcast address (and with `outbound_deny_private` a loopback or private one; IPv4-mapped, IPv4-compatible and NAT64 IPv6 forms are judged by their IPv4 address) is `422`, and so is a URL the outbound client cannot send to (an IPv6 zone id, a port out of range or `0`). Redirects from it are not followed.
         * @example https://hooks.example/alert
         */
        OutboundUrl: string;
        /**
         * @description When `consecutive_failures` (failed attempts: the agent's `fail`, the reaper's
         *     `lease_expired` and `timeout`) reaches `failure_threshold`, the circuit opens: the task
         *     is paused with `paused_reason: "circuit open: N consecutive failed attempts"` and its
         *     pending work is held (not claimable); `kairos_circuit_opened_total` grows and a
         *     `circuit.opened` notification goes to `notify.on_failure`. A success
         *     resets the count. With `cooldown_seconds` the retry scanner resumes the task that many
         *     seconds after it opened, half-open (`consecutive_failures` kept: the next failure
         *     reopens, a success closes); otherwise it stays paused until `POST /resume` (or a `PUT`
         *     with `paused: false`), which resets `consecutive_failures` to 0.
         */
        CircuitBreaker: {
            /** @default 5 */
            failure_threshold?: number;
            /** @default null */
            cooldown_seconds?: number | null;
        };
        /**
         * @description A `PUT /v1/tasks/{id}` body. Unknown fields (at any level) are `422`; optional fields
         *     given as `null` are treated as absent and get their defaults. The read-only fields of a
         *     task (`next_fire_at`, `paused_reason`, `consecutive_failures`, `created_at`,
         *     `updated_at`, `version`) are accepted and ignored, so a task read with `GET` can be
         *     edited and sent back (a webhook task still needs its `dispatch.secret`, which is never
         *     shown).
         */
        TaskInput: {
            /** @description Optional; when given it must equal the id in the path (else `422`). */
            id?: components["schemas"]["TaskId"];
            agent_id: components["schemas"]["AgentId"];
            trigger: components["schemas"]["Trigger"];
            execution?: components["schemas"]["Execution"];
            dispatch?: components["schemas"]["DispatchInput"];
            /**
             * @description Free JSON object handed to the agent with each instance; at most 65536 bytes serialized.
             * @default {}
             */
            context?: {
                [key: string]: unknown;
            };
            notify?: components["schemas"]["NotifyInput"];
            circuit_breaker?: components["schemas"]["CircuitBreaker"];
            /**
             * @description Desired pause state. Optional: when absent the current pause state is left unchanged
             *     (not paused on creation).
             */
            paused?: boolean;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            next_fire_at?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            paused_reason?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            consecutive_failures?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            created_at?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            updated_at?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            version?: unknown;
        };
        /**
         * @description A registered task as the API shows it, every default filled in, secrets removed.
         * @example {
         *       "id": "daily_report_001",
         *       "agent_id": "report_agent",
         *       "trigger": {
         *         "type": "cron",
         *         "expr": "0 30 8 * * *",
         *         "timezone": "Asia/Shanghai"
         *       },
         *       "execution": {
         *         "timeout_seconds": 600,
         *         "max_retries": 3,
         *         "retry_backoff": {
         *           "base_seconds": 10,
         *           "max_seconds": 600,
         *           "jitter": 0.2
         *         },
         *         "concurrency_limit": 1,
         *         "overlap": "skip",
         *         "catchup": "skip",
         *         "catchup_window_seconds": 86400,
         *         "misfire_grace_seconds": 60,
         *         "limits": []
         *       },
         *       "dispatch": {
         *         "mode": "poll"
         *       },
         *       "context": {
         *         "params": {
         *           "region": "cn-north"
         *         }
         *       },
         *       "notify": {
         *         "on_success": [
         *           "https://hooks.example/sink"
         *         ],
         *         "on_failure": [
         *           "https://hooks.example/alert"
         *         ]
         *       },
         *       "circuit_breaker": {
         *         "failure_threshold": 5,
         *         "cooldown_seconds": null
         *       },
         *       "paused": false,
         *       "paused_reason": null,
         *       "next_fire_at": "2026-11-30T00:30:00Z",
         *       "consecutive_failures": 0,
         *       "version": 1,
         *       "created_at": "2026-11-29T09:12:44.512301Z",
         *       "updated_at": "2026-11-29T09:12:44.512301Z"
         *     }
         */
        Task: {
            id: components["schemas"]["TaskId"];
            agent_id: components["schemas"]["AgentId"];
            trigger: components["schemas"]["Trigger"];
            execution: WithRequired<components["schemas"]["Execution"], "timeout_seconds" | "max_retries" | "retry_backoff" | "concurrency_limit" | "overlap" | "catchup" | "catchup_window_seconds" | "misfire_grace_seconds" | "limits" | "priority">;
            dispatch: components["schemas"]["Dispatch"];
            context: {
                [key: string]: unknown;
            };
            notify: components["schemas"]["Notify"];
            circuit_breaker: WithRequired<components["schemas"]["CircuitBreaker"], "failure_threshold" | "cooldown_seconds">;
            /** @description Whether the task is paused (by an operator, a PUT, or the circuit breaker). */
            readonly paused: boolean;
            /** @description Why the task is paused; `null` when it is not. E.g. `paused by operator`, `circuit open: 5 consecutive failed attempts`, `upstream task <id> was deleted`. */
            readonly paused_reason: string | null;
            /**
             * Format: date-time
             * @description The next window the trigger loop will materialise; `null` when the schedule has none (`manual`, `after`, a spent `once`).
             */
            readonly next_fire_at: string | null;
            readonly consecutive_failures: number;
            /** @description Grows by one on each change; also sent as `ETag`. */
            readonly version: number;
            readonly created_at: components["schemas"]["Timestamp"];
            readonly updated_at: components["schemas"]["Timestamp"];
        };
        TaskList: {
            items: components["schemas"]["Task"][];
            /** @description Pass as `cursor` for the next page; `null` on the last page. */
            next_cursor: string | null;
        };
        PauseRequest: {
            /** @description Stored as `paused_reason` (at most 1024 characters). Default `paused by operator`. */
            reason?: string | null;
        };
        TaskPreview: {
            windows: components["schemas"]["PreviewWindow"][];
        };
        PreviewWindow: {
            scheduled_at: components["schemas"]["Timestamp"];
            /**
             * @description The scheduled instant, RFC 3339 UTC with seconds.
             * @example 2026-11-29T00:30:00Z
             */
            window_key: string;
            /**
             * @description When the window becomes claimable: `scheduled_at` plus the task's jitter offset
             *     (`trigger.jitter_seconds`), exactly the `available_at` its instance gets when it is
             *     materialised; `scheduled_at` itself without jitter.
             * @example 2026-11-29T00:32:41.377Z
             */
            available_at: components["schemas"]["Timestamp"];
        };
        /**
         * @example {
         *       "expr": "0 30 8 * * *",
         *       "timezone": "Asia/Shanghai",
         *       "fire_times": [
         *         "2026-11-30T00:30:00Z",
         *         "2026-12-01T00:30:00Z"
         *       ]
         *     }
         */
        CronPreview: {
            /** @description The expression as given, trimmed. */
            expr: string;
            /** @description The zone as given (default `UTC`). */
            timezone: string;
            fire_times: components["schemas"]["Timestamp"][];
        };
        /**
         * @description SUCCESS, DEAD, SKIPPED and CANCELLED are terminal for every automatic path.
         * @enum {string}
         */
        InstanceStatus: "PENDING" | "RUNNING" | "SUCCESS" | "FAILED" | "DEAD" | "SKIPPED" | "CANCELLED";
        /**
         * @description Retries keep the original source; this version does not assign `retry`.
         * @enum {string}
         */
        InstanceSource: "schedule" | "catchup" | "backfill" | "manual" | "dependency" | "retry";
        /** @description One row per (task, window). Every field is always present (`null` when not set). */
        Instance: {
            /** Format: uuid */
            id: string;
            task_id: components["schemas"]["TaskId"];
            /** @description The agent the instance is for (the task's `agent_id` when the window was created); claims and agent-token scoping use it. When a task moves to another agent (`PUT` with a new `agent_id`), its waiting instances (PENDING, and FAILED ones waiting for a retry) move with it, and an operator retry gives an instance to the task's current agent; RUNNING instances stay with the worker holding them. */
            agent_id: components["schemas"]["AgentId"];
            /**
             * @description The scheduled instant (RFC 3339 UTC with seconds) for cron/interval/once/backfill
             *     windows; the upstream window key for `after` tasks; a caller-supplied key or
             *     `manual:<uuid>` for API triggers.
             */
            window_key: string;
            scheduled_at: components["schemas"]["Timestamp"];
            status: components["schemas"]["InstanceStatus"];
            /** @description How the window came to exist; kept across retries. */
            source: components["schemas"]["InstanceSource"];
            /** @description 1-based; never above `max_attempts`. */
            attempt: number;
            /** @description `max_retries + 1`; an operator retry adds one. */
            max_attempts: number;
            /** @description When the instance may next be claimed (delayed runs, retry backoff). */
            available_at: components["schemas"]["Timestamp"];
            /**
             * Format: date-time
             * @description Set exactly while RUNNING.
             */
            lease_expires_at: string | null;
            /** @description The worker that claimed the latest attempt (for a webhook push, the pushing replica's `node_id`); kept after it ends; cleared by an operator retry. */
            worker_id: string | null;
            /**
             * Format: date-time
             * @description When the latest attempt was claimed; its timeout deadline is `started_at + timeout_seconds`.
             */
            started_at: string | null;
            /**
             * Format: date-time
             * @description Set exactly on terminal states.
             */
            finished_at: string | null;
            /** @description The agent's JSON result (≤ 64 KiB), or `null`. */
            result: unknown;
            /**
             * @description The last failure (at most 4096 bytes), kept through the retries that follow it and
             *     cleared on SUCCESS and on an operator retry; on CANCELLED, the cancel reason.
             */
            error: string | null;
            /**
             * @description `agent` (the agent's `fail`), `throttled` (the agent's `fail` with
             *     `retry_after_seconds`: waiting, attempt not spent), `lease_expired` or `timeout` (the
             *     reaper), `dispatch`
             *     (a webhook push failed: another status, no success body, a connection error or no
             *     answer within `timeout_seconds`; `error` holds the status or reason), `cancelled`.
             *     Cleared with `error`.
             * @enum {string|null}
             */
            error_kind: "agent" | "timeout" | "lease_expired" | "dispatch" | "cancelled" | "throttled" | null;
            /** @description Set on SKIPPED instances: `missed`, `overlap: window 2026-11-29T08:29:59Z still unfinished` (the oldest blocking window) or `overlap: replaced by window 2026-11-29T08:30:01Z` (superseded in the same pass under `replace`). */
            skip_reason: string | null;
            /**
             * Format: uuid
             * @description For dependency instances, the upstream instance that succeeded.
             */
            upstream_instance_id: string | null;
            /**
             * @description For dependency instances, `sha256:<hex>` of the upstream result's compact JSON text (object keys sorted; the text `null` when it had no result), so a chained task can check what it built on.
             * @example sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b
             */
            upstream_result_digest: string | null;
            /**
             * @description `task_id:window_key`, stable across attempts; pass it downstream to de-duplicate side effects.
             * @example daily_report_001:2026-11-29T00:30:00Z
             */
            idempotency_key: string;
            /** @description The instance's priority (its task's `execution.priority` when it was created); 0 most urgent. */
            priority: number;
            created_at: components["schemas"]["Timestamp"];
            updated_at: components["schemas"]["Timestamp"];
        };
        /** @description One transition in an instance's history. */
        InstanceEvent: {
            /** @description The previous status; `null` on the creating event. */
            from: components["schemas"]["InstanceStatus"] | null;
            to: components["schemas"]["InstanceStatus"];
            attempt: number;
            at: components["schemas"]["Timestamp"];
            /** @description Who made the transition, e.g. `trigger:<node_id>` (the trigger loop), `api` (manual trigger, task deletion), `backfill`, `dependency`, `agent:<worker_id>` (claim, complete — single or batched — and fail), `webhook:<node_id>` (the webhook dispatcher's claim, complete and fail), `reaper:<node_id>`, `retry_scanner:<node_id>` or `operator`. */
            actor: string;
            /** @description Why, e.g. the source on creation (`schedule`, `manual`, `backfill`, …), the skip reason, `dependency: upstream instance <id> succeeded`, `task deleted`, `overlap replace: superseded by window <key>`, `claimed by worker <worker_id>`, `<error_kind>: <error>` (cut to 512 characters) on a failure, `retry: attempt <n>`, or an operator's reason. */
            reason: string | null;
        };
        /** @description An instance with its full history. */
        InstanceDetail: components["schemas"]["Instance"] & {
            /** @description Every transition, oldest first. */
            events: components["schemas"]["InstanceEvent"][];
            /**
             * @description Only on PENDING and FAILED instances: why the instance is not running now, each
             *     reason with a detail an operator can act on. Empty when nothing holds it back (the
             *     next claim of its agent, or the webhook dispatcher, takes it).
             */
            waiting_on?: components["schemas"]["WaitingOn"][];
        };
        /**
         * @description One reason an instance waits. `reason` is one of
         *     - `available_at`: not due yet (a delayed run, a window made ahead of time);
         *     - `retry_backoff`: a failed attempt waits for its retry backoff, or a throttled attempt
         *       for its `retry_after_seconds`;
         *     - `limit_concurrency`: a shared limit's units are all held (the detail names the running
         *       instances holding them);
         *     - `limit_rate`: a shared limit's rate is used up (`until` is the next start it allows);
         *     - `limit_held`: a shared limit is held (by an operator, or by a throttled attempt's
         *       `hold_limit`) until `until`;
         *     - `concurrency_limit`: the task's own `execution.concurrency_limit` is reached;
         *     - `priority`: more urgent work of the same agent is claimable and goes first;
         *     - `task_paused`, `circuit_open`: the task is paused (by an operator or its definition;
         *       or by its circuit breaker, `until` its automatic resume when it has one);
         *     - `no_agent`: no claim from the instance's agent has been seen for more than
         *       `agent_absent_seconds` (default 60), or ever (poll-mode tasks only).
         *     Entries about a shared limit name it in `limit`, and the key in `key` for a `per_key`
         *     limit. Any `until` lies in the future.
         */
        WaitingOn: {
            /** @enum {string} */
            reason: "available_at" | "retry_backoff" | "limit_concurrency" | "limit_rate" | "limit_held" | "concurrency_limit" | "task_paused" | "circuit_open" | "priority" | "no_agent";
            /** @example openai: 8 of 8 units running, 1 needed: instances 0193…, 0193… */
            detail: string;
            until?: components["schemas"]["Timestamp"];
            limit?: string;
            key?: string;
        };
        InstanceList: {
            items: components["schemas"]["Instance"][];
            /** @description Pass as `cursor` for the next page; `null` on the last page. */
            next_cursor: string | null;
        };
        Health: {
            /** @constant */
            status: "ok";
        };
        /**
         * @example {
         *       "status": "ready",
         *       "node_id": "kairos-a",
         *       "database": "ok",
         *       "loops": {
         *         "trigger": "ok",
         *         "retry_scanner": "ok",
         *         "timeout_reaper": "ok",
         *         "webhook_dispatcher": "ok",
         *         "notifier": "ok",
         *         "pruner": "ok",
         *         "stats": "ok"
         *       },
         *       "problems": []
         *     }
         */
        Readiness: {
            /** @enum {string} */
            status: "ready" | "not ready";
            /** @description This replica's name. */
            node_id: string;
            /** @enum {string} */
            database: "ok" | "migrations pending" | "unreachable";
            /** @description Each background loop this replica runs, by name (`trigger`, `retry_scanner`, `timeout_reaper`, `webhook_dispatcher`, `notifier`, `pruner`, `stats`), and whether it completed a pass within three times its interval and at least 15 seconds (`ok`) or not (`stale`). */
            loops: {
                [key: string]: "ok" | "stale";
            };
            problems: string[];
        };
        FieldError: {
            /** @description Dotted path of the offending field or query parameter (`execution.max_retries`, `notify.on_failure[1]`, `limit`); empty when the whole body is wrong. */
            field: string;
            message: string;
        };
        /** @description RFC 9457 problem details (`application/problem+json`). */
        Problem: {
            /**
             * Format: uri
             * @description `https://kairos.dev/problems/<slug>`, slug one of `malformed-request` (400),
             *     `unauthorized` (401), `forbidden` (403),
             *     `not-found` (404), `method-not-allowed` (405), `conflict` (409), `version-mismatch`
             *     (412), `too-large` (413), `unsupported-media-type` (415), `validation-failed` (422),
             *     `internal` (500), `unavailable` (503).
             */
            type: string;
            title: string;
            status: number;
            detail: string;
            /** @description Present on `422` only; every validation problem found. */
            errors?: components["schemas"]["FieldError"][];
        };
        /**
         * Format: uuid
         * @description The `lease_token` a claim returned. Missing or not a UUID is `422` on `lease_token`.
         * @example 6f1c2d9e-8a47-4b35-b0e2-93d1c7a5f604
         */
        LeaseToken: string;
        /**
         * @description A `POST /v1/claims` body. Unknown fields are `422`; optional fields given as `null` get
         *     their defaults. The bounds of `lease_seconds` and `wait_seconds` come from the server's
         *     configuration (defaults shown).
         */
        ClaimRequest: {
            /** @description Take only instances of this agent's tasks. */
            agent_id: components["schemas"]["AgentId"];
            /**
             * @description The claiming process (same alphabet as `agent_id`); recorded as the instance's `worker_id` and in event actors `agent:<worker_id>`.
             * @example report-worker-7
             */
            worker_id: string;
            /**
             * @description Most instances to take in this claim.
             * @default 1
             */
            max_instances?: number | null;
            /**
             * @description Lease length for each instance taken. Default `default_lease_seconds` (60); at most
             *     `max_lease_seconds` (3600, the maximum shown; a server configured lower answers `422`
             *     above its setting).
             */
            lease_seconds?: number | null;
            /**
             * @description How long to wait for work when none can be taken now (long poll). Default 0 (answer
             *     at once); at most `claim_max_wait_seconds` (30, the maximum shown; a server configured
             *     lower answers `422` above its setting).
             */
            wait_seconds?: number | null;
            /**
             * @description Chosen by the client (a UUID per claim, say) to make a retried claim safe. A claim
             *     repeated with the same `claim_id` by the same `worker_id` of the same agent, while it
             *     still holds some of what the first one took, is answered with those instances and
             *     the same lease tokens instead of taking more: send it again, unchanged, when a claim
             *     timed out or its connection broke, and no instance is stranded. Once every instance
             *     of that answer was completed, failed, reaped or given back, the same `claim_id`
             *     claims anew. 1–128 characters without control characters.
             * @example 3b0f6c1e-1d8a-4f51-9b0c-0d6a1b4c2f77
             */
            claim_id?: string | null;
        };
        /** @description An instance just claimed, with the lease that fences its reports and the context to run with. */
        ClaimedInstance: components["schemas"]["Instance"] & {
            /**
             * Format: uuid
             * @description Fresh for this claim; send it with heartbeat, complete and fail. Never shown by other operations.
             */
            lease_token: string;
            /** @description The task's `context`, with a manual trigger's `context` merged over it (top-level keys). */
            context: {
                [key: string]: unknown;
            };
            /**
             * @description W3C Trace Context of this claim: the trace of the window (the trace id of the
             *     `traceparent` of the manual trigger that created it, else a new trace per window,
             *     as every scheduled window is, whose id is the instance id without dashes) and this claim's span id (new for every claim). Run the work as a child
             *     of it and send a child's `traceparent` with `complete`/`fail`. Always present.
             * @example 00-4bf92f3577b34da6a3ce929d0e0e4736-5d3e1a9b2c7f4e60-01
             */
            traceparent: string;
            /**
             * @description The `tracestate` that came with the window's `traceparent`, when there was one; absent otherwise.
             * @example vendor=opaque
             */
            tracestate?: string;
        };
        ClaimResponse: {
            /** @description The instances taken (RUNNING), oldest `available_at` first; empty after `wait_seconds` without work. */
            instances: components["schemas"]["ClaimedInstance"][];
        };
        HeartbeatRequest: {
            lease_token: components["schemas"]["LeaseToken"];
            /** @description New lease from now. Default `default_lease_seconds` (60); at most `max_lease_seconds` (3600, the maximum shown; a server configured lower answers `422` above its setting). */
            lease_seconds?: number | null;
        };
        CompleteRequest: {
            lease_token: components["schemas"]["LeaseToken"];
            /** @description Any JSON value, at most 65536 bytes serialized (else `413`). Absent or `null` stores `null`. */
            result?: unknown;
        };
        /** @description A `POST /v1/completions` body. Unknown fields are `422`, at both levels. */
        CompletionBatchRequest: {
            /** @description The instances to complete, each under its own lease token; answered in this order. */
            completions: {
                /**
                 * Format: uuid
                 * @description The instance. Missing or not a UUID is `422` on `completions[n].id`.
                 */
                id: string;
                /** @description The `lease_token` a claim returned for this instance. Missing or not a UUID is `422` on `completions[n].lease_token`. */
                lease_token: components["schemas"]["LeaseToken"];
                /** @description Any JSON value, at most 65536 bytes serialized (else `413`). Absent or `null` stores `null`. */
                result?: unknown;
                /** @description The W3C `traceparent` of the span that did this item's work (the parent of its completion span); overrides the request's `traceparent` header for this item. Not a string is `422` on `completions[n].traceparent`; a string that is no valid traceparent is ignored. */
                traceparent?: string;
            }[];
        };
        CompletionBatchResponse: {
            /** @description One entry per item of the request, in the same order. */
            results: ({
                /** Format: uuid */
                id: string;
                /** @constant */
                status: 200;
                instance: components["schemas"]["Instance"];
            } | {
                /** Format: uuid */
                id: string;
                /** @enum {integer} */
                status: 409 | 404 | 403 | 503 | 500;
                detail: string;
            })[];
        };
        FailRequest: {
            lease_token: components["schemas"]["LeaseToken"];
            /** @description What went wrong. Accepted up to 65536 characters (else `422`); stored cut to 4096 bytes, ending in `...`. */
            error: string;
            /**
             * @description `false` makes the instance DEAD at once, whatever attempts remain.
             * @default true
             */
            retryable?: boolean | null;
            /**
             * @description `true` gives the attempt back rather than failing it on its merits (an agent shutting
             *     down with work in hand): when an attempt remains, the instance is FAILED with
             *     `available_at = now()` instead of after the task's backoff, so another worker can
             *     take it at once. It still uses the attempt and counts as a failure for the circuit
             *     breaker. A failure that is not retried (`retryable: false`, or no attempts left)
             *     ends DEAD as without it.
             * @default false
             */
            retry_at_once?: boolean | null;
            /**
             * @description The attempt was **throttled**: a quota refused it (an HTTP 429 from a model API,
             *     say), and it may be tried again after this many seconds (its `Retry-After`). The
             *     instance goes back to PENDING with `available_at = now() + retry_after_seconds`
             *     (with `hold_limit`, exactly the instant that hold asked to end),
             *     the **same `attempt`** (not spent), `error_kind: throttled` and `error` as sent, and
             *     the task's `consecutive_failures` is left alone: a quota never opens the circuit
             *     breaker. `retryable` and `retry_at_once` do not apply. Outside 1–86400: `422`, and
             *     nothing changes (the instance stays RUNNING under its lease).
             */
            retry_after_seconds?: number | null;
            /**
             * @description A shared limit the instance draws on (its task's `execution.limits`, as rendered for
             *     this instance), to hold until the throttled attempt's retry time: that budget (for a
             *     `per_key` limit, the instance's key's) starts nothing until now +
             *     `retry_after_seconds`, for every task that draws on it, so other agents stop hitting
             *     the same quota too. The limit's `held_reason` names this instance and its `error`;
             *     `kairos_limit_throttled_total{limit}` grows. A hold never shortens a later one
             *     already in place. Requires `retry_after_seconds`; without it, or naming a limit the
             *     instance does not draw on, it is `422` on `hold_limit` and nothing changes (the
             *     instance stays RUNNING under its lease). Only the attempt that holds the lease
             *     holds the limit: a report under a lease token that is not the instance's (a stale
             *     worker's late 429) is `409` and holds nothing, and the same report sent again after
             *     it landed is answered as before without a second hold.
             */
            hold_limit?: string | null;
        };
        /** @description Optional body of an operator retry or cancel. */
        ReasonRequest: {
            /**
             * @description Recorded on the event (and, for cancel, as `error`); at most 1024 characters. Default
             *     `retried by operator` or `cancelled by operator`.
             */
            reason?: string | null;
        };
        /** @description Optional body of an operator retry. */
        RetryRequest: {
            /** @description Recorded on the event; at most 1024 characters. Default `retried by operator`. */
            reason?: string | null;
            /** @description The retried instance's priority (0 most urgent, 9 least); it keeps its own when absent. */
            priority?: number | null;
        };
        /**
         * @description Optional body of `POST /v1/tasks/{id}/trigger`. Unknown fields are `422`; fields given as
         *     `null` are treated as absent. `run_at` and `delay_seconds` are mutually exclusive (`422`
         *     on `run_at`); with neither the run is available at once.
         */
        TriggerRequest: {
            /**
             * @description The instance's key; at most 256 characters, not empty, without control
             *     characters. A key the task already has returns that instance (`200`). Default
             *     `manual:<uuid>` (a fresh key: always a new run).
             * @example rerun-2026-11-29
             */
            window_key?: string | null;
            /**
             * @description Make the run claimable this many seconds after now (database clock), at most 366 days.
             * @example 600
             */
            delay_seconds?: number | null;
            /**
             * Format: date-time
             * @description Make the run claimable at this instant (RFC 3339, truncated to whole seconds); a past instant means at once. Also the instance's `scheduled_at`.
             * @example 2026-11-30T02:00:00Z
             */
            run_at?: string | null;
            /**
             * @description At most 65536 bytes serialized. Stored with the instance and merged over the task's `context` at claim time (top-level keys; these values win). A debounced trigger's context replaces the waiting instance's.
             * @example {
             *       "params": {
             *         "region": "cn-south"
             *       }
             *     }
             */
            context?: {
                [key: string]: unknown;
            } | null;
            /** @description The run's priority (0 most urgent, 9 least); the task's `execution.priority` when absent. */
            priority?: number | null;
            /**
             * @description For a task with `execution.debounce`: the triggers of one key coalesce, those of
             *     different keys do not (one waiting run per tenant, say). At most 256 characters,
             *     not empty, without control characters. Default: the task's id. Not with
             *     `window_key`, and only for a debounced task (else `422` on `debounce_key`).
             * @example tenant-acme
             */
            debounce_key?: string | null;
        };
        /** @description The instance a manual trigger made or found, and whether a debounce took the trigger. */
        TriggeredInstance: components["schemas"]["Instance"] & {
            /**
             * @description `true` when the task's waiting debounced instance took this trigger (moved
             *     later, with its `context`; answered `200`); `false` for a new instance (`201`)
             *     and for an existing `window_key` (`200`).
             */
            debounced: boolean;
        };
        /** @description Body of `POST /v1/tasks/{id}/backfill`. Unknown fields are `422`. */
        BackfillRequest: {
            /** @description The priority of the windows the backfill makes or retries (0 most urgent, 9 least); the task's `execution.priority` when absent. */
            priority?: number | null;
            /**
             * Format: date-time
             * @description First instant of the range, inclusive (RFC 3339, truncated to whole seconds).
             * @example 2026-11-28T00:00:00Z
             */
            from: string;
            /**
             * Format: date-time
             * @description End of the range, exclusive; must be after `from` (else `422` on `to`). The range may hold at most 10,000 windows.
             * @example 2026-11-29T00:00:00Z
             */
            to: string;
            /**
             * @description Report what would happen, write nothing, and list every window's outcome.
             * @default false
             */
            dry_run?: boolean | null;
            /**
             * @description The overlap policy for this backfill only (the task is not changed); absent or null uses the task's `execution.overlap`. Any other value is `422` on `overlap`.
             * @enum {string|null}
             */
            overlap?: "skip" | "queue" | "replace" | null;
            /**
             * @description What existing windows of the range get. `none`: left alone. `failed`: windows that are DEAD, FAILED or CANCELLED get an operator retry (as `POST /v1/instances/{id}/retry`: PENDING now, one more attempt allowed, an event by actor `backfill`; not subject to the overlap policy), counted in `reprocessed`. SUCCESS windows never run again; PENDING, RUNNING and SKIPPED windows are left alone. Any other value is `422` on `reprocess`.
             * @default none
             * @enum {string|null}
             */
            reprocess?: "none" | "failed" | null;
        };
        /** @description What a backfill did or, for a dry run, would do. */
        BackfillReport: {
            dry_run: boolean;
            /** @description Instances inserted (would be inserted), including those recorded SKIPPED by the overlap policy. */
            created: number;
            /** @description Windows of the range that already had an instance (any status), left alone. */
            existing: number;
            /** @description Of `created`, the windows recorded SKIPPED by the overlap policy. */
            skipped: number;
            /** @description Older unfinished instances CANCELLED by overlap `replace`; always 0 in a dry run. */
            cancelled: number;
            /** @description Of `existing`, the windows given an operator retry (would be, in a dry run) by `reprocess: failed`; 0 otherwise. */
            reprocessed: number;
            /** @description Only when `dry_run` is true; every window of the range, earliest first. */
            windows?: components["schemas"]["BackfillWindow"][];
        };
        BackfillWindow: {
            /**
             * @description The window's scheduled instant, RFC 3339 UTC with seconds.
             * @example 2026-11-28T01:00:00Z
             */
            window_key: string;
            /**
             * @description `exists` (an instance already has this window), `would_create` (would be inserted PENDING), `would_reprocess` (exists and would get an operator retry, `reprocess: failed`) or `would_skip: <reason>` (would be inserted SKIPPED with that `skip_reason`).
             * @example would_skip: overlap: window 2026-11-28T01:00:00Z still unfinished
             */
            outcome: string;
        };
        /**
         * @description A shared limit's name (the task id alphabet).
         * @example openai
         */
        LimitName: string;
        /**
         * @description One entry of `execution.limits`: a limit the task's instances draw on, the key of the
         *     budget they draw from, and how many units each instance takes. Responses show every
         *     field (`key: null` when there is none).
         */
        LimitDraw: {
            /** @description The limit; it must exist when the task is written (else `422`). */
            name: components["schemas"]["LimitName"];
            /**
             * @description Which budget of a `per_key` limit the instance draws from (required there; ignored
             *     by a limit without `per_key`). A template of at most 256 characters: literal text with
             *     `{{task_id}}`, `{{agent_id}}` and `{{params.<field>[.<field>…]}}` (fields of
             *     letters, digits, `_` and `-`), rendered when the instance is created from its
             *     effective context (the task's `context` with a manual trigger's `context` merged
             *     over it by top-level key). A missing parameter renders empty, a non-string one as
             *     its JSON text. In a rendered key each control character becomes U+FFFD (holds and
             *     releases name keys without them), and a key longer than 256 characters becomes its
             *     first 200 characters, `#` and the MD5 of the whole key (hex), which keeps it apart
             *     from every other key. Another variable, an unmatched `{{` or `}}`, or a control
             *     character in the template is `422` on `execution.limits[i].key`.
             * @example {{params.tenant}}
             */
            key?: string | null;
            /**
             * @description Units one instance takes from each budget: concurrency units while it is RUNNING,
             *     and rate units when it starts. At most the limit's `concurrency` and its
             *     `rate.burst + 1` (else it could never start: `422` on `execution.limits[i].cost`).
             * @default 1
             */
            cost?: number | null;
        };
        /**
         * @description At most `count + burst` start units in any `per_seconds` window (GCRA: one unit every
         *     `per_seconds / count`, with `burst` more allowed at once; see Shared limits). From
         *     idle, `burst + 1` units may start at once.
         */
        LimitRate: {
            /** @description Start units per `per_seconds`. Required. */
            count: number;
            /** @description The window, in seconds (at most one day). Required. */
            per_seconds: number;
            /**
             * @description Start units allowed at once beyond the steady pace; at most `count` (else `422` on `rate.burst`).
             * @default 0
             */
            burst?: number | null;
        };
        /**
         * @description A `PUT /v1/limits/{name}` body: `concurrency`, `rate` or both (neither is `422` on
         *     `concurrency`), and `per_key`. Unknown fields (at any level) are `422`; optional fields
         *     given as `null` are treated as absent. The read-only fields of a limit's view are
         *     accepted and ignored, so a limit read with `GET` can be edited and sent back.
         */
        LimitInput: {
            /** @description Most cost units RUNNING at once on a budget (on each key's, with `per_key`). */
            concurrency?: number | null;
            rate?: components["schemas"]["LimitRate"] | null;
            /**
             * @description `true`: every rendered key has its own budget (its own concurrency, rate and hold),
             *     and every task drawing on the limit must give a `key`.
             * @default false
             */
            per_key?: boolean | null;
            /** @description Read-only. Accepted and ignored, but a string must equal the name in the path (else `422` on `name`). */
            name?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            version?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            running?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            available_rate?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            held_until?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            held_reason?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            keys?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            created_at?: unknown;
            /** @description Read-only, set by the server. Accepted with any value and ignored, so that a body read with `GET` can be sent back with `PUT`; use `If-Match` to guard against a concurrent change. */
            updated_at?: unknown;
        } | {
            concurrency: number;
        } | {
            rate: Record<string, never>;
        };
        /**
         * @description A shared limit as the API shows it: its definition (`concurrency` and `rate` as set,
         *     absent when not set; `rate.burst` always shown) and its usage when the answer was made.
         *     For a limit without `per_key`, `running`, `available_rate`, `held_until` and
         *     `held_reason` are those of its one budget. For a `per_key` limit, `running` is the sum
         *     over its keys, `available_rate`, `held_until` and `held_reason` are `null`, and `keys`
         *     shows each key's own.
         * @example {
         *       "name": "openai",
         *       "version": 1,
         *       "concurrency": 8,
         *       "rate": {
         *         "count": 500,
         *         "per_seconds": 60,
         *         "burst": 0
         *       },
         *       "per_key": false,
         *       "running": 7,
         *       "available_rate": 0,
         *       "held_until": "2026-12-03T09:15:20.412907Z",
         *       "held_reason": "held by a throttled attempt of instance 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10: openai 429: rate limit exceeded",
         *       "created_at": "2026-12-03T08:00:02.118342Z",
         *       "updated_at": "2026-12-03T08:00:02.118342Z"
         *     }
         */
        Limit: {
            name: components["schemas"]["LimitName"];
            /** @description Grows by one on each change; also sent as `ETag`. */
            readonly version: number;
            /** @description Most cost units RUNNING at once on a budget. Absent when not set. */
            concurrency?: number;
            /** @description Absent when not set. */
            rate?: WithRequired<components["schemas"]["LimitRate"], "count" | "per_seconds" | "burst">;
            per_key: boolean;
            /**
             * @description Cost units held now by RUNNING instances, summed over the limit's keys. Units are
             *     taken only on limits with a `concurrency`, so a rate-only limit shows 0.
             */
            readonly running: number;
            /**
             * @description Start units the `rate` allows now (at most `rate.burst + 1`; 0 until the pace
             *     allows one more). `null` without a `rate`, and for a `per_key` limit (see `keys`).
             */
            readonly available_rate: number | null;
            /**
             * Format: date-time
             * @description Nothing starts on the budget before this instant; `null` when it is not held, and for a `per_key` limit (see `keys`).
             */
            readonly held_until: string | null;
            /**
             * @description Why it is held (`null` when it is not): the operator's `reason` (default `held by
             *     operator`) or `held by a throttled attempt of instance <id>: <its error>`.
             */
            readonly held_reason: string | null;
            /**
             * @description Only for a `per_key` limit: its busiest budgets, at most 20 (most units running
             *     first, then the latest hold, then the latest rate use, then by key), among the keys
             *     that have started or been held.
             */
            readonly keys?: components["schemas"]["LimitKey"][];
            readonly created_at: components["schemas"]["Timestamp"];
            readonly updated_at: components["schemas"]["Timestamp"];
        };
        /** @description One budget of a `per_key` limit. */
        LimitKey: {
            /**
             * @description The rendered key (empty when its template rendered empty).
             * @example acme
             */
            key: string;
            /** @description Cost units held now by RUNNING instances on this key (0 without `concurrency`). */
            running: number;
            /** @description Start units the key's `rate` allows now (at most `rate.burst + 1`); `null` without a `rate`. */
            available_rate: number | null;
            /**
             * Format: date-time
             * @description Nothing starts on this key before this instant; `null` when it is not held.
             */
            held_until: string | null;
            /** @description Why it is held; `null` when it is not. */
            held_reason: string | null;
        };
        LimitList: {
            /** @description A page of limits, in `name` order. */
            items: components["schemas"]["Limit"][];
            /** @description Pass as `cursor` for the next page; `null` on the last page. */
            next_cursor: string | null;
        };
        /** @description Body of `POST /v1/limits/{name}/hold`. Unknown fields are `422`; `key` and `reason` given as `null` are treated as absent. */
        LimitHoldRequest: {
            /** @description Hold until now + this many seconds (at most one day). Required. */
            seconds: number;
            /**
             * @description The rendered key whose budget to hold; required for a `per_key` limit (`422` on `key`), ignored otherwise. At most 256 characters, without control characters.
             * @example acme
             */
            key?: string | null;
            /** @description Shown as `held_reason` (at most 1024 characters, without control characters). Default `held by operator`. */
            reason?: string | null;
        };
        /** @description Optional body of `POST /v1/limits/{name}/release`. Unknown fields are `422`. */
        LimitReleaseRequest: {
            /**
             * @description Lift only this key's hold (of a `per_key` limit; ignored otherwise; at most 256 characters, without control characters). Absent or `null`, every hold of the limit is lifted.
             * @example acme
             */
            key?: string | null;
        };
    };
    responses: {
        /** @description An HTML page. */
        ConsolePage: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "text/html": string;
            };
        };
        /** @description No session; `Location` is `/ui/login`. */
        ConsoleLogin: {
            headers: {
                [name: string]: unknown;
            };
            content?: never;
        };
        /**
         * @description No valid bearer token: the `Authorization` header is missing, not `Bearer`, or names an
         *     unknown token. Checked before routing. Never returned in open mode (no tokens configured).
         */
        Unauthorized: {
            headers: {
                /** @description Always `Bearer realm="kairos"`. */
                "WWW-Authenticate"?: "Bearer realm=\"kairos\"";
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/unauthorized",
                 *       "title": "Unauthorized",
                 *       "status": 401,
                 *       "detail": "an Authorization: Bearer <token> header is required"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The token's role is not `admin` (`viewer` and `agent` tokens may not make this call). */
        ForbiddenAdmin: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/forbidden",
                 *       "title": "Forbidden",
                 *       "status": 403,
                 *       "detail": "a viewer token may not PUT /v1/tasks/daily_report_001"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /**
         * @description A `viewer` token, or an `agent` token limited to agent ids that do not include the
         *     claim's `agent_id` (for claims) or the instance's `agent_id` (for heartbeat, complete and
         *     fail) — even with the right lease token. (`POST /v1/completions` answers such an
         *     instance in its own item; the whole batch is `403` only for a `viewer` token.)
         */
        ForbiddenAgent: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/forbidden",
                 *       "title": "Forbidden",
                 *       "status": 403,
                 *       "detail": "this token may not act for agent \"ops_agent\""
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description Malformed request — the body is not JSON, or a JSON task or limit definition is required but the body is empty or `null`. */
        BadRequest: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/malformed-request",
                 *       "title": "Malformed request",
                 *       "status": 400,
                 *       "detail": "the body is not valid JSON: expected value at line 1 column 1"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The query string cannot be parsed. */
        BadQuery: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description No such resource (or no such route). */
        NotFound: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/not-found",
                 *       "title": "Not found",
                 *       "status": 404,
                 *       "detail": "no task with id \"daily_report_001\""
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The path is served but not with this method (any method not documented on a path). */
        MethodNotAllowed: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/method-not-allowed",
                 *       "title": "Method not allowed",
                 *       "status": 405,
                 *       "detail": "this route does not accept that method"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description `If-Match` does not match the current version (or the task or limit does not exist, or the header is not a version or `*`). */
        PreconditionFailed: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/version-mismatch",
                 *       "title": "Version mismatch",
                 *       "status": 412,
                 *       "detail": "If-Match does not match the current version 4"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The request body is larger than `max_body_bytes` (default 262144). */
        PayloadTooLarge: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description `Content-Type` is present and is neither `application/json` nor a `+json` type. */
        UnsupportedMediaType: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /**
         * @description Values that parse but are not allowed: unknown body fields or query parameters, repeated
         *     query parameters, out-of-range numbers, bad enum values, invalid cron expressions or
         *     zones, bad timestamps, unknown `after` upstream or a dependency cycle, a webhook or
         *     notification URL that is invalid, names a host outside `outbound_allowed_hosts` or
         *     holds a refused address, a
         *     missing or malformed `lease_token`, a body that is not a JSON object (claims and instance
         *     actions; field `""`). Every problem is listed in `errors`.
         */
        ValidationFailed: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/validation-failed",
                 *       "title": "Invalid request values",
                 *       "status": 422,
                 *       "detail": "execution.max_retries: must be an integer from 0 to 100; trigger.timzone: unknown field",
                 *       "errors": [
                 *         {
                 *           "field": "execution.max_retries",
                 *           "message": "must be an integer from 0 to 100"
                 *         },
                 *         {
                 *           "field": "trigger.timzone",
                 *           "message": "unknown field"
                 *         }
                 *       ]
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description `claim_max_waiters` long polls already wait in this replica; retry after `Retry-After` seconds, or claim without `wait_seconds`. */
        TooManyWaiters: {
            headers: {
                /** @description Seconds to wait before retrying. */
                "Retry-After"?: number;
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/too-many-requests",
                 *       "title": "Too many requests",
                 *       "status": 429,
                 *       "detail": "this replica already holds 1024 waiting claims (claim_max_waiters); retry later or claim without wait_seconds"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The database is unavailable (problem type `unavailable`, with `Retry-After`; answered within `database_unavailable_answer_ms` while it is unreachable), or this replica is shutting down and takes no new claims (problem type `shutting-down`, with `Retry-After`; another replica can serve the claim at once). */
        ClaimUnavailable: {
            headers: {
                /** @description Seconds to wait before retrying. */
                "Retry-After"?: number;
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/shutting-down",
                 *       "title": "Shutting down",
                 *       "status": 503,
                 *       "detail": "this replica is shutting down and takes no new claims; retry (another replica will answer)"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /**
         * @description The database is unavailable or the request lost a race inside it (a restart, a failover,
         *     a read-only standby, no free connection, a deadlock, a lock or statement timeout); retry
         *     after `Retry-After`. While the database is unreachable this answer comes within
         *     `database_unavailable_answer_ms` (default 2000). A report (complete, fail) whose answer
         *     was lost this way may have been recorded: sent again under the same lease token it is
         *     answered `200` as the first was.
         */
        ServiceUnavailable: {
            headers: {
                /** @description Seconds to wait before retrying. */
                "Retry-After"?: number;
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/unavailable",
                 *       "title": "Service unavailable",
                 *       "status": 503,
                 *       "detail": "the database is unavailable; retry later"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The server failed (never because of bad input); details are logged, not returned. */
        InternalError: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/internal",
                 *       "title": "Internal server error",
                 *       "status": 500,
                 *       "detail": "the server failed; the error was logged"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /**
         * @description Fence rejection: the instance is not RUNNING under this `lease_token` (the lease was
         *     reaped, the instance was cancelled, completed or failed, or a newer attempt holds it).
         *     Nothing is written; `kairos_fence_rejections_total` grows.
         */
        StaleLease: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/conflict",
                 *       "title": "Conflict",
                 *       "status": 409,
                 *       "detail": "stale lease: instance 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10 (task daily_report_001, window 2026-11-30T00:30:00Z) is RUNNING at attempt 2; this lease token no longer holds it"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The instance's current status does not allow this action. */
        IllegalTransition: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "type": "https://kairos.dev/problems/conflict",
                 *       "title": "Conflict",
                 *       "status": 409,
                 *       "detail": "instance 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10 is SUCCESS; that transition is not allowed from SUCCESS"
                 *     }
                 */
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
    };
    parameters: {
        /**
         * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
         *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
         *     (`422` on `id`).
         * @example daily_report_001
         */
        TaskIdPath: string;
        /**
         * @description The shared limit's name, chosen by its author (the task id alphabet: 1–128 of `a-z`,
         *     `0-9`, `_`, `.`, `-`, starting with a letter or digit). On `PUT` a name that does not
         *     match the pattern is `422` (field `name`); on other operations it is simply not found
         *     (`404`), except one holding U+0000 (`422` on `name`).
         * @example openai
         */
        LimitNamePath: string;
        /**
         * @description Make the write conditional: a task's (or limit's) version as returned in
         *     `ETag`/`version` (`"3"` or `3`), or `*` (it must exist). A mismatch, a missing task or
         *     limit, or any other value (including weak tags `W/"3"`) is `412`. Without the header
         *     the write is unconditional.
         * @example "3"
         */
        IfMatch: string;
        /**
         * @description W3C Trace Context: the caller's span. On a task definition it is stored with the task
         *     (when the request creates or changes it) and each window of the task is a new trace
         *     whose window span links to it; on a manual trigger it is stored with the instance it
         *     creates, which continues its trace (the window span is its child). On `complete`, `fail` and `POST /v1/completions` it names the agent's span,
         *     the parent of the completion span when it is of the instance's trace. An invalid value is
         *     ignored, never refused (see Tracing).
         * @example 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
         */
        Traceparent: string;
        /**
         * @description W3C Trace Context vendor state, kept with a valid `traceparent` (at most 512 characters
         *     of `key=value` members) and handed on with the trace: claimed instances carry it as
         *     `tracestate`, webhook pushes as a header. An invalid value is dropped, never refused.
         * @example vendor=opaque
         */
        Tracestate: string;
        /** @description Page size. Outside 1–500 (or not an integer) is `422`. */
        Limit: number;
        /** @description Opaque; the `next_cursor` of the previous page with the same filters. A cursor this server did not issue is `422`. */
        Cursor: string;
        /** @description How many times to compute. Outside 1–1000 (or not an integer) is `422`. */
        PreviewCount: number;
        /**
         * @description Base instant, RFC 3339 (truncated to whole seconds). Results are **strictly after** it.
         *     Default: the database clock's now.
         * @example 2026-11-29T00:00:00Z
         */
        PreviewFrom: string;
        /**
         * @description The instance id. An id that is not a UUID is `404` (one holding U+0000 is `422` on `id`).
         * @example 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10
         */
        InstanceIdPath: string;
    };
    requestBodies: {
        ConsoleForm: {
            content: {
                "application/x-www-form-urlencoded": {
                    /** @description The page's CSRF token. */
                    csrf?: string;
                    reason?: string;
                };
            };
        };
    };
    headers: {
        /**
         * @description The task's (or limit's) `version` as a strong entity tag, e.g. `"3"`. Usable in `If-Match`.
         * @example "3"
         */
        ETag: string;
    };
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    getTask: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
                 *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
                 *     (`422` on `id`).
                 * @example daily_report_001
                 */
                id: components["parameters"]["TaskIdPath"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The task. */
            200: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Task"];
                };
            };
            401: components["responses"]["Unauthorized"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    putTask: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description Make the write conditional: a task's (or limit's) version as returned in
                 *     `ETag`/`version` (`"3"` or `3`), or `*` (it must exist). A mismatch, a missing task or
                 *     limit, or any other value (including weak tags `W/"3"`) is `412`. Without the header
                 *     the write is unconditional.
                 * @example "3"
                 */
                "If-Match"?: components["parameters"]["IfMatch"];
                /**
                 * @description W3C Trace Context: the caller's span. On a task definition it is stored with the task
                 *     (when the request creates or changes it) and each window of the task is a new trace
                 *     whose window span links to it; on a manual trigger it is stored with the instance it
                 *     creates, which continues its trace (the window span is its child). On `complete`, `fail` and `POST /v1/completions` it names the agent's span,
                 *     the parent of the completion span when it is of the instance's trace. An invalid value is
                 *     ignored, never refused (see Tracing).
                 * @example 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
                 */
                traceparent?: components["parameters"]["Traceparent"];
                /**
                 * @description W3C Trace Context vendor state, kept with a valid `traceparent` (at most 512 characters
                 *     of `key=value` members) and handed on with the trace: claimed instances carry it as
                 *     `tracestate`, webhook pushes as a header. An invalid value is dropped, never refused.
                 * @example vendor=opaque
                 */
                tracestate?: components["parameters"]["Tracestate"];
            };
            path: {
                /**
                 * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
                 *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
                 *     (`422` on `id`).
                 * @example daily_report_001
                 */
                id: components["parameters"]["TaskIdPath"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["TaskInput"];
            };
        };
        responses: {
            /** @description The task existed and was replaced, or the submission was identical (no-op; version unchanged). */
            200: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Task"];
                };
            };
            /** @description The task was created (version 1). */
            201: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Task"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            /** @description The task was created concurrently by another request; retry. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            412: components["responses"]["PreconditionFailed"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            /**
             * @description Invalid definition (every problem listed in `errors`, by dotted field path): unknown
             *     fields, out-of-range numbers, bad enum values, invalid cron expressions or zones, bad
             *     timestamps, `dispatch.url`/`dispatch.secret` missing with `mode: webhook` (or given
             *     with `mode: poll`), a URL that is not `http(s)://`, names no host, carries
             *     credentials or is longer than 2048 characters, a secret outside 1–1024 characters, an
             *     unknown `after` upstream or a dependency cycle, an `execution.limits` entry naming a
             *     limit twice or with an unknown key template variable; then (the first problem only)
             *     an entry naming no limit, a `per_key` limit without `key`, or a `cost` the limit
             *     could never admit. When `outbound_allowed_hosts` is set,
             *     also every webhook or notification URL naming a host outside it, and every such URL
             *     holding a refused literal address, e.g. `169.254.169.254` (checked once the rest of
             *     the definition is valid).
             */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    deleteTask: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
                 *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
                 *     (`422` on `id`).
                 * @example daily_report_001
                 */
                id: components["parameters"]["TaskIdPath"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Deleted. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listTasks: {
        parameters: {
            query?: {
                /** @description Only tasks of this agent (exact match). */
                agent_id?: string;
                /** @description Only paused (`true`) or only running (`false`) tasks. Any other value is `422`. */
                paused?: boolean;
                /** @description Page size. Outside 1–500 (or not an integer) is `422`. */
                limit?: components["parameters"]["Limit"];
                /** @description Opaque; the `next_cursor` of the previous page with the same filters. A cursor this server did not issue is `422`. */
                cursor?: components["parameters"]["Cursor"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of tasks. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TaskList"];
                };
            };
            400: components["responses"]["BadQuery"];
            401: components["responses"]["Unauthorized"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    pauseTask: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
                 *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
                 *     (`422` on `id`).
                 * @example daily_report_001
                 */
                id: components["parameters"]["TaskIdPath"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                /**
                 * @example {
                 *       "reason": "upstream API maintenance"
                 *     }
                 */
                "application/json": components["schemas"]["PauseRequest"];
            };
        };
        responses: {
            /** @description The paused task. */
            200: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Task"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    resumeTask: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
                 *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
                 *     (`422` on `id`).
                 * @example daily_report_001
                 */
                id: components["parameters"]["TaskIdPath"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The task, running. */
            200: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Task"];
                };
            };
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    triggerTask: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description W3C Trace Context: the caller's span. On a task definition it is stored with the task
                 *     (when the request creates or changes it) and each window of the task is a new trace
                 *     whose window span links to it; on a manual trigger it is stored with the instance it
                 *     creates, which continues its trace (the window span is its child). On `complete`, `fail` and `POST /v1/completions` it names the agent's span,
                 *     the parent of the completion span when it is of the instance's trace. An invalid value is
                 *     ignored, never refused (see Tracing).
                 * @example 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
                 */
                traceparent?: components["parameters"]["Traceparent"];
                /**
                 * @description W3C Trace Context vendor state, kept with a valid `traceparent` (at most 512 characters
                 *     of `key=value` members) and handed on with the trace: claimed instances carry it as
                 *     `tracestate`, webhook pushes as a header. An invalid value is dropped, never refused.
                 * @example vendor=opaque
                 */
                tracestate?: components["parameters"]["Tracestate"];
            };
            path: {
                /**
                 * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
                 *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
                 *     (`422` on `id`).
                 * @example daily_report_001
                 */
                id: components["parameters"]["TaskIdPath"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["TriggerRequest"];
            };
        };
        responses: {
            /**
             * @description The task already has an instance with this `window_key`: it is returned unchanged
             *     (nothing is written; `debounced: false`). Or, for a debounced task, its waiting
             *     instance took the trigger (moved later, with this trigger's `context`;
             *     `debounced: true`).
             */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TriggeredInstance"];
                };
            };
            /** @description The instance was created (PENDING); `debounced` is `false`. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "01937b02-5d1e-7c44-8a0f-2b6e9d3c1a77",
                     *       "task_id": "daily_report_001",
                     *       "agent_id": "report_agent",
                     *       "window_key": "rerun-2026-11-29",
                     *       "scheduled_at": "2026-11-29T10:10:00.218455Z",
                     *       "status": "PENDING",
                     *       "source": "manual",
                     *       "attempt": 1,
                     *       "max_attempts": 4,
                     *       "available_at": "2026-11-29T10:10:00.218455Z",
                     *       "lease_expires_at": null,
                     *       "worker_id": null,
                     *       "started_at": null,
                     *       "finished_at": null,
                     *       "result": null,
                     *       "error": null,
                     *       "error_kind": null,
                     *       "skip_reason": null,
                     *       "upstream_instance_id": null,
                     *       "upstream_result_digest": null,
                     *       "idempotency_key": "daily_report_001:rerun-2026-11-29",
                     *       "priority": 5,
                     *       "created_at": "2026-11-29T10:00:00.218455Z",
                     *       "updated_at": "2026-11-29T10:00:00.218455Z",
                     *       "debounced": false
                     *     }
                     */
                    "application/json": components["schemas"]["TriggeredInstance"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            /**
             * @description Invalid body: unknown fields; a body that is not a JSON object (field `""`);
             *     `window_key` empty, longer than 256 characters, or containing control characters;
             *     `delay_seconds` not an integer from 0 to 31622400; `run_at` not an RFC 3339
             *     timestamp; `run_at` together with `delay_seconds` (reported on `run_at`); `context`
             *     not an object or larger than 65536 bytes serialized; `debounce_key` empty, longer
             *     than 256 characters, containing control characters, beside a `window_key`, or for a task
             *     without `execution.debounce`; `run_at` or `delay_seconds` on a debounced trigger (a
             *     task with `execution.debounce`, no `window_key`).
             */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "https://kairos.dev/problems/validation-failed",
                     *       "title": "Invalid request values",
                     *       "status": 422,
                     *       "detail": "run_at: give run_at or delay_seconds, not both",
                     *       "errors": [
                     *         {
                     *           "field": "run_at",
                     *           "message": "give run_at or delay_seconds, not both"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    backfillTask: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
                 *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
                 *     (`422` on `id`).
                 * @example daily_report_001
                 */
                id: components["parameters"]["TaskIdPath"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["BackfillRequest"];
            };
        };
        responses: {
            /** @description What the backfill did (or, with `dry_run`, would do). */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["BackfillReport"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            /**
             * @description Invalid body or range: unknown fields; a body that is not a JSON object (field
             *     `""`); `from` or `to` missing or not an RFC 3339 timestamp; `to` not after `from`
             *     (on `to`); `dry_run` not a boolean; more than 10,000 windows in the range (on
             *     `to`); a `manual` or `after` task (field `""`).
             */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "https://kairos.dev/problems/validation-failed",
                     *       "title": "Invalid request values",
                     *       "status": 422,
                     *       "detail": "to: the range holds more than 10000 windows; backfill it in parts",
                     *       "errors": [
                     *         {
                     *           "field": "to",
                     *           "message": "the range holds more than 10000 windows; backfill it in parts"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    previewTask: {
        parameters: {
            query?: {
                /** @description How many times to compute. Outside 1–1000 (or not an integer) is `422`. */
                count?: components["parameters"]["PreviewCount"];
                /**
                 * @description Base instant, RFC 3339 (truncated to whole seconds). Results are **strictly after** it.
                 *     Default: the database clock's now.
                 * @example 2026-11-29T00:00:00Z
                 */
                from?: components["parameters"]["PreviewFrom"];
            };
            header?: never;
            path: {
                /**
                 * @description The user-chosen task id. On `PUT` an id that does not match the pattern is `422` (field
                 *     `id`); on other operations it is simply not found (`404`), except one holding U+0000
                 *     (`422` on `id`).
                 * @example daily_report_001
                 */
                id: components["parameters"]["TaskIdPath"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The windows, earliest first. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TaskPreview"];
                };
            };
            400: components["responses"]["BadQuery"];
            401: components["responses"]["Unauthorized"];
            404: components["responses"]["NotFound"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    previewCron: {
        parameters: {
            query: {
                /**
                 * @description The cron expression (missing or empty is `422`).
                 * @example 0 30 8 * * MON-FRI
                 */
                expr: string;
                /**
                 * @description IANA time zone the expression is evaluated in.
                 * @example Asia/Shanghai
                 */
                timezone?: string;
                /** @description How many times to compute. Outside 1–1000 (or not an integer) is `422`. */
                count?: components["parameters"]["PreviewCount"];
                /**
                 * @description Base instant, RFC 3339 (truncated to whole seconds). Results are **strictly after** it.
                 *     Default: the database clock's now.
                 * @example 2026-11-29T00:00:00Z
                 */
                from?: components["parameters"]["PreviewFrom"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The fire times, earliest first. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["CronPreview"];
                };
            };
            400: components["responses"]["BadQuery"];
            401: components["responses"]["Unauthorized"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listInstances: {
        parameters: {
            query?: {
                /** @description Only instances of this task (exact match). */
                task_id?: string;
                /** @description Only instances for this agent (the instance's `agent_id`, see `Instance.agent_id`; exact match). */
                agent_id?: string;
                /**
                 * @description Comma-separated list of statuses (any of them matches), e.g.
                 *     `status=FAILED,DEAD`. Matching of names is case-insensitive and surrounding spaces
                 *     are ignored; an unknown name (or an empty list) is `422`.
                 */
                status?: components["schemas"]["InstanceStatus"][];
                /** @description Only the instance(s) of this window key (exact match). */
                window_key?: string;
                /**
                 * @description Only instances of this priority (`Instance.priority`: 0 most urgent, 9 least). Not an
                 *     integer from 0 to 9 is `422` naming `priority`.
                 */
                priority?: number;
                /** @description Only instances with `scheduled_at >= from` (inclusive). RFC 3339, truncated to whole seconds. */
                from?: string;
                /** @description Only instances with `scheduled_at < to` (exclusive). RFC 3339, truncated to whole seconds. `to` before `from` is `422`. */
                to?: string;
                /** @description Page size. Outside 1–500 (or not an integer) is `422`. */
                limit?: components["parameters"]["Limit"];
                /** @description Opaque; the `next_cursor` of the previous page with the same filters. A cursor this server did not issue is `422`. */
                cursor?: components["parameters"]["Cursor"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of instances. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["InstanceList"];
                };
            };
            400: components["responses"]["BadQuery"];
            401: components["responses"]["Unauthorized"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getInstance: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The instance id. An id that is not a UUID is `404` (one holding U+0000 is `422` on `id`).
                 * @example 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10
                 */
                id: components["parameters"]["InstanceIdPath"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The instance with `events`. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["InstanceDetail"];
                };
            };
            401: components["responses"]["Unauthorized"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    claimInstances: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "agent_id": "report_agent",
                 *       "worker_id": "report-worker-7",
                 *       "max_instances": 5,
                 *       "lease_seconds": 120,
                 *       "wait_seconds": 20
                 *     }
                 */
                "application/json": components["schemas"]["ClaimRequest"];
            };
        };
        responses: {
            /** @description The instances taken, now RUNNING under the caller's leases, in claim order; empty when none could be taken within `wait_seconds`. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ClaimResponse"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAgent"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            429: components["responses"]["TooManyWaiters"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ClaimUnavailable"];
        };
    };
    heartbeatInstance: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The instance id. An id that is not a UUID is `404` (one holding U+0000 is `422` on `id`).
                 * @example 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10
                 */
                id: components["parameters"]["InstanceIdPath"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "lease_token": "6f1c2d9e-8a47-4b35-b0e2-93d1c7a5f604",
                 *       "lease_seconds": 120
                 *     }
                 */
                "application/json": components["schemas"]["HeartbeatRequest"];
            };
        };
        responses: {
            /** @description The instance, still RUNNING, with its new `lease_expires_at`. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Instance"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAgent"];
            404: components["responses"]["NotFound"];
            409: components["responses"]["StaleLease"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    completeInstance: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description W3C Trace Context: the caller's span. On a task definition it is stored with the task
                 *     (when the request creates or changes it) and each window of the task is a new trace
                 *     whose window span links to it; on a manual trigger it is stored with the instance it
                 *     creates, which continues its trace (the window span is its child). On `complete`, `fail` and `POST /v1/completions` it names the agent's span,
                 *     the parent of the completion span when it is of the instance's trace. An invalid value is
                 *     ignored, never refused (see Tracing).
                 * @example 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
                 */
                traceparent?: components["parameters"]["Traceparent"];
            };
            path: {
                /**
                 * @description The instance id. An id that is not a UUID is `404` (one holding U+0000 is `422` on `id`).
                 * @example 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10
                 */
                id: components["parameters"]["InstanceIdPath"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "lease_token": "6f1c2d9e-8a47-4b35-b0e2-93d1c7a5f604",
                 *       "result": {
                 *         "report_url": "https://reports.example/2026-11-30.pdf",
                 *         "rows": 1824
                 *       }
                 *     }
                 */
                "application/json": components["schemas"]["CompleteRequest"];
            };
        };
        responses: {
            /** @description The instance, now SUCCESS. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Instance"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAgent"];
            404: components["responses"]["NotFound"];
            409: components["responses"]["StaleLease"];
            /** @description `result` is larger than 65536 bytes serialized, or the body is larger than `max_body_bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "https://kairos.dev/problems/too-large",
                     *       "title": "Payload too large",
                     *       "status": 413,
                     *       "detail": "result is 70211 bytes serialized; at most 65536 are kept. Store large outputs elsewhere and return a reference"
                     *     }
                     */
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    completeInstances: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description W3C Trace Context: the caller's span. On a task definition it is stored with the task
                 *     (when the request creates or changes it) and each window of the task is a new trace
                 *     whose window span links to it; on a manual trigger it is stored with the instance it
                 *     creates, which continues its trace (the window span is its child). On `complete`, `fail` and `POST /v1/completions` it names the agent's span,
                 *     the parent of the completion span when it is of the instance's trace. An invalid value is
                 *     ignored, never refused (see Tracing).
                 * @example 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
                 */
                traceparent?: components["parameters"]["Traceparent"];
            };
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "completions": [
                 *         {
                 *           "id": "01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10",
                 *           "lease_token": "6f1c2d9e-8a47-4b35-b0e2-93d1c7a5f604",
                 *           "result": {
                 *             "report_url": "https://reports.example/2026-11-30.pdf",
                 *             "rows": 1824
                 *           }
                 *         },
                 *         {
                 *           "id": "01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b11",
                 *           "lease_token": "0b8e4f2a-51c3-4d6e-8f17-2a9c3e5d7b40"
                 *         },
                 *         {
                 *           "id": "01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b12",
                 *           "lease_token": "9d2a7c41-3e8b-4f05-a6d1-7c4e2b9f0a83"
                 *         }
                 *       ]
                 *     }
                 */
                "application/json": components["schemas"]["CompletionBatchRequest"];
            };
        };
        responses: {
            /** @description One result per item, in request order; each item succeeded (`200`) or failed on its own (`409`, `404`, `403`). */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "results": [
                     *         {
                     *           "id": "01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10",
                     *           "status": 200,
                     *           "instance": {
                     *             "id": "01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10",
                     *             "task_id": "daily_report_001",
                     *             "agent_id": "report_agent",
                     *             "window_key": "2026-11-30T00:30:00Z",
                     *             "scheduled_at": "2026-11-30T00:30:00Z",
                     *             "status": "SUCCESS",
                     *             "source": "schedule",
                     *             "attempt": 1,
                     *             "max_attempts": 4,
                     *             "available_at": "2026-11-30T00:30:00Z",
                     *             "lease_expires_at": null,
                     *             "worker_id": "report-worker-7",
                     *             "started_at": "2026-11-30T00:30:00.412307Z",
                     *             "finished_at": "2026-11-30T00:31:12.905118Z",
                     *             "result": {
                     *               "report_url": "https://reports.example/2026-11-30.pdf",
                     *               "rows": 1824
                     *             },
                     *             "error": null,
                     *             "error_kind": null,
                     *             "skip_reason": null,
                     *             "upstream_instance_id": null,
                     *             "upstream_result_digest": null,
                     *             "idempotency_key": "daily_report_001:2026-11-30T00:30:00Z",
                     *             "created_at": "2026-11-30T00:30:00.103215Z",
                     *             "updated_at": "2026-11-30T00:31:12.905118Z"
                     *           }
                     *         },
                     *         {
                     *           "id": "01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b11",
                     *           "status": 409,
                     *           "detail": "stale lease: instance 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b11 (task daily_report_001, window 2026-11-30T00:31:00Z) is RUNNING at attempt 2; this lease token no longer holds it"
                     *         },
                     *         {
                     *           "id": "01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b12",
                     *           "status": 404,
                     *           "detail": "no instance with id 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b12"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["CompletionBatchResponse"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAgent"];
            /** @description An item's `result` is larger than 65536 bytes serialized (the first such item is named), or the body is larger than `max_body_bytes`. Nothing is written. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "https://kairos.dev/problems/too-large",
                     *       "title": "Payload too large",
                     *       "status": 413,
                     *       "detail": "completions[3].result is 70211 bytes serialized; at most 65536 are kept"
                     *     }
                     */
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            415: components["responses"]["UnsupportedMediaType"];
            /** @description The body is not `{"completions": [...]}` with 1–500 valid items: the first problem is named (`completions`, `completions[n]`, `completions[n].<unknown field>`, `completions[n].id`, `completions[n].lease_token`, or the path of a U+0000 in `completions[n].result`). Nothing is written. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "https://kairos.dev/problems/validation-failed",
                     *       "title": "Invalid request values",
                     *       "status": 422,
                     *       "detail": "completions[2].lease_token: must be the UUID a claim returned",
                     *       "errors": [
                     *         {
                     *           "field": "completions[2].lease_token",
                     *           "message": "must be the UUID a claim returned"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    failInstance: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description W3C Trace Context: the caller's span. On a task definition it is stored with the task
                 *     (when the request creates or changes it) and each window of the task is a new trace
                 *     whose window span links to it; on a manual trigger it is stored with the instance it
                 *     creates, which continues its trace (the window span is its child). On `complete`, `fail` and `POST /v1/completions` it names the agent's span,
                 *     the parent of the completion span when it is of the instance's trace. An invalid value is
                 *     ignored, never refused (see Tracing).
                 * @example 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
                 */
                traceparent?: components["parameters"]["Traceparent"];
            };
            path: {
                /**
                 * @description The instance id. An id that is not a UUID is `404` (one holding U+0000 is `422` on `id`).
                 * @example 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10
                 */
                id: components["parameters"]["InstanceIdPath"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "lease_token": "6f1c2d9e-8a47-4b35-b0e2-93d1c7a5f604",
                 *       "error": "upstream API answered 503",
                 *       "retryable": true
                 *     }
                 */
                "application/json": components["schemas"]["FailRequest"];
            };
        };
        responses: {
            /** @description The instance, now FAILED (retry at `available_at`), DEAD, or (throttled) PENDING at `available_at` with its attempt unspent. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Instance"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAgent"];
            404: components["responses"]["NotFound"];
            409: components["responses"]["StaleLease"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    retryInstance: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The instance id. An id that is not a UUID is `404` (one holding U+0000 is `422` on `id`).
                 * @example 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10
                 */
                id: components["parameters"]["InstanceIdPath"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                /**
                 * @example {
                 *       "reason": "downstream fixed; re-running"
                 *     }
                 */
                "application/json": components["schemas"]["RetryRequest"];
            };
        };
        responses: {
            /** @description The instance, now PENDING. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Instance"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            409: components["responses"]["IllegalTransition"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    cancelInstance: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The instance id. An id that is not a UUID is `404` (one holding U+0000 is `422` on `id`).
                 * @example 01937a6e-2f4c-7d3a-9b1e-5c2f8e4a7b10
                 */
                id: components["parameters"]["InstanceIdPath"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                /**
                 * @example {
                 *       "reason": "report no longer needed"
                 *     }
                 */
                "application/json": components["schemas"]["ReasonRequest"];
            };
        };
        responses: {
            /** @description The instance, now CANCELLED. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Instance"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            409: components["responses"]["IllegalTransition"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getLimit: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The shared limit's name, chosen by its author (the task id alphabet: 1–128 of `a-z`,
                 *     `0-9`, `_`, `.`, `-`, starting with a letter or digit). On `PUT` a name that does not
                 *     match the pattern is `422` (field `name`); on other operations it is simply not found
                 *     (`404`), except one holding U+0000 (`422` on `name`).
                 * @example openai
                 */
                name: components["parameters"]["LimitNamePath"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The limit. */
            200: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Limit"];
                };
            };
            401: components["responses"]["Unauthorized"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    putLimit: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description Make the write conditional: a task's (or limit's) version as returned in
                 *     `ETag`/`version` (`"3"` or `3`), or `*` (it must exist). A mismatch, a missing task or
                 *     limit, or any other value (including weak tags `W/"3"`) is `412`. Without the header
                 *     the write is unconditional.
                 * @example "3"
                 */
                "If-Match"?: components["parameters"]["IfMatch"];
            };
            path: {
                /**
                 * @description The shared limit's name, chosen by its author (the task id alphabet: 1–128 of `a-z`,
                 *     `0-9`, `_`, `.`, `-`, starting with a letter or digit). On `PUT` a name that does not
                 *     match the pattern is `422` (field `name`); on other operations it is simply not found
                 *     (`404`), except one holding U+0000 (`422` on `name`).
                 * @example openai
                 */
                name: components["parameters"]["LimitNamePath"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["LimitInput"];
            };
        };
        responses: {
            /** @description The limit existed and was replaced, or the submission was identical (no-op; version unchanged). */
            200: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Limit"];
                };
            };
            /** @description The limit was created (version 1). */
            201: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Limit"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            /**
             * @description The change would leave a task that draws on the limit unable ever to start (the
             *     detail names the task; nothing is written), or the limit was created concurrently by
             *     another request (retry).
             */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "https://kairos.dev/problems/conflict",
                     *       "title": "Conflict",
                     *       "status": 409,
                     *       "detail": "task \"summarize\" draws 2 units on this limit, whose cost is 2, above the limit's concurrency of 1: it could never start; change the task first"
                     *     }
                     */
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            412: components["responses"]["PreconditionFailed"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            /**
             * @description Invalid name or definition (every problem of the definition listed in `errors`, by
             *     dotted field path): unknown fields, values out of range, `rate.count` or
             *     `rate.per_seconds` missing, `rate.burst` above `rate.count`, neither `concurrency`
             *     nor `rate` (on `concurrency`), a `name` in the body other than the path's.
             */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "https://kairos.dev/problems/validation-failed",
                     *       "title": "Invalid request values",
                     *       "status": 422,
                     *       "detail": "colour: unknown field; rate.burst: must be at most rate.count (500)",
                     *       "errors": [
                     *         {
                     *           "field": "colour",
                     *           "message": "unknown field"
                     *         },
                     *         {
                     *           "field": "rate.burst",
                     *           "message": "must be at most rate.count (500)"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    deleteLimit: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The shared limit's name, chosen by its author (the task id alphabet: 1–128 of `a-z`,
                 *     `0-9`, `_`, `.`, `-`, starting with a letter or digit). On `PUT` a name that does not
                 *     match the pattern is `422` (field `name`); on other operations it is simply not found
                 *     (`404`), except one holding U+0000 (`422` on `name`).
                 * @example openai
                 */
                name: components["parameters"]["LimitNamePath"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Deleted. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            /** @description Tasks draw on the limit (the detail names them); nothing is deleted. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "https://kairos.dev/problems/conflict",
                     *       "title": "Conflict",
                     *       "status": 409,
                     *       "detail": "tasks draw on limit \"openai\": summarize, translate"
                     *     }
                     */
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listLimits: {
        parameters: {
            query?: {
                /** @description Page size. Outside 1–500 (or not an integer) is `422`. */
                limit?: components["parameters"]["Limit"];
                /** @description Opaque; the `next_cursor` of the previous page with the same filters. A cursor this server did not issue is `422`. */
                cursor?: components["parameters"]["Cursor"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description A page of limits. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["LimitList"];
                };
            };
            401: components["responses"]["Unauthorized"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    holdLimit: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The shared limit's name, chosen by its author (the task id alphabet: 1–128 of `a-z`,
                 *     `0-9`, `_`, `.`, `-`, starting with a letter or digit). On `PUT` a name that does not
                 *     match the pattern is `422` (field `name`); on other operations it is simply not found
                 *     (`404`), except one holding U+0000 (`422` on `name`).
                 * @example openai
                 */
                name: components["parameters"]["LimitNamePath"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "seconds": 120,
                 *       "reason": "provider incident, calls paused"
                 *     }
                 */
                "application/json": components["schemas"]["LimitHoldRequest"];
            };
        };
        responses: {
            /** @description The limit, held. */
            200: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Limit"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    releaseLimit: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The shared limit's name, chosen by its author (the task id alphabet: 1–128 of `a-z`,
                 *     `0-9`, `_`, `.`, `-`, starting with a letter or digit). On `PUT` a name that does not
                 *     match the pattern is `422` (field `name`); on other operations it is simply not found
                 *     (`404`), except one holding U+0000 (`422` on `name`).
                 * @example openai
                 */
                name: components["parameters"]["LimitNamePath"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                /** @example {} */
                "application/json": components["schemas"]["LimitReleaseRequest"];
            };
        };
        responses: {
            /** @description The limit, its holds lifted. */
            200: {
                headers: {
                    ETag: components["headers"]["ETag"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Limit"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["ForbiddenAdmin"];
            404: components["responses"]["NotFound"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            422: components["responses"]["ValidationFailed"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    healthz: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Alive. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Health"];
                };
            };
        };
    };
    readyz: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Ready. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Readiness"];
                };
            };
            /** @description Not ready; `problems` says why. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Readiness"];
                };
            };
        };
    };
    metrics: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The metrics. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/plain; version=0.0.4": string;
                };
            };
            401: components["responses"]["Unauthorized"];
            /** @description The metrics recorder is not installed (plain text, not problem+json). */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /** @example metrics recorder unavailable */
                    "text/plain": string;
                };
            };
        };
    };
    openapi: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The OpenAPI document, as written in the repository. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/yaml": string;
                };
            };
            401: components["responses"]["Unauthorized"];
        };
    };
    uiRoot: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Redirect to `/ui/`. */
            308: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
        };
    };
    uiOverview: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
        };
    };
    uiLoginForm: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
        };
    };
    uiLogin: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/x-www-form-urlencoded": {
                    token?: string;
                    /** @description The login form's hidden field. */
                    csrf?: string;
                };
            };
        };
        responses: {
            /** @description Signed in; `Set-Cookie` holds the session and `Location` is `/ui/`. */
            303: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            401: components["responses"]["ConsolePage"];
            403: components["responses"]["ConsolePage"];
        };
    };
    uiLogout: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: components["requestBodies"]["ConsoleForm"];
        responses: {
            /** @description The session is ended on the server and its cookie cleared; `Location` is `/ui/login`. */
            303: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            403: components["responses"]["ConsolePage"];
        };
    };
    uiTasks: {
        parameters: {
            query?: {
                agent?: string;
                paused?: "any" | "true" | "false";
                type?: "any" | "cron" | "interval" | "once" | "after" | "manual";
                after?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
            422: components["responses"]["ConsolePage"];
        };
    };
    uiTask: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
            404: components["responses"]["ConsolePage"];
        };
    };
    uiTaskAction: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
                action: "pause" | "resume" | "trigger" | "backfill-preview" | "backfill";
            };
            cookie?: never;
        };
        requestBody: components["requestBodies"]["ConsoleForm"];
        responses: {
            200: components["responses"]["ConsolePage"];
            /** @description Done; `Location` is the task page. */
            303: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            403: components["responses"]["ConsolePage"];
            404: components["responses"]["ConsolePage"];
            422: components["responses"]["ConsolePage"];
        };
    };
    uiInstances: {
        parameters: {
            query?: {
                task_id?: string;
                agent_id?: string;
                status?: string;
                window_key?: string;
                from?: string;
                to?: string;
                cursor?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
            422: components["responses"]["ConsolePage"];
        };
    };
    uiInstance: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
            404: components["responses"]["ConsolePage"];
        };
    };
    uiInstanceAction: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
                action: "retry" | "cancel";
            };
            cookie?: never;
        };
        requestBody: components["requestBodies"]["ConsoleForm"];
        responses: {
            /** @description Done; `Location` is the instance page. */
            303: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            403: components["responses"]["ConsolePage"];
            404: components["responses"]["ConsolePage"];
            409: components["responses"]["ConsolePage"];
            422: components["responses"]["ConsolePage"];
        };
    };
    uiLimits: {
        parameters: {
            query?: {
                done?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
            422: components["responses"]["ConsolePage"];
        };
    };
    uiLimitAction: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                name: string;
                action: "hold" | "release";
            };
            cookie?: never;
        };
        requestBody: components["requestBodies"]["ConsoleForm"];
        responses: {
            /** @description Done; `Location` is the Limits page. */
            303: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            403: components["responses"]["ConsolePage"];
            404: components["responses"]["ConsolePage"];
            422: components["responses"]["ConsolePage"];
        };
    };
    uiDeadQueue: {
        parameters: {
            query?: {
                task_id?: string;
                cursor?: string;
                action?: string;
                ok?: string;
                failed?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
        };
    };
    uiDeadAction: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: components["requestBodies"]["ConsoleForm"];
        responses: {
            /** @description Done; `Location` is the DEAD queue with the counts. */
            303: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            403: components["responses"]["ConsolePage"];
            422: components["responses"]["ConsolePage"];
        };
    };
    uiPlayground: {
        parameters: {
            query?: {
                expr?: string;
                tz?: string;
                from?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["ConsolePage"];
            303: components["responses"]["ConsoleLogin"];
            422: components["responses"]["ConsolePage"];
        };
    };
    uiCss: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description CSS. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/css": string;
                };
            };
        };
    };
    uiJs: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description JavaScript. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/javascript": string;
                };
            };
        };
    };
}
type WithRequired<T, K extends keyof T> = T & {
    [P in K]-?: T[P];
};
