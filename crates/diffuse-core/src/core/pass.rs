//! The dispatch pass: which queued task each free slot takes (hinted tasks first, then the
//! node's policy within the job order's shares), and assigning a task to a node (where each
//! input is read from). Functions over a [`Step`] and the owners only a dispatch reads: where a
//! fetch reads from ([`Sources`]) and the racks.

use super::lifecycle::Step;
use super::sources::Sources;
use super::state::{Phase, Running};
use super::view;
use crate::action::{Action, Dispatch, Source};
use crate::dispatch::SchedView;
use crate::ids::{JobId, NodeId, ObjectId, TaskId};
use crate::racks::Racks;
use crate::sharing::share::ShareView;
use crate::time::Time;

/// Offer each free node's slots to the queued tasks: first the tasks hinted at it, then its
/// policy's choice within the job order's shares; a local pass (data held where the node is)
/// before one that takes any task. Where nodes hold tasks ready beyond their cores
/// ([`crate::CoreConfig::ready_tasks`]), the free cores are offered first, then the ready slots.
pub(super) fn run(s: &mut Step, sources: &Sources, racks: &Racks, now: Time) {
    if !s.queued.queue().is_empty() {
        s.hints.time(s.tasks, now);
        offer(s, sources, racks, now, false);
        if s.nodes.keeps_ready() && !s.queued.queue().is_empty() {
            offer(s, sources, racks, now, true);
        }
    }
    if s.queued.queue().is_empty() && !s.nodes.holding_ready().is_empty() {
        withdraw_stranded(s);
    }
}

/// With nothing queued, a core free on one node while another node holds a task ready behind
/// a running one: ask that task back (the newest held on each such node, one per free core),
/// so that it runs on the free core instead of waiting. The node gives it back if it has not
/// started it ([`crate::Outcome::Withdrawn`]); the pass then sends it to the free core.
fn withdraw_stranded(s: &mut Step) {
    let holding: Vec<NodeId> = s.nodes.holding_ready().iter().copied().collect();
    let mut free = s.nodes.with_a_free_core(holding.len());
    for node in holding {
        if free == 0 {
            return;
        }
        let Some(n) = s.nodes.get(node) else { continue };
        let newest = n
            .running
            .iter()
            .filter_map(|t| match &s.tasks.get(t)?.phase {
                Phase::Running(r) if r.held && !r.withdrawing && !r.cancelled => {
                    Some((r.since, *t))
                }
                _ => None,
            })
            .max();
        let Some((_, task)) = newest else { continue };
        let t = s.tasks.get_mut(&task).expect("running task exists");
        let attempt = t.attempt;
        if let Phase::Running(r) = &mut t.phase {
            r.withdrawing = true;
        }
        s.actions.push_back(Action::Withdraw {
            task,
            attempt,
            node,
        });
        free -= 1;
    }
}

/// Whether `node` runs a task that should end soon: of a job whose attempts end within the
/// ready bound, and not yet running for longer than it. A task held ready there starts soon.
fn runs_short(s: &Step, node: NodeId, now: Time) -> bool {
    let bound = s.cfg.ready_below_s;
    if bound == f64::INFINITY {
        return true;
    }
    s.nodes.get(node).is_some_and(|n| {
        n.running.iter().any(|t| {
            s.tasks.get(t).is_some_and(|e| {
                let young = match &e.phase {
                    Phase::Running(r) => now.since(r.since).as_secs_f64() < bound,
                    _ => false,
                };
                young && s.jobs.get(&e.job).is_some_and(|j| j.short(bound))
            })
        })
    })
}

