//! The hardware ceiling: `pgbench -N` on the same server, in a database of its own.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::db::BenchDb;

/// `pgbench -N` TPS with 8 clients for 10 s, after `pgbench -i -s 8`.
pub async fn pgbench(base: &str) -> Result<f64> {
    let db = BenchDb::create(base, "pgbench").await?;
    let bin = which_pgbench()
        .context("pgbench not found (Debian: postgresql-contrib or postgresql-15)")?;
    let init = Command::new(&bin)
        .args(["-i", "-q", "-s", "8", &db.url])
        .output()?;
    if !init.status.success() {
        bail!(
            "pgbench -i failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
    }
    let out = Command::new(&bin)
        .args(["-N", "-c", "8", "-j", "2", "-T", "10", &db.url])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    db.drop_db().await?;
    text.lines()
        .find(|l| l.starts_with("tps"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .context("no tps line in pgbench output")
}

fn which_pgbench() -> Option<String> {
    if Command::new("pgbench").arg("--version").output().is_ok() {
        return Some("pgbench".to_owned());
    }
    let dirs = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    let mut found: Vec<String> = dirs
        .filter_map(|d| d.ok())
        .map(|d| format!("{}/bin/pgbench", d.path().display()))
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    found.sort();
    found.pop()
}
