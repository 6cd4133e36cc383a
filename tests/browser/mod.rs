//! A real headless Chromium for the console's end-to-end tests, driven over WebDriver: each
//! `Browser` starts its own chromedriver on a free loopback port, with a private profile, and
//! kills the driver and every browser process it started when dropped, also when a test fails.
//!
//! chromedriver is `KAIROS_CHROMEDRIVER`, else `chromedriver` on `PATH`; the browser is
//! `KAIROS_CHROMIUM`, else the one chromedriver finds. Without a chromedriver the tests fail,
//! saying how to install one: they never pass without having run.
#![allow(dead_code)]

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// The viewport every test and screenshot uses.
pub const WIDTH: u32 = 1280;
pub const HEIGHT: u32 = 800;

/// How long an element may take to appear, a page to load or the driver to start.
pub const DEADLINE: Duration = Duration::from_secs(10);

const POLL: Duration = Duration::from_millis(50);

pub struct Browser {
    client: Client,
    base: String,
    // Dropped after the client: the driver outlives the session.
    _driver: Driver,
}

impl Browser {
    /// A fresh browser session against the server at `base` (`http://127.0.0.1:port`).
    pub async fn new(base: &str) -> Browser {
        let driver = Driver::start().await;
        let args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--hide-scrollbars".to_owned(),
            format!("--window-size={WIDTH},{HEIGHT}"),
            "--lang=en-US".to_owned(),
            format!("--user-data-dir={}", driver.dir.join("profile").display()),
        ];
        let mut options = json!({ "args": args });
        if let Some(binary) = std::env::var_os("KAIROS_CHROMIUM") {
            options["binary"] = json!(binary.to_string_lossy());
        }
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert("goog:chromeOptions".into(), options);
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&driver.url)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "chromedriver could not start a Chromium session: {e}\n{}",
                    driver.log_tail()
                )
            });
        let browser = Browser {
            client,
            base: base.trim_end_matches('/').to_owned(),
            _driver: driver,
        };
        browser.fit_viewport().await;
        browser
    }

    /// Size the window so that the page itself (what a screenshot shows) is WIDTH x HEIGHT:
    /// `--window-size` counts the window's frame too.
    async fn fit_viewport(&self) {
        let frame = self
            .execute(
                "return [window.outerWidth - window.innerWidth, \
                         window.outerHeight - window.innerHeight];",
                vec![],
            )
            .await;
        let extra = |i: usize| frame[i].as_u64().and_then(|v| u32::try_from(v).ok());
        let (Some(dw), Some(dh)) = (extra(0), extra(1)) else {
            panic!("reading the window's frame size: {frame}");
        };
        self.client
            .set_window_size(WIDTH + dw, HEIGHT + dh)
            .await
            .unwrap_or_else(|e| panic!("resizing the window: {e}"));
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Open `path` of the server and wait until the page has loaded.
    pub async fn goto(&self, path: &str) {
        let url = self.url(path);
        self.client
            .goto(&url)
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// Log in through the form with `token` and wait for the console's session label.
    pub async fn login(&self, token: &str) {
        self.goto("/ui/login").await;
        self.fill("#token", token).await;
        self.click("#login").await;
        self.wait_for("#role", DEADLINE).await;
    }

    /// The first element matching `css`, polled for until `deadline`.
    pub async fn wait_for(&self, css: &str, deadline: Duration) -> Element {
        let start = Instant::now();
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await {
                return e;
            }
            if start.elapsed() >= deadline {
                panic!(
                    "no element matches {css:?} after {deadline:?} on {}",
                    self.where_am_i().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The text of the first element matching `css` once `wanted` accepts it, polled for until
    /// `deadline`.
    pub async fn wait_for_text(
        &self,
        css: &str,
        deadline: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        let mut last = None;
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await
                && let Ok(text) = e.text().await
            {
                if wanted(&text) {
                    return text;
                }
                last = Some(text);
            }
            if start.elapsed() >= deadline {
                panic!(
                    "{css:?} did not show the expected text after {deadline:?} (last: {last:?}) on {}",
                    self.where_am_i().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub async fn click(&self, css: &str) {
        let e = self.wait_for(css, DEADLINE).await;
        e.click()
            .await
            .unwrap_or_else(|err| panic!("clicking {css:?}: {err}"));
    }

    /// Replace the value of the input matching `css` by typing `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        let e = self.wait_for(css, DEADLINE).await;
        e.clear()
            .await
            .unwrap_or_else(|err| panic!("clearing {css:?}: {err}"));
        e.send_keys(text)
            .await
            .unwrap_or_else(|err| panic!("typing into {css:?}: {err}"));
    }

    /// The visible text of the first element matching `css` (waiting for it to appear).
    pub async fn text(&self, css: &str) -> String {
        let e = self.wait_for(css, DEADLINE).await;
        e.text()
            .await
            .unwrap_or_else(|err| panic!("reading the text of {css:?}: {err}"))
    }

    /// An attribute of the first element matching `css`.
    pub async fn attr(&self, css: &str, name: &str) -> Option<String> {
        let e = self.wait_for(css, DEADLINE).await;
        e.attr(name)
            .await
            .unwrap_or_else(|err| panic!("reading {name} of {css:?}: {err}"))
    }

    /// How many elements match `css` now (no waiting).
    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map_or(0, |all| all.len())
    }

    /// Run `script` in the page with `args` (as `arguments[i]`).
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("running a script in the page: {e}"))
    }

    /// The value of cookie `name` as the browser holds it (HttpOnly ones included).
    pub async fn cookie(&self, name: &str) -> String {
        self.client
            .get_named_cookie(name)
            .await
            .unwrap_or_else(|e| panic!("reading cookie {name}: {e}"))
            .value()
            .to_owned()
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        self.client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("taking a screenshot: {e}"))
    }

    async fn where_am_i(&self) -> String {
        let url = self
            .client
            .current_url()
            .await
            .map_or_else(|_| "?".to_owned(), |u| u.to_string());
        let title = self.client.title().await.unwrap_or_default();
        format!("{url} ({title:?})")
    }
}

/// A running chromedriver, in its own process group so that dropping it ends the browser
/// processes it started too; its working directory (profile, log) is removed with it.
struct Driver {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Driver {
    async fn start() -> Driver {
        kairos::outbound::install_crypto_provider();
        let program = chromedriver();
        let mut last_error = String::new();
        // A free port may be taken between looking and binding: try a few.
        for _ in 0..3 {
            let mut driver = Driver::spawn(&program);
            match driver.wait_ready().await {
                Ok(()) => return driver,
                Err(e) => last_error = format!("{e}\n{}", driver.log_tail()),
            }
        }
        panic!("{} did not start: {last_error}", program.display());
    }

    fn spawn(program: &Path) -> Driver {
        let dir = std::env::temp_dir().join(format!("kairos-e2e-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let log = dir.join("chromedriver.log");
        let out = File::create(&log).expect("chromedriver log file");
        let err = out.try_clone().expect("chromedriver log file");
        let port = free_port();
        let child = Command::new(program)
            .arg(format!("--port={port}"))
            // The browser's own temporary files go there too, and are removed with it.
            .env("TMPDIR", &dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    /// Poll `/status` until the driver is ready, it exits, or the deadline passes.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let http = reqwest::Client::new();
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("chromedriver exited with {status}"));
            }
            if let Ok(resp) = http.get(format!("{}/status", self.url)).send().await
                && let Ok(body) = resp.json::<Value>().await
                && body["value"]["ready"] == json!(true)
            {
                return Ok(());
            }
            if start.elapsed() >= DEADLINE {
                return Err(format!("chromedriver not ready after {DEADLINE:?}"));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("chromedriver.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("chromedriver output (last lines):\n{tail}")
    }
}

impl Drop for Driver {
    /// Kill the driver's process group (the driver and the browser it started), then remove
    /// its directory.
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The chromedriver to run: `KAIROS_CHROMEDRIVER`, else `chromedriver` on `PATH`; panics with
/// the way to install one when there is none.
fn chromedriver() -> PathBuf {
    if let Some(path) = std::env::var_os("KAIROS_CHROMEDRIVER") {
        let path = PathBuf::from(path);
        assert!(
            is_executable(&path),
            "KAIROS_CHROMEDRIVER={} is not an executable file",
            path.display()
        );
        return path;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("chromedriver"))
        .find(|p| is_executable(p))
        .unwrap_or_else(|| {
            panic!(
                "chromedriver not found on PATH: the console's end-to-end tests drive a real \
                 headless Chromium. Install Chromium and its driver (Debian/Ubuntu: \
                 `apt-get install chromium chromium-driver`; macOS: `brew install --cask \
                 chromedriver`; scripts/test installs them when missing), or set \
                 KAIROS_CHROMEDRIVER (and KAIROS_CHROMIUM for the browser) to their paths."
            )
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
