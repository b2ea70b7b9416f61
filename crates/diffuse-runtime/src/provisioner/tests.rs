//! The pool's decisions for each kind of [`Listing`], driven step by step on a scripted
//! backend: no process, no resource manager, a few milliseconds. The real backends are tested
//! end to end by `crates/diffuse/tests/pool.rs`.

use super::backend::RmFuture;
use super::rm::RmPolicy;
use super::*;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A backend whose listings are scripted and whose calls are recorded.
struct Scripted {
    listing: Listing,
    /// Where a fresh job stands.
    fresh: RmState,
    /// The answers of the next `list` calls (none left: an empty listing).
    answers: Arc<Mutex<VecDeque<Vec<Job>>>>,
    /// Every call, in order: `submit <request>`, `list`, `cancel <request> <job>`, `wind_down`.
    calls: Arc<Mutex<Vec<String>>>,
    /// Job ids handed out.
    next: u64,
    /// Most requests one call submits.
    group: u32,
    /// Whether the next group submission fails.
    fail_group: Arc<std::sync::atomic::AtomicBool>,
}

impl ResourceManager for Scripted {
    fn listing(&self) -> Listing {
        self.listing
    }

    fn submit<'a>(
        &'a mut self,
        request: &'a str,
        _launch: &'a Launch,
    ) -> RmFuture<'a, Result<(String, RmState), String>> {
        self.calls.lock().unwrap().push(format!("submit {request}"));
        self.next += 1;
        let answer = Ok((self.next.to_string(), self.fresh.clone()));
        Box::pin(async move { answer })
    }

    fn group_size(&self) -> u32 {
        self.group
    }

    fn submit_group<'a>(
        &'a mut self,
        requests: &'a [String],
        launch: &'a Launch,
    ) -> RmFuture<'a, Result<Vec<(String, RmState)>, String>> {
        let request = launch.args.iter().skip_while(|a| *a != "--name").nth(1);
        let first = launch.env.iter().find(|(k, _)| k == "DIFFUSE_POOL_FIRST");
        self.calls.lock().unwrap().push(format!(
            "submit_group {} (--name {}, first {})",
            requests.join(" "),
            request.map_or("?", |r| r.as_str()),
            first.map_or("?", |(_, v)| v.as_str())
        ));
        self.next += 1;
        let array = self.next;
        let answer = if self
            .fail_group
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            Err("refused".to_string())
        } else {
            Ok((0..requests.len())
                .map(|k| (format!("{array}_{k}"), self.fresh.clone()))
                .collect())
        };
        Box::pin(async move { answer })
    }

    fn list(&mut self) -> RmFuture<'_, Result<Vec<Job>, String>> {
        self.calls.lock().unwrap().push("list".into());
        let jobs = self.answers.lock().unwrap().pop_front().unwrap_or_default();
        Box::pin(async move { Ok(jobs) })
    }

    fn cancel<'a>(
        &'a mut self,
        request: &'a str,
        job: &'a str,
        _launch: &'a Launch,
        _force: bool,
    ) -> RmFuture<'a, Result<(), String>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("cancel {request} {job}"));
        Box::pin(async { Ok(()) })
    }

    fn wind_down(&mut self, _grace: Duration) -> RmFuture<'_, ()> {
        self.calls.lock().unwrap().push("wind_down".into());
        Box::pin(async {})
    }
}

/// A pool on a [`Scripted`] backend, with what it said and what it asked.
struct Bench {
    pool: Pool,
    answers: Arc<Mutex<VecDeque<Vec<Job>>>>,
    calls: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<Vec<PoolEvent>>>,
    /// Set: the backend's next group submission fails.
    fail_group: Arc<std::sync::atomic::AtomicBool>,
}

impl Bench {
    /// Requests named `pfx-<n>`, at most 4 workers, listed at every tick, a worker given
    /// `start_timeout` to connect.
    fn new(listing: Listing, fresh: RmState, start_timeout: Duration) -> Bench {
        Bench::grouped(listing, fresh, start_timeout, 1)
    }

    /// The same, with a disconnected worker's job kept `lost_grace` for it to come back.
    fn losing(listing: Listing, fresh: RmState, lost_grace: Duration) -> Bench {
        Bench::with(listing, fresh, HOUR, 1, lost_grace)
    }

