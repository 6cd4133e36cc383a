//! The statements, whole: one `.sql` file per statement under `src/store/sql/`, laid out like
//! the store's modules (`sql/instances/lease/complete.sql` is run by `store::instances::lease`).
//! Each file is valid SQL that pastes into `psql` as it stands (parameters `$1…` aside), and
//! [`sql!`] embeds it at compile time, so a statement is a `&'static str` and never assembled
//! at run time. The few statements that are truly dynamic (a caller-chosen set of filters) are
//! built with `sqlx::QueryBuilder` where they are used, each with a comment saying why.
//!
//! A fragment that has one home elsewhere (the states a compare-and-swap expects, which the
//! transition table defines; a spec default, which `domain::task` defines; a column list that
//! several statements must agree on) is written out literally, after a comment naming it:
//!
//! ```sql
//! where i.id = f.id and /* fragment: sources of complete */ (i.status || '') = 'RUNNING'
//! ```
//!
//! The tests below check every such fragment against its home, that every file
//! is used, and that no file is missing; `tests/statements.rs` prepares every file against the
//! migrated schema, so a statement that no longer fits the tables fails the suite.

/// The statement in `src/store/sql/<name>.sql`, as a `&'static str`.
macro_rules! sql {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/store/sql/",
            $name,
            ".sql"
        ))
    };
}
pub(crate) use sql;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use crate::domain::instance::{Event, InstanceStatus, legal_sources};
    use crate::store::{TASK_LIMIT_SQL, TASK_TIMEOUT_SQL, status_in_sql};

    /// What the fragment called `name` must read, rendered from its home; `None` for a name no
    /// fragment has. `sources of <event>` fragments are checked by [`sources_of`] instead.
    fn fragment(name: &str) -> Option<String> {
        Some(match name {
            "instance columns" => crate::store::instances::read::INSTANCE_COLUMNS.to_owned(),
            // The `RunningAttempt` columns but `expiry` and `lost_to_outage`, for
            // `task_instance i left join tasks t`.
            "running attempt columns" => "i.id, i.task_id, i.window_key, i.agent_id, \
                i.attempt, i.max_attempts, i.lease_token, i.worker_id, \
                t.spec->'execution'->'retry_backoff' as retry_backoff, \
                t.id is not null as task_exists"
                .to_owned(),
            "queued work" => crate::store::instances::lease::queued_work_sql(),
            "limit columns" => "name, spec, version, created_at, updated_at".to_owned(),
            // The budgets that cannot start even one unit now, as (name, key) with key null
            // for a limit without per_key: held, their rate spent (tat > now + burst·T), or
            // their concurrency units all taken. A claim's pick passes over rows drawing on
            // them; whether a row of a budget with some room fits is decided under its lock.
            "blocked budgets" => "select l.name, \
                case when (l.spec->>'per_key')::boolean then b.key end as key \
                from limits l cross join lateral ( \
                select s.key from limit_state s where s.limit_name = l.name \
                and (s.held_until > now() \
                or (l.spec ? 'rate' and s.tat > now() + make_interval(secs => \
                (l.spec->'rate'->>'burst')::float8 * (l.spec->'rate'->>'per_seconds')::float8 \
                / (l.spec->'rate'->>'count')::float8))) \
                union \
                select u.key from limit_units u where u.limit_name = l.name and l.spec ? 'concurrency' \
                group by u.key having sum(u.cost) >= (l.spec->>'concurrency')::bigint \
                ) b"
                .to_owned(),
            // True when instance row `i` draws on no budget of `blocked` (the CTE above).
            "not blocked i" => "(i.limit_draws is null or not exists (select 1 from blocked) \
                or not exists ( \
                select 1 from jsonb_array_elements(i.limit_draws) d join blocked b \
                on b.name = d->>'name' and (b.key is null or b.key = d->>'key')))"
                .to_owned(),
            // True when task `t` draws on no budget of `blocked` that has no key: such a
            // budget is all or nothing for every waiting row of the task, since they draw on
            // the task's limits (rendered afresh whenever those change). A task without
            // limits is answered before `blocked` is read, so it never sums anyone's units.
            "not blocked t" => "(coalesce(t.spec->'execution'->'limits', '[]'::jsonb) = '[]'::jsonb \
                or not exists (select 1 from blocked b where b.key is null \
                and t.spec->'execution'->'limits' \
                @> jsonb_build_array(jsonb_build_object('name', b.name))))"
                .to_owned(),
            "task concurrency_limit" => TASK_LIMIT_SQL.to_string(),
            "task timeout_seconds" => TASK_TIMEOUT_SQL.to_string(),
            "task failure_threshold" => format!(
                "coalesce((t.spec->'circuit_breaker'->>'failure_threshold')::int, {})",
                crate::domain::task::DEFAULT_FAILURE_THRESHOLD
            ),
            "default dispatch timeout_seconds" => {
                crate::domain::task::DEFAULT_DISPATCH_TIMEOUT_SECONDS.to_string()
            }
            "push lease margin" => crate::store::claim::PUSH_LEASE_MARGIN_SECONDS.to_string(),
            // The first half of an `ev` CTE that closes attempts in `upd`: when the closing
            // attempt's claim lives only on the row (`old_claimed_by`, see
            // `migrations/20261201000001_hot_path.sql`), it becomes an explicit event first, so
            // the history keeps it once the row moves on. The statement goes on with one
            // `select` of the closing event (with `o = 1`) and `) x order by instance_id, o`,
            // which numbers the claim before the event that ends it.
            "close attempt events" => "insert into instance_events \
                    (instance_id, attempt, from_status, to_status, actor, reason, at) \
                select instance_id, attempt, from_status, to_status, actor, reason, at from ( \
                    select id as instance_id, attempt, 'PENDING' as from_status, \
                        'RUNNING' as to_status, old_claimed_by as actor, \
                        'claimed by worker ' || coalesce(worker_id, 'unknown') as reason, \
                        started_at as at, 0 as o \
                    from upd where old_claimed_by is not null \
                    union all"
                .to_owned(),
            // The operator-retry write after a CTE `old (id, status)` of locked rows: PENDING
            // with one more attempt allowed, claimable now, for the task's current agent (it
            // may have moved), with its limit draws rendered again, and its event by actor `$3`
            // with reason `$4`; `$5` may give the instance a priority of its own (null: keep
            // its). The statement goes on with `select … from upd`.
            "operator retry" => "upd as ( \
                    update task_instance i set status = 'PENDING', attempt = i.attempt + 1, \
                        max_attempts = i.max_attempts + 1, available_at = now(), \
                        finished_at = null, started_at = null, worker_id = null, \
                        lease_token = null, lease_expires_at = null, deadline_at = null, \
                        result = null, error = null, error_kind = null, skip_reason = null, \
                        updated_at = now(), priority = coalesce($5::smallint, i.priority), \
                        agent_id = coalesce((select t.agent_id from tasks t \
                            where t.id = i.task_id), i.agent_id), \
                        limit_draws = (select \
                            kairos_render_limit_draws(t.spec->'execution'->'limits', \
                                i.task_id, t.agent_id, \
                                coalesce(t.spec->'context', '{}'::jsonb) \
                                    || coalesce(i.context_override, '{}'::jsonb)) \
                            from tasks t where t.id = i.task_id) \
                    from old where i.id = old.id \
                    returning i.*, old.status as from_status \
                ), ev as ( \
                    insert into instance_events \
                        (instance_id, attempt, from_status, to_status, actor, reason) \
                    select id, attempt, from_status, 'PENDING', $3, $4 from upd \
                )"
            .to_owned(),
            // The terminal states, the only ones pruned: no automatic path moves an instance
            // out of them.
            "terminal states" => {
                let terminal: Vec<InstanceStatus> = InstanceStatus::ALL
                    .into_iter()
                    .filter(|s| s.is_terminal())
                    .collect();
                status_in_sql("status", &terminal)
            }
            "default priority" => crate::domain::task::DEFAULT_PRIORITY.to_string(),
            "occurred at" => crate::store::outbox::OCCURRED_AT_SQL.to_owned(),
            "task columns" => "spec, paused, paused_reason, \
                 (select c.next_fire_at from task_cursor c where c.task_id = tasks.id) \
                 as next_fire_at, consecutive_failures, version, created_at, updated_at"
                .to_owned(),
            "pending of task_cursor" => {
                crate::store::has_pending_sql("task_cursor.task_id", "true")
            }
            _ => return None,
        })
    }

    /// The event whose source states a `sources of <name>` fragment spells.
    fn sources_of(name: &str) -> Option<Event> {
        Some(match name {
            "claim" => Event::Claim,
            "complete" => Event::Complete,
            "give back" => Event::GiveBack,
            "throttle" => Event::Throttle,
            "fail" => Event::Fail { give_up: false },
            "fail giving up" => Event::Fail { give_up: true },
            "retry due" => Event::RetryDue,
            "cancel" => Event::Cancel,
            _ => return None,
        })
    }

    /// Whitespace collapsed to single spaces, so that a fragment may be wrapped over lines.
    fn squeeze(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// Every problem with the fragments of one statement's text: unknown names, and fragments that
    /// do not read as their home renders them.
    fn check_fragments(text: &str) -> Vec<String> {
        const MARK: &str = "/* fragment: ";
        let mut problems = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(MARK) {
            let after = &rest[at + MARK.len()..];
            let Some(end) = after.find(" */") else {
                problems.push("a fragment comment is not closed".to_owned());
                break;
            };
            let name = &after[..end];
            let body = squeeze(&after[end + 3..]);
            let want = match (fragment(name), name.strip_prefix("sources of ")) {
                (Some(want), _) => Some(want),
                (None, Some(event)) => sources_of(event).and_then(|ev| {
                    // The column is what the text compares: `<column> = '…'` or `<column> in (…)`.
                    let column = body
                        .find(" = '")
                        .or_else(|| body.find(" in ("))
                        .map(|i| body[..i].to_owned())?;
                    Some(status_in_sql(&column, &legal_sources(ev)))
                }),
                (None, None) => None,
            };
            match want {
                None => problems.push(format!("unknown fragment {name:?}")),
                Some(want) if !body.starts_with(&squeeze(&want)) => problems.push(format!(
                    "fragment {name:?} must read {want:?}, reads {:?}",
                    body.chars().take(want.len() + 20).collect::<String>()
                )),
                Some(_) => {}
            }
            rest = after;
        }
        problems
    }

    fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// The statement names under `src/store/sql/`.
    fn statement_files() -> BTreeSet<String> {
        let dir = root().join("src/store/sql");
        let mut found = Vec::new();
        files(&dir, "sql", &mut found);
        found
            .iter()
            .filter_map(|p| p.strip_prefix(&dir).ok())
            .map(|p| p.with_extension("").to_string_lossy().replace('\\', "/"))
            .collect()
    }

    /// The names passed to `sql!` anywhere in `src/`.
    fn statements_used() -> BTreeSet<String> {
        let mut sources = Vec::new();
        files(&root().join("src"), "rs", &mut sources);
        let mut used = BTreeSet::new();
        for path in sources {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("sql!(\"") {
                let after = &rest[at + 6..];
                if let Some(end) = after.find('"') {
                    used.insert(after[..end].to_owned());
                }
                rest = after;
            }
        }
        used
    }

    #[test]
    fn every_statement_file_is_used() {
        let files = statement_files();
        assert!(!files.is_empty());
        let used = statements_used();
        let unused: Vec<&String> = files.difference(&used).collect();
        assert!(
            unused.is_empty(),
            "statement files no code runs: {unused:?}"
        );
    }

    #[test]
    fn every_fragment_reads_as_its_home_renders_it() {
        let mut problems = Vec::new();
        for name in statement_files() {
            let path = root().join("src/store/sql").join(format!("{name}.sql"));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for p in check_fragments(&text) {
                problems.push(format!("{name}.sql: {p}"));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn a_fragment_that_drifted_is_named() {
        let ok = "where /* fragment: sources of complete */ (i.status || '') = 'RUNNING' and x";
        assert!(check_fragments(ok).is_empty());
        let wrapped = "where /* fragment: sources of cancel */ i.status in ('PENDING',\n   'RUNNING', 'FAILED')";
        assert!(check_fragments(wrapped).is_empty());
        let drifted = "where /* fragment: sources of cancel */ i.status in ('PENDING', 'RUNNING')";
        assert_eq!(check_fragments(drifted).len(), 1);
        let unknown = "select /* fragment: nothing such */ 1";
        assert_eq!(check_fragments(unknown).len(), 1);
        let default = "select /* fragment: task timeout_seconds */ coalesce((t.spec->'execution'->>'timeout_seconds')::bigint, 7)";
        assert_eq!(check_fragments(default).len(), 1);
    }
}
