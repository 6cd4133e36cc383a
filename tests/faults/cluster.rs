//! A private PostgreSQL cluster per test: `initdb` into a fresh directory, TCP on 127.0.0.1 only,
//! `fsync = off`; started, restarted, stopped with `pg_ctl` on demand. As root the cluster
//! belongs to and runs as `postgres` (PostgreSQL refuses to run as root). A cluster can have a
//! streaming standby (`pg_basebackup -R`), promoted with `pg_ctl promote`. Dropping it stops the
//! cluster at once and removes its directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The superuser `initdb` creates; every connection is trusted (loopback only).
const SUPERUSER: &str = "kairos";

pub struct Cluster {
    root: PathBuf,
    tools: Tools,
    port: u16,
}

/// What running the cluster's programs needs; cloned into blocking tasks.
#[derive(Clone)]
struct Tools {
    data: PathBuf,
    log: PathBuf,
    bindir: PathBuf,
    owner: Option<String>,
}

/// The directory holding `initdb` and `pg_ctl`: `KAIROS_PG_BINDIR`, else `pg_config --bindir`,
/// else the newest `/usr/lib/postgresql/*/bin`.
fn bindir() -> PathBuf {
    let has_tools = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Ok(dir) = std::env::var("KAIROS_PG_BINDIR") {
        let dir = PathBuf::from(dir);
        assert!(
            has_tools(&dir),
            "KAIROS_PG_BINDIR={} has no initdb and pg_ctl",
            dir.display()
        );
        return dir;
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has_tools(&dir) {
            return dir;
        }
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e
                .file_name()
                .to_string_lossy()
                .split('.')
                .map(str::parse)
                .collect::<Result<Vec<u32>, _>>()
                .ok()?;
            let dir = e.path().join("bin");
            has_tools(&dir).then_some((version, dir))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d).expect(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install them \
         (apt-get install postgresql) or set KAIROS_PG_BINDIR",
    )
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Who owns and runs the cluster: `None` for the current user, else `postgres` (or `nobody`).
fn owner() -> Option<String> {
    if !running_as_root() {
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

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Cluster {
    /// Create and start a fresh cluster.
    pub async fn start() -> Cluster {
        tokio::task::spawn_blocking(Cluster::start_blocking)
            .await
            .expect("cluster start task")
    }

    /// A directory for a new cluster, owned by the cluster's owner; nothing in it yet.
    fn empty() -> Cluster {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let root = std::env::temp_dir().join(format!(
            "kairos-faults-{}-{nanos}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&root).expect("create the cluster directory");
        let cluster = Cluster {
            tools: Tools {
                data: root.join("data"),
                log: root.join("postgres.log"),
                bindir: bindir(),
                owner: owner(),
            },
            root,
            port: 0,
        };
        if let Some(owner) = &cluster.tools.owner {
            let status = Command::new("chown")
                .arg(format!("{owner}:"))
                .arg(&cluster.root)
                .status()
                .expect("run chown");
            assert!(status.success(), "chown {owner} {}", cluster.root.display());
        }
        cluster
    }

    /// Start a streaming standby of this (running) cluster: `pg_basebackup -R` (which writes
    /// `primary_conninfo` and `standby.signal`), on a port of its own, hot standby (it answers
    /// read-only queries). The primary does not wait for it on commit until its
    /// `synchronous_standby_names` names it.
    pub async fn start_standby(&self) -> Cluster {
        let primary_port = self.port;
        tokio::task::spawn_blocking(move || {
            let mut standby = Cluster::empty();
            let port = primary_port.to_string();
            let data = standby.tools.data.to_string_lossy().into_owned();
            let out = standby.tools.pg(
                "pg_basebackup",
                &[
                    "--host=127.0.0.1",
                    "--port",
                    &port,
                    "--username",
                    SUPERUSER,
                    "--pgdata",
                    &data,
                    "--write-recovery-conf",
                    "--wal-method=stream",
                    "--checkpoint=fast",
                    "--no-sync",
                ],
            );
            assert!(out.status.success(), "pg_basebackup: {}", describe(&out));
            standby.port = free_port();
            standby.configure();
            let out = standby.tools.pg_ctl(&["start", "--wait", "--timeout=60"]);
            assert!(
                out.status.success(),
                "standby did not start: {}\n{}",
                describe(&out),
                standby.log_tail(20)
            );
            standby
        })
        .await
        .expect("standby start task")
    }

    /// `pg_ctl promote`: the standby stops replaying and accepts writes.
    pub async fn promote(&self) {
        self.pg_ctl_ok(&["promote", "--wait", "--timeout=60"], "pg_ctl promote")
            .await;
    }

    /// `pg_ctl stop -m immediate`: the server dies as in a crash and stays down.
    pub async fn stop_immediate(&self) {
        self.pg_ctl_ok(
            &["stop", "--mode=immediate", "--wait", "--timeout=60"],
            "pg_ctl stop",
        )
        .await;
    }

    fn start_blocking() -> Cluster {
        let mut cluster = Cluster::empty();
        let out = cluster.tools.pg(
            "initdb",
            &[
                "--pgdata",
                &cluster.tools.data.to_string_lossy(),
                "--username",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        assert!(out.status.success(), "initdb failed: {}", describe(&out));
        for attempt in 0..5 {
            cluster.port = free_port();
            cluster.configure();
            let out = cluster.tools.pg_ctl(&["start", "--wait", "--timeout=60"]);
            if out.status.success() {
                return cluster;
            }
            let log = cluster.log_tail(20);
            assert!(
                attempt < 4 && log.contains("already in use"),
                "PostgreSQL did not start: {}\n{log}",
                describe(&out)
            );
        }
        unreachable!("the loop returns or panics")
    }

    /// Append this test's settings to postgresql.conf (later lines win on a retry).
    /// `synchronous_commit` stays on: a crash of the server (not of the machine) then loses no
    /// commit it acknowledged, as in production. With it off, an immediate restart drops the
    /// last acknowledged commits (a completion answered 200 comes back RUNNING and runs again),
    /// which no client of the database can prevent. `fsync` and full-page writes only matter
    /// when the machine itself crashes, so they are off for speed.
    fn configure(&self) {
        let conf = format!(
            "\n# kairos fault tests\nlisten_addresses = '127.0.0.1'\nport = {}\n\
             unix_socket_directories = ''\nfsync = off\nsynchronous_commit = on\n\
             full_page_writes = off\nmax_connections = 200\n",
            self.port
        );
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.tools.data.join("postgresql.conf"))
            .expect("open postgresql.conf");
        f.write_all(conf.as_bytes()).expect("write postgresql.conf");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `postgres` as the superuser, at `port` (the cluster's own or a
    /// proxy's).
    pub fn url_at(&self, port: u16) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{port}/postgres")
    }

    pub fn url(&self) -> String {
        self.url_at(self.port)
    }

    /// Where a test keeps other files (kairos's log): removed with the cluster.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// Run `pg_ctl` with `args` and panic, with the server log's tail, unless it succeeds.
    async fn pg_ctl_ok(&self, args: &'static [&'static str], what: &str) {
        let out = self.pg_ctl_async(args).await;
        assert!(
            out.status.success(),
            "{what}: {}\n{}",
            describe(&out),
            self.log_tail(20)
        );
    }

    async fn pg_ctl_async(&self, args: &'static [&'static str]) -> Output {
        let tools = self.tools.clone();
        tokio::task::spawn_blocking(move || tools.pg_ctl(args))
            .await
            .expect("pg_ctl task")
    }

    /// A crash: `pg_ctl restart -m immediate` (no shutdown checkpoint, every session cut).
    pub async fn restart_immediate(&self) {
        self.pg_ctl_ok(
            &["restart", "--mode=immediate", "--wait", "--timeout=60"],
            "pg_ctl restart",
        )
        .await;
    }

    /// `pg_ctl stop -m fast`: sessions are terminated, the server goes away.
    pub async fn stop_fast(&self) {
        self.pg_ctl_ok(
            &["stop", "--mode=fast", "--wait", "--timeout=60"],
            "pg_ctl stop",
        )
        .await;
    }

    /// Start the stopped cluster again, on the same port.
    pub async fn start_again(&self) {
        self.pg_ctl_ok(&["start", "--wait", "--timeout=60"], "pg_ctl start")
            .await;
    }

    /// The last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.tools.log, n)
    }
}

impl Tools {
    /// A PostgreSQL program of the cluster's binaries, as the cluster's owner, from `/`.
    fn pg(&self, program: &str, args: &[&str]) -> Output {
        let path = self.bindir.join(program);
        let mut cmd = match &self.owner {
            Some(owner) => {
                let mut c = Command::new("runuser");
                c.args(["-u", owner, "--"]).arg(&path);
                c
            }
            None => Command::new(&path),
        };
        cmd.args(args)
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", path.display()))
    }

    /// `pg_ctl` on this cluster, its server output going to the log file (never to a pipe that
    /// would keep `output()` waiting for the server to exit).
    fn pg_ctl(&self, args: &[&str]) -> Output {
        let data = self.data.to_string_lossy().into_owned();
        let log = self.log.to_string_lossy().into_owned();
        let mut all = vec!["--pgdata", &data, "--log", &log];
        all.extend_from_slice(args);
        self.pg("pg_ctl", &all)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- PostgreSQL log (last 30 lines) ----\n{}",
                self.log_tail(30)
            );
        }
        if self.tools.data.join("postmaster.pid").exists() {
            let _ = self
                .tools
                .pg_ctl(&["stop", "--mode=immediate", "--wait", "--timeout=30"]);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn describe(out: &Output) -> String {
    format!(
        "{}; stdout: {}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

/// The last `n` lines of a text file ("" when it cannot be read).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