    /// The same, on a backend that submits up to `group` requests in one call.
    fn grouped(listing: Listing, fresh: RmState, start_timeout: Duration, group: u32) -> Bench {
        Bench::with(listing, fresh, start_timeout, group, HOUR)
    }

    fn with(
        listing: Listing,
        fresh: RmState,
        start_timeout: Duration,
        group: u32,
        lost_grace: Duration,
    ) -> Bench {
        let fail_group = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(VecDeque::new()));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let events = Arc::new(Mutex::new(Vec::new()));
        let rm = Scripted {
            listing,
            fresh,
            answers: answers.clone(),
            calls: calls.clone(),
            next: 0,
            group,
            fail_group: fail_group.clone(),
        };
        let sink = events.clone();
        let cfg = PoolConfig {
            backend: Backend::Local, // a name for the log only: the backend is `rm`
            max_workers: 4,
            max_pending: 4,
            cores: 1,
            cache_size: 1 << 20,
            cache_dir: "/nonexistent/{request}".into(),
            worker_args: Vec::new(),
            dispatcher_url: "http://127.0.0.1:1".into(),
            worker_token: "token".into(),
            worker_env: Vec::new(),
            exe: PathBuf::from("/nonexistent/diffuse"),
            state_dir: PathBuf::from("/nonexistent"),
            prefix: "pfx".into(),
            rm: RmPolicy::default(),
            poll_interval: Duration::ZERO,
            start_timeout,
            release_grace: Duration::from_secs(3600),
            lost_grace,
        };
        let pool = Pool::with_backend(
            cfg,
            Box::new(rm),
            Box::new(move |ev| sink.lock().unwrap().push(ev)),
        );
        Bench {
            pool,
            answers,
            calls,
            events,
            fail_group,
        }
    }

    /// The next listing's answer.
    fn lists(&self, jobs: &[(&str, &str, RmState)]) {
        let jobs = jobs
            .iter()
            .map(|(id, name, state)| Job {
                id: id.to_string(),
                name: name.to_string(),
                state: state.clone(),
            })
            .collect();
        self.answers.lock().unwrap().push_back(jobs);
    }

    fn state(&self, request: &str) -> Option<RequestState> {
        self.pool.requests.get(request).map(|r| r.state)
    }

    /// The backend's calls since the last look.
    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    /// Why each request that never joined will not come, since the last look.
    fn never_joined(&self) -> Vec<(String, String)> {
        let events = std::mem::take(&mut *self.events.lock().unwrap());
        events
            .into_iter()
            .filter_map(|ev| match ev {
                PoolEvent::NeverJoined { request, reason } => Some((request, reason)),
                _ => None,
            })
            .collect()
    }

    /// The extra jobs adopted (true) or cancelled, since the last look.
    fn extras(&self) -> Vec<(String, bool)> {
        let events = std::mem::take(&mut *self.events.lock().unwrap());
        events
            .into_iter()
            .filter_map(|ev| match ev {
                PoolEvent::Extra { job, adopted, .. } => Some((job, adopted)),
                _ => None,
            })
            .collect()
    }
}

const NAMED: Listing = Listing::Named { command: "qlist" };
const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn a_named_listing_gives_a_job_up_only_when_two_listings_in_a_row_miss_it() {
    let mut b = Bench::new(NAMED, RmState::Pending, HOUR);
    b.pool.adopt().await; // nothing of an earlier run
    b.pool.on_cmd(PoolCmd::Acquire(1)).await;
    assert_eq!(b.calls(), ["list", "submit pfx-1"]);
    assert_eq!(b.state("pfx-1"), Some(RequestState::Pending));
    b.lists(&[("1", "pfx-1", RmState::Running)]);
    b.pool.tick().await;
    assert_eq!(b.state("pfx-1"), Some(RequestState::Starting));
    b.lists(&[]); // missed once: maybe late
    b.pool.tick().await;
    b.lists(&[("1", "pfx-1", RmState::Running)]);
    b.pool.tick().await;
    b.lists(&[]);
    b.pool.tick().await;
    assert_eq!(b.state("pfx-1"), Some(RequestState::Starting), "one miss");
    assert!(b.never_joined().is_empty());
    b.lists(&[]);
    b.pool.tick().await; // the second miss in a row
    assert_eq!(b.state("pfx-1"), None);
    assert_eq!(
        b.never_joined(),
        [(
            "pfx-1".to_string(),
            "its job is no longer in qlist".to_string()
        )]
    );
}

