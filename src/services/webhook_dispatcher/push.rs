//! One push: the body (the instance as its lease holder receives it, and the callback URLs),
//! the signed request bounded by the task's wait, and what the receiver's answer decides.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::record::{count, stale};
use super::{PushOutcome, WebhookDispatcher};
use crate::domain::task::Dispatch;
use crate::otel::{Attr, SpanKind, names};
use crate::outbound;
use crate::services::error_chain;
use crate::store::{claim, instances};

/// The body of a push: the instance as its lease holder receives it, and the callback URLs.
#[derive(serde::Serialize)]
struct PushBody<'a> {
    instance: claim::LeaseView<'a>,
    callbacks: Callbacks,
}

#[derive(serde::Serialize)]
struct Callbacks {
    heartbeat: String,
    complete: String,
    fail: String,
}

/// What a push is to do, read from the claimed task's `dispatch`.
struct Target {
    url: String,
    secret: String,
    /// The wait for the answer and the setting that bounds it.
    wait: Duration,
    bound_by: &'static str,
}

impl Target {
    fn of(c: &claim::Claimed) -> Option<Target> {
        let d = Dispatch::deserialize(c.dispatch.as_ref()?).ok()?;
        let Dispatch::Webhook {
            url,
            secret,
            timeout_seconds,
        } = d
        else {
            return None;
        };
        let execution = c.timeout_seconds.max(1);
        let (secs, bound_by) = if timeout_seconds.max(1) <= execution {
            (timeout_seconds.max(1), "dispatch.timeout_seconds")
        } else {
            (execution, "execution.timeout_seconds")
        };
        Some(Target {
            url,
            secret,
            wait: Duration::from_secs(secs.unsigned_abs()),
            bound_by,
        })
    }
}

impl WebhookDispatcher {
    /// Push one claimed instance and record what its receiver answered. When `shutdown` is
    /// cancelled before the answer arrives, the instance is given back
    /// (`Self::give_back_at_shutdown`).
    pub async fn push(&self, c: claim::Claimed, shutdown: &CancellationToken) -> PushOutcome {
        if !self.spans.is_on() {
            return self.deliver(c, shutdown).await;
        }
        let start = chrono::Utc::now();
        self.spans
            .claim(&c.instance, c.lease_token, &self.config.node_id, start);
        let (instance, token) = (c.instance.clone(), c.lease_token);
        let outcome = Box::pin(self.deliver(c, shutdown)).await;
        let (label, error) = match outcome {
            PushOutcome::Succeeded => ("succeeded", None),
            PushOutcome::Accepted => ("accepted", None),
            PushOutcome::Failed => ("failed", Some("the push failed".to_owned())),
            PushOutcome::Stale => ("stale", None),
        };
        self.spans.attempt_with(
            names::PUSH,
            SpanKind::Client,
            &instance,
            token,
            None,
            (start, chrono::Utc::now()),
            error,
            vec![("kairos.push_outcome", Attr::Str(label.to_owned()))],
        );
        outcome
    }

