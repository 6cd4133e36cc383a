//! The `kairos serve` children: the `kairos` binary beside this one, each on a free port,
//! waited for until `/healthz` answers, and stopped (TERM, then KILL) when dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::db::{BenchDb, with_database};

/// `--via-pgbouncer`, for every server started.
pub static VIA_PGBOUNCER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// A `kairos serve` child process, killed on drop.
pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One server, node id `bench`.
pub async fn start_server(db: &BenchDb, extra: &[(&str, &str)]) -> Result<Server> {
    start_node(db, "bench", extra).await
}

/// `k` replicas on the same database, node ids `bench1`..`bench<k>`, each on its own port.
pub async fn start_servers(db: &BenchDb, k: usize, extra: &[(&str, &str)]) -> Result<Vec<Server>> {
    let mut servers = Vec::with_capacity(k);
    for i in 1..=k {
        servers.push(start_node(db, &format!("bench{i}"), extra).await?);
    }
    Ok(servers)
}

async fn start_node(db: &BenchDb, node_id: &str, extra: &[(&str, &str)]) -> Result<Server> {
    let exe = std::env::current_exe()?.with_file_name("kairos");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut cmd = Command::new(&exe);
    cmd.arg("serve")
        .env("DATABASE_URL", &db.url)
        .env("KAIROS_LISTEN", format!("127.0.0.1:{port}"))
        .env("KAIROS_NODE_ID", node_id)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if std::path::Path::new("config/kairos.toml").exists() {
        cmd.env("KAIROS_CONFIG", "config/kairos.toml");
    }
    if let Some(Some(bouncer)) = VIA_PGBOUNCER.get() {
        cmd.env("DATABASE_URL", with_database(bouncer, &db.name)?)
            .env("KAIROS_DATABASE_POOLER", "pgbouncer")
            .env("KAIROS_LISTEN_DATABASE_URL", &db.url)
            .env("KAIROS_MIGRATE_DATABASE_URL", &db.url);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client.get(format!("{}/healthz", server.base)).send().await
            && r.status().is_success()
        {
            return Ok(server);
        }
        if Instant::now() > deadline {
            bail!("kairos did not start");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