#[tokio::test]
async fn an_earlier_runs_worker_that_joins_stands_for_one_worker_asked_for() {
    let mut b = Bench::new(NAMED, RmState::Pending, HOUR);
    b.lists(&[
        ("7", "pfx-1", RmState::Running),
        ("8", "pfx-2", RmState::Running),
    ]);
    b.pool.adopt().await;
    // A restarted dispatcher asks before the earlier run's workers are back: 4 for its queue,
    // room for 2 (at most 4).
    b.pool.on_cmd(PoolCmd::Acquire(4)).await;
    assert_eq!(b.calls(), ["list", "submit pfx-3", "submit pfx-4"]);
    // They come back: the core counts them as 2 of the 4, so nothing is left to ask for.
    for r in ["pfx-1", "pfx-2"] {
        b.pool.on_cmd(PoolCmd::Joined(r.into())).await;
    }
    // One of their jobs ends: room, and no stale want to fill it with.
    for _ in 0..2 {
        b.lists(&[
            ("7", "pfx-1", RmState::Ended("COMPLETED".into())),
            ("8", "pfx-2", RmState::Running),
            ("1", "pfx-3", RmState::Pending),
            ("2", "pfx-4", RmState::Pending),
        ]);
        b.pool.tick().await;
    }
    assert_eq!(b.state("pfx-1"), None);
    assert_eq!(b.calls(), ["list", "list"], "nothing submitted");
}

#[tokio::test]
async fn a_named_listings_jobs_of_no_request_are_adopted_at_start_and_cancelled_once_later() {
    let mut b = Bench::new(NAMED, RmState::Pending, HOUR);
    b.lists(&[("7", "pfx-3", RmState::Running)]);
    b.pool.adopt().await;
    assert_eq!(b.state("pfx-3"), Some(RequestState::Starting));
    assert_eq!(b.extras(), [("7".to_string(), true)]);
    b.pool.on_cmd(PoolCmd::Acquire(1)).await;
    assert_eq!(
        b.calls(),
        ["list", "submit pfx-4"],
        "numbered after the adopted"
    );
    // Wanting no more workers: a job under the pool's names that no request owns is cancelled,
    // once, however many listings show it while it ends.
    for _ in 0..2 {
        b.lists(&[
            ("7", "pfx-3", RmState::Running),
            ("1", "pfx-4", RmState::Pending),
            ("9", "pfx-9", RmState::Running),
        ]);
        b.pool.tick().await;
    }
    assert_eq!(b.calls(), ["list", "cancel pfx-9 9", "list"]);
    assert_eq!(b.extras(), [("9".to_string(), false)]);
    assert_eq!(b.state("pfx-9"), None);
}

#[tokio::test]
async fn an_own_listing_is_listed_every_tick_and_neither_reconciled_nor_given_up() {
    let mut b = Bench::new(Listing::Own, RmState::Running, HOUR);
    b.pool.adopt().await;
    b.pool.on_cmd(PoolCmd::Acquire(1)).await;
    assert_eq!(b.calls(), ["submit pfx-1"], "no look for an earlier run");
    assert_eq!(b.state("pfx-1"), Some(RequestState::Starting));
    for _ in 0..3 {
        b.lists(&[("9", "pfx-9", RmState::Running)]); // not pfx-1; a job of no request
        b.pool.tick().await;
    }
    assert_eq!(b.calls(), ["list", "list", "list"], "nothing cancelled");
    assert_eq!(
        b.state("pfx-1"),
        Some(RequestState::Starting),
        "never missed"
    );
    assert!(b.extras().is_empty());
    b.lists(&[("1", "pfx-1", RmState::Ended("it exited".into()))]);
    b.pool.tick().await;
    assert_eq!(b.state("pfx-1"), None);
    assert_eq!(
        b.never_joined(),
        [("pfx-1".to_string(), "it exited".to_string())]
    );
}

