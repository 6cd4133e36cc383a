//! How answers are shown: the `-o` choice, the API's JSON pretty-printed, and list pages as a
//! table with a hint at the next page.

use clap::ValueEnum;
use serde_json::Value;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

pub(super) fn print_json(v: &Value) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(_) => println!("{v}"),
    }
}

/// A list page: the API's JSON, or a table of its items and a hint at the next page.
pub(super) fn show_page(out: Output, page: &Value, print_rows: fn(&[Value])) {
    if out == Output::Json {
        print_json(page);
    } else {
        print_rows(items(page));
        hint_next_page(page);
    }
}

fn hint_next_page(page: &Value) {
    if let Some(c) = page.get("next_cursor").and_then(Value::as_str) {
        eprintln!("(more: --cursor {c}, or --all)");
    }
}

pub(super) fn items(page: &Value) -> &[Value] {
    items_of(page, "items")
}

pub(super) fn items_of<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}
