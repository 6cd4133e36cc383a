//! Shared limits: budgets of concurrency and rate that tasks of any agent draw on.
//!
//! A limit (`PUT /v1/limits/{name}`) has a `concurrency` (cost units held by RUNNING
//! instances at once), a `rate` (`count` start units per `per_seconds`, plus `burst`), or both;
//! `per_key` keeps a separate budget per rendered key. A task names the limits it draws on in
//! `execution.limits` ([`Draw`]); each instance renders the key templates when it is created.
//!
//! The rate is GCRA (the generic cell rate algorithm) with emission interval `T = per_seconds /
//! count` and tolerance `τ = burst · T`, over one stored instant per budget, the theoretical
//! arrival time `tat`: a start of cost `c` at `t` is admitted iff `t ≥ tat + (c − 1)·T − τ`, and
//! then `tat := max(tat, t) + c·T`. Admissions of a budget are serialised (the claim locks the
//! budget's row), so no half-open interval `[t, t + per_seconds)` ever holds more than
//! `count + burst` start units, whatever order the starts commit in; from idle, `burst + 1`
//! units start at once. Rate units are never given back. All arithmetic is in integer
//! microseconds, `T` rounded up, so rounding can only make the limit stricter.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::task::{FieldError, json_integer};
use super::text::at_most_chars;

/// Largest `concurrency`.
pub const MAX_CONCURRENCY: i64 = 100_000;
/// Largest `rate.count`.
pub const MAX_RATE_COUNT: i64 = 1_000_000;
/// Largest `rate.per_seconds`: one day.
pub const MAX_RATE_PER_SECONDS: i64 = 86_400;
/// Most limits one task draws on.
pub const MAX_DRAWS_PER_TASK: usize = 8;
/// Longest key template, and longest rendered key kept.
pub const MAX_KEY_LEN: usize = 256;
/// Longest hold: one day (as `retry_after_seconds`).
pub const MAX_HOLD_SECONDS: i64 = 86_400;

/// `rate`: at most `count + burst` start units in any `per_seconds` window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    pub count: i64,
    pub per_seconds: i64,
    pub burst: i64,
}

/// A validated limit definition with its defaults filled in. Stored as JSON in `limits.spec`;
/// two PUTs are "the same" exactly when their specs are equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    #[serde(default)]
    pub per_key: bool,
}

impl LimitSpec {
    /// Why a draw of `cost` units could never start on this limit, if it could not.
    pub fn refuses_cost(&self, cost: i64) -> Option<String> {
        if let Some(c) = self.concurrency
            && cost > c
        {
            return Some(format!(
                "is {cost}, above the limit's concurrency of {c}: it could never start"
            ));
        }
        if let Some(r) = self.rate
            && cost > r.burst + 1
        {
            return Some(format!(
                "is {cost}, above the limit's rate burst + 1 ({}): it could never start",
                r.burst + 1
            ));
        }
        None
    }
}

/// One entry of `execution.limits`: the limit, the key template (required by `per_key`
/// limits) and the units one instance takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Draw {
    pub name: String,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default = "one")]
    pub cost: i64,
}

fn one() -> i64 {
    1
}

/// A draw as rendered on an instance (`task_instance.limit_draws`): the key with its
/// template filled in (`""` when the entry has none).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RenderedDraw {
    pub name: String,
    #[serde(default)]
    pub key: String,
    pub cost: i64,
}

fn err(field: &str, message: impl Into<String>) -> FieldError {
    FieldError::new(field, message)
}

fn int_in(
    obj: &Map<String, Value>,
    prefix: &str,
    key: &str,
    min: i64,
    max: i64,
    errs: &mut Vec<FieldError>,
) -> Option<i64> {
    let field = if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    };
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match json_integer(n) {
            Some(v) if (min..=max).contains(&v) => Some(v),
            _ => {
                errs.push(err(
                    &field,
                    format!("must be an integer from {min} to {max}"),
                ));
                None
            }
        },
        Some(_) => {
            errs.push(err(
                &field,
                format!("must be an integer from {min} to {max}"),
            ));
            None
        }
    }
}

