//! Workload generators: MI, SW and AP exactly as defined in `shared/papers/NOTES.md`, plus
//! hand-written task lists for tests and lists read from a JSON Lines file ([`read_arrivals`]).
//!
//! A workload is a lazy, seeded stream of arrivals in time order, so that the 2,000,000 tasks of
//! SW are never all in memory at once.

use diffuse_core::ObjectId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// 10 MB, as the paper counts (10^7 bytes: 1000 tasks/s x 10 MB = 80 Gb/s).
pub const MB: u64 = 1_000_000;

/// One task arriving at the dispatcher.
#[derive(Clone, Debug, PartialEq)]
pub struct Arrival {
    /// Arrival time, seconds since the start.
    pub time: f64,
    /// Objects read and their sizes.
    pub inputs: Vec<(ObjectId, u64)>,
    /// Compute time, seconds.
    pub compute_s: f64,
    /// Cores it holds while it runs (1 in the paper's workloads).
    pub cores: u32,
    /// Intermediate objects it writes, with their sizes: kept on its node and read by later
    /// arrivals that list them as inputs (none in the paper's workloads).
    pub produces: Vec<(ObjectId, u64)>,
    /// Earlier arrivals (by position, from 0) that must succeed before it runs.
    pub after: Vec<u64>,
    /// Its job (0 in the paper's workloads): the unit of FIFO/Fair sharing.
    pub job: u32,
    /// Its priority: higher runs first (0 in the paper's workloads).
    pub priority: i16,
}

/// Which workload to generate.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Monotonically increasing arrival rate: 250,000 tasks over 10,000 files of 10 MB.
    Mi,
    /// Sine-wave arrival rate: 2,000,000 tasks over 100,000 files of 10 MB.
    Sw,
    /// All-pairs 500 x 500 over two sets of 12 MB items, all submitted at once.
    Ap {
        /// Compute per task (1 s, or 0.1 s for the data-intensive variant).
        compute_s: f64,
    },
    /// A fixed list (tests, small experiments). Must be sorted by time.
    Custom(Vec<Arrival>),
}

/// Summary facts about a workload, for reports and the ideal makespan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkloadInfo {
    /// Short name.
    pub name: String,
    /// Number of tasks.
    pub tasks: u64,
    /// Distinct objects in the dataset.
    pub objects: u64,
    /// Bytes in the dataset (the working set W).
    pub dataset_bytes: u64,
    /// Bytes each task reads (average).
    pub bytes_per_task: f64,
    /// Inputs per task (average).
    pub inputs_per_task: f64,
    /// Compute per task, seconds (average).
    pub compute_s: f64,
    /// Time of the last arrival, seconds.
    pub last_arrival_s: f64,
}

/// MI arrival rate in interval `i` (60 s each): A_0 = 1, A_i = min(ceil(1.3 A_{i-1}), 1000).
pub fn mi_rates() -> impl Iterator<Item = u64> {
    let mut a = 1u64;
    let mut first = true;
    std::iter::from_fn(move || {
        if !first {
            a = ((a as f64 * 1.3).ceil() as u64).min(1000);
        }
        first = false;
        Some(a)
    })
}

/// SW arrival rate (tasks/s) in the second starting at `sec` (from the Falkon source code).
pub fn sw_rate(sec: u64) -> u64 {
    let t = sec as f64 / 60.0 + 0.11;
    let a = ((t.sqrt() * 2.859678).sin() + 1.0) * t * 5.705;
    a.floor().clamp(0.0, 1000.0) as u64
}

const MI_TASKS: u64 = 250_000;
const MI_FILES: u64 = 10_000;
const SW_TASKS: u64 = 2_000_000;
const SW_FILES: u64 = 100_000;
const AP_SIDE: u64 = 500;
const AP_ITEM: u64 = 12 * MB;

