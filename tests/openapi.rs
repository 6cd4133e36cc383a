//! `openapi.yaml` documents exactly the routes the router serves, and is served itself.

mod common;

use std::collections::BTreeSet;

use sqlx::PgPool;

/// (method, path) pairs under `paths:` — path keys indented two spaces, methods four.
fn spec_routes(yaml: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut in_paths = false;
    let mut path: Option<String> = None;
    for line in yaml.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() {
            in_paths = line.trim_end() == "paths:";
            path = None;
            continue;
        }
        if !in_paths {
            continue;
        }
        if let Some(rest) = line.strip_prefix("  ")
            && rest.starts_with('/')
        {
            path = Some(
                rest.trim_end()
                    .trim_end_matches(':')
                    .trim_matches('\'')
                    .trim_matches('"')
                    .to_owned(),
            );
            continue;
        }
        if let (Some(p), Some(rest)) = (&path, line.strip_prefix("    "))
            && !rest.starts_with(' ')
        {
            let key = rest.trim_end().trim_end_matches(':');
            if ["get", "put", "post", "delete", "patch"].contains(&key) {
                out.insert((key.to_owned(), p.clone()));
            }
        }
    }
    out
}

#[test]
fn the_spec_lists_exactly_the_served_routes() {
    let served: BTreeSet<(String, String)> = kairos::router::served_routes()
        .into_iter()
        .map(|(m, p)| (m.to_owned(), p.to_owned()))
        .collect();
    let spec = spec_routes(kairos::http::health::OPENAPI_YAML);
    let missing: Vec<_> = served.difference(&spec).collect();
    let extra: Vec<_> = spec.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "served but not in openapi.yaml: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "in openapi.yaml but not served: {extra:?}"
    );
}

#[sqlx::test]
async fn the_spec_is_served(pool: PgPool) {
    let app = common::TestApp::spawn(pool).await;
    let resp = app.get("/openapi.yaml").await;
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.expect("body");
    assert!(
        text.starts_with("openapi: 3."),
        "{}",
        &text[..text.len().min(80)]
    );
}