/// The read-only fields of a limit's view, accepted and ignored in a PUT body so that a body
/// read with `GET` can be sent back.
pub const READ_ONLY_FIELDS: [&str; 9] = [
    "name",
    "version",
    "running",
    "available_rate",
    "held_until",
    "held_reason",
    "keys",
    "created_at",
    "updated_at",
];

/// Parse and validate a `PUT /v1/limits/{name}` body. Every problem is reported with its field.
pub fn parse_limit(body: &Value) -> Result<LimitSpec, Vec<FieldError>> {
    let Some(obj) = body.as_object() else {
        return Err(vec![err("", "the body must be a JSON object")]);
    };
    let mut errs = Vec::new();
    for k in obj.keys() {
        let known = ["concurrency", "rate", "per_key"];
        if !known.contains(&k.as_str()) && !READ_ONLY_FIELDS.contains(&k.as_str()) {
            errs.push(err(k, "unknown field"));
        }
    }
    let concurrency = int_in(obj, "", "concurrency", 1, MAX_CONCURRENCY, &mut errs);
    let rate = match obj.get("rate") {
        None | Some(Value::Null) => None,
        Some(Value::Object(r)) => {
            for k in r.keys() {
                if !["count", "per_seconds", "burst"].contains(&k.as_str()) {
                    errs.push(err(&format!("rate.{k}"), "unknown field"));
                }
            }
            let count = int_in(r, "rate", "count", 1, MAX_RATE_COUNT, &mut errs);
            let per = int_in(r, "rate", "per_seconds", 1, MAX_RATE_PER_SECONDS, &mut errs);
            if r.get("count").is_none_or(Value::is_null) {
                errs.push(err("rate.count", "is required"));
            }
            if r.get("per_seconds").is_none_or(Value::is_null) {
                errs.push(err("rate.per_seconds", "is required"));
            }
            let burst = int_in(r, "rate", "burst", 0, MAX_RATE_COUNT, &mut errs).unwrap_or(0);
            if let Some(c) = count
                && burst > c
            {
                errs.push(err(
                    "rate.burst",
                    format!("must be at most rate.count ({c})"),
                ));
            }
            match (count, per) {
                (Some(count), Some(per_seconds)) => Some(Rate {
                    count,
                    per_seconds,
                    burst: burst.min(count),
                }),
                _ => None,
            }
        }
        Some(_) => {
            errs.push(err("rate", "must be an object"));
            None
        }
    };
    let per_key = match obj.get("per_key") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errs.push(err("per_key", "must be a boolean"));
            false
        }
    };
    let no_budget = obj.get("concurrency").is_none_or(Value::is_null)
        && obj.get("rate").is_none_or(Value::is_null);
    if no_budget {
        errs.push(err(
            "concurrency",
            "a limit needs concurrency, rate or both",
        ));
    }
    if errs.is_empty() {
        Ok(LimitSpec {
            concurrency,
            rate,
            per_key,
        })
    } else {
        Err(errs)
    }
}

/// Check a key template: literal text with `{{task_id}}`, `{{agent_id}}` and
/// `{{params.<field>[.<field>…]}}` (fields of letters, digits, `_` and `-`).
pub fn check_key_template(t: &str) -> Result<(), String> {
    if !at_most_chars(t, MAX_KEY_LEN) {
        return Err(format!("must be at most {MAX_KEY_LEN} characters"));
    }
    // A key an operator could not name in a hold or a release.
    if t.chars().any(char::is_control) {
        return Err("must not contain control characters".to_owned());
    }
    let mut rest = t;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err("has a '{{' without its '}}'".to_owned());
        };
        let var = &after[..close];
        let ok = var == "task_id"
            || var == "agent_id"
            || var.strip_prefix("params.").is_some_and(|path| {
                !path.is_empty()
                    && path.split('.').all(|f| {
                        !f.is_empty()
                            && f.chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    })
            });
        if !ok {
            return Err(format!(
                "uses the unknown template variable {{{{{var}}}}} (known: {{{{task_id}}}}, \
                 {{{{agent_id}}}}, {{{{params.<field>}}}})"
            ));
        }
        rest = &after[close + 2..];
    }
    if rest.contains("}}") {
        return Err("has a '}}' without its '{{'".to_owned());
    }
    Ok(())
}

