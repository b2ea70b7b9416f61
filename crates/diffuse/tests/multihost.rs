//! Across hosts: a dispatcher and workers in separate network namespaces, each with its own
//! address and cache, talking over real TCP. A worker listening on 0.0.0.0 must advertise an
//! address its peers can reach.

mod common;

use common::cluster::*;
use common::host::skip;
use common::testbed::Testbed;
use common::BIN;
use serde_json::Value;
use std::process::Command;

#[test]
fn workers_on_separate_hosts_fetch_from_each_other() {
    let Some(bed) = Testbed::up(3) else {
        return skip("network namespaces need root and iproute2");
    };
    let dir = tempfile::tempdir().unwrap();
    let (client, worker) = (random_token(), random_token());
    let env = |cmd: &mut Command| {
        cmd.env("DIFFUSE_CLIENT_TOKEN", &client)
            .env("DIFFUSE_WORKER_TOKEN", &worker)
            .env("DIFFUSE_LOG", "info");
    };
    let url = format!("http://{}:8700", bed.addr(0));
    let mut d = bed.command(0, BIN);
    d.args(["dispatcher", "--listen", &format!("{}:8700", bed.addr(0))])
        .arg("--journal")
        .arg(dir.path().join("journal.sqlite"));
    env(&mut d);
    let mut procs = vec![Proc::spawn(
        "dispatcher (host 0)",
        &mut d,
        dir.path().join("d.log"),
    )];
    let http = http();
    let get = |path: &str| -> Option<Value> {
        http.get(format!("{url}{path}"))
            .bearer_auth(&client)
            .send()
            .ok()?
            .json()
            .ok()
    };
    poll("the dispatcher on host 0", || get("/v1/status"));
    let start_worker = |host: usize, name: &str, procs: &mut Vec<Proc>| {
        let mut w = bed.command(host, BIN);
        w.args([
            "worker",
            "--dispatcher",
            &url,
            "--cache-size",
            "100MB",
            "--slots",
            "1",
        ])
        .args(["--name", name])
        .arg("--cache-dir")
        .arg(dir.path().join(format!("cache-{name}")));
        env(&mut w);
        let log = dir.path().join(format!("worker-{name}.log"));
        procs.push(Proc::spawn(
            &format!("worker {name} (host {host})"),
            &mut w,
            log,
        ));
    };
    let submit = |tasks: &[Value]| {
        let body: String = tasks.iter().map(|t| format!("{t}\n")).collect();
        let r = http
            .post(format!("{url}/v1/tasks"))
            .bearer_auth(&client)
            .body(body)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().unwrap_or_default());
    };
    let done = |id: &str| {
        poll(&format!("{id} to end"), || {
            get(&format!("/v1/tasks/{id}")).filter(|t| {
                ["succeeded", "failed"].contains(&t["state"].as_str().unwrap_or_default())
            })
        })
    };
    let workers = |n: u64| {
        poll("workers", || {
            get("/v1/status").filter(|s| s["workers"] == n)
        })
    };

    start_worker(1, "A", &mut procs);
    workers(1);
    let size = 2 << 20;
    let x = dir.path().join("x.bin");
    std::fs::write(&x, random_bytes(size)).unwrap();
    let uri = file_uri(&x);
    submit(&[wc_task("t1", &uri)]);
    let t1 = done("t1");
    assert_eq!(t1["state"], "succeeded", "{t1}");
    // A's only slot stays busy, so the next reader of x goes to B.
    let gate = dir.path().join("gate");
    submit(&[gated_task("hold", &gate)]);
    poll("A to be busy", || {
        get("/v1/tasks/hold").filter(|t| t["state"] == "running")
    });
    start_worker(2, "B", &mut procs);
    workers(2);
    submit(&[wc_task("t2", &uri)]);
    let t2 = done("t2");
    std::fs::write(&gate, b"go").unwrap();
    assert_eq!(t2["state"], "succeeded", "{t2}");
    assert_eq!(t2["node"], "B", "{t2}");
    let r = report(&t2);
    assert_eq!(
        traffic(&r["traffic"]),
        [0, 1, 0, 0, size as u64, 0],
        "B read x from A across hosts (a worker that advertised 0.0.0.0 would be unreachable): {r}"
    );
    // A task's output, fetched by the dispatcher (host 0) from the worker that ran it (host 1).
    let stdout = http
        .get(format!("{url}/v1/tasks/t1/logs"))
        .bearer_auth(&client)
        .send()
        .unwrap();
    assert!(stdout.status().is_success(), "{}", stdout.status());
    let stdout = stdout.text().unwrap();
    assert!(stdout.starts_with(&size.to_string()), "{stdout}");
    let log = std::fs::read_to_string(dir.path().join("d.log")).unwrap();
    assert!(
        log.contains(&format!("peer=http://{}:", bed.addr(1))),
        "A advertised its own host's address:\n{log}"
    );
    drop(procs);
}
