//! The overview: instance counts by status, the last hour's lag and windows, this node's loops.

use axum::extract::State;
use maud::html;

use crate::domain::instance::InstanceStatus;
use crate::state::AppState;
use crate::store::{self, console};
use crate::ui::render::{self, time};
use crate::ui::{Session, UiResult, page};

pub async fn overview(session: Session, State(state): State<AppState>) -> UiResult {
    if let Some(agents) = session.principal.readable_agents() {
        // The sampled numbers are cluster-wide: a token limited to some agents does not see them.
        let body = html! {
            h1 { "Overview" }
            p #scoped {
                "This token sees the agents " (agents.join(", ")) " only; cluster-wide counts and lag are for admin and viewer tokens. "
                a href="/ui/tasks" { "Your tasks" } ", " a href="/ui/instances" { "their instances" } " and " a href="/ui/dead" { "their DEAD queue" } "."
            }
        };
        return Ok(page(&session, "/ui/", "Overview", body));
    }
    let now = store::now(&state.pool).await?;
    let gauges = console::gauges(&state.pool).await?;
    let minutes = console::minutes_since(&state.pool, now - chrono::Duration::hours(1)).await?;
    let gauge = |name: &str| gauges.iter().find(|g| g.name == name);
    let sampled_at = gauges.iter().map(|g| g.sampled_at).max();
    let loops = state.heartbeats.snapshot();
    let last_hour =
        |f: fn(&console::Minute) -> i32| minutes.iter().map(|m| i64::from(f(m))).sum::<i64>();
    let body = html! {
        h1 { "Overview" }
        p.muted {
            "Node " code { (state.node_id) } ". Counts sampled "
            @match sampled_at { Some(t) => { (time(t)) }, None => { "not yet (the stats loop samples every few seconds)" } }
            "; the charts cover windows scheduled in the last hour."
        }
        section.cards {
            @for s in InstanceStatus::ALL {
                @let name = format!("instances.{}", s.as_str());
                div class={ "card s-" (s.as_str().to_ascii_lowercase()) } {
                    div.label { (s.as_str()) }
                    div.value #{ "count-" (s.as_str()) } {
                        @match gauge(&name) {
                            Some(g) => { @if !g.exact { "≈" } (g.value) },
                            None => { "—" },
                        }
                    }
                    @if s == InstanceStatus::Dead {
                        a href="/ui/dead" { "open the DEAD queue" }
                    } @else {
                        a href={ "/ui/instances?status=" (s.as_str()) } { "list" }
                    }
                }
            }
        }
        section.cards {
            div.card { div.label { "Tasks" } div.value { (gauge("tasks").map_or(0, |g| g.value)) } a href="/ui/tasks" { "list" } }
            div.card { div.label { "Paused" } div.value { (gauge("tasks.paused").map_or(0, |g| g.value)) } a href="/ui/tasks?paused=true" { "list" } }
            div.card class=[(gauge("tasks.circuit_open").is_some_and(|g| g.value > 0)).then_some("s-dead")] {
                div.label { "Open circuit breakers" }
                div.value #count-circuits { (gauge("tasks.circuit_open").map_or(0, |g| g.value)) }
                a href="/ui/tasks?paused=true" { "paused tasks" }
            }
            div.card { div.label { "Last hour: scheduled" } div.value { (last_hour(|m| m.windows)) } }
            div.card { div.label { "succeeded" } div.value { (last_hour(|m| m.succeeded)) } }
            div.card { div.label { "skipped" } div.value { (last_hour(|m| m.skipped)) } }
        }
        section.charts {
            (render::lag_chart(&minutes))
            (render::windows_chart(&minutes))
        }
        section {
            h2 { "Loops on this node" }
            table.grid {
                thead { tr { th { "loop" } th { "last tick" } th { "state" } } }
                tbody {
                    @for (name, age, ok) in &loops {
                        tr {
                            td { code { (name) } }
                            td { (format!("{age:.1} s ago")) }
                            td { @if *ok { span.badge.s-success { "ready" } } @else { span.badge.s-dead { "stale" } } }
                        }
                    }
                }
            }
        }
    };
    Ok(page(&session, "/ui/", "Overview", body))
}