/// One offer of the nodes' room (`ready`: the ready slots, else the free cores).
fn offer(s: &mut Step, sources: &Sources, racks: &Racks, now: Time, ready: bool) {
    // A dispatch moves the window, which can bring in a task for a node that already
    // declined in this pass: repeat until a pass changes nothing of that kind.
    // The free nodes as each pass began (a dispatch may fill one meanwhile), one list reused.
    let mut free: Vec<NodeId> = Vec::new();
    loop {
        let mut declined = false;
        let mut dispatched_after_decline = false;
        // The window's bound, kept until a dispatch changes the queue.
        let mut bound = None;
        for local_pass in [true, false] {
            // A node declined the second pass since the last dispatch.
            let mut any_declined = false;
            free.clear();
            free.extend(s.nodes.free().iter().copied());
            for &node in &free {
                // An empty queue has nothing for the nodes left, hinted or not (a hint binds
                // a queued task only).
                if s.queued.queue().is_empty() {
                    break;
                }
                // A ready slot only behind a task that ends soon (CoreConfig::ready_below_s).
                if ready && !runs_short(s, node, now) {
                    continue;
                }
                // A node takes the tasks hinted at it first.
                while s.nodes.has_room(node, ready) {
                    let Some(task) = next_hinted(s, node, now) else {
                        break;
                    };
                    assign(s, sources, racks, task, node, now);
                    bound = None;
                    any_declined = false;
                }
                while s.nodes.has_room(node, ready) && !s.queued.queue().is_empty() {
                    // A retried task avoids the node it failed on while another has room; one
                    // that node failed for a fault of its own, while another node is there.
                    let elsewhere = s.nodes.free().len() > 1;
                    let others = s.nodes.count() > 1;
                    let tasks = &*s.tasks;
                    let nodes = &*s.nodes;
                    let uniform = s.queued.uniform() && !s.hints.any_bound();
                    // Whether a task may run on a node with a free core now.
                    let fits_on = |t: TaskId, on: NodeId| {
                        uniform || {
                            let Some(n) = nodes.get(on) else {
                                return false;
                            };
                            let e = &tasks[&t];
                            // A ready slot holds one core and nothing else.
                            if ready && !e.resources.is_one_core() {
                                return false;
                            }
                            (e.resources.is_one_core()
                                || e.resources.fits_in(&n.capacity.minus(&n.used)))
                                && !((elsewhere || others && e.rare().avoid_always)
                                    && e.rare().avoid == Some(on))
                                && e.rare()
                                    .walltime
                                    .is_none_or(|w| n.ends_at.is_none_or(|end| now + w <= end))
                                && !(e.hint_live && e.hint().map(|h| h.node) != n.name)
                        }
                    };
                    let fits = |t: TaskId| fits_on(t, node);
                    let nodes = &*s.nodes;
                    let load = |n: NodeId| {
                        nodes.get(n).map_or(1.0, |e| {
                            e.reported_load.unwrap_or(
                                (e.used.cores as f64 / e.capacity.cores.max(1) as f64).min(1.0),
                            )
                        })
                    };
                    let beta = |t: TaskId| tasks.get(&t).and_then(|e| e.rare().dad_beta);
                    let view = SchedView {
                        beta: &beta,
                        queue: s.queued.queue(),
                        locality: s.copies.locality(),
                        index: s.copies.effective(),
                        held: s.copies.index(),
                        racks,
                        window_bound: *bound.get_or_insert_with(|| {
                            view::window_bound(s.queued, s.hints, s.cfg.window)
                        }),
                        busy_slots: s.nodes.busy(),
                        total_slots: s.nodes.slots(),
                        fits: &fits,
                        fits_on: &fits_on,
                        // Under the cores' offer, a node whose only room is a ready slot
                        // is busy: a policy must not wait for it as if it were free.
                        free: if ready {
                            s.nodes.free()
                        } else {
                            s.nodes.free_cores()
                        },
                        load: &load,
                    };
                    // Shares of the queue, each chosen from by its policy, in the job order's
                    // turn (see crate::sharing).
                    let policies = &*s.policies;
                    let kind_of = |t: TaskId| policies.of_job(tasks[&t].job);
                    let jobs = &*s.jobs;
                    let held = |j: JobId| jobs.get(&j).map_or(0, |e| e.running_cores);
                    let shares = s.queued.job_order().shares(&ShareView {
                        queue: s.queued.queue(),
                        window_bound: view.window_bound,
                        job_policies: policies.any_by_job(),
                        kind_of: &kind_of,
                        groups: policies.groups(),
                        held: &held,
                    });
                    // The others would decline as the last one did (see
                    // `DispatchPolicy::any_ignores_node`).
                    if !local_pass && any_declined && uniform && shares.is_none() {
                        break;
                    }
                    let job_of = |t: TaskId| tasks[&t].job;
                    let choice = s
                        .policies
                        .choose(shares, &view, &job_of, node, now, local_pass);
                    let Some(task) = choice else {
                        declined = true;
                        any_declined = !local_pass && s.policies.any_ignores_node();
                        break;
                    };
                    dispatched_after_decline |= declined;
                    assign(s, sources, racks, task, node, now);
                    bound = None;
                    any_declined = false;
                }
            }
        }
        if !dispatched_after_decline || s.queued.queue().is_empty() || s.nodes.free().is_empty() {
            break;
        }
    }
}

