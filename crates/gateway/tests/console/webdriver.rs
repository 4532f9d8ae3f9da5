//! Just enough of the W3C WebDriver protocol (JSON over HTTP) to drive headless Chromium
//! through Debian's `chromedriver`: a session, navigation, finding elements by CSS selector,
//! clicks, typing, reading text and screenshots.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// The key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The flags Chromium needs here: no sandbox (root in a container), no GPU, nothing that
/// reaches the network on its own.
const FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// The first of `names` found on `PATH` (or in `/usr/bin`), or the value of `env`.
fn find(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            PathBuf::from("/usr/bin"),
            PathBuf::from("/usr/lib/chromium"),
        ])
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// `chromedriver` running on a free loopback port; killed when dropped.
pub struct Driver {
    child: Child,
    url: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

impl Driver {
    /// Starts `chromedriver` (`CHROMEDRIVER`, or on `PATH`) and waits until it answers.
    pub async fn start() -> Self {
        let driver = find("CHROMEDRIVER", &["chromedriver"]).expect(
            "the console test needs chromedriver and chromium: `apt-get install chromium chromium-driver` (.ci/run installs them)",
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} cannot be started: {e}", driver.display()));
        let driver = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
        };
        // A process of its own: it answers once it has bound its port.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(v) = driver.call(Method::GET, "/status", None).await
                && v["ready"] == true
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        driver
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let res = self.client.request(req).await.map_err(|e| e.to_string())?;
        let status = res.status();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{path}: {status} {}", v["value"]));
        }
        Ok(v["value"].clone())
    }

    /// A new headless Chromium with a fresh profile in `profile`.
    pub async fn session(&self, profile: &Path) -> Browser<'_> {
        let browser = find("CHROMIUM", &["chromium", "chromium-browser", "chrome"])
            .expect("chromium is installed");
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push("--window-size=1280,1800".to_owned());
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": browser, "args": args}
        }}});
        let v = self
            .call(Method::POST, "/session", Some(caps))
            .await
            .expect("a browser session");
        let id = v["sessionId"].as_str().expect("a session id").to_owned();
        let b = Browser { driver: self, id };
        // Finding an element waits for it this long.
        b.cmd(Method::POST, "timeouts", Some(json!({"implicit": 10_000})))
            .await
            .expect("timeouts set");
        b
    }
}

/// One browser session.
pub struct Browser<'a> {
    driver: &'a Driver,
    id: String,
}

/// An element of the page.
#[derive(Clone)]
pub struct Element(String);

impl Browser<'_> {
    async fn cmd(&self, method: Method, what: &str, body: Option<Value>) -> Result<Value, String> {
        let path = format!("/session/{}/{what}", self.id);
        self.driver.call(method, &path, body).await
    }

    /// Opens `url`.
    pub async fn go(&self, url: &str) {
        self.cmd(Method::POST, "url", Some(json!({"url": url})))
            .await
            .expect("navigation");
    }

    /// The first element matching `css` (waiting for it), or `None`.
    pub async fn find(&self, css: &str) -> Option<Element> {
        let v = self
            .cmd(
                Method::POST,
                "element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await
            .ok()?;
        v[ELEMENT].as_str().map(|id| Element(id.to_owned()))
    }

    /// The element matching `css`: it must appear.
    pub async fn must(&self, css: &str) -> Element {
        match self.find(css).await {
            Some(e) => e,
            None => panic!(
                "no element matches {css} on the page at {}; it reads:\n{}",
                self.cmd(Method::GET, "url", None).await.unwrap_or_default(),
                self.cmd(Method::GET, "source", None)
                    .await
                    .unwrap_or_default()
            ),
        }
    }

    /// How many elements match `css` now, without waiting.
    pub async fn count(&self, css: &str) -> usize {
        let script = format!(
            "return document.querySelectorAll({}).length",
            serde_json::to_string(css).unwrap_or_default()
        );
        self.eval(&script).await.as_u64().unwrap_or(0) as usize
    }

    /// Waits (at most 15 s) until nothing matches `css`.
    pub async fn gone(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.count(css).await > 0 {
            assert!(Instant::now() < deadline, "{css} is still on the page");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The visible text of `element`.
    pub async fn text(&self, element: &Element) -> String {
        self.cmd(Method::GET, &format!("element/{}/text", element.0), None)
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Clicks `element`.
    pub async fn click(&self, element: &Element) {
        self.cmd(
            Method::POST,
            &format!("element/{}/click", element.0),
            Some(json!({})),
        )
        .await
        .expect("click");
    }

    /// Clicks the element matching `css`, found again when the page replaced it between the
    /// look-up and the click (a table the page rebuilds on its refresh).
    pub async fn click_on(&self, css: &str) {
        for _ in 0..5 {
            let element = self.must(css).await;
            match self
                .cmd(
                    Method::POST,
                    &format!("element/{}/click", element.0),
                    Some(json!({})),
                )
                .await
            {
                Ok(_) => return,
                Err(e) if e.contains("stale element") => continue,
                Err(e) => panic!("click on {css}: {e}"),
            }
        }
        panic!("{css} was replaced on every attempt to click it");
    }

    /// Types `text` into `element`.
    pub async fn type_into(&self, element: &Element, text: &str) {
        self.cmd(
            Method::POST,
            &format!("element/{}/value", element.0),
            Some(json!({"text": text})),
        )
        .await
        .expect("typing");
    }

    /// Resizes the window (CSS pixels).
    pub async fn window(&self, width: u32, height: u32) {
        self.cmd(
            Method::POST,
            "window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await
        .expect("window resized");
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let v = self
            .cmd(Method::GET, "screenshot", None)
            .await
            .expect("a screenshot");
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("base64 PNG")
    }

    /// Runs `script` in the page and returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.cmd(
            Method::POST,
            "execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
        .expect("script runs")
    }

    /// Ends the session (closes the browser).
    pub async fn quit(self) {
        let path = format!("/session/{}", self.id);
        let _ = self.driver.call(Method::DELETE, &path, None).await;
    }
}