impl Workload {
    /// Facts about the workload (computed without generating it, except `Custom`).
    pub fn info(&self) -> WorkloadInfo {
        match self {
            Workload::Mi => self.one_file_per_task("mi", MI_TASKS, MI_FILES),
            Workload::Sw => self.one_file_per_task("sw", SW_TASKS, SW_FILES),
            Workload::Ap { compute_s } => WorkloadInfo {
                name: "ap".into(),
                tasks: AP_SIDE * AP_SIDE,
                objects: 2 * AP_SIDE,
                dataset_bytes: 2 * AP_SIDE * AP_ITEM,
                bytes_per_task: (2 * AP_ITEM) as f64,
                inputs_per_task: 2.0,
                compute_s: *compute_s,
                last_arrival_s: 0.0,
            },
            Workload::Custom(list) => {
                let n = list.len().max(1) as f64;
                let mut objects: Vec<(ObjectId, u64)> =
                    list.iter().flat_map(|a| a.inputs.iter().copied()).collect();
                objects.sort();
                objects.dedup_by_key(|(o, _)| *o);
                WorkloadInfo {
                    name: "custom".into(),
                    tasks: list.len() as u64,
                    objects: objects.len() as u64,
                    dataset_bytes: objects.iter().map(|(_, s)| s).sum(),
                    bytes_per_task: list
                        .iter()
                        .flat_map(|a| &a.inputs)
                        .map(|(_, s)| *s as f64)
                        .sum::<f64>()
                        / n,
                    inputs_per_task: list.iter().map(|a| a.inputs.len() as f64).sum::<f64>() / n,
                    compute_s: list.iter().map(|a| a.compute_s).sum::<f64>() / n,
                    last_arrival_s: list.last().map_or(0.0, |a| a.time),
                }
            }
        }
    }

    /// MI and SW: each task reads one of `files` 10 MB files and computes 10 ms.
    fn one_file_per_task(&self, name: &str, tasks: u64, files: u64) -> WorkloadInfo {
        WorkloadInfo {
            name: name.into(),
            tasks,
            objects: files,
            dataset_bytes: files * 10 * MB,
            bytes_per_task: (10 * MB) as f64,
            inputs_per_task: 1.0,
            compute_s: 0.01,
            last_arrival_s: self.last_arrival(),
        }
    }

    fn last_arrival(&self) -> f64 {
        let mut it = self.arrivals(0);
        let mut last = 0.0;
        // Cheap: only times are needed, but generation is fast enough (2M tasks in ~0.1 s).
        for a in it.by_ref() {
            last = a.time;
        }
        last
    }

    /// The arrivals, in time order, with file choices drawn from `seed`.
    pub fn arrivals(&self, seed: u64) -> Box<dyn Iterator<Item = Arrival> + Send> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        match self {
            Workload::Mi => {
                let mut rates = mi_rates();
                let per_second = std::iter::from_fn(move || rates.next())
                    .flat_map(|a| std::iter::repeat_n(a, 60));
                Box::new(
                    spread(per_second)
                        .take(MI_TASKS as usize)
                        .map(move |time| one_file(time, rng.random_range(0..MI_FILES), 0.01)),
                )
            }
            Workload::Sw => Box::new(
                spread((0u64..).map(sw_rate))
                    .take(SW_TASKS as usize)
                    .map(move |time| one_file(time, rng.random_range(0..SW_FILES), 0.01)),
            ),
            Workload::Ap { compute_s } => {
                let c = *compute_s;
                Box::new((0..AP_SIDE * AP_SIDE).map(move |k| Arrival {
                    time: 0.0,
                    inputs: vec![
                        (ObjectId(k / AP_SIDE), AP_ITEM),
                        (ObjectId(AP_SIDE + k % AP_SIDE), AP_ITEM),
                    ],
                    compute_s: c,
                    cores: 1,
                    produces: Vec::new(),
                    after: Vec::new(),
                    job: 0,
                    priority: 0,
                }))
            }
            Workload::Custom(list) => Box::new(list.clone().into_iter()),
        }
    }
}

fn one_file(time: f64, file: u64, compute_s: f64) -> Arrival {
    Arrival {
        time,
        inputs: vec![(ObjectId(file), 10 * MB)],
        compute_s,
        cores: 1,
        produces: Vec::new(),
        after: Vec::new(),
        job: 0,
        priority: 0,
    }
}

/// Turn per-second rates into arrival times spaced evenly within each second.
fn spread(rates: impl Iterator<Item = u64>) -> impl Iterator<Item = f64> {
    rates
        .enumerate()
        .flat_map(|(sec, a)| (0..a).map(move |k| sec as f64 + k as f64 / a as f64))
}

