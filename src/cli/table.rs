//! Aligned plain-text tables and the one way a JSON value is shown in a cell.

use serde_json::Value;

/// A JSON value as a cell: strings bare, `null` as `-`, anything else as compact JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Prints `rows` under `headers` (none when empty), columns padded to their widest cell; the
/// last column is not padded so lines carry no trailing spaces.
pub fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    print!("{}", render(headers, rows));
}

fn render(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut all: Vec<Vec<String>> = Vec::with_capacity(rows.len() + 1);
    if !headers.is_empty() {
        all.push(headers.iter().map(|h| (*h).to_owned()).collect());
    }
    all.extend(rows.into_iter().map(|r| {
        r.into_iter()
            .map(|c| c.replace(['\n', '\r', '\t'], " "))
            .collect()
    }));
    let columns = all.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in &all {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &all {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 2;
                out.push_str(&" ".repeat(pad));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_to_the_widest_cell_without_trailing_spaces() {
        let s = render(
            &["ID", "STATUS"],
            vec![
                vec!["a".into(), "PENDING".into()],
                vec!["long_id".into(), "DEAD".into()],
            ],
        );
        assert_eq!(s, "ID       STATUS\na        PENDING\nlong_id  DEAD\n");
    }

    #[test]
    fn null_is_a_dash_and_strings_are_bare() {
        assert_eq!(text(&Value::Null), "-");
        assert_eq!(text(&serde_json::json!("x")), "x");
        assert_eq!(text(&serde_json::json!(3)), "3");
    }
}