/// Parse `execution.limits` (names, templates, costs; whether the limits exist is the store's
/// check). Problems go to `errs` with their field.
pub fn parse_draws(value: Option<&Value>, errs: &mut Vec<FieldError>) -> Vec<Draw> {
    let list = match value {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(list)) => list,
        Some(_) => {
            errs.push(err("execution.limits", "must be an array"));
            return Vec::new();
        }
    };
    if list.len() > MAX_DRAWS_PER_TASK {
        errs.push(err(
            "execution.limits",
            format!("must name at most {MAX_DRAWS_PER_TASK} limits"),
        ));
        return Vec::new();
    }
    let mut out: Vec<Draw> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let p = format!("execution.limits[{i}]");
        let Some(obj) = item.as_object() else {
            errs.push(err(&p, "must be an object with name, key and cost"));
            continue;
        };
        for k in obj.keys() {
            if !["name", "key", "cost"].contains(&k.as_str()) {
                errs.push(err(&format!("{p}.{k}"), "unknown field"));
            }
        }
        let name = match obj.get("name") {
            Some(Value::String(s)) if super::task::TaskId::parse(s).is_ok() => Some(s.clone()),
            Some(Value::String(_)) => {
                errs.push(err(
                    &format!("{p}.name"),
                    "must be a limit name (1-128 of a-z, 0-9, '_', '.', '-')",
                ));
                None
            }
            None | Some(Value::Null) => {
                errs.push(err(&format!("{p}.name"), "is required"));
                None
            }
            Some(_) => {
                errs.push(err(&format!("{p}.name"), "must be a string"));
                None
            }
        };
        let key = match obj.get("key") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => match check_key_template(s) {
                Ok(()) => Some(s.clone()),
                Err(m) => {
                    errs.push(err(&format!("{p}.key"), m));
                    None
                }
            },
            Some(_) => {
                errs.push(err(&format!("{p}.key"), "must be a string template"));
                None
            }
        };
        let cost = int_in(obj, &p, "cost", 1, MAX_CONCURRENCY, errs).unwrap_or(1);
        if let Some(name) = name {
            if out.iter().any(|d| d.name == name) {
                errs.push(err(
                    &format!("{p}.name"),
                    format!("names the limit {name:?} twice"),
                ));
                continue;
            }
            out.push(Draw { name, key, cost });
        }
    }
    out
}

/// Microseconds since the epoch.
pub fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// The instant of `us` microseconds since the epoch.
pub fn instant(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl Rate {
    /// `per_seconds` in microseconds.
    fn period_us(&self) -> i128 {
        i128::from(self.per_seconds) * 1_000_000
    }

    /// Whether `cost` units may start at `now` given `tat` (none yet: `now`):
    /// `now ≥ tat + (cost − 1)·T − burst·T`, i.e. `count·(now − tat) ≥ (cost − 1 − burst)·P`.
    pub fn admits(&self, tat: Option<i64>, now: i64, cost: i64) -> bool {
        let tat = tat.unwrap_or(now);
        i128::from(self.count) * i128::from(now - tat)
            >= i128::from(cost - 1 - self.burst) * self.period_us()
    }

    /// The theoretical arrival time after a start of `cost` units at `now`:
    /// `max(tat, now) + cost·T`, rounded up to the microsecond.
    pub fn after(&self, tat: Option<i64>, now: i64, cost: i64) -> i64 {
        let base = tat.unwrap_or(now).max(now);
        let add = (i128::from(cost) * self.period_us() + i128::from(self.count) - 1)
            / i128::from(self.count);
        base.saturating_add(i64::try_from(add).unwrap_or(i64::MAX))
    }

    /// Start units allowed at `now` (`available_rate`): at most `burst + 1`.
    pub fn available(&self, tat: Option<i64>, now: i64) -> i64 {
        let Some(tat) = tat.filter(|t| *t > now) else {
            return self.burst + 1;
        };
        // Largest c with count·(now − tat) ≥ (c − 1 − burst)·P.
        let behind = i128::from(self.count) * i128::from(tat - now); // > 0
        let p = self.period_us();
        let over = (behind + p - 1) / p; // ceil
        let c = i128::from(self.burst) + 1 - over;
        i64::try_from(c.max(0)).unwrap_or(0)
    }

    /// When `cost` units may next start: `tat + (cost − 1 − burst)·T` (or now, if already).
    pub fn next_start(&self, tat: Option<i64>, now: i64, cost: i64) -> i64 {
        let Some(tat) = tat else { return now };
        let shift = i128::from(cost - 1 - self.burst) * self.period_us();
        let shift = if shift >= 0 {
            (shift + i128::from(self.count) - 1) / i128::from(self.count)
        } else {
            shift / i128::from(self.count)
        };
        let at = i128::from(tat) + shift;
        i64::try_from(at).unwrap_or(i64::MAX).max(now)
    }
}

/// One budget as a claim sees it: its limit's spec, what is in use and held, at one instant.
/// [`Budget::take`] admits starts one by one in claim order, exactly as they will be recorded.
#[derive(Debug, Clone)]
pub struct Budget {
    pub spec: LimitSpec,
    /// Concurrency units held by RUNNING instances.
    pub running: i64,
    /// The rate's theoretical arrival time, microseconds.
    pub tat: Option<i64>,
    /// Held until then (microseconds), if later than `now`.
    pub held_until: Option<i64>,
    /// The instant the budget was read at (microseconds).
    pub now: i64,
}

/// Why a start does not fit a budget now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Held { until: i64 },
    Concurrency,
    Rate { until: i64 },
}