/// Read a workload from JSON Lines, one task per line:
/// `{"time": s, "compute_s": s, "inputs": [[object_index, bytes], ...], "cores": 1}`.
///
/// `time` is the arrival in seconds from the start and `compute_s` the time it runs once its
/// inputs are read (both from 0 to 10^9); `inputs` (default none) names objects by index,
/// each with its size in bytes; `cores` defaults to 1; an optional `id` string is ignored.
/// Blank lines are skipped. Arrivals may come in any order: they are sorted by time (ties keep
/// the file's order). An object given two different sizes, an object listed twice in one task,
/// an unknown field or a malformed line is refused with the line number (from 1) named.
pub fn read_arrivals(text: &str) -> Result<Vec<Arrival>, String> {
    let mut out = Vec::new();
    // Object index -> (size, first line that gave it).
    let mut sizes: rustc_hash::FxHashMap<u64, (u64, usize)> = Default::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let a = arrival_line(line).map_err(|e| format!("line {n}: {e}"))?;
        let mut seen = Vec::with_capacity(a.inputs.len());
        for &(ObjectId(o), size) in &a.inputs {
            if seen.contains(&o) {
                return Err(format!("line {n}: object {o} is listed twice"));
            }
            seen.push(o);
            let (first, at) = *sizes.entry(o).or_insert((size, n));
            if first != size {
                return Err(format!(
                    "line {n}: object {o} is {size} bytes here but {first} bytes on line {at}"
                ));
            }
        }
        out.push(a);
    }
    if out.is_empty() {
        return Err("no arrivals (every line is blank)".into());
    }
    out.sort_by(|a, b| a.time.total_cmp(&b.time));
    Ok(out)
}

/// One line of an arrivals file; the error names the field at fault.
fn arrival_line(line: &str) -> Result<Arrival, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
        // serde_json counts lines and columns within the one line it was given.
        let msg = e.to_string();
        msg.rsplit_once(" at line 1 column ")
            .map_or(msg.clone(), |(m, c)| format!("{m} (column {c})"))
    })?;
    let serde_json::Value::Object(fields) = v else {
        return Err("expected a JSON object".into());
    };
    for k in fields.keys() {
        if ![
            "time",
            "compute_s",
            "inputs",
            "cores",
            "id",
            "job",
            "priority",
        ]
        .contains(&k.as_str())
        {
            return Err(format!(
                "unknown field `{k}` (expected time, compute_s, inputs, cores, id, job, priority)"
            ));
        }
    }
    let seconds = |name: &str| -> Result<f64, String> {
        let x = fields
            .get(name)
            .ok_or_else(|| format!("missing field `{name}`"))?;
        match x.as_f64() {
            // At most 10^9 s (about 31 years): virtual time must fit a Duration.
            Some(s) if (0.0..=1e9).contains(&s) => Ok(s),
            _ => Err(format!(
                "`{name}` must be a number of seconds from 0 to 1e9, not {x}"
            )),
        }
    };
    let time = seconds("time")?;
    let compute_s = seconds("compute_s")?;
    let cores = match fields.get("cores") {
        None => 1,
        Some(c) => match c.as_u64() {
            Some(k) if k >= 1 && k <= u32::MAX as u64 => k as u32,
            _ => {
                return Err(format!(
                    "`cores` must be a whole number, at least 1, not {c}"
                ))
            }
        },
    };
    let mut inputs = Vec::new();
    if let Some(list) = fields.get("inputs") {
        let bad = |x: &serde_json::Value| {
            format!(
                "`inputs` must be a list of [object_index, bytes] pairs of whole numbers, not {x}"
            )
        };
        for pair in list.as_array().ok_or_else(|| bad(list))? {
            match pair.as_array().map(Vec::as_slice) {
                Some([o, b]) => match (o.as_u64(), b.as_u64()) {
                    (Some(o), Some(b)) => inputs.push((ObjectId(o), b)),
                    _ => return Err(bad(pair)),
                },
                _ => return Err(bad(pair)),
            }
        }
    }
    if let Some(id) = fields.get("id") {
        if !id.is_string() {
            return Err(format!("`id` must be a string, not {id}"));
        }
    }
    let job = match fields.get("job") {
        None => 0,
        Some(j) => match j.as_u64() {
            Some(k) if k <= u32::MAX as u64 => k as u32,
            _ => return Err(format!("`job` must be a whole number, not {j}")),
        },
    };
    let priority = match fields.get("priority") {
        None => 0,
        Some(p) => match p.as_i64() {
            Some(k) if (i16::MIN as i64..=i16::MAX as i64).contains(&k) => k as i16,
            _ => {
                return Err(format!(
                    "`priority` must be a whole number from -32768 to 32767, not {p}"
                ))
            }
        },
    };
    Ok(Arrival {
        time,
        inputs,
        compute_s,
        cores,
        produces: Vec::new(),
        after: Vec::new(),
        job,
        priority,
    })
}

