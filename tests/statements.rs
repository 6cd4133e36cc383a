//! Every statement file under `src/store/sql/` is prepared against the migrated schema: a
//! statement that no longer fits the tables (a renamed column, a dropped index predicate's
//! column, a type that changed) fails here, whether or not a test happens to run it.

use std::path::{Path, PathBuf};

use sqlx::{AssertSqlSafe, Executor, PgPool, SqlSafeStr};

fn statement_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            statement_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "sql") {
            out.push(path);
        }
    }
}

#[sqlx::test]
async fn every_statement_file_prepares_against_the_schema(pool: PgPool) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/store/sql");
    let mut files = Vec::new();
    statement_files(&dir, &mut files);
    files.sort();
    assert!(
        files.len() > 1,
        "no statement files under {}",
        dir.display()
    );
    let mut conn = pool.acquire().await.expect("connection");
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("statement file");
        if let Err(e) = (&mut *conn)
            .prepare(AssertSqlSafe(text).into_sql_str())
            .await
        {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