impl Budget {
    /// Whether `cost` units fit now, without taking them.
    pub fn refusal(&self, cost: i64) -> Option<Refusal> {
        if let Some(h) = self.held_until.filter(|h| *h > self.now) {
            return Some(Refusal::Held { until: h });
        }
        if let Some(c) = self.spec.concurrency
            && self.running + cost > c
        {
            return Some(Refusal::Concurrency);
        }
        if let Some(r) = self.spec.rate
            && !r.admits(self.tat, self.now, cost)
        {
            return Some(Refusal::Rate {
                until: r.next_start(self.tat, self.now, cost),
            });
        }
        None
    }

    /// Record a start of `cost` units (after [`Budget::refusal`] said it fits).
    pub fn take(&mut self, cost: i64) {
        self.running += cost;
        if let Some(r) = self.spec.rate {
            self.tat = Some(r.after(self.tat, self.now, cost));
        }
    }

    /// Concurrency units free now (None: no concurrency).
    pub fn free_units(&self) -> Option<i64> {
        self.spec.concurrency.map(|c| (c - self.running).max(0))
    }

    /// Start units the rate allows now (None: no rate).
    pub fn available_rate(&self) -> Option<i64> {
        self.spec.rate.map(|r| r.available(self.tat, self.now))
    }
}

/// Admit a start drawing `cost` on each of `budgets` (found by index) only if all of them have
/// room; then take the units from each. Returns whether it was admitted.
pub fn admit_all(budgets: &mut [Budget], draws: &[(usize, i64)]) -> bool {
    let fits = draws.iter().all(|&(b, cost)| {
        budgets
            .get(b)
            .is_none_or(|budget| budget.refusal(cost).is_none())
    });
    if fits {
        for &(b, cost) in draws {
            if let Some(budget) = budgets.get_mut(b) {
                budget.take(cost);
            }
        }
    }
    fits
}

/// What keeps a start from its budgets now, as a waiting claim needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Nothing: it fits now.
    Nothing,
    /// Concurrency units in use: they come back when a run ends, at no instant known now.
    Units,
    /// A hold or a rate alone, until this instant (microseconds): the later of the ends.
    Until(i64),
}

impl Budget {
    /// What keeps a start of `cost` units from this budget now ([`Wait`]).
    pub fn wait(&self, cost: i64) -> Wait {
        if let Some(c) = self.spec.concurrency
            && self.running + cost > c
        {
            return Wait::Units;
        }
        let held = self.held_until.filter(|h| *h > self.now);
        let rate = self
            .spec
            .rate
            .filter(|r| !r.admits(self.tat, self.now, cost))
            .map(|r| r.next_start(self.tat, self.now, cost));
        match held.into_iter().chain(rate).max() {
            Some(at) => Wait::Until(at),
            None => Wait::Nothing,
        }
    }
}