/// DAD's readgf (dad-data-aware-dispatch-gfarm-torque.txt, section V-B): 20 tasks at time 0,
/// task i reading file i (object i, 1 GB) and computing nothing.
pub fn readgf_arrivals() -> Vec<Arrival> {
    (0..20)
        .map(|i| Arrival {
            time: 0.0,
            inputs: vec![(ObjectId(i), 1_000_000_000)],
            compute_s: 0.0,
            cores: 1,
            produces: Vec::new(),
            after: Vec::new(),
            job: 0,
            priority: 0,
        })
        .collect()
}

/// Where readgf's files start: "distributed evenly" over `nodes` nodes, in blocks (files 0-4
/// on the first of four nodes, 5-9 on the second, ...), so that the task order (0, 1, 2, ...)
/// says nothing of where each file is.
pub fn readgf_placement(nodes: u32) -> Vec<(u32, ObjectId, u64)> {
    let per = 20u64.div_ceil(nodes.max(1) as u64);
    (0..20u64)
        .map(|i| ((i / per) as u32, ObjectId(i), 1_000_000_000))
        .collect()
}

/// A BLAST-like mixed workload for DAD's beta/delay sweep (dad-data-aware-dispatch-gfarm-
/// torque.txt, section V-C). The paper gives no sizes or counts for its BLAST runs; these are
/// this project's, chosen to have its shape: two sub-benchmarks over different file sets,
/// submitted interleaved, one I/O-bound and one CPU-bound with about a fifth more time when its
/// file is remote. 40 `blastn` tasks (job 0) read partition `i % 4` of database `nt` (objects
/// 100-103, 1 GB each) and compute 5 s; 40 `blastx` tasks (job 1) read partition `i % 4` of
/// `nr` (objects 200-203, 1 GB each) and compute 40 s.
pub fn blast_arrivals() -> Vec<Arrival> {
    let task = |job: u32, object: u64, compute_s: f64| Arrival {
        time: 0.0,
        inputs: vec![(ObjectId(object), 1_000_000_000)],
        compute_s,
        cores: 1,
        produces: Vec::new(),
        after: Vec::new(),
        job,
        priority: 0,
    };
    (0..40u64)
        .flat_map(|i| [task(0, 100 + i % 4, 5.0), task(1, 200 + i % 4, 40.0)])
        .collect()
}

