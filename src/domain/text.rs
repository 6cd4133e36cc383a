//! Text PostgreSQL can store. It refuses U+0000 in `text` columns and `\u0000` in `jsonb`, so
//! such input is refused where it enters, with the place it was found; receivers' answers, which
//! cannot be refused, have it removed before they are kept.
//!
//! Error texts kept for an attempt are bounded ([`bound_error`]).

use serde_json::Value;

/// Why a value holding U+0000 is refused.
pub const NUL_REFUSED: &str = "must not contain the character U+0000 (NUL): it cannot be stored";

/// True when `s` holds U+0000.
pub fn has_nul(s: &str) -> bool {
    s.contains('\0')
}

/// True when `s` is at most `max` characters long, counted as JSON Schema's `maxLength` and
/// PostgreSQL's `length()` count them (Unicode code points, not bytes).
pub fn at_most_chars(s: &str, max: usize) -> bool {
    s.len() <= max || s.chars().count() <= max
}

/// True when `s` is at most `max` characters and holds no control character (Unicode `Cc`:
/// U+0000–U+001F, U+007F–U+009F), the text openapi.yaml's
/// `pattern: '^[^\u0000-\u001F\u007F-\u009F]*$'` admits: keys, names chosen by clients, reasons.
pub fn plain_text(s: &str, max: usize) -> bool {
    at_most_chars(s, max) && !s.chars().any(char::is_control)
}

/// `s` without its U+0000 characters.
pub fn without_nul(s: &str) -> String {
    s.chars().filter(|c| *c != '\0').collect()
}

/// Where the first U+0000 sits in a JSON value: the field path (`context.params.a`,
/// `completions[3].result`, `""` for the value itself) of a string holding it, or of an object
/// with a key holding it. `prefix` is the path of `v`.
pub fn nul_in_json(v: &Value, prefix: &str) -> Option<String> {
    match v {
        Value::String(s) if has_nul(s) => Some(prefix.to_owned()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_in_json(item, &format!("{prefix}[{i}]"))),
        Value::Object(map) => {
            if map.keys().any(|k| has_nul(k)) {
                return Some(prefix.to_owned());
            }
            map.iter().find_map(|(k, item)| {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                nul_in_json(item, &path)
            })
        }
        _ => None,
    }
}

/// Longest `error` text kept for an attempt (longer text is cut, marked with an ellipsis).
pub const MAX_ERROR_LEN: usize = 4096;

/// Cut an error message to [`MAX_ERROR_LEN`] bytes on a character boundary.
pub fn bound_error(error: &str) -> String {
    if error.len() <= MAX_ERROR_LEN {
        return error.to_owned();
    }
    let mut end = MAX_ERROR_LEN - 3;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &error[..end])
}

/// `"a"` or `"an"` for `word`, by its first letter (enough for kairos's own words: roles,
/// trigger types).
pub fn article(word: &str) -> &'static str {
    match word.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_text_counts_characters_and_refuses_control_characters() {
        assert!(plain_text(&"租".repeat(256), 256));
        assert!(!plain_text(&"租".repeat(257), 256));
        assert!(plain_text("", 256));
        for bad in ["a\u{0}", "a\u{1f}", "a\u{7f}", "a\u{85}", "a\u{9f}", "a\nb"] {
            assert!(!plain_text(bad, 256), "{bad:?}");
        }
        assert!(plain_text("a\u{a0}b", 256));
    }

    #[test]
    fn clean_values_have_no_nul() {
        let v = json!({"a": [1, "x", {"b": null, "c": true}], "d": "\u{1}"});
        assert_eq!(nul_in_json(&v, ""), None);
    }

    #[test]
    fn the_path_names_the_string_holding_nul() {
        let v = json!({"context": {"params": {"region": "cn\u{0}north"}}});
        assert_eq!(
            nul_in_json(&v, "").as_deref(),
            Some("context.params.region")
        );
        let v = json!({"completions": [{"id": "x"}, {"id": "y", "result": ["ok", "\u{0}"]}]});
        assert_eq!(
            nul_in_json(&v, "").as_deref(),
            Some("completions[1].result[1]")
        );
        assert_eq!(nul_in_json(&json!("\u{0}"), "").as_deref(), Some(""));
    }

    #[test]
    fn a_key_holding_nul_names_its_object() {
        let v = json!({"context": {"a\u{0}": 1}});
        assert_eq!(nul_in_json(&v, "").as_deref(), Some("context"));
    }

    #[test]
    fn nul_is_removed_from_kept_text() {
        assert_eq!(without_nul("a\u{0}b\u{0}"), "ab");
        assert!(has_nul("\u{0}") && !has_nul("0"));
    }

    #[test]
    fn short_errors_are_kept_whole() {
        assert_eq!(bound_error("boom"), "boom");
        let exact = "y".repeat(MAX_ERROR_LEN);
        assert_eq!(bound_error(&exact), exact);
    }

    #[test]
    fn long_errors_are_cut_on_a_character_boundary_with_an_ellipsis() {
        let long = "z".repeat(MAX_ERROR_LEN + 1);
        let cut = bound_error(&long);
        assert_eq!(cut.len(), MAX_ERROR_LEN);
        assert!(cut.ends_with("..."));
        // A two-byte character straddling the cut point is dropped whole.
        let wide = format!("{}é{}", "a".repeat(MAX_ERROR_LEN - 4), "b".repeat(10));
        let cut = bound_error(&wide);
        assert_eq!(cut, format!("{}...", "a".repeat(MAX_ERROR_LEN - 4)));
        assert!(cut.len() < MAX_ERROR_LEN);
    }

    #[test]
    fn articles_follow_the_first_letter() {
        assert_eq!(super::article("agent"), "an");
        assert_eq!(super::article("after"), "an");
        assert_eq!(super::article("viewer"), "a");
        assert_eq!(super::article("manual"), "a");
    }
}
