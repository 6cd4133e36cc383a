//! Every statement file under `src/store/sql/` is prepared against the migrated schema: a
//! statement that no longer fits the tables (a renamed column, a dropped index predicate's
//! column, a type that changed) fails here, whether or not a test happens to run it.

use std::path::{Path, PathBuf};

use sqlx::{AssertSqlSafe, Executor, PgConnection, PgPool, SqlSafeStr};

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
        let prepared = (&mut *conn)
            .prepare(AssertSqlSafe(text.clone()).into_sql_str())
            .await;
        let failed = match prepared {
            Ok(_) => None,
            // Several statements sent whole as one simple query (the `BEGIN`s of the hot
            // path), which no prepared statement holds: run in a transaction rolled back.
            Err(e) if several_statements(&e) => run_rolled_back(&mut conn, text).await.err(),
            Err(e) => Some(e),
        };
        if let Some(e) = failed {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether PostgreSQL refused to prepare a text because it holds several statements.
fn several_statements(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db)
        if db.code().as_deref() == Some("42601")
            && db.message().contains("multiple commands"))
}

/// Run `text` as one simple query inside a transaction that is rolled back whatever happens.
async fn run_rolled_back(conn: &mut PgConnection, text: String) -> Result<(), sqlx::Error> {
    conn.execute("begin").await?;
    let ran = conn.execute(sqlx::raw_sql(AssertSqlSafe(text))).await;
    conn.execute("rollback").await?;
    ran.map(|_| ())
}
