//! List cursors: opaque hex of a small text payload, so clients cannot mistake them for ids. A
//! task list's cursor holds the last task id; an instance list's (newest first) the last
//! instance's scheduled instant and id.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::instance::Instance;
use crate::problem::ApiError;

/// The cursor carrying `raw`.
pub fn encode_cursor(raw: &str) -> String {
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Cut `items`, read with `limit + 1` rows, to one page of `limit`; the next page's cursor (the
/// last item's, by `cursor_of`) when a row was left over, `None` on the last page.
pub fn cut_page<T>(
    items: &mut Vec<T>,
    limit: i64,
    cursor_of: impl Fn(&T) -> String,
) -> Option<String> {
    let limit = usize::try_from(limit).unwrap_or(0);
    if items.len() <= limit {
        return None;
    }
    items.truncate(limit);
    items.last().map(cursor_of)
}

/// The text a cursor carries; one this server did not issue is refused (422 on `cursor`).
pub fn decode_cursor(cursor: &str) -> Result<String, ApiError> {
    let bad = || ApiError::invalid("cursor", "is not a cursor this server issued");
    if !cursor.len().is_multiple_of(2) || cursor.len() > 1024 {
        return Err(bad());
    }
    let bytes = (0..cursor.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(cursor.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    // Cursors carry ids and instants, never control characters; U+0000 could not reach SQL.
    if text.chars().any(char::is_control) {
        return Err(bad());
    }
    Ok(text)
}

/// The instance list cursor that continues after `i` (newest first).
pub fn instance_cursor(i: &Instance) -> String {
    encode_cursor(&format!("{}|{}", i.scheduled_at.timestamp_micros(), i.id))
}

/// The (scheduled instant, id) an instance list cursor continues after.
pub fn parse_instance_cursor(raw: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let bad = || ApiError::invalid("cursor", "is not a cursor this server issued");
    let text = decode_cursor(raw)?;
    let (micros, id) = text.split_once('|').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    // Windows are RFC 3339 instants (years 0–9999); anything else was not issued here, and
    // PostgreSQL could not even compare it.
    let at = DateTime::<Utc>::from_timestamp_micros(micros)
        .filter(|t| (0..=9999).contains(&chrono::Datelike::year(t)))
        .ok_or_else(bad)?;
    let id = Uuid::parse_str(id).map_err(|_| bad())?;
    Ok((at, id))
}
