//! The web dashboard in a real headless Chromium (Debian's `chromium`): the page loads from
//! the dispatcher, its script draws the figures from `/v1/series` and `/v1/status` with the
//! token from the URL's fragment, and the figures update as tasks run; the token never reaches
//! the dispatcher's log; the data routes refuse a request without a token.

mod common;

use common::cluster::*;
use common::host::{is_root, skip};
use serde_json::json;
use std::process::{Command, Stdio};

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The page's DOM after its script has run for `budget_ms` of (virtual) time.
fn dump_dom(browser: &str, profile: &std::path::Path, url: &str, budget_ms: u32) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of `data-NAME="..."` on the body.
fn body_attr(dom: &str, name: &str) -> u64 {
    let key = format!("data-{name}=\"");
    let start = dom
        .find(&key)
        .unwrap_or_else(|| panic!("no {key} in the page:\n{dom}"))
        + key.len();
    dom[start..]
        .split('"')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not a number"))
}

#[test]
fn the_dashboard_draws_live_figures_in_chromium() {
    let Some(browser) = chromium() else {
        // scripts/test.sh installs Debian's chromium when it runs as root.
        assert!(
            !is_root(),
            "chromium is missing: scripts/test.sh installs it"
        );
        return skip("chromium is not installed");
    };
    let mut c = Cluster::start(&[]);
    c.worker("w", 2, "50MB");
    c.wait_workers(1);
    let f = file_uri(&c.data("f", &random_bytes(2 << 20)));
    c.submit(&[
        wc_task("a", &f),
        wc_task("b", &f),
        json!({"id": "bad", "cmd": "exit 4"}),
    ]);
    for id in ["a", "b", "bad"] {
        c.wait_done(id);
    }
    // The page and its assets need no token; the data does.
    let page = c.http.get(format!("{}/", c.url)).send().unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    let series = c.http.get(format!("{}/v1/series", c.url)).send().unwrap();
    assert_eq!(series.status(), 401, "the series needs a token");

    // The dispatcher samples once a second: wait for a few samples to draw.
    let samples = |c: &Cluster| c.get("/v1/series").as_array().map_or(0, Vec::len);
    poll("three samples", || (samples(&c) >= 3).then_some(()));
    let profile = c.path("chromium");
    let url = format!("{}/#token={}", c.url, c.client_token);
    let first = dump_dom(browser, &profile, &url, 4000);
    assert!(
        body_attr(&first, "updates") >= 2,
        "the page polled:\n{first}"
    );
    assert!(body_attr(&first, "points") >= 1, "a figure has points");
    assert_eq!(first.matches("<canvas").count(), 4, "four figures");
    assert!(first.contains("data-worker=\"w\""), "the worker's row");
    assert!(first.contains("exit code 4"), "the failure and why");
    let (ok1, local1) = (
        body_attr(&first, "succeeded"),
        body_attr(&first, "bytes-local"),
    );
    assert_eq!((ok1, local1), (2, 2 << 20), "b read a's copy locally");

    // More work: the figures move.
    let g = file_uri(&c.data("g", &random_bytes(1 << 20)));
    c.submit(&[wc_task("c", &g), wc_task("d", &g), wc_task("e", &f)]);
    for id in ["c", "d", "e"] {
        c.wait_succeeded(id);
    }
    let before = samples(&c);
    poll("two more samples", || {
        (samples(&c) >= before + 2).then_some(())
    });
    let second = dump_dom(browser, &profile, &url, 4000);
    assert_eq!(body_attr(&second, "succeeded"), 5);
    assert!(
        body_attr(&second, "bytes-local") > local1,
        "more local reads drawn"
    );
    assert!(body_attr(&second, "points") >= body_attr(&first, "points"));

    // The token was in the page's URL fragment only: never sent, never logged.
    let log = c.dispatcher.as_ref().unwrap().log_text();
    assert!(
        !log.contains(&c.client_token),
        "the token is in the dispatcher's log"
    );
}
