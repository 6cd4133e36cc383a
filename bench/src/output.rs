//! The report: one Markdown table row per measurement.

/// One table row: scenario, result, detail, notes.
pub type Row = [String; 4];

/// A row from its four cells.
pub fn row(a: &str, b: impl Into<String>, c: impl Into<String>, d: &str) -> Row {
    [a.to_owned(), b.into(), c.into(), d.to_owned()]
}

/// An exactly-once check as the table shows it: a failure in capitals, to stand out.
pub fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

/// The table, after a blank line that ends the progress lines before it.
pub fn print_table(rows: &[Row]) {
    println!();
    println!("| scenario | result | detail | notes |");
    println!("|---|---|---|---|");
    for r in rows {
        println!("| {} | {} | {} | {} |", r[0], r[1], r[2], r[3]);
    }
}
