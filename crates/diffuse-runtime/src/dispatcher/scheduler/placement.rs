//! Placement hints, live: workers' names become the core's [`NodeName`]s ([`NodeNames`]), a
//! strict hint is checked at submission against the workers connected then, and whether a hint
//! held is recorded with the task's result. Hercules' place, live
//! (`PUT /v1/objects/{uri}/placement`): a `tmp://` object asked for on a worker (its producer
//! runs there if it has not started; once written, the object is copied there). The rule itself
//! is the core's ([`diffuse_core::Placement`]).

use super::objects::PlaceError;
use super::sessions::Sessions;
use super::shared::Shared;
use super::tasks::TaskTable;
use super::views::SubmitError;
use crate::spec::TaskDef;
use diffuse_core::{Core, NodeId, NodeName, ObjectId, Placement};
use rustc_hash::FxHashMap;

/// Workers' names as the core knows them (placement hints name them).
#[derive(Default)]
pub struct NodeNames {
    ids: FxHashMap<String, NodeName>,
    /// The names, by `NodeName`.
    names: Vec<String>,
}

impl NodeNames {
    /// The core's name for worker name `name` (the same for every worker of that name).
    pub fn id(&mut self, name: &str) -> NodeName {
        if let Some(n) = self.ids.get(name) {
            return *n;
        }
        let n = NodeName(self.names.len() as u32);
        self.ids.insert(name.to_string(), n);
        self.names.push(name.to_string());
        n
    }

    /// The core's form of `def`'s hint, if it has one.
    pub fn placement_of(&mut self, def: &TaskDef) -> Option<Placement> {
        let h = def.more.as_ref()?.hint.as_ref()?;
        Some(Placement {
            node: self.id(h.name()),
            strict: h.strict,
            wait: h.wait(),
        })
    }

    /// The error of a task whose strict hint's worker left.
    pub fn hinted_worker_left(&self, name: NodeName) -> String {
        let name = self.names.get(name.0 as usize).map_or("?", String::as_str);
        format!(
            "hint: worker '{name}' left the pool, and a strict hint runs only there (a lost connection counts as leaving)"
        )
    }
}

/// A strict hint must name a connected worker (and a slot it has): else the batch is refused,
/// naming the task and the workers there are.
pub fn check_hints(defs: &[TaskDef], sessions: &Sessions, core: &Core) -> Result<(), SubmitError> {
    for d in defs {
        let Some(h) = d.more.as_ref().and_then(|m| m.hint.as_ref()) else {
            continue;
        };
        if !h.strict {
            continue;
        }
        let slots = sessions
            .values()
            .filter(|s| s.name == h.name())
            .map(|s| s.slots)
            .max();
        let more = d.more();
        let want = diffuse_core::Resources {
            cores: more.cores.unwrap_or(1),
            memory: more.memory.unwrap_or(0),
            gpus: more.gpus.unwrap_or(0),
            disk: more.disk.unwrap_or(0),
        };
        let fits = sessions
            .iter()
            .filter(|(_, s)| s.name == h.name())
            .any(|(n, _)| core.node_capacity(*n).is_some_and(|c| want.fits_in(&c)));
        let refuse = |why: String| {
            Err(SubmitError::Invalid(format!(
                "task '{}': field 'hint': {why}",
                d.id
            )))
        };
        match (slots, h.slot_index()) {
            (None, _) => {
                let mut names: Vec<&str> = sessions.values().map(|s| s.name.as_str()).collect();
                names.sort_unstable();
                names.dedup();
                let shown = match names.len() {
                    0 => "none is connected".to_string(),
                    n if n > 10 => format!("connected: {}, ...", names[..10].join(", ")),
                    _ => format!("connected: {}", names.join(", ")),
                };
                return refuse(format!(
                    "no worker named '{}' is connected, and a strict hint runs only there ({shown})",
                    h.name()
                ));
            }
            (Some(n), Some(i)) if i >= n => {
                return refuse(format!(
                    "worker '{}' has {n} slots (0 to {}), not slot {i}",
                    h.name(),
                    n - 1
                ));
            }
            (Some(_), _) if !fits => {
                return refuse(format!(
                    "it asks for {want}, more than worker '{}' has, and a strict hint runs only there",
                    h.name()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether `def`'s hint held on `node` (None: it has none).
pub fn hint_held(def: &TaskDef, sessions: &Sessions, node: NodeId) -> Option<bool> {
    let h = def.more.as_ref()?.hint.as_ref()?;
    Some(sessions.get(&node).is_some_and(|s| s.name == h.name()))
}

/// Place `tmp://` object `uri` on worker `name`: its producer, if it has not started, will run
/// only there (a strict hint); if it runs, the object is copied there once written; if written,
/// it is copied there now. Returns what was done, in a few words.
pub fn place(
    uri: &str,
    name: &str,
    sh: &mut Shared,
    tasks: &TaskTable,
    names: &mut NodeNames,
) -> Result<String, PlaceError> {
    let Some(o) = sh.objects.get(uri) else {
        return Err(PlaceError::Unknown(format!(
            "no task reads or writes {uri}"
        )));
    };
    let Some(producer) = sh.objects.producer(o) else {
        return Err(PlaceError::Invalid(format!(
            "{uri}: only tmp:// objects are placed (others are cached where tasks read them)"
        )));
    };
    if !sh.sessions.values().any(|s| s.name == name) {
        return Err(PlaceError::Invalid(format!(
            "no worker named '{name}' is connected"
        )));
    }
    let view = sh
        .objects
        .view(uri, sh.core, sh.sessions, tasks)
        .expect("known object");
    if matches!(view.state.as_str(), "failed" | "released") {
        return Err(PlaceError::Invalid(format!(
            "{uri} is {}: there is nothing to place",
            view.state
        )));
    }
    sh.objects.place(o, name);
    if view.nodes.iter().any(|n| n == name) {
        return Ok(format!("{uri} is already on '{name}'"));
    }
    if view.state == "written" {
        copy_placed(o, sh);
        return Ok(format!("{uri} is being copied to '{name}'"));
    }
    let hint = Placement {
        node: names.id(name),
        strict: true,
        wait: std::time::Duration::ZERO,
    };
    let producer_id = &tasks.get(producer).def.id;
    match sh.core.handle_hint(producer, hint, sh.now) {
        Ok(true) => Ok(format!("its producer '{producer_id}' will run on '{name}'")),
        // Running (or run again to remake it): copied there once written.
        _ => Ok(format!(
            "{uri} will be copied to '{name}' once its producer '{producer_id}' has written it"
        )),
    }
}

/// If `o` was placed on a worker that lacks it, that worker fetches it from a holder.
pub fn copy_placed(o: ObjectId, sh: &mut Shared) {
    let Some(name) = sh.objects.placed(o) else {
        return;
    };
    let Some(target) = sh.sessions.by_name(name) else {
        return;
    };
    let holders = sh.core.locate(o);
    if holders.contains(&target) {
        return;
    }
    if let Some(&from) = holders.first() {
        let size = sh.objects.tmp_size(o).unwrap_or(0);
        sh.fetch_from_peer(o, size, from, target);
    }
}