/// What keeps a start drawing `cost` on each of `budgets` (found by index): units on any of
/// them, else the latest instant a hold or a rate ends on any, else nothing.
pub fn wait_all(budgets: &[Budget], draws: &[(usize, i64)]) -> Wait {
    let mut out = Wait::Nothing;
    for &(b, cost) in draws {
        match (budgets.get(b).map(|x| x.wait(cost)), out) {
            (Some(Wait::Units), _) => return Wait::Units,
            (Some(Wait::Until(at)), Wait::Until(was)) => out = Wait::Until(at.max(was)),
            (Some(Wait::Until(at)), _) => out = Wait::Until(at),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const S: i64 = 1_000_000;

    fn rate(count: i64, per_seconds: i64, burst: i64) -> Rate {
        Rate {
            count,
            per_seconds,
            burst,
        }
    }

    /// Start one unit whenever admitted, polling every `step` µs for `span` µs; returns starts.
    fn greedy(r: Rate, step: i64, span: i64) -> Vec<i64> {
        let mut tat = None;
        let mut starts = Vec::new();
        let mut t = 0;
        while t < span {
            while r.admits(tat, t, 1) {
                tat = Some(r.after(tat, t, 1));
                starts.push(t);
            }
            t += step;
        }
        starts
    }

    #[test]
    fn no_window_holds_more_than_count_plus_burst() {
        for (c, p, b) in [(5, 2, 1), (10, 1, 0), (7, 60, 3), (500, 60, 0), (3, 1, 3)] {
            let r = rate(c, p, b);
            let starts = greedy(r, 997, 20 * p * S);
            for (i, s) in starts.iter().enumerate() {
                let n = starts[i..].iter().take_while(|x| **x < s + p * S).count();
                assert!(n as i64 <= c + b, "{c}/{p}s burst {b}: {n} starts from {s}");
            }
            // Not stricter than it must be: over the run, about count per period.
            let periods = 20;
            assert!(
                starts.len() as i64 >= c * periods - c,
                "{c}/{p}s: {}",
                starts.len()
            );
        }
    }

    #[test]
    fn from_idle_burst_plus_one_start_at_once() {
        let r = rate(5, 2, 1);
        assert_eq!(r.available(None, 0), 2);
        let tat = r.after(None, 0, 1);
        assert_eq!(r.available(Some(tat), 0), 1);
        let tat = r.after(Some(tat), 0, 1);
        assert_eq!(r.available(Some(tat), 0), 0);
        assert!(!r.admits(Some(tat), 0, 1));
        // The next unit: one emission interval (0.4 s) after the first two.
        assert_eq!(r.next_start(Some(tat), 0, 1), 400_000);
        assert!(r.admits(Some(tat), 400_000, 1));
    }

    #[test]
    fn a_cost_needs_that_many_units_at_once() {
        let r = rate(10, 1, 2);
        assert!(r.admits(None, 0, 3));
        assert!(!r.admits(None, 0, 4));
        let tat = r.after(None, 0, 3);
        assert_eq!(tat, 300_000);
        assert_eq!(r.available(Some(tat), 0), 0);
    }

    #[test]
    fn budgets_admit_only_when_every_draw_fits() {
        let spec = |concurrency, rate| LimitSpec {
            concurrency,
            rate,
            per_key: false,
        };
        let b = |spec, running| Budget {
            spec,
            running,
            tat: None,
            held_until: None,
            now: 0,
        };
        let mut budgets = vec![
            b(spec(Some(3), None), 2),
            b(spec(None, Some(rate(1, 60, 0))), 0),
        ];
        assert!(!admit_all(&mut budgets, &[(0, 2), (1, 1)]));
        assert_eq!(budgets[0].running, 2);
        assert!(admit_all(&mut budgets, &[(0, 1), (1, 1)]));
        assert_eq!(budgets[0].running, 3);
        assert_eq!(budgets[1].refusal(1), Some(Refusal::Rate { until: 60 * S }));
        let mut held = b(spec(Some(3), None), 0);
        held.held_until = Some(5);
        assert_eq!(held.refusal(1), Some(Refusal::Held { until: 5 }));
    }

    #[test]
    fn limits_are_validated_field_by_field() {
        let fields = |body: Value| -> Vec<String> {
            parse_limit(&body)
                .err()
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.field)
                .collect()
        };
        assert_eq!(fields(json!({})), vec!["concurrency"]);
        assert_eq!(fields(json!({"concurrency": 0})), vec!["concurrency"]);
        assert_eq!(
            fields(json!({"rate": {"count": 5, "per_seconds": 60, "burst": 6}})),
            vec!["rate.burst"]
        );
        assert_eq!(
            fields(json!({"rate": {"count": -1, "per_seconds": 0}})).len(),
            2
        );
        assert_eq!(
            fields(json!({"concurrency": 8, "per_key": "yes"})),
            vec!["per_key"]
        );
        assert_eq!(
            fields(json!({"concurrency": 8, "colour": 1})),
            vec!["colour"]
        );
        let ok = parse_limit(&json!({"concurrency": 8, "rate": {"count": 500, "per_seconds": 60}}));
        assert_eq!(ok.ok().and_then(|s| s.rate), Some(rate(500, 60, 0)));
    }

    #[test]
    fn key_templates_know_three_variables() {
        assert!(check_key_template("tenant-{{params.tenant}}").is_ok());
        assert!(check_key_template("{{task_id}}/{{agent_id}}/{{params.a.b_c}}").is_ok());
        assert!(check_key_template("plain").is_ok());
        assert!(check_key_template("{{tenant}}").is_err());
        assert!(check_key_template("{{params.}}").is_err());
        assert!(check_key_template("{{task_id").is_err());
        assert!(check_key_template("x}}").is_err());
        assert!(check_key_template("a\nb-{{params.t}}").is_err());
        assert!(check_key_template("a\u{85}b").is_err());
    }

    #[test]
    fn draws_are_at_most_eight_distinct_limits() {
        let mut errs = Vec::new();
        let many: Vec<Value> = (0..9).map(|i| json!({"name": format!("l{i}")})).collect();
        parse_draws(Some(&Value::Array(many)), &mut errs);
        assert_eq!(errs.len(), 1);
        let mut errs = Vec::new();
        let d = parse_draws(
            Some(&json!([{"name": "a", "cost": 2}, {"name": "a"}, {"name": "b", "cost": 0}])),
            &mut errs,
        );
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["execution.limits[1].name", "execution.limits[2].cost"]
        );
        assert_eq!(d.len(), 2);
    }

    fn budget(spec: LimitSpec, running: i64, tat: Option<i64>, held: Option<i64>) -> Budget {
        Budget {
            spec,
            running,
            tat,
            held_until: held,
            now: 10 * S,
        }
    }

    #[test]
    fn a_wait_names_units_before_time_and_the_later_of_a_hold_and_the_rate() {
        let both = LimitSpec {
            concurrency: Some(2),
            rate: Some(rate(1, 1, 0)),
            per_key: false,
        };
        // Room and no rate debt: nothing keeps it.
        assert_eq!(budget(both.clone(), 1, None, None).wait(1), Wait::Nothing);
        // Full: units, whatever the hold says.
        assert_eq!(
            budget(both.clone(), 2, None, Some(20 * S)).wait(1),
            Wait::Units
        );
        // Held until 20 s, the rate's next start at 12 s: the hold ends later.
        assert_eq!(
            budget(both.clone(), 0, Some(12 * S), Some(20 * S)).wait(1),
            Wait::Until(20 * S)
        );
        // A hold already over does not count; the rate does.
        assert_eq!(
            budget(both.clone(), 0, Some(12 * S), Some(5 * S)).wait(1),
            Wait::Until(12 * S)
        );
        // Across budgets: units anywhere win, else the latest end.
        let list = [
            budget(both.clone(), 0, Some(12 * S), None),
            budget(both.clone(), 0, None, Some(15 * S)),
            budget(both.clone(), 2, None, None),
        ];
        assert_eq!(wait_all(&list, &[(0, 1), (1, 1)]), Wait::Until(15 * S));
        assert_eq!(wait_all(&list, &[(0, 1), (2, 1)]), Wait::Units);
        assert_eq!(wait_all(&list, &[]), Wait::Nothing);
    }
}
