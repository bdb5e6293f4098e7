//! A minimal W3C WebDriver client (plain HTTP + JSON) for dashboard tests in
//! a real headless Chromium, without a browser-automation crate.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::call_http;
use crate::process::free_port;

/// A running `chromedriver` and one headless Chromium session.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    endpoint: String,
    session: String,
}

impl Browser {
    /// Starts `chromedriver` (at `driver_path`) and a headless session.
    ///
    /// # Panics
    /// When the driver or the browser does not start: the test cannot go on.
    pub async fn start(driver_path: &str) -> Self {
        let port = free_port();
        let driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while call_http(&endpoint, "GET", "/status", None).await.is_none() {
            assert!(Instant::now() < deadline, "chromedriver answers /status");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let capabilities = json!({ "capabilities": { "alwaysMatch": { "goog:chromeOptions": {
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-dev-shm-usage", "--window-size=1280,900"]
        }}}});
        let created = call_http(&endpoint, "POST", "/session", Some(&capabilities))
            .await
            .expect("a WebDriver session");
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {created}"))
            .to_owned();
        Self {
            driver,
            endpoint,
            session,
        }
    }

    async fn command(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let reply = call_http(&self.endpoint, method, &path, body)
            .await
            .unwrap_or_else(|| panic!("WebDriver {method} {path} answered"));
        reply["value"].clone()
    }

    /// Opens `url`.
    pub async fn visit(&self, url: &str) {
        self.command("POST", "/url", Some(&json!({ "url": url })))
            .await;
    }

    /// The current page's HTML.
    pub async fn source(&self) -> String {
        self.command("GET", "/source", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The WebDriver id of the first element matching the CSS `selector`.
    ///
    /// # Panics
    /// When no element matches.
    async fn element(&self, selector: &str) -> String {
        let found = self
            .command(
                "POST",
                "/element",
                Some(&json!({ "using": "css selector", "value": selector })),
            )
            .await;
        found
            .as_object()
            .and_then(|object| object.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element matches {selector}: {found}"))
            .to_owned()
    }

    /// Clicks the first element matching the CSS `selector`.
    ///
    /// # Panics
    /// When no element matches.
    pub async fn click(&self, selector: &str) {
        let element = self.element(selector).await;
        self.command(
            "POST",
            &format!("/element/{element}/click"),
            Some(&json!({})),
        )
        .await;
    }

    /// Types `text` into the first element matching the CSS `selector`, as
    /// a person at the keyboard would.
    ///
    /// # Panics
    /// When no element matches.
    pub async fn type_into(&self, selector: &str, text: &str) {
        let element = self.element(selector).await;
        self.command(
            "POST",
            &format!("/element/{element}/value"),
            Some(&json!({ "text": text })),
        )
        .await;
    }

    /// A PNG screenshot of the current page.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let encoded = self.command("GET", "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("a base64 PNG")
    }

    /// `DELETE /session/{id}`, blocking (it runs in `drop`); the driver
    /// answers once the browser has quit.
    fn end_session(&self) {
        let endpoint = self.endpoint.clone();
        let path = format!("/session/{}", self.session);
        // Drop may run inside a test's runtime; a thread of its own may block.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            let _ = runtime.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(10),
                    call_http(&endpoint, "DELETE", &path, None),
                )
                .await
            });
        })
        .join();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Killing chromedriver orphans its Chromium, which then runs on after
        // the tests: deleting the session first makes the driver quit it.
        self.end_session();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
