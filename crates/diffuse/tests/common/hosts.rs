//! A dispatcher on host 0 of a [`Testbed`], workers on the others: the multi-host tests'
//! and benchmarks' cluster.

#![allow(dead_code)] // each test crate uses a different part

use super::cluster::*;
use super::testbed::Testbed;
use super::BIN;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// A dispatcher on host 0 of a testbed, workers on the others.
pub struct Hosts {
    pub bed: Testbed,
    pub dir: tempfile::TempDir,
    pub client: String,
    worker_token: String,
    pub url: String,
    pub http: reqwest::blocking::Client,
    /// The dispatcher first, then the workers in the order started.
    pub procs: Vec<Proc>,
}

impl Hosts {
    /// `hosts` hosts, the dispatcher (with `args`) on host 0; None where namespaces cannot be
    /// made.
    pub fn up(hosts: usize, args: &[&str]) -> Option<Hosts> {
        let bed = Testbed::up(hosts)?;
        let url = format!("http://{}:8700", bed.addr(0));
        let mut h = Hosts {
            dir: tempfile::tempdir().unwrap(),
            client: random_token(),
            worker_token: random_token(),
            url,
            http: http(),
            procs: Vec::new(),
            bed,
        };
        let mut d = h.bed.command(0, BIN);
        d.args(["dispatcher", "--listen", &format!("{}:8700", h.bed.addr(0))])
            .arg("--journal")
            .arg(h.dir.path().join("journal.sqlite"))
            .args(args);
        h.env(&mut d);
        let log = h.path("d.log");
        h.procs
            .push(Proc::spawn("dispatcher (host 0)", &mut d, log));
        poll("the dispatcher on host 0", || h.get("/v1/status"));
        Some(h)
    }

    /// An HTTP store on `host` serving `dir` at port 8000 (Python's threaded file server with
    /// a listen backlog of 1024: `http.server`'s own is 5, and a worker's burst of lookups
    /// overflowed it, each dropped connection costing a second's SYN retry). Its URL.
    pub fn http_store(&mut self, host: usize, dir: &std::path::Path) -> String {
        std::fs::create_dir_all(dir).unwrap();
        let code = "import functools, http.server, sys\n\
                    class S(http.server.ThreadingHTTPServer):\n    request_queue_size = 1024\n\
                    h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[2])\n\
                    S((sys.argv[1], 8000), h).serve_forever()\n";
        let mut server = self.bed.command(host, "python3");
        server.args(["-c", code, &self.bed.addr(host)]).arg(dir);
        let log = self.path(&format!("store-{host}.log"));
        self.procs.push(Proc::spawn(
            &format!("store (host {host})"),
            &mut server,
            log,
        ));
        let url = format!("http://{}:8000", self.bed.addr(host));
        poll("the HTTP store", || {
            self.http
                .get(format!("{url}/"))
                .send()
                .ok()
                .filter(|r| r.status().is_success())
        });
        url
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn env(&self, cmd: &mut Command) {
        cmd.env("DIFFUSE_CLIENT_TOKEN", &self.client)
            .env("DIFFUSE_WORKER_TOKEN", &self.worker_token)
            .env("DIFFUSE_LOG", "info")
            // Off, as in every test but tests/reuse.rs (see `run_diffuse`).
            .env("DIFFUSE_REUSE", "off");
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.client)
            .send()
            .ok()?
            .json()
            .ok()
    }

    /// A one-slot worker named `name` on `host`, listening on 0.0.0.0 (the default).
    pub fn worker(&mut self, host: usize, name: &str) {
        self.worker_with(host, name, &["--cache-size", "100MB"]);
    }

    /// A one-slot worker with `args` (which set its --cache-size).
    pub fn worker_with(&mut self, host: usize, name: &str, args: &[&str]) {
        let cache = self.path(&format!("cache-{name}"));
        let mut w = self.bed.command(host, BIN);
        w.args(["worker", "--dispatcher", &self.url, "--cores", "1"])
            .args(args)
            .args(["--name", name])
            .arg("--cache-dir")
            .arg(cache);
        self.env(&mut w);
        let log = self.path(&format!("worker-{name}.log"));
        self.procs.push(Proc::spawn(
            &format!("worker {name} (host {host})"),
            &mut w,
            log,
        ));
    }

    pub fn wait_workers(&self, n: u64) {
        poll("workers", || {
            self.get("/v1/status").filter(|s| s["workers"] == n)
        });
    }

    pub fn submit(&self, tasks: &[Value]) {
        let body: String = tasks.iter().map(|t| format!("{t}\n")).collect();
        let r = self
            .http
            .post(format!("{}/v1/tasks", self.url))
            .bearer_auth(&self.client)
            .body(body)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().unwrap_or_default());
    }

    /// `diffuse stage` of `uris` with `args` (`--to`, `--schedule`, ...): its `--json` summary,
    /// or Null for `--drop`.
    pub fn stage(&self, uris: &[String], args: &[&str]) -> Value {
        let path = self.path("list");
        let text: String = uris.iter().map(|u| format!("{u}\n")).collect();
        std::fs::write(&path, text).unwrap();
        let mut all = vec![
            "stage",
            path.to_str().unwrap(),
            "--json",
            "--dispatcher",
            &self.url,
        ];
        all.extend_from_slice(args);
        let out = super::run_diffuse(
            &all,
            None,
            &[("DIFFUSE_CLIENT_TOKEN", &self.client)],
            std::time::Duration::from_secs(1800),
        );
        assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
        if args.contains(&"--drop") {
            return Value::Null;
        }
        serde_json::from_str(out.stdout.trim()).unwrap()
    }

    pub fn done(&self, id: &str) -> Value {
        poll(&format!("{id} to end"), || {
            self.get(&format!("/v1/tasks/{id}")).filter(|t| {
                ["succeeded", "failed"].contains(&t["state"].as_str().unwrap_or_default())
            })
        })
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in &self.procs {
                p.dump();
            }
        }
    }
}