/// The first task bound to `node`'s name that fits what `node` has free now.
fn next_hinted(s: &Step, node: NodeId, now: Time) -> Option<TaskId> {
    s.hints.next_for(s.nodes.get(node)?, s.tasks, now)
}

/// Send `task` to `node`: out of the queue, each input read from where it is (held, on its way,
/// a peer, or storage), its node's slots and its job's cores taken, the hooks told, the
/// dispatch handed to the driver, and its fetches counted in transfer.
fn assign(s: &mut Step, sources: &Sources, racks: &Racks, task: TaskId, node: NodeId, now: Time) {
    let Phase::Queued { seq } = s.tasks[&task].phase else {
        panic!("policy chose {task}, which is not queued");
    };
    s.dequeue(task, seq);
    let use_locality = s.caches_for(task);
    let t = s.tasks.get_mut(&task).expect("task exists");
    t.attempt += 1;
    // Taken out while sources are picked (which reads the rest of the core), put back below.
    let task_inputs = std::mem::take(&mut t.inputs);
    let mut inputs = Vec::with_capacity(task_inputs.len());
    let mut peers: Vec<NodeId> = Vec::new();
    for input in &task_inputs {
        // An intermediate object is read from a node that holds it, under any policy: it
        // is not on persistent storage.
        let kept = match s.dataflow.get_mut(&input.object) {
            Some(im) => {
                im.read = true;
                true
            }
            None => false,
        };
        let source = if !use_locality && !kept {
            Source::Storage
        } else if s.copies.index().holds(node, input.object)
            || (use_locality && s.copies.in_transfer(node, input.object))
        {
            // Held, or being fetched to this node for another task: join that fetch.
            Source::Local
        } else {
            let holder =
                sources.pick_holder(s.copies.index(), s.nodes, racks, node, input.object, kept);
            match holder {
                Some(h) => {
                    peers.push(h);
                    Source::Peer(h)
                }
                None => Source::Storage,
            }
        };
        inputs.push((input.object, source));
    }
    let fetching: Vec<ObjectId> = inputs
        .iter()
        .filter(|(_, src)| use_locality && *src != Source::Local)
        .map(|(o, _)| *o)
        .collect();
    for p in &peers {
        s.nodes.serve(*p);
    }
    // No core free: it goes into a ready slot, held until one frees.
    let held_ready = !s.nodes.has_room(node, false);
    let t = s.tasks.get_mut(&task).expect("task exists");
    t.inputs = task_inputs;
    t.phase = Phase::Running(Box::new(Running {
        node,
        since: now,
        peers,
        fetching: fetching.clone(),
        cancelled: false,
        withdrawing: false,
        held: held_ready,
    }));
    let attempt = t.attempt;
    let held = t.resources;
    let job = t.job;
    s.jobs.entry(job).or_default().running_cores += held.cores as u64;
    s.nodes.occupy(node, task, held);
    s.counts.running += 1;
    s.notify(None, |h, v, fx| {
        h.dispatched(v, task, node, &inputs, use_locality, fx)
    });
    s.actions.push_back(Action::Dispatch(Dispatch {
        task,
        attempt,
        node,
        inputs,
        held: held_ready,
    }));
    for object in fetching {
        s.copies.transfer_started(node, object);
    }
}
