//! The object table: every object a task or a batch names, by URI and by the core's
//! [`ObjectId`], with what the dispatcher knows of it (its source version, the task that writes
//! it and the size it reported, for `tmp://` ones; the worker it was placed on), and Hercules'
//! locate, live (`GET /v1/objects/{uri}`: where an object is and what state it is in).

use super::sessions::Sessions;
use super::tasks::{Phase, TaskTable};
use crate::journal::OutcomeState;
use crate::proto::{AssignedInput, InputSource};
use diffuse_core::{Core, ObjectId, TaskId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// What `GET /v1/objects/{uri}` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObjectView {
    /// Canonical URI.
    pub uri: String,
    /// For a `tmp://` object: `pending` (its producer has not succeeded yet), `written` (on
    /// the workers in `nodes`), `lost` (every copy gone: made again if a task needs it),
    /// `released` (no task needs it; deleted), `failed` (its producer failed). For another
    /// URI: `cached` or `uncached`.
    pub state: String,
    /// Workers holding a copy.
    pub nodes: Vec<String>,
    /// Bytes, once written (`tmp://` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The task writing it (`tmp://` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// The worker it was placed on, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed: Option<String>,
}

/// Why a placement was refused.
#[derive(Clone, Debug)]
pub enum PlaceError {
    /// No object of that URI is known.
    Unknown(String),
    /// The request cannot be met (not `tmp://`, no such worker, ...).
    Invalid(String),
}

/// Every object named so far. An object's id is its index; ids are never reused.
#[derive(Default)]
pub struct ObjectTable {
    ids: FxHashMap<String, ObjectId>,
    uris: Vec<String>,
    /// Source version of each object: empty until a lookup or a worker's report gives one.
    versions: Vec<String>,
    /// The task that writes each intermediate (`tmp://`) object, ended or not.
    producers: FxHashMap<ObjectId, TaskId>,
    /// Sizes of intermediate objects, as their producers reported them.
    tmp_sizes: FxHashMap<ObjectId, u64>,
    /// `tmp://` objects placed on a worker (`PUT /v1/objects/{uri}/placement`), by its name.
    placed: FxHashMap<ObjectId, String>,
}

impl ObjectTable {
    /// The id of `uri`, given now if it has none yet.
    pub fn intern(&mut self, uri: &str) -> ObjectId {
        if let Some(o) = self.ids.get(uri) {
            return *o;
        }
        let o = ObjectId(self.uris.len() as u64);
        self.ids.insert(uri.to_string(), o);
        self.uris.push(uri.to_string());
        self.versions.push(String::new());
        o
    }

    /// The id of `uri`, if it has one.
    pub fn get(&self, uri: &str) -> Option<ObjectId> {
        self.ids.get(uri).copied()
    }

    /// The URI of `o`.
    pub fn uri(&self, o: ObjectId) -> &str {
        &self.uris[o.0 as usize]
    }

    /// The source version of `o` (empty: not known yet).
    pub fn version(&self, o: ObjectId) -> &str {
        &self.versions[o.0 as usize]
    }

    /// The source version of `o`, to change.
    pub fn version_mut(&mut self, o: ObjectId) -> &mut String {
        &mut self.versions[o.0 as usize]
    }

    /// The task that writes `o` (`tmp://` objects only).
    pub fn producer(&self, o: ObjectId) -> Option<TaskId> {
        self.producers.get(&o).copied()
    }

    /// `t` writes `o`.
    pub fn set_producer(&mut self, o: ObjectId, t: TaskId) {
        self.producers.insert(o, t);
    }

    /// The size `o`'s producer reported (`tmp://` objects only, once written).
    pub fn tmp_size(&self, o: ObjectId) -> Option<u64> {
        self.tmp_sizes.get(&o).copied()
    }

    /// `o`'s producer wrote `size` bytes.
    pub fn set_tmp_size(&mut self, o: ObjectId, size: u64) {
        self.tmp_sizes.insert(o, size);
    }

    /// The name of the worker `o` was placed on.
    pub fn placed(&self, o: ObjectId) -> Option<&str> {
        self.placed.get(&o).map(String::as_str)
    }

    /// `o` is placed on the worker named `name`.
    pub fn place(&mut self, o: ObjectId, name: &str) {
        self.placed.insert(o, name.to_string());
    }

    /// `o` as a worker is told to read or fetch it: `size` bytes from `source`.
    pub fn input(&self, o: ObjectId, size: u64, source: InputSource) -> AssignedInput {
        AssignedInput {
            uri: self.uri(o).to_string(),
            size,
            version: self.version(o).to_string(),
            source,
        }
    }

    /// Where `uri` is, and its state; None if no task names it.
    pub fn view(
        &self,
        uri: &str,
        core: &Core,
        sessions: &Sessions,
        tasks: &TaskTable,
    ) -> Option<ObjectView> {
        let o = self.get(uri)?;
        let nodes: Vec<String> = core
            .locate(o)
            .iter()
            .filter_map(|n| sessions.name(n).map(str::to_string))
            .collect();
        let placed = self.placed(o).map(str::to_string);
        let Some(producer) = self.producer(o) else {
            let state = if nodes.is_empty() {
                "uncached"
            } else {
                "cached"
            };
            return Some(ObjectView {
                uri: uri.to_string(),
                state: state.to_string(),
                nodes,
                size: None,
                producer: None,
                placed,
            });
        };
        let state = match (&tasks.get(producer).phase, core.intermediate_holders(o)) {
            (_, Some(h)) if !h.is_empty() => "written",
            (Phase::Done(OutcomeState::Succeeded), Some(_)) => "lost",
            (Phase::Done(OutcomeState::Succeeded), None) => "released",
            (Phase::Done(_), _) => "failed",
            _ => "pending",
        };
        Some(ObjectView {
            uri: uri.to_string(),
            state: state.to_string(),
            nodes,
            size: self.tmp_size(o),
            producer: Some(tasks.get(producer).def.id.clone()),
            placed,
        })
    }
}

/// The id of a URI the table knows (panics if it does not, as a map's index does).
impl std::ops::Index<&str> for ObjectTable {
    type Output = ObjectId;

    fn index(&self, uri: &str) -> &ObjectId {
        &self.ids[uri]
    }
}
