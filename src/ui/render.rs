//! Small pieces every console page uses: timestamps, status badges, durations, charts.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use maud::{Markup, html};

use crate::store::console::{Minute, WindowCell};

/// A UTC instant, shown in UTC; the page script can show it in the browser's zone instead.
pub fn time(at: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) {
            (at.format("%Y-%m-%d %H:%M:%S UTC"))
        }
    }
}

pub fn time_opt(at: Option<DateTime<Utc>>) -> Markup {
    match at {
        Some(t) => time(t),
        None => html! { span.muted { "—" } },
    }
}

/// An instant in a task's own zone, e.g. `2026-03-08 03:00 EDT`.
pub fn zoned(at: DateTime<Utc>, tz: Tz) -> String {
    at.with_timezone(&tz)
        .format("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

/// A status as a coloured badge.
pub fn status(s: &str) -> Markup {
    html! { span class={ "badge s-" (s.to_ascii_lowercase()) } { (s) } }
}

/// Milliseconds as a short human duration.
pub fn millis(ms: f64) -> String {
    let abs = ms.abs();
    if abs < 1_000.0 {
        format!("{ms:.0} ms")
    } else if abs < 120_000.0 {
        format!("{:.1} s", ms / 1_000.0)
    } else if abs < 7_200_000.0 {
        format!("{:.1} min", ms / 60_000.0)
    } else {
        format!("{:.1} h", ms / 3_600_000.0)
    }
}

/// The hover text of a window cell: status, attempt, lag and skip reason.
pub fn cell_title(c: &WindowCell) -> String {
    let mut parts = vec![
        c.window_key.clone(),
        c.status.clone(),
        format!("attempt {}/{}", c.attempt, c.max_attempts),
    ];
    if let Some(lag) = c.start_lag_ms {
        parts.push(format!("start lag {}", millis(lag)));
    }
    if let Some(r) = &c.skip_reason {
        parts.push(format!("skipped: {r}"));
    }
    if let Some(k) = &c.error_kind {
        parts.push(format!("error: {k}"));
    }
    parts.join(" · ")
}

/// Windows as a strip of coloured cells, oldest on the left; each links to its instance.
pub fn strip(cells: &[WindowCell]) -> Markup {
    html! {
        span.strip {
            @for c in cells.iter().rev() {
                a class={ "cell s-" (c.status.to_ascii_lowercase()) } href={ "/ui/instances/" (c.id) }
                    title=(cell_title(c)) aria-label=(cell_title(c)) {}
            }
        }
    }
}

/// A line chart of fire lag p50 and p99 per minute, as inline SVG (no script needed).
pub fn lag_chart(minutes: &[Minute]) -> Markup {
    let series = |f: fn(&Minute) -> Option<f64>| -> Vec<(DateTime<Utc>, f64)> {
        minutes
            .iter()
            .filter_map(|m| Some((m.minute, f(m)?)))
            .collect()
    };
    let p50 = series(|m| m.fire_lag_p50_ms);
    let p99 = series(|m| m.fire_lag_p99_ms);
    chart(
        "Fire lag per minute (created − scheduled, schedule windows)",
        &[("p50", "l-p50", &p50), ("p99", "l-p99", &p99)],
        millis,
    )
}

/// Windows per minute: scheduled, succeeded, skipped.
pub fn windows_chart(minutes: &[Minute]) -> Markup {
    let series = |f: fn(&Minute) -> i32| -> Vec<(DateTime<Utc>, f64)> {
        minutes
            .iter()
            .map(|m| (m.minute, f64::from(f(m))))
            .collect()
    };
    let windows = series(|m| m.windows);
    let succeeded = series(|m| m.succeeded);
    let skipped = series(|m| m.skipped);
    chart(
        "Windows per minute",
        &[
            ("scheduled", "l-windows", &windows),
            ("succeeded", "l-success", &succeeded),
            ("skipped", "l-skipped", &skipped),
        ],
        |v| format!("{v:.0}"),
    )
}

type Series<'a> = (&'a str, &'a str, &'a [(DateTime<Utc>, f64)]);

fn chart(title: &str, lines: &[Series<'_>], label: fn(f64) -> String) -> Markup {
    const W: f64 = 560.0;
    const H: f64 = 160.0;
    const LEFT: f64 = 64.0;
    const BOTTOM: f64 = 20.0;
    let points: Vec<&(DateTime<Utc>, f64)> = lines.iter().flat_map(|l| l.2.iter()).collect();
    let empty = points.is_empty();
    let t0 = points.iter().map(|p| p.0).min();
    let t1 = points.iter().map(|p| p.0).max();
    let max = points.iter().map(|p| p.1).fold(0.0_f64, f64::max).max(1.0);
    let x = |t: DateTime<Utc>| -> f64 {
        match (t0, t1) {
            (Some(a), Some(b)) if b > a => {
                LEFT + (t - a).num_seconds() as f64 / (b - a).num_seconds() as f64
                    * (W - LEFT - 8.0)
            }
            _ => LEFT,
        }
    };
    let y = |v: f64| -> f64 { 8.0 + (H - BOTTOM - 8.0) * (1.0 - v / max) };
    html! {
        figure.chart {
            figcaption { (title) }
            @if empty {
                p.muted { "No windows in the last hour." }
            } @else {
                svg viewBox={ "0 0 " (W) " " (H) } width=(W) height=(H) role="img" aria-label=(title) {
                    line.axis x1=(LEFT) y1=(y(0.0)) x2=(W - 8.0) y2=(y(0.0)) {}
                    line.grid x1=(LEFT) y1=(y(max)) x2=(W - 8.0) y2=(y(max)) {}
                    text.tick x=(LEFT - 4.0) y=(y(max) + 4.0) text-anchor="end" { (label(max)) }
                    text.tick x=(LEFT - 4.0) y=(y(0.0) + 4.0) text-anchor="end" { (label(0.0)) }
                    @if let (Some(a), Some(b)) = (t0, t1) {
                        text.tick x=(LEFT) y=(H - 4.0) { (a.format("%H:%M UTC")) }
                        @if b > a {
                            text.tick x=(W - 8.0) y=(H - 4.0) text-anchor="end" { (b.format("%H:%M UTC")) }
                        }
                    }
                    @for (name, class, pts) in lines {
                        @if let [(t, v)] = pts {
                            // A polyline of one point draws nothing.
                            circle class=(class) cx=(format!("{:.1}", x(*t))) cy=(format!("{:.1}", y(*v))) r="3" {
                                title { (name) }
                            }
                        } @else if !pts.is_empty() {
                            polyline class=(class) points=(polyline(pts, &x, &y)) {
                                title { (name) }
                            }
                        }
                    }
                }
                ul.legend {
                    @for (name, class, pts) in lines {
                        li { span class={ "swatch " (class) } {} (name)
                            @if let Some(last) = pts.last() { " (last " (label(last.1)) ")" } }
                    }
                }
            }
        }
    }
}

fn polyline(
    pts: &[(DateTime<Utc>, f64)],
    x: &dyn Fn(DateTime<Utc>) -> f64,
    y: &dyn Fn(f64) -> f64,
) -> String {
    pts.iter()
        .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Pretty-printed JSON in a `<pre>`.
pub fn json_block(v: &serde_json::Value) -> Markup {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    html! { pre.json { (text) } }
}

/// A hidden CSRF field.
pub fn csrf(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}
