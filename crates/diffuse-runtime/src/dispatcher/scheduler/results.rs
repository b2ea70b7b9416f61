//! Results reused by content, the dispatcher's half (docs/runtime.md, "Results reused by
//! content"): the index of kept results by identity, the digests workers reported for the inputs
//! they read, and the tasks in flight by key, so that two identical tasks run once.
//!
//! At dispatch ([`Results::plan`]) a reusable task's key is computed from what is known of its
//! inputs: a digest where one was reported for the input's current version, else the version.
//! A kept result under that key, with a copy of each of its files on some worker, stands for
//! the task ([`Plan::Reuse`]); an identical task already in flight makes it wait
//! ([`Plan::Wait`]); otherwise it runs and its worker keeps its result. When an attempt ends
//! ([`Results::finished`]), its result is indexed under the identity made from the digests its
//! worker reported, and the tasks that waited for it are dispatched again: now they reuse it,
//! or (it failed) one of them runs.

use super::objects::ObjectTable;
use super::shared::Shared;
use crate::proto::{InputSource, ReuseFile, ReuseOrder, TaskReport};
use crate::reuse::kept::{STDERR, STDOUT};
use crate::reuse::store::{Loaded, Store};
use crate::reuse::{identity, reusable, Content, Identity, KeptResult};
use crate::spec::TaskDef;
use diffuse_core::{Dispatch, NodeId, TaskId};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// What to do with a dispatched attempt.
pub enum Plan {
    /// Run it; with `keep`, its worker keeps its result.
    Run {
        /// Keep its result.
        keep: bool,
    },
    /// A kept result stands for it.
    Reuse(ReuseOrder),
    /// An identical task is in flight: wait for it (under this key).
    Wait(Identity),
}

/// The kept results, what is known of inputs' content, and identical tasks in flight.
#[derive(Default)]
pub struct Results {
    on: bool,
    index: FxHashMap<Identity, KeptResult>,
    /// URI -> (source version, SHA-256) of the last read reported.
    digests: FxHashMap<String, (String, String)>,
    /// Key -> the task in flight under it.
    leaders: FxHashMap<Identity, TaskId>,
    key_of: FxHashMap<TaskId, Identity>,
    /// Key -> attempts waiting for its leader.
    parked: FxHashMap<Identity, Vec<Dispatch>>,
    store: Option<Store>,
    /// Tasks ended by reuse since start.
    pub reused: u64,
}

/// The index's counts, for `GET /v1/results` and `diffuse cache`.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct ResultsView {
    /// Whether reuse is on.
    pub reuse: bool,
    /// Results kept.
    pub results: u64,
    /// Bytes they keep (a file shared by two results counted twice).
    pub bytes: u64,
    /// Input digests known.
    pub digests: u64,
    /// Tasks ended by reuse since the dispatcher started.
    pub reused: u64,
    /// Tasks waiting for an identical one in flight.
    pub waiting: u64,
    /// Where the index is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
}

impl Results {
    /// Reuse `on` or off, over the `store` opened with what it held (None: nothing kept
    /// across restarts).
    pub fn new(on: bool, store: Option<(Store, Loaded)>) -> Results {
        let mut r = Results {
            on,
            ..Results::default()
        };
        if let Some((store, loaded)) = store {
            r.index = loaded.results.into_iter().collect();
            r.digests = loaded
                .digests
                .into_iter()
                .map(|(uri, v, sha)| (uri, (v, sha)))
                .collect();
            r.store = Some(store);
        }
        r
    }

    /// The key of `def` from what is known of its inputs now, and whether it is its identity
    /// (every input's content known).
    fn key(&self, def: &TaskDef, objects: &ObjectTable) -> (Identity, bool) {
        let mut complete = true;
        let contents: Vec<Content> = def
            .inputs
            .iter()
            .map(|uri| {
                let version = objects.get(uri).map_or("", |o| objects.version(o));
                if crate::uri::is_tmp(uri) && !version.is_empty() {
                    // An intermediate object's version is its SHA-256.
                    return Content::Digest(version);
                }
                match self.digests.get(uri) {
                    Some((v, sha)) if v == version => Content::Digest(sha),
                    _ => {
                        complete = false;
                        Content::Version(uri, version)
                    }
                }
            })
            .collect();
        (identity(def, &contents), complete)
    }

    /// What to do with attempt `d` of task `def`.
    pub fn plan(&mut self, d: &Dispatch, def: &TaskDef, sh: &Shared) -> Plan {
        if !self.on || !reusable(def) {
            return Plan::Run { keep: false };
        }
        let (key, _) = self.key(def, sh.objects);
        if let Some(r) = self.index.get(&key) {
            match order(r, def, d.node, sh) {
                Some(o) => return Plan::Reuse(o),
                None => {
                    // A copy is gone: the result cannot stand for anything any more.
                    self.index.remove(&key);
                    if let Some(s) = &self.store {
                        s.forget(vec![key]);
                    }
                }
            }
        }
        // A task keeps the key it first ran under for as long as it is in flight (a retry may
        // know more of its inputs by then): the tasks waiting for it wait under that key.
        let flight = *self.key_of.get(&d.task).unwrap_or(&key);
        match self.leaders.get(&flight) {
            Some(&leader) if leader != d.task => Plan::Wait(flight),
            _ => {
                self.leaders.insert(flight, d.task);
                self.key_of.insert(d.task, flight);
                Plan::Run { keep: true }
            }
        }
    }

    /// Attempt `d` waits under `key` for the identical task in flight.
    pub fn park(&mut self, d: Dispatch, key: Identity) {
        self.parked.entry(key).or_default().push(d);
    }

