//! `diffuse sim run TASKS`: the simulator's workload from a task file exactly as `diffuse run`
//! takes it (docs/runtime.md, "Task fields"), so that a run can be simulated before, or
//! next to, running it.
//!
//! Every task arrives at time 0, as `diffuse run` submits them at once. Each task:
//! - runs for its `compute_s` (or `--compute-s` where it has none; a task with neither is
//!   refused, named);
//! - reads its inputs, one object per distinct URI, each the size the store gives for it
//!   (`file://` looked at on this machine, `http(s)://` and `s3://` asked of the store, as a
//!   worker would); a `tmp://` input is its producer's output, whose size is `--tmp-size`;
//! - keeps its `tmp://` outputs on its node, for the tasks that read them; other outputs are
//!   copied out live, which the simulator does not model;
//! - holds its `cores`; its `job` (by name), `priority` and `after` are kept.

use diffuse_core::ObjectId;
use diffuse_sim::workload::Arrival;
use std::collections::HashMap as FxHashMap;

/// How the task file's unknowns are filled in.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fill {
    /// Compute time of a task that gives no `compute_s`.
    pub compute_s: Option<f64>,
    /// Size of every `tmp://` object.
    pub tmp_size: Option<u64>,
}

/// Each task in `text` (JSON Lines or a JSON array, as `diffuse run` reads) as its id and its
/// arrival, in file order, each input sized by asking its store. Errors name the line and the
/// task.
pub fn arrivals(text: &str, fill: Fill) -> Result<Vec<(String, Arrival)>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let storage = diffuse_runtime::storage::Storage::default();
    arrivals_sized(text, fill, &mut |uri| {
        rt.block_on(storage.head(uri))
            .map(|info| info.size)
            .map_err(|e| format!("cannot read its size: {e}"))
    })
}

/// [`arrivals`] with the sizes of non-`tmp://` inputs from `size`.
fn arrivals_sized(
    text: &str,
    fill: Fill,
    size: &mut dyn FnMut(&str) -> Result<u64, String>,
) -> Result<Vec<(String, Arrival)>, String> {
    let tasks = diffuse_runtime::spec::parse_numbered(text).map_err(|e| e.to_string())?;
    let position: FxHashMap<&str, u64> = tasks
        .iter()
        .enumerate()
        .map(|(i, (_, t))| (t.id.as_str(), i as u64))
        .collect();
    let mut objects: FxHashMap<String, (ObjectId, u64)> = FxHashMap::new();
    let mut jobs: FxHashMap<String, u32> = FxHashMap::new();
    let mut out = Vec::with_capacity(tasks.len());
    for (line, t) in &tasks {
        let at = |e: String| format!("line {line} (task {}): {e}", t.id);
        let more = t.more();
        let compute_s = more.compute_s.or(fill.compute_s).ok_or_else(|| {
            at("no `compute_s`; give it, or --compute-s for every task without".into())
        })?;
        let mut object = |uri: &str| -> Result<(ObjectId, u64), String> {
            if let Some(o) = objects.get(uri) {
                return Ok(*o);
            }
            let size = if diffuse_runtime::uri::is_tmp(uri) {
                fill.tmp_size.ok_or_else(|| {
                    format!("{uri}: the size of an intermediate object is not known before the run; give --tmp-size")
                })?
            } else {
                size(uri).map_err(|e| format!("{uri}: {e}"))?
            };
            let o = (ObjectId(objects.len() as u64), size);
            objects.insert(uri.to_string(), o);
            Ok(o)
        };
        let mut inputs = Vec::with_capacity(t.inputs.len());
        for uri in &t.inputs {
            let o = object(uri).map_err(at)?;
            if !inputs.contains(&o) {
                inputs.push(o);
            }
        }
        let mut produces = Vec::new();
        for uri in t.outputs.iter().filter(|u| diffuse_runtime::uri::is_tmp(u)) {
            produces.push(object(uri).map_err(at)?);
        }
        let mut after = Vec::new();
        for id in &more.after {
            let p = position
                .get(id.as_str())
                .ok_or_else(|| at(format!("`after` names {id}, which is not in the file")))?;
            after.push(*p);
        }
        let next_job = jobs.len() as u32;
        let job = *jobs.entry(t.job().to_string()).or_insert(next_job);
        out.push((
            t.id.clone(),
            Arrival {
                time: 0.0,
                inputs,
                compute_s,
                cores: more.cores.unwrap_or(1),
                produces,
                after,
                job,
                priority: more.priority,
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_file_becomes_arrivals_with_the_inputs_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.dat");
        std::fs::write(&a, vec![0u8; 1000]).unwrap();
        let b = dir.path().join("b.dat");
        std::fs::write(&b, vec![0u8; 30]).unwrap();
        let text = format!(
            concat!(
                r#"{{"id":"x","cmd":"cat {{inputs[0]}} > {{outputs[0]}}","inputs":["file://{a}"],"outputs":["tmp://mid"],"compute_s":2}}"#,
                "\n",
                r#"{{"id":"y","cmd":"cat {{inputs[0]}} {{inputs[1]}}","inputs":["tmp://mid","file://{b}"],"cores":2,"job":"j2","priority":5}}"#,
                "\n",
                r#"{{"id":"z","cmd":"true","inputs":["file://{a}"],"after":["y"],"compute_s":0.5}}"#,
            ),
            a = a.display(),
            b = b.display()
        );
        let fill = Fill {
            compute_s: Some(1.0),
            tmp_size: Some(77),
        };
        let (ids, v): (Vec<String>, Vec<Arrival>) =
            arrivals(&text, fill).unwrap().into_iter().unzip();
        assert_eq!(ids, ["x", "y", "z"]);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].inputs, [(ObjectId(0), 1000)]);
        assert_eq!(v[0].produces, [(ObjectId(1), 77)]);
        assert_eq!(v[0].compute_s, 2.0);
        assert_eq!(v[1].inputs, [(ObjectId(1), 77), (ObjectId(2), 30)]);
        assert_eq!((v[1].cores, v[1].job, v[1].priority), (2, 1, 5));
        assert_eq!(v[1].compute_s, 1.0, "the default fills in");
        assert_eq!(v[2].inputs, [(ObjectId(0), 1000)], "one object per URI");
        assert_eq!(v[2].after, [1]);
        assert!(v.iter().all(|a| a.time == 0.0));

        let e = arrivals(
            &text,
            Fill {
                compute_s: None,
                tmp_size: Some(77),
            },
        )
        .unwrap_err();
        assert!(
            e.contains("line 2 (task y)") && e.contains("compute_s"),
            "{e}"
        );
        let e = arrivals(
            &text,
            Fill {
                compute_s: Some(1.0),
                tmp_size: None,
            },
        )
        .unwrap_err();
        assert!(e.contains("tmp://mid") && e.contains("--tmp-size"), "{e}");
        let e = arrivals_sized(
            r#"{"id":"s","cmd":"true","inputs":["s3://b/k"],"compute_s":1}"#,
            fill,
            &mut |uri| Err(format!("no store answers for {uri}")),
        )
        .unwrap_err();
        assert!(e.contains("line 1 (task s): s3://b/k: no store"), "{e}");
        let e = arrivals(
            &format!(
                r#"{{"id":"m","cmd":"true","inputs":["file://{}/none"],"compute_s":1}}"#,
                dir.path().display()
            ),
            fill,
        )
        .unwrap_err();
        assert!(e.contains("cannot read its size"), "{e}");
    }
}
