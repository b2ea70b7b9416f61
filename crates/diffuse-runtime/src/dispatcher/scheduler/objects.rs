//! Hercules' locate and place, live: `GET /v1/objects/{uri}` says where an object is and what
//! state it is in; `PUT /v1/objects/{uri}/placement` asks for a `tmp://` object on a worker
//! (its producer runs there if it has not started; once written, the object is copied there).

use super::{Phase, Scheduler};
use crate::journal::OutcomeState;
use crate::proto::{AssignedInput, InputSource, ToWorker};
use diffuse_core::{NodeId, ObjectId, Placement};
use serde::Serialize;

/// What `GET /v1/objects/{uri}` shows.
#[derive(Clone, Debug, Serialize)]
pub struct ObjectView {
    /// Canonical URI.
    pub uri: String,
    /// For a `tmp://` object: `pending` (its producer has not succeeded yet), `written` (on
    /// the workers in `nodes`), `lost` (every copy gone: made again if a task needs it),
    /// `released` (no task needs it; deleted), `failed` (its producer failed). For another
    /// URI: `cached` or `uncached`.
    pub state: &'static str,
    /// Workers holding a copy.
    pub nodes: Vec<String>,
    /// Bytes, once written (`tmp://` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The task writing it (`tmp://` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// The worker it was placed on, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
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

impl Scheduler {
    /// Where `uri` is, and its state; None if no task names it.
    pub(super) fn object_view(&self, uri: &str) -> Option<ObjectView> {
        let o = *self.objects.get(uri)?;
        let nodes: Vec<String> = self
            .core
            .locate(o)
            .iter()
            .filter_map(|n| self.sessions.name(n).map(str::to_string))
            .collect();
        let placed = self.placed.get(&o).cloned();
        let Some(&producer) = self.tmp_producer.get(&o) else {
            let state = if nodes.is_empty() {
                "uncached"
            } else {
                "cached"
            };
            return Some(ObjectView {
                uri: uri.to_string(),
                state,
                nodes,
                size: None,
                producer: None,
                placed,
            });
        };
        let state = match (
            &self.tasks.get(producer).phase,
            self.core.intermediate_holders(o),
        ) {
            (_, Some(h)) if !h.is_empty() => "written",
            (Phase::Done(OutcomeState::Succeeded), Some(_)) => "lost",
            (Phase::Done(OutcomeState::Succeeded), None) => "released",
            (Phase::Done(_), _) => "failed",
            _ => "pending",
        };
        Some(ObjectView {
            uri: uri.to_string(),
            state,
            nodes,
            size: self.tmp_sizes.get(&o).copied(),
            producer: Some(self.tasks.get(producer).def.id.clone()),
            placed,
        })
    }

    /// Place `tmp://` object `uri` on worker `name`: its producer, if it has not started, will
    /// run only there (a strict hint); if it runs, the object is copied there once written; if
    /// written, it is copied there now. Returns what was done, in a few words.
    pub(super) fn place(&mut self, uri: &str, name: &str) -> Result<String, PlaceError> {
        let Some(&o) = self.objects.get(uri) else {
            return Err(PlaceError::Unknown(format!(
                "no task reads or writes {uri}"
            )));
        };
        let Some(&producer) = self.tmp_producer.get(&o) else {
            return Err(PlaceError::Invalid(format!(
                "{uri}: only tmp:// objects are placed (others are cached where tasks read them)"
            )));
        };
        if !self.sessions.values().any(|s| s.name == name) {
            return Err(PlaceError::Invalid(format!(
                "no worker named '{name}' is connected"
            )));
        }
        let view = self.object_view(uri).expect("known object");
        if matches!(view.state, "failed" | "released") {
            return Err(PlaceError::Invalid(format!(
                "{uri} is {}: there is nothing to place",
                view.state
            )));
        }
        self.placed.insert(o, name.to_string());
        if view.nodes.iter().any(|n| n == name) {
            return Ok(format!("{uri} is already on '{name}'"));
        }
        if view.state == "written" {
            self.copy_placed(o);
            return Ok(format!("{uri} is being copied to '{name}'"));
        }
        let hint = Placement {
            node: self.node_name(name),
            strict: true,
            wait: std::time::Duration::ZERO,
        };
        let now = self.now();
        match self.core.handle_hint(producer, hint, now) {
            Ok(true) => Ok(format!(
                "its producer '{}' will run on '{name}'",
                self.tasks.get(producer).def.id
            )),
            // Running (or run again to remake it): copied there once written.
            _ => Ok(format!(
                "{uri} will be copied to '{name}' once its producer '{}' has written it",
                self.tasks.get(producer).def.id
            )),
        }
    }

    /// If `o` was placed on a worker that lacks it, that worker fetches it from a holder.
    pub(super) fn copy_placed(&mut self, o: ObjectId) {
        let Some(name) = self.placed.get(&o) else {
            return;
        };
        let Some(target) = self.sessions.by_name(name) else {
            return;
        };
        let holders = self.core.locate(o);
        if holders.contains(&target) {
            return;
        }
        if let Some(&from) = holders.first() {
            self.copy_object(o, from, target);
        }
    }

    /// Worker `to` fetches `o` from worker `from`, as a peer read (placement, replicas ahead of
    /// time); it reports the copy when it is cached.
    pub(super) fn copy_object(&mut self, o: ObjectId, from: NodeId, to: NodeId) {
        let (Some(source), true) = (self.sessions.get(&from), self.sessions.contains(&to)) else {
            return;
        };
        let size = self.tmp_sizes.get(&o).copied().unwrap_or(0);
        let input = AssignedInput {
            uri: self.uris[o.0 as usize].clone(),
            size,
            version: self.versions[o.0 as usize].clone(),
            source: InputSource::Peer {
                url: source.peer_url.clone(),
                also: self.other_holders(o, size, from, to),
            },
        };
        self.comm.send(
            to,
            ToWorker::Fetch {
                inputs: vec![input],
            },
        );
    }
}