    /// Take task `t`'s waiting attempt, if it waits (it is being cancelled).
    pub fn unpark(&mut self, t: TaskId) -> Option<Dispatch> {
        let mut found = None;
        self.parked.retain(|_, ds| {
            if let Some(i) = ds.iter().position(|d| d.task == t) {
                found = Some(ds.remove(i));
            }
            !ds.is_empty()
        });
        found
    }

    /// An attempt of task `t` (`def`) ended as `report` says, on `node`; `success`: the core
    /// took it as the task's success. Its result is indexed if it kept one; the attempts that
    /// waited for it are returned, to be dispatched again.
    pub fn finished(
        &mut self,
        t: TaskId,
        def: &TaskDef,
        node: NodeId,
        report: &TaskReport,
        success: bool,
        sh: &mut Shared,
    ) -> Vec<Dispatch> {
        if success && report.reused_from.is_some() {
            self.reused += 1;
        }
        if success {
            self.keep(def, node, report, sh);
        }
        self.ended(t)
    }

    /// Task `t` is no longer in flight (it ended, or ended without a report): the attempts
    /// that waited for it, to be dispatched again.
    pub fn ended(&mut self, t: TaskId) -> Vec<Dispatch> {
        let Some(key) = self.key_of.remove(&t) else {
            return Vec::new();
        };
        if self.leaders.get(&key) == Some(&t) {
            self.leaders.remove(&key);
        }
        self.parked.remove(&key).unwrap_or_default()
    }

    /// Index the result `report` kept (or, for a reuse, refresh the one it reused), under the
    /// identity made from the digests its worker read.
    fn keep(&mut self, def: &TaskDef, node: NodeId, report: &TaskReport, sh: &mut Shared) {
        let Some(files) = &report.result else {
            return;
        };
        // A result names the task's own outputs, each once, its captured output, and a
        // function task's value: nothing else is ever written from it.
        let named = |f: &crate::reuse::ResultFile| {
            def.outputs.contains(&f.name)
                || f.name == STDOUT
                || f.name == STDERR
                || (f.name == crate::reuse::kept::VALUE && def.cmd.call().is_some())
        };
        if !files.iter().all(named)
            || def
                .outputs
                .iter()
                .any(|o| files.iter().filter(|f| f.name == *o).count() != 1)
        {
            tracing::warn!(task = %report.task, "a result that does not name the task's outputs: not kept");
            return;
        }
        for r in &report.read {
            let known = self.digests.get(&r.uri);
            if known.is_none_or(|(v, sha)| *v != r.version || *sha != r.sha256) {
                self.digests
                    .insert(r.uri.clone(), (r.version.clone(), r.sha256.clone()));
                if let Some(s) = &self.store {
                    s.digest(r.uri.clone(), r.version.clone(), r.sha256.clone());
                }
            }
        }
        // Its result files are objects on `node` now.
        for f in files {
            let o = sh.objects.intern(&f.object());
            *sh.objects.version_mut(o) = f.sha256.clone();
            sh.core.handle_object_size(o, f.size);
            let _ = sh.core.handle_object_cached(node, o, sh.now);
        }
        let (id, complete) = self.key(def, sh.objects);
        if !complete {
            // An input read without its digest (larger than the cache): not kept.
            return;
        }
        let task = report.reused_from.as_ref().unwrap_or(&report.task);
        if self
            .index
            .get(&id)
            .is_some_and(|r| r.files == *files && r.task == *task)
        {
            return;
        }
        let result = KeptResult {
            task: task.clone(),
            files: files.clone(),
        };
        if let Some(s) = &self.store {
            s.record(id, result.clone(), report.finished_at);
        }
        self.index.insert(id, result);
    }

    /// Forget every kept result and digest (`diffuse cache clear --results`); the copies stay
    /// in the caches until evicted. How many results were forgotten.
    pub fn clear(&mut self) -> u64 {
        let n = self.index.len() as u64;
        self.index.clear();
        self.digests.clear();
        if let Some(s) = &self.store {
            s.clear();
        }
        n
    }

    /// The counts.
    pub fn view(&self) -> ResultsView {
        ResultsView {
            reuse: self.on,
            results: self.index.len() as u64,
            bytes: self.index.values().map(KeptResult::bytes).sum(),
            digests: self.digests.len() as u64,
            reused: self.reused,
            waiting: self.parked.values().map(|p| p.len() as u64).sum(),
            store: self.store.as_ref().map(|s| s.path().display().to_string()),
        }
    }
}

/// Where `node` reads each file of `r` from: its own cache, or a peer holding it; the files
/// named as task `def`'s outputs (the same as the maker's, but for `tmp://` names, which are
/// labels). None if a file has no copy on a connected worker.
fn order(r: &KeptResult, def: &TaskDef, node: NodeId, sh: &Shared) -> Option<ReuseOrder> {
    let mut files = Vec::with_capacity(r.files.len());
    for (i, f) in r.files.iter().enumerate() {
        let mut f = f.clone();
        if let Some(name) = def.outputs.get(i) {
            f.name = name.clone();
        }
        let o = sh.objects.get(&f.object())?;
        let holders = sh.core.locate(o);
        let source = if holders.contains(&node) {
            InputSource::Local
        } else {
            let url = holders
                .iter()
                .find_map(|h| sh.sessions.get(h).map(|s| s.peer_url.clone()))?;
            InputSource::Peer {
                url,
                also: Vec::new(),
            }
        };
        files.push(ReuseFile { file: f, source });
    }
    Some(ReuseOrder {
        from: r.task.clone(),
        files,
    })
}
