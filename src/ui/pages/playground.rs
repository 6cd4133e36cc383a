//! The cron playground: an expression's next fire times in a zone, with the DST rule that
//! shaped each.

use axum::extract::State;
use chrono_tz::Tz;
use maud::html;

use super::tasks::{FIRES, annotate, fire_table};
use super::{Params, Query, param, param_time};
use crate::domain::schedule::{CronSchedule, Schedule};
use crate::state::AppState;
use crate::store;
use crate::ui::{Session, UiResult, page};

pub async fn playground(
    session: Session,
    State(state): State<AppState>,
    Query(q): Params,
) -> UiResult {
    let expr = param(&q, "expr").unwrap_or("30 8 * * *");
    let zone = param(&q, "tz").unwrap_or("Asia/Shanghai");
    let from = match param_time(&q, "from")? {
        Some(f) => f,
        None => store::now(&state.pool).await?,
    };
    let outcome = CronSchedule::parse(expr, zone).map_err(|e| (e.field, e.message.clone()));
    let fires = match &outcome {
        Ok(c) => match c.first_fire_after(from) {
            Ok(_) => Ok(annotate(
                c,
                &Schedule::Cron(Box::new(c.clone())).upcoming(from, FIRES),
            )),
            Err(e) => Err((e.field, e.message.clone())),
        },
        Err(e) => Err(e.clone()),
    };
    let tz: Tz = zone.parse().unwrap_or(Tz::UTC);
    let bad_field = fires.as_ref().err().map(|(f, _)| *f);
    let body = html! {
        h1 { "Cron playground" }
        p.muted { "Five fields (min hour day-of-month month day-of-week) or six with seconds first; macros like @daily. Times are evaluated in the zone, with DST as cronie does it." }
        form.filters #playground method="get" action="/ui/playground" {
            label { "Expression " input #expr type="text" name="expr" value=(expr) class=[(bad_field == Some("trigger.expr")).then_some("invalid")]; }
            label { "Time zone " input #tz type="text" name="tz" value=(zone) list="zones" class=[(bad_field == Some("trigger.timezone")).then_some("invalid")]; }
            label { "From " input #from type="text" name="from" value=(from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)); }
            button #show type="submit" { "Show fire times" }
        }
        datalist #zones { @for z in ["UTC", "Asia/Shanghai", "America/New_York", "Europe/London", "Europe/Berlin", "Asia/Tokyo", "Australia/Sydney", "Australia/Lord_Howe", "America/Los_Angeles", "America/Sao_Paulo"] { option value=(z) {} } }
        @match &fires {
            Ok(list) => { (fire_table(tz, list, None)) },
            Err((field, message)) => {
                div.panel.error-panel #playground-error {
                    p { strong { (field_label(field)) } ": " (message) }
                }
            },
        }
    };
    let mut resp = page(&session, "/ui/playground", "Cron playground", body);
    if fires.is_err() {
        // The form and the reason, as a refusal: 422 as the API's preview answers.
        *resp.status_mut() = axum::http::StatusCode::UNPROCESSABLE_ENTITY;
    }
    Ok(resp)
}

fn field_label(field: &str) -> &str {
    match field {
        "trigger.expr" => "expression",
        "trigger.timezone" => "time zone",
        other => other,
    }
}
