//! A small W3C WebDriver client over reqwest (<https://www.w3.org/TR/webdriver2/>): the few
//! commands the browser test needs — a session, navigation, elements by CSS selector, typing,
//! clicking, text, a screenshot — and [`Chromedriver`], the driver process it talks to.
//! (fantoccini would bring a C build of aws-lc and ICU with it; this needs nothing new.)

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use base64::Engine;
use serde_json::{Value, json};

/// The key of an element reference in WebDriver's answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `chromedriver` on a free loopback port, killed on drop.
/// How long [`Browser::find`] waits for an element to appear.
const PAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

pub struct Chromedriver {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
}

impl Chromedriver {
    /// Starts `/usr/bin/chromedriver` (install it with `scripts/browser.sh`) and waits until
    /// it answers `/status` as ready.
    pub async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver: run scripts/browser.sh to install chromium and chromium-driver");
        let driver = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let status = format!("{}/status", driver.url);
        crate::support::wait_until(Duration::from_secs(20), "chromedriver ready", async || {
            match http.get(&status).send().await {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .is_ok_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            }
        })
        .await;
        driver
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One browser session.
pub struct Browser {
    http: reqwest::Client,
    session: String,
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// A new headless Chromium session on `driver`.
    pub async fn new(driver: &Chromedriver) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1500,820"]
            }
        }}});
        let answer: Value = http
            .post(format!("{}/session", driver.url))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {answer}"))
            .to_owned();
        Self {
            http,
            session: format!("{}/session/{session}", driver.url),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("WebDriver {path}: {error}"))
    }

    /// [`Self::call`], with WebDriver's error (e.g. a stale element) as `Err`.
    async fn try_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        match answer["value"]["error"].as_str() {
            Some(error) => Err(format!("{error}: {}", answer["value"]["message"])),
            None => Ok(answer["value"].clone()),
        }
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The page's URL.
    pub async fn current_url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The elements matching `css`.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self
            .call(
                reqwest::Method::POST,
                "/elements",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| Element(e[ELEMENT].as_str().unwrap().to_owned()))
            .collect()
    }

    /// The first element matching `css`, waited for up to [`PAGE_WAIT`] (a click that navigates
    /// returns before the next page is there); panics naming it when it never comes.
    pub async fn find(&self, css: &str) -> Element {
        let deadline = std::time::Instant::now() + PAGE_WAIT;
        loop {
            if let Some(e) = self.find_all(css).await.into_iter().next() {
                return e;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no element {css} on the page within {PAGE_WAIT:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// The text of the first element matching `css`, waited for as [`Self::find`] does.
    pub async fn wait_text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.text(&e).await
    }

    /// The text of the first element matching `css` once it starts with `prefix`, waited for up
    /// to [`PAGE_WAIT`]; else the last text seen, for the caller's assertion to show. A click
    /// that posts a form returns while the old page (and its element, e.g. the previous
    /// `#notice`) is still there, and that element goes stale when the next page arrives.
    pub async fn wait_text_starting(&self, css: &str, prefix: &str) -> String {
        let deadline = std::time::Instant::now() + PAGE_WAIT;
        let mut last = String::new();
        while std::time::Instant::now() < deadline {
            if let Some(e) = self.find_all(css).await.into_iter().next() {
                let path = format!("/element/{}/text", e.0);
                if let Ok(text) = self.try_call(reqwest::Method::GET, &path, None).await {
                    last = text.as_str().unwrap_or_default().to_owned();
                    if last.starts_with(prefix) {
                        return last;
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        last
    }

    /// The text of the first element matching `css`, if any.
    pub async fn text_of(&self, css: &str) -> Option<String> {
        match self.find_all(css).await.into_iter().next() {
            Some(e) => Some(self.text(&e).await),
            None => None,
        }
    }

    /// An element's rendered text.
    pub async fn text(&self, e: &Element) -> String {
        self.call(
            reqwest::Method::GET,
            &format!("/element/{}/text", e.0),
            None,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// Clears an input and types `text` into it.
    pub async fn type_into(&self, e: &Element, text: &str) {
        self.call(
            reqwest::Method::POST,
            &format!("/element/{}/clear", e.0),
            Some(json!({})),
        )
        .await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Clicks an element.
    pub async fn click(&self, e: &Element) {
        self.call(
            reqwest::Method::POST,
            &format!("/element/{}/click", e.0),
            Some(json!({})),
        )
        .await;
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let b64 = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap()
    }

    /// Ends the session (closes the browser).
    pub async fn quit(self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}
