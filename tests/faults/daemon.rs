//! The real `kairos serve` as a child process, its output in a log file; killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{free_port, tail};

pub struct Kairos {
    child: Child,
    pid: u32,
    pub base: String,
    log: PathBuf,
}

impl Kairos {
    /// Start `kairos serve` on a free loopback port over `database_url`, with `env` on top of
    /// the repository's config file, and wait until `/readyz` answers 200.
    pub async fn start(database_url: &str, dir: &Path, env: &[(&str, &str)]) -> Kairos {
        kairos::outbound::install_crypto_provider();
        let port = free_port();
        let log = dir.join("kairos.log");
        let out = std::fs::File::create(&log).expect("create kairos.log");
        let err = out.try_clone().expect("clone the log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kairos"));
        cmd.arg("serve")
            .env("DATABASE_URL", database_url)
            .env("KAIROS_CONFIG", "config/kairos.toml")
            .env("KAIROS_LISTEN", format!("127.0.0.1:{port}"))
            .env("KAIROS_NODE_ID", "faults")
            .env("KAIROS_LOG_FORMAT", "text")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn kairos");
        let kairos = Kairos {
            pid: child.id(),
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .build()
            .expect("http client");
        let start = Instant::now();
        loop {
            if kairos.readyz(&client).await == Some(200) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "kairos not ready within 60 s:\n{}",
                tail(&kairos.log, 30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        kairos
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The status of `GET /readyz`, or `None` when no answer came.
    pub async fn readyz(&self, client: &reqwest::Client) -> Option<u16> {
        client
            .get(self.url("/readyz"))
            .send()
            .await
            .ok()
            .map(|r| r.status().as_u16())
    }

    /// `None` while the process runs; its exit status once it has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(status.to_string()),
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    /// The log lines at WARN or ERROR, without colour codes.
    pub fn problems(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(strip_ansi)
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.contains("panicked"))
            .collect()
    }

    /// Print a summary of the WARN and ERROR lines: how many of each message, and the first
    /// `n` lines in full.
    pub fn print_problems(&self, n: usize) {
        let lines = self.problems();
        let mut by_message: std::collections::BTreeMap<String, usize> = Default::default();
        for l in &lines {
            *by_message.entry(message_of(l)).or_default() += 1;
        }
        eprintln!("kairos logged {} WARN/ERROR lines:", lines.len());
        for (m, count) in &by_message {
            eprintln!("  {count:>5} x {m}");
        }
        for l in lines.iter().take(n) {
            eprintln!("  | {l}");
        }
    }

    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }
}

impl Drop for Kairos {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Debugging aid: KAIROS_FAULTS_KEEP_LOG=<file> keeps the whole log of the daemon.
        if let Ok(keep) = std::env::var("KAIROS_FAULTS_KEEP_LOG") {
            let _ = std::fs::copy(&self.log, keep);
        }
        if std::thread::panicking() {
            eprintln!(
                "---- kairos log (last 40 lines) ----\n{}",
                self.log_tail(40)
            );
        }
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The level, target and message of a text log line, without its time and fields.
fn message_of(line: &str) -> String {
    let rest = line
        .split_once(" WARN ")
        .map(|(_, r)| format!("WARN {r}"))
        .or_else(|| {
            line.split_once(" ERROR ")
                .map(|(_, r)| format!("ERROR {r}"))
        })
        .unwrap_or_else(|| line.to_owned());
    // Fields follow the message as ` key=value`; keep the text before the first of them.
    let cut = rest
        .char_indices()
        .find(|&(i, _)| {
            rest[i..].starts_with(' ')
                && rest[i + 1..].split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty()
                        && k.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                })
        })
        .map(|(i, _)| i)
        .unwrap_or(rest.len());
    rest[..cut].chars().take(160).collect()
}