#[tokio::test]
async fn an_unlisted_backends_jobs_are_never_listed_and_gone_once_stopped() {
    let mut b = Bench::new(Listing::Unlisted, RmState::Running, Duration::ZERO);
    b.pool.adopt().await;
    b.pool.on_cmd(PoolCmd::Acquire(1)).await;
    assert_eq!(b.state("pfx-1"), Some(RequestState::Starting));
    b.pool.tick().await; // start time-out 0: stopped at once
    assert_eq!(b.calls(), ["submit pfx-1", "cancel pfx-1 1"]);
    assert_eq!(b.state("pfx-1"), None, "stopped is gone");
    assert_eq!(b.never_joined().len(), 1, "counted once");
}

#[tokio::test]
async fn shutdown_cancels_every_job_then_winds_the_backend_down() {
    let mut b = Bench::new(Listing::Own, RmState::Running, HOUR);
    b.pool.on_cmd(PoolCmd::Acquire(2)).await;
    b.pool.shutdown().await;
    assert_eq!(
        b.calls(),
        [
            "submit pfx-1",
            "submit pfx-2",
            "cancel pfx-1 1",
            "cancel pfx-2 2",
            "wind_down"
        ]
    );
}

#[tokio::test]
async fn a_grouped_backend_gets_the_requests_that_fit_in_one_call_each() {
    let mut b = Bench::grouped(NAMED, RmState::Pending, HOUR, 3);
    b.pool.adopt().await;
    b.pool.on_cmd(PoolCmd::Acquire(4)).await;
    // Three in one call (their names come from the job), the fourth alone (its own name).
    assert_eq!(
        b.calls(),
        [
            "list",
            "submit_group pfx-1 pfx-2 pfx-3 (--name {request}, first 1)",
            "submit pfx-4"
        ]
    );
    assert_eq!(b.state("pfx-2"), Some(RequestState::Pending));
    // Each element is followed as its own request.
    b.lists(&[
        ("1_0", "pfx-1", RmState::Running),
        ("1_1", "pfx-2", RmState::Pending),
        ("1_2", "pfx-3", RmState::Ended("CANCELLED".into())),
        ("2", "pfx-4", RmState::Pending),
    ]);
    b.pool.tick().await;
    assert_eq!(b.state("pfx-1"), Some(RequestState::Starting));
    assert_eq!(b.state("pfx-2"), Some(RequestState::Pending));
    assert_eq!(b.state("pfx-3"), None);
    // A failed group submission makes none of its requests.
    let mut b = Bench::grouped(Listing::Own, RmState::Running, HOUR, 4);
    b.fail_group
        .store(true, std::sync::atomic::Ordering::SeqCst);
    b.pool.on_cmd(PoolCmd::Acquire(4)).await;
    assert!((1..=4).all(|k| b.state(&format!("pfx-{k}")).is_none()));
    assert_eq!(b.never_joined().len(), 4, "each said why");
}

#[tokio::test]
async fn a_disconnected_workers_job_is_kept_for_the_lost_grace_then_cancelled() {
    let grace = Duration::from_millis(300);
    let mut b = Bench::losing(NAMED, RmState::Running, grace);
    b.pool.adopt().await;
    b.pool.on_cmd(PoolCmd::Acquire(2)).await;
    for r in ["pfx-1", "pfx-2"] {
        b.pool.on_cmd(PoolCmd::Joined(r.into())).await;
    }
    let live = [
        ("1", "pfx-1", RmState::Running),
        ("2", "pfx-2", RmState::Running),
    ];
    b.lists(&live);
    b.pool.tick().await;
    b.calls();
    // Both lose their connections; one comes back within the grace, the other does not.
    for r in ["pfx-1", "pfx-2"] {
        b.pool.on_cmd(PoolCmd::Disconnected(r.into())).await;
    }
    assert_eq!(b.state("pfx-1"), Some(RequestState::Lost));
    b.lists(&live);
    b.pool.tick().await;
    assert_eq!(b.calls(), ["list"], "nothing cancelled within the grace");
    b.pool.on_cmd(PoolCmd::Joined("pfx-1".into())).await;
    assert_eq!(b.state("pfx-1"), Some(RequestState::Joined));
    tokio::time::sleep(grace + Duration::from_millis(50)).await;
    b.lists(&live);
    b.pool.tick().await;
    assert_eq!(
        b.calls(),
        ["list", "cancel pfx-2 2"],
        "only the one still away"
    );
    assert_eq!(b.state("pfx-1"), Some(RequestState::Joined));
}
