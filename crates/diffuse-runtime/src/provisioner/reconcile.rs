//! Reconciliation: the jobs a resource manager shows under this dispatcher's names, set against
//! the pool's requests (a [`super::backend::Listing::Named`] backend's: Slurm's).
//!
//! Each request owns one job. A job under the pool's names that is not a request's own is an
//! *extra*: a second job for one request (an `sbatch` that failed yet submitted, then a retry
//! that submitted again), or a job no request knows (a submission Slurm handled after the pool
//! had looked it up and given up on it). Extras are allocations nobody asked for, charged to the
//! user, so each is dealt with at once. A second job for a request is cancelled (its worker
//! would join under the same name as the request's own). A job under a name no request has is
//! adopted as that request's worker while the pool still wants workers and has room under
//! `--max-workers`, and cancelled otherwise. Jobs that ended are left alone.
//!
//! This is a pure function of what the pool knows and what `squeue` showed, so it is tested
//! without a resource manager ([`reconcile`]'s unit tests); the pool carries the decisions out.

use super::job::{Job, RmState};
use std::collections::BTreeMap;

/// What to do with one extra job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Extra {
    /// Take it as the worker of the request it is named after (a name no request has).
    Adopt {
        /// Its id.
        job: String,
        /// Its name, from now on a request of the pool.
        name: String,
        /// Pending or running.
        state: RmState,
    },
    /// Cancel it.
    Cancel {
        /// Its id.
        job: String,
        /// Its name.
        name: String,
        /// Why it is extra, for the log and `diffuse status`.
        why: String,
    },
}

/// Where a job id sorts: by number, an array element (`<array id>_<k>`) by its array's, then
/// its index; an id that is neither, last.
fn job_order(id: &str) -> (u64, u64) {
    let (array, k) = id.split_once('_').unwrap_or((id, "0"));
    match (array.parse::<u64>(), k.parse::<u64>()) {
        (Ok(a), Ok(k)) => (a, k),
        _ => (u64::MAX, u64::MAX),
    }
}

/// The extras among `jobs`, given the pool's live requests (`name -> its job id, once known`)
/// and `room`: how many more workers the pool may take (what it still wants, within
/// `--max-workers`). A request whose job is not known yet (its submission is being settled)
/// owns every job of its name for now; the next look, once it has an id, sorts them out.
pub fn reconcile(
    requests: &BTreeMap<String, Option<String>>,
    jobs: &[Job],
    room: u32,
) -> Vec<Extra> {
    let mut room = room;
    let mut decisions = Vec::new();
    let mut live: Vec<&Job> = jobs
        .iter()
        .filter(|j| !matches!(j.state, RmState::Ended(_)))
        .collect();
    // Lowest id first: of several unknown jobs with one name, the oldest is the one adopted.
    live.sort_by_key(|j| (job_order(&j.id), j.id.clone()));
    let mut claimed: BTreeMap<&str, &str> = BTreeMap::new();
    for job in live {
        let cancel = |why: String| Extra::Cancel {
            job: job.id.clone(),
            name: job.name.clone(),
            why,
        };
        match requests.get(&job.name) {
            Some(None) => {}
            Some(Some(own)) if *own == job.id => {}
            Some(Some(own)) => decisions.push(cancel(format!(
                "a second job for request {} (its job is {own})",
                job.name
            ))),
            None => match claimed.get(job.name.as_str()) {
                Some(first) => decisions.push(cancel(format!(
                    "a second job named {} (job {first} has that name)",
                    job.name
                ))),
                None => {
                    claimed.insert(&job.name, &job.id);
                    if room > 0 {
                        room -= 1;
                        decisions.push(Extra::Adopt {
                            job: job.id.clone(),
                            name: job.name.clone(),
                            state: job.state.clone(),
                        });
                    } else {
                        decisions.push(cancel(format!(
                            "a job named {} that no request of the pool owns, and the pool \
                             wants no more workers",
                            job.name
                        )));
                    }
                }
            },
        }
    }
    decisions
}

