//! `diffuse stage`: copy a batch of objects to workers before the tasks that read them, as
//! GDS schedules it (or LDS, or naive, to compare), through `POST /v1/stage`; follow its
//! progress and print a summary.

use super::api::{Client, ClientArgs};
use super::runtime;
use anyhow::{bail, Context, Result};
use diffuse_runtime::dispatcher::answers::{StageStarted, StageView};
use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

/// `diffuse stage`.
#[derive(clap::Args)]
pub struct StageArgs {
    /// File listing the objects, one URI (file://, s3://, http(s)://, tmp://) or absolute path
    /// per line; `#` starts a comment. `-`: read the list from standard input.
    list: String,
    /// Where to copy them: `all` (every connected worker) or worker names, comma-separated.
    #[arg(long, default_value = "all", value_name = "all|NAME,NAME")]
    to: String,
    /// How the batch is scheduled: `gds` (one scheduler: the transfer that ends first starts
    /// first, several sources per object, bandwidth booked as it goes), `lds` (each worker
    /// alone, smallest objects first, several sources), `naive` (each worker alone, each
    /// object from one source chosen at random).
    #[arg(long, default_value = "gds", value_parser = ["gds", "lds", "naive"])]
    schedule: String,
    /// Drop the listed objects from those workers instead (a dataset no longer wanted there;
    /// persistent-storage objects only: a tmp:// object's copy may be the only one).
    #[arg(long, conflicts_with_all = ["schedule", "no_wait"])]
    drop: bool,
    /// Print the batch's number and return at once (follow it with `GET /v1/stage/{id}`).
    #[arg(long)]
    no_wait: bool,
    /// Print the final JSON instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// The URIs of the list.
fn read_list(list: &str) -> Result<Vec<String>> {
    let reader: Box<dyn BufRead> = if list == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(list).with_context(|| format!("cannot read {list}"))?,
        ))
    };
    let mut uris = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{list}: line {}", n + 1))?;
        let item = line.split('#').next().unwrap_or("").trim();
        if item.is_empty() {
            continue;
        }
        if item.contains("://") {
            uris.push(item.to_string());
        } else if item.starts_with('/') {
            uris.push(format!("file://{item}"));
        } else {
            bail!(
                "{list}: line {}: '{item}' is neither a URI nor an absolute path",
                n + 1
            );
        }
    }
    if uris.is_empty() {
        bail!("{list}: no object listed");
    }
    Ok(uris)
}

/// `diffuse stage LIST`.
pub fn stage(a: StageArgs) -> Result<ExitCode> {
    let uris = read_list(&a.list)?;
    let to: Vec<String> = if a.to == "all" {
        Vec::new()
    } else {
        a.to.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    let c = Client::new(&a.client)?;
    let rt = runtime()?;
    let body = serde_json::json!({
        "uris": uris, "to": to, "schedule": a.schedule, "drop": a.drop
    });
    let started =
        rt.block_on(c.call::<StageStarted>(c.http.post(format!("{}/v1/stage", c.url)).json(&body)));
    let id = match started {
        Ok(v) => v.id,
        Err(e) => return e.exit_if(&[400]),
    };
    if a.drop {
        let v: StageView = match rt.block_on(c.call(c.http.get(format!("{}/v1/stage/{id}", c.url))))
        {
            Ok(v) => v,
            Err(e) => return e.exit_if(&[404]),
        };
        println!(
            "dropping {} copies from {} workers",
            v.done,
            v.destinations.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if a.no_wait {
        println!("{id}");
        return Ok(ExitCode::SUCCESS);
    }
    let url = format!("{}/v1/stage/{id}", c.url);
    let mut shown = (String::new(), u64::MAX);
    let v = loop {
        let v: StageView = match rt.block_on(c.call(c.http.get(&url))) {
            Ok(v) => v,
            Err(e) => return e.exit_if(&[404]),
        };
        if v.state == "done" {
            break v;
        }
        if !a.json && (v.state != shown.0 || v.done as u64 != shown.1) {
            eprintln!(
                "stage {id}: {}, {}/{} copies, {} under way, {:.0} MB in {:.1} s",
                v.state,
                v.done,
                v.requests,
                v.running,
                v.bytes as f64 / 1e6,
                v.seconds,
            );
            shown = (v.state.clone(), v.done as u64);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if a.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        print!("{}", summary(&v));
        for f in &v.failed {
            eprintln!("not staged: {f}");
        }
    }
    Ok(if v.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The closing lines: copies, bytes, time, throughput and each source's share.
fn summary(v: &StageView) -> String {
    let bytes = v.bytes as f64;
    let secs = v.seconds;
    let mut out = format!(
        "staged {} of {} copies ({} objects to {} workers, {}): {:.1} MB in {:.2} s, {:.1} MB/s\n",
        v.done,
        v.requests,
        v.objects,
        v.destinations.len(),
        v.schedule,
        bytes / 1e6,
        secs,
        if secs > 0.0 { bytes / 1e6 / secs } else { 0.0 },
    );
    let total: f64 = v.by_source.values().map(|b| *b as f64).sum();
    let mut rows: Vec<(&String, f64)> = v.by_source.iter().map(|(k, b)| (k, *b as f64)).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (source, b) in rows {
        out.push_str(&format!(
            "  from {source}: {:.1} MB ({:.0}%)\n",
            b / 1e6,
            if total > 0.0 { 100.0 * b / total } else { 0.0 }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_takes_uris_and_absolute_paths_and_skips_comments() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("list");
        std::fs::write(&f, "# the index\n/data/a.idx\ns3://b/k  # model\n\n").unwrap();
        let uris = read_list(f.to_str().unwrap()).unwrap();
        assert_eq!(uris, vec!["file:///data/a.idx", "s3://b/k"]);
        std::fs::write(&f, "relative/path\n").unwrap();
        let e = read_list(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn the_summary_gives_each_sources_share() {
        let v: StageView = serde_json::from_value(serde_json::json!({
            "id": 1, "state": "done", "running": 0,
            "done": 4, "requests": 4, "objects": 2, "destinations": ["a", "b"],
            "schedule": "gds", "bytes": 400_000_000u64, "seconds": 2.0,
            "by_source": {"storage": 100_000_000u64, "a": 300_000_000u64}
        }))
        .unwrap();
        let s = summary(&v);
        assert!(s.starts_with("staged 4 of 4 copies (2 objects to 2 workers, gds): 400.0 MB in 2.00 s, 200.0 MB/s"), "{s}");
        assert!(
            s.contains("from a: 300.0 MB (75%)\n  from storage: 100.0 MB (25%)"),
            "{s}"
        );
    }
}
