//! A real PgBouncer per test, in transaction pooling mode with its stock settings otherwise, in
//! front of a test cluster: configuration and log in a fresh directory, listening on a free
//! loopback port. As root it runs as `postgres` (else `nobody`): PgBouncer refuses to run as
//! root. Dropping it stops it (SIGTERM to the pid it wrote) and removes its directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::cluster::{free_port, tail};

pub struct Bouncer {
    dir: PathBuf,
    bin: PathBuf,
    owner: Option<String>,
    port: u16,
}

/// The pgbouncer binary: `KAIROS_PGBOUNCER`, else `pgbouncer` on PATH, else
/// `/usr/sbin/pgbouncer` (Debian's). `None` when there is none: under `CI=true` that panics,
/// saying how to install it; elsewhere the caller skips, loudly.
pub fn binary() -> Option<PathBuf> {
    let found = std::env::var_os("KAIROS_PGBOUNCER")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join("pgbouncer"))
                    .find(|p| p.is_file())
            })
        })
        .or_else(|| {
            let debian = PathBuf::from("/usr/sbin/pgbouncer");
            debian.is_file().then_some(debian)
        });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "PgBouncer not found (KAIROS_PGBOUNCER, PATH, /usr/sbin/pgbouncer): the tests of \
             kairos behind PgBouncer must run under CI; scripts/lib/pgbouncer.sh installs it \
             (apt-get install pgbouncer)"
        );
        eprintln!(
            "\n!!!! SKIPPED: PgBouncer not found (apt-get install pgbouncer, or set \
             KAIROS_PGBOUNCER); kairos behind PgBouncer is NOT tested in this run !!!!\n"
        );
    }
    found
}

fn owner() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return None;
    }
    let exists = |u: &str| {
        Command::new("id")
            .arg("-u")
            .arg(u)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    Some(
        if exists("postgres") {
            "postgres"
        } else {
            "nobody"
        }
        .to_owned(),
    )
}

impl Bouncer {
    /// Start PgBouncer with `bin` in front of PostgreSQL on 127.0.0.1:`pg_port`, and wait until
    /// it answers through to the database.
    pub async fn start(bin: PathBuf, pg_port: u16) -> Bouncer {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "kairos-pgbouncer-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the PgBouncer directory");
        let port = free_port();
        // Stock settings but for what a private instance must say: where to listen, how clients
        // authenticate (every connection is trusted, loopback only), transaction pooling, and
        // its files. No ignore_startup_parameters, no max_prepared_statements.
        let ini = format!(
            "[databases]\n\
             * = host=127.0.0.1 port={pg_port}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir}/users.txt\n\
             pool_mode = transaction\n\
             logfile = {dir}/pgbouncer.log\n\
             pidfile = {dir}/pgbouncer.pid\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).expect("write pgbouncer.ini");
        std::fs::write(dir.join("users.txt"), "\"kairos\" \"\"\n").expect("write users.txt");
        let owner = owner();
        if let Some(o) = &owner {
            let out = Command::new("chown")
                .args(["-R", o])
                .arg(&dir)
                .output()
                .expect("run chown");
            assert!(out.status.success(), "chown {}: {out:?}", dir.display());
        }
        let b = Bouncer {
            dir,
            bin,
            owner,
            port,
        };
        b.launch().await;
        b
    }

    /// Run the daemon (`-d`) and wait until a query passes through it.
    async fn launch(&self) {
        let ini = self.dir.join("pgbouncer.ini");
        let mut cmd = match &self.owner {
            Some(o) => {
                let mut c = Command::new("runuser");
                c.args(["-u", o, "--"]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let out = cmd
            .arg("-d")
            .arg(&ini)
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .expect("run pgbouncer");
        assert!(
            out.status.success(),
            "pgbouncer -d: {out:?}\n{}",
            self.log_tail(20)
        );
        let start = Instant::now();
        loop {
            let answered = async {
                let mut conn = sqlx::postgres::PgConnectOptions::new()
                    .host("127.0.0.1")
                    .port(self.port)
                    .username("kairos")
                    .database("postgres")
                    .extra_float_digits(None)
                    .statement_cache_capacity(0);
                conn = conn.application_name("kairos-tests");
                use sqlx::{ConnectOptions, Connection, Executor};
                let mut c = conn.connect().await.ok()?;
                c.execute(sqlx::raw_sql("select 1")).await.ok()?;
                c.close().await.ok()
            };
            if answered.await.is_some() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "PgBouncer did not answer within 30 s:\n{}",
                self.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The URL of database `db` through PgBouncer.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://kairos:kairos@127.0.0.1:{}/{db}", self.port)
    }

    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("pgbouncer.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Send `signal` to the daemon and wait until it has exited.
    async fn signal_and_wait(&self, signal: &str) {
        let Some(pid) = self.pid() else { return };
        let _ = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status();
        let start = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "PgBouncer (pid {pid}) still runs 30 s after kill {signal}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = std::fs::remove_file(self.dir.join("pgbouncer.pid"));
    }

    /// Stop PgBouncer at once (SIGKILL: every client and server connection is cut, nothing is
    /// finished) and start it again on the same port.
    pub async fn restart_hard(&self) {
        self.signal_and_wait("-KILL").await;
        self.launch().await;
    }

    /// Stop PgBouncer (SIGTERM: its immediate shutdown) and start it again on the same port.
    pub async fn restart(&self) {
        self.signal_and_wait("-TERM").await;
        self.launch().await;
    }

    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.dir.join("pgbouncer.log"), n)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- PgBouncer log (last 30 lines) ----\n{}",
                self.log_tail(30)
            );
        }
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