/// The state of each request's own job: the job with its id, or (id not known yet) the lowest
/// id with its name. A request whose job is not among `jobs` is absent.
pub fn own_states(
    requests: &BTreeMap<String, Option<String>>,
    jobs: &[Job],
) -> BTreeMap<String, (String, RmState)> {
    let mut states: BTreeMap<String, (String, RmState)> = BTreeMap::new();
    for job in jobs {
        let Some(own) = requests.get(&job.name) else {
            continue;
        };
        let mine = match own {
            Some(id) => *id == job.id,
            None => states.get(&job.name).is_none_or(|(id, _)| {
                job.id.parse::<u64>().unwrap_or(u64::MAX) < id.parse::<u64>().unwrap_or(u64::MAX)
            }),
        };
        if mine {
            states.insert(job.name.clone(), (job.id.clone(), job.state.clone()));
        }
    }
    states
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, name: &str, state: RmState) -> Job {
        Job {
            id: id.into(),
            name: name.into(),
            state,
        }
    }

    fn requests(rows: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        rows.iter()
            .map(|(n, j)| (n.to_string(), j.map(str::to_string)))
            .collect()
    }

    #[test]
    fn a_second_job_for_one_request_is_cancelled_and_its_own_kept() {
        // The frozen controller: sbatch timed out yet made job 2; the retry made job 3.
        let reqs = requests(&[("dfs-1", Some("3")), ("dfs-2", Some("4"))]);
        let jobs = [
            job("2", "dfs-1", RmState::Running),
            job("3", "dfs-1", RmState::Running),
            job("4", "dfs-2", RmState::Pending),
        ];
        let d = reconcile(&reqs, &jobs, 5);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            matches!(&d[0], Extra::Cancel { job, .. } if job == "2"),
            "{d:?}"
        );
        let own = own_states(&reqs, &jobs);
        assert_eq!(own["dfs-1"].0, "3");
        assert_eq!(own["dfs-2"], ("4".to_string(), RmState::Pending));
    }

    #[test]
    fn an_unknown_job_is_adopted_while_wanted_and_cancelled_past_the_room() {
        let reqs = requests(&[("dfs-2", Some("5"))]);
        let jobs = [
            job("4", "dfs-1", RmState::Pending),
            job("5", "dfs-2", RmState::Running),
            job("7", "dfs-3", RmState::Running),
            job("6", "dfs-3", RmState::Running),
            job("8", "dfs-4", RmState::Running),
        ];
        let d = reconcile(&reqs, &jobs, 2);
        assert_eq!(
            d,
            vec![
                Extra::Adopt {
                    job: "4".into(),
                    name: "dfs-1".into(),
                    state: RmState::Pending
                },
                Extra::Adopt {
                    job: "6".into(),
                    name: "dfs-3".into(),
                    state: RmState::Running
                },
                Extra::Cancel {
                    job: "7".into(),
                    name: "dfs-3".into(),
                    why: "a second job named dfs-3 (job 6 has that name)".into()
                },
                Extra::Cancel {
                    job: "8".into(),
                    name: "dfs-4".into(),
                    why: "a job named dfs-4 that no request of the pool owns, and the pool \
                          wants no more workers"
                        .into()
                },
            ]
        );
        assert!(reconcile(&reqs, &jobs, 0)
            .iter()
            .all(|e| matches!(e, Extra::Cancel { .. })));
    }

    #[test]
    fn ended_jobs_and_requests_still_being_submitted_are_left_alone() {
        let reqs = requests(&[("dfs-1", None), ("dfs-2", Some("9"))]);
        let jobs = [
            job("3", "dfs-1", RmState::Pending),
            job("2", "dfs-1", RmState::Pending),
            job("8", "dfs-2", RmState::Ended("Slurm job 8 CANCELLED".into())),
            job("9", "dfs-2", RmState::Running),
            job("1", "dfs-0", RmState::Ended("Slurm job 1 COMPLETED".into())),
        ];
        assert!(reconcile(&reqs, &jobs, 0).is_empty());
        let own = own_states(&reqs, &jobs);
        assert_eq!(own["dfs-1"].0, "2", "the lowest id stands for it");
        assert_eq!(own["dfs-2"].0, "9");
        assert!(!own.contains_key("dfs-0"));
    }
}