/// Where the BLAST-like workload's databases are: `nt` partition k on node k, `nr` partition k
/// on node (k + 2) mod 4 (Gfarm keeps one replica of each on a compute node).
pub fn blast_placement() -> Vec<(u32, ObjectId, u64)> {
    (0..4u64)
        .flat_map(|k| {
            [
                (k as u32, ObjectId(100 + k), 1_000_000_000),
                (((k + 2) % 4) as u32, ObjectId(200 + k), 1_000_000_000),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mi_rates_match_the_paper() {
        let r: Vec<u64> = mi_rates().take(25).collect();
        assert_eq!(
            r,
            vec![
                1, 2, 3, 4, 6, 8, 11, 15, 20, 26, 34, 45, 59, 77, 101, 132, 172, 224, 292, 380,
                494, 643, 836, 1000, 1000
            ]
        );
    }

    #[test]
    fn mi_ends_35_s_into_the_1000_interval() {
        let info = Workload::Mi.info();
        assert_eq!(info.tasks, 250_000);
        assert_eq!(Workload::Mi.arrivals(1).count(), 250_000);
        // 23 intervals of 60 s, then 35 s at 1000/s: last arrival in second 1414, ideal 1415 s.
        assert!(
            info.last_arrival_s >= 1414.0 && info.last_arrival_s < 1415.0,
            "{}",
            info.last_arrival_s
        );
    }

    #[test]
    fn sw_reaches_two_million_in_the_6504th_second() {
        // Seconds are numbered from 0: the 2,000,000th task arrives in second 6503 (the 6504th
        // second, "t = 6504 s" in NOTES.md), so the ideal makespan is just over 6503 s.
        let info = Workload::Sw.info();
        assert!(
            info.last_arrival_s >= 6503.0 && info.last_arrival_s < 6504.0,
            "{}",
            info.last_arrival_s
        );
        // floor((sin(sqrt(0.11) * 2.859678) + 1) * 0.11 * 5.705) = floor(1.137)
        assert_eq!(sw_rate(0), 1);
        assert!((0..7000).map(sw_rate).max() == Some(1000));
    }

    #[test]
    fn ap_pairs_every_a_with_every_b() {
        let all: Vec<Arrival> = Workload::Ap { compute_s: 1.0 }.arrivals(0).collect();
        assert_eq!(all.len(), 250_000);
        assert_eq!(
            all[0].inputs,
            vec![(ObjectId(0), 12 * MB), (ObjectId(500), 12 * MB)]
        );
        assert_eq!(
            all[501].inputs,
            vec![(ObjectId(1), 12 * MB), (ObjectId(501), 12 * MB)]
        );
    }

    #[test]
    fn same_seed_same_files() {
        let a: Vec<Arrival> = Workload::Mi.arrivals(3).take(100).collect();
        let b: Vec<Arrival> = Workload::Mi.arrivals(3).take(100).collect();
        let c: Vec<Arrival> = Workload::Mi.arrivals(4).take(100).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn reads_an_arrivals_file() {
        let text = r#"{"time": 1.5, "compute_s": 1, "inputs": [[3, 1000]], "cores": 2, "id": "t1"}

{"time": 0.25, "compute_s": 0.5, "inputs": [[3, 1000], [4, 20]]}
{"time": 2, "compute_s": 0}
"#;
        let a = read_arrivals(text).unwrap();
        assert_eq!(a.len(), 3);
        // Sorted by time; defaults filled in.
        assert_eq!(a[0].time, 0.25);
        assert_eq!(a[0].inputs, vec![(ObjectId(3), 1000), (ObjectId(4), 20)]);
        assert_eq!(a[0].cores, 1);
        assert_eq!(a[1].cores, 2);
        assert!(a[2].inputs.is_empty());
        let info = Workload::Custom(a).info();
        assert_eq!((info.tasks, info.objects, info.dataset_bytes), (3, 2, 1020));
        assert_eq!(info.last_arrival_s, 2.0);
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number() {
        let good = r#"{"time": 0, "compute_s": 1, "inputs": [[0, 10]]}"#;
        for (bad, words) in [
            ("{\"time\": 1}", &["line 2", "compute_s"][..]),
            ("not json", &["line 2", "column"]),
            (
                r#"{"time": 1, "compute_s": 1, "colour": "red"}"#,
                &["line 2", "colour"],
            ),
            (
                r#"{"time": -1, "compute_s": 1}"#,
                &["line 2", "`time`", "-1"],
            ),
            (
                r#"{"time": 1, "compute_s": 1, "id": 7}"#,
                &["line 2", "`id`"],
            ),
            ("[1, 2]", &["line 2", "object"]),
            (r#"{"time": 1e12, "compute_s": 1}"#, &["line 2", "`time`"]),
            (
                r#"{"time": 1, "compute_s": 1, "cores": 0}"#,
                &["line 2", "cores"],
            ),
            (
                r#"{"time": 1, "compute_s": 1, "inputs": [[0, 11]]}"#,
                &["line 2", "object 0", "11 bytes", "line 1"],
            ),
            (
                r#"{"time": 1, "compute_s": 1, "inputs": [[5, 1], [5, 1]]}"#,
                &["line 2", "object 5", "twice"],
            ),
            (
                r#"{"time": 1, "compute_s": 1, "inputs": [[5]]}"#,
                &["line 2"],
            ),
            (
                r#"{"time": "soon", "compute_s": 1}"#,
                &["line 2", "`time`", "soon"],
            ),
        ] {
            let err = read_arrivals(&format!("{good}\n{bad}\n")).unwrap_err();
            for w in words {
                assert!(err.contains(w), "{bad}: {err} (expected {w})");
            }
        }
        assert!(read_arrivals("\n  \n").unwrap_err().contains("no arrivals"));
    }
}