    /// [`Self::push`] without spans.
    async fn deliver(&self, c: claim::Claimed, shutdown: &CancellationToken) -> PushOutcome {
        let i = &c.instance;
        let base = self.config.public_url.trim_end_matches('/');
        // Serialised straight from the claim's fields: no JSON tree per push.
        let body = PushBody {
            instance: c.view(),
            callbacks: Callbacks {
                heartbeat: format!("{base}/v1/instances/{}/heartbeat", i.id),
                complete: format!("{base}/v1/instances/{}/complete", i.id),
                fail: format!("{base}/v1/instances/{}/fail", i.id),
            },
        };
        let answer = match (Target::of(&c), serde_json::to_vec(&body)) {
            (None, _) => Err("the task has no webhook URL".to_owned()),
            (Some(_), Err(e)) => Err(format!("cannot encode the push: {}", error_chain(&e))),
            (Some(t), Ok(bytes)) => {
                let mut headers = Vec::with_capacity(3);
                headers.push(("Idempotency-Key", i.idempotency_key.clone()));
                headers.push(("traceparent", body.instance.traceparent.clone()));
                if let Some(state) = body.instance.tracestate {
                    headers.push(("tracestate", state.to_owned()));
                }
                // Boxed, as are the rare paths below: the push's own future stays small, and
                // spawning or polling it moves little memory (it showed in profiles at 5,000
                // pushes a second).
                let send =
                    Box::pin(
                        self.client
                            .post(&t.url, &bytes, Some(&t.secret), &headers, t.wait),
                    );
                tokio::select! {
                    // An answer that has arrived wins over a shutdown at the same moment: a
                    // finished push is recorded as what it was, never as failed.
                    biased;
                    a = send => a.map_err(|reason| {
                        if reason == outbound::NO_ANSWER {
                            format!("no answer within {}s ({})", t.wait.as_secs(), t.bound_by)
                        } else {
                            reason
                        }
                    }),
                    _ = shutdown.cancelled() => {
                        return Box::pin(self.give_back_at_shutdown(&c)).await;
                    }
                }
            }
        };
        let actor = self.actor();
        let outcome: Result<(), String> = match answer {
            Ok(a) if a.status == 202 => {
                // The agent calls back later: hold the instance for its execution timeout.
                let hold = instances::LeaseExtension {
                    id: i.id,
                    lease_token: c.lease_token,
                    lease_seconds: c.timeout_seconds.max(1),
                };
                return match self.group.heartbeat(hold).await {
                    Ok(_) => {
                        tracing::info!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, lease_s = c.timeout_seconds, "webhook accepted; awaiting the agent's callback");
                        count(PushOutcome::Accepted)
                    }
                    Err(e) => stale(i, &e),
                };
            }
            Ok(a) if a.truncated && (200..300).contains(&a.status) => Err(format!(
                "HTTP {}: response body larger than {} bytes",
                a.status,
                outbound::MAX_RESPONSE_BYTES
            )),
            Ok(a) if (200..300).contains(&a.status) => {
                let parsed: Result<Value, serde_json::Error> = serde_json::from_slice(&a.body);
                match parsed {
                    Ok(v) if v.get("status").and_then(Value::as_str) == Some("success") => {
                        let result = v.get("result").filter(|r| !r.is_null());
                        let too_big = result
                            .and_then(|r| serde_json::to_vec(r).ok())
                            .is_some_and(|b| b.len() > crate::domain::task::MAX_RESULT_BYTES);
                        if too_big {
                            Err("receiver returned a result over 64 KiB".to_owned())
                        } else if result.is_some_and(holds_nul) {
                            Err(format!(
                                "HTTP {}: receiver returned a result holding U+0000, which cannot be stored",
                                a.status
                            ))
                        } else {
                            let done = instances::Completion {
                                id: i.id,
                                lease_token: c.lease_token,
                                result: result.cloned(),
                                actor: Some(actor.clone()),
                            };
                            match self.record_success(done).await {
                                Ok(_) => {
                                    tracing::info!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, "webhook push succeeded");
                                    return count(PushOutcome::Succeeded);
                                }
                                Err(e) => return stale(i, &e),
                            }
                        }
                    }
                    // JSON nested past the parser's depth (128): say so, not "no status".
                    Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
                        Err(format!(
                            "HTTP {}: the body is JSON nested too deeply to read",
                            a.status
                        ))
                    }
                    _ => Err(format!(
                        "HTTP {} without {{\"status\": \"success\"}} in the body",
                        a.status
                    )),
                }
            }
            Ok(a) if a.body.is_empty() => Err(format!("HTTP {}", a.status)),
            Ok(a) => {
                let text = String::from_utf8_lossy(&a.body);
                let snippet: String = text.chars().filter(|c| *c != '\0').take(200).collect();
                Err(format!("HTTP {}: {snippet}", a.status))
            }
            Err(reason) => Err(reason),
        };
        match outcome {
            Ok(()) => PushOutcome::Stale,
            Err(reason) => Box::pin(self.record_failure(&c, reason, false)).await,
        }
    }
}

/// Whether a JSON value holds U+0000 in a string or a key (jsonb cannot store it).
fn holds_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(holds_nul),
        Value::Object(m) => m.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nul_is_found_anywhere_in_a_result() {
        assert!(!holds_nul(&json!({"a": ["b", 1, null, {"c": "d"}]})));
        assert!(holds_nul(&json!({"a": ["b", {"c": "d\u{0}"}]})));
        assert!(holds_nul(&json!({"a\u{0}": 1})));
        assert!(holds_nul(&json!("\u{0}")));
    }
}
