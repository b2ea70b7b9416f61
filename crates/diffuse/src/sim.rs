//! `diffuse sim`: run the simulator and report, or reproduce the paper's experiments.

use crate::numbers::positive_seconds;
use crate::size::{format_size, parse_size};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use diffuse_core::{EvictionPolicy, HandoffConfig, StepPolicy};
use diffuse_sim::paper;
use diffuse_sim::plot::plot;
use diffuse_sim::report::{series, write_csv};
use diffuse_sim::workload::read_arrivals;
use diffuse_sim::{
    Arrival, DynamicSettings, SimConfig, Simulation, Summary, TaskTrace, Testbed, Workload,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorkloadArg {
    /// Monotonically increasing rate: 250K tasks, 10K x 10 MB files, 64 nodes.
    Mi,
    /// Sine-wave rate: 2M tasks, 100K x 10 MB files, 100 nodes.
    Sw,
    /// All-pairs 500x500 over 12 MB items, 100 nodes.
    Ap,
    /// Every experiment of the paper's table, side by side with the paper's figures.
    Paper,
    /// DAD's readgf: 20 files of 1 GB, 5 on each of 4 nodes' disks, 20 tasks reading one
    /// each; testbed tsukuba-2014 (compare --policy fa with --policy dad).
    Readgf,
    /// A BLAST-like mix for DAD's beta/delay sweep (40 I/O-bound and 40 CPU-bound tasks over
    /// two databases kept on the nodes); testbed tsukuba-2014 (see docs/policies.md).
    Blast,
    /// GDS, LDS and naive staging of a batch of files on the GDS paper's four sites (scaled
    /// down), next to a lower bound (docs/transfers.md).
    Stage,
    /// MixApart's job mixes 1-4 (Table 1) on testbed ec2-2013, each job's duration over an
    /// all-local ideal, with and without prefetching, the storage cap swept.
    Mixapart,
    /// Tasks read from --arrivals FILE (JSON Lines: time, compute_s, inputs, cores), e.g. the
    /// arrivals of a live run; testbed `local`, dynamic provisioning, step `all`.
    Arrivals,
    /// The tasks of a task file as `diffuse run` takes it (`diffuse sim run TASKS.jsonl`):
    /// each task's `compute_s`, its `file://` inputs' sizes read from the files, `--tmp-size`
    /// for intermediates; testbed `local`, dynamic provisioning, step `all` (as `arrivals`).
    Run,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProvisioningArg {
    /// All nodes from the start.
    Static,
    /// Acquire nodes as the queue grows, release after an idle timeout.
    Dynamic,
}

/// `--eviction`: a per-node policy, or 2Mark across nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvictionArg {
    /// The nodes' own policy (LRU under 2Mark, which never lets them evict).
    pub policy: EvictionPolicy,
    /// 2Mark.
    pub two_mark: bool,
}

/// `random`, `fifo`, `lru`, `lfu` or `2mark`.
pub fn eviction(s: &str) -> Result<EvictionArg, String> {
    if s.eq_ignore_ascii_case("2mark") {
        return Ok(EvictionArg {
            policy: EvictionPolicy::Lru,
            two_mark: true,
        });
    }
    s.parse::<EvictionPolicy>()
        .map(|policy| EvictionArg {
            policy,
            two_mark: false,
        })
        .map_err(|e| e.replace("or lfu)", "lfu or 2mark)"))
}

/// `--handoff`: off, or a byte budget per release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandoffArg(pub Option<u64>);

/// `none`, or a byte budget per release such as `1GB`.
fn handoff_budget(s: &str) -> Result<HandoffArg, String> {
    if s.eq_ignore_ascii_case("none") {
        Ok(HandoffArg(None))
    } else {
        parse_size(s)
            .map(|b| HandoffArg(Some(b)))
            .map_err(|e| format!("{e}; or 'none' to turn hand-off off"))
    }
}

/// A preset's name, or a testbed file (TOML, the fields of `testbeds/*.toml`).
fn testbed(s: &str) -> Result<Testbed, String> {
    if let Some(t) = Testbed::by_name(s) {
        return Ok(t);
    }
    let path = std::path::Path::new(s);
    if !path.exists() {
        return Err(format!(
            "'{s}' is neither a preset ({}) nor a file",
            Testbed::PRESETS.join(", ")
        ));
    }
    read_testbed(path)
}

/// Read and check a testbed file.
pub fn read_testbed(path: &std::path::Path) -> Result<Testbed, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let t: Testbed = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    t.check().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(t)
}

/// A duration in seconds that may be zero (from 0 to 10^9).
fn seconds_or_zero(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(0.0) => Ok(0.0),
        _ => positive_seconds(s),
    }
}

/// Arguments of `diffuse sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Workload to simulate, or `paper` for every experiment of the paper (exits 1 if any of the
    /// project's acceptance checks on those experiments fails).
    #[arg(value_enum)]
    workload: WorkloadArg,
    /// run only: the task file (JSON Lines or a JSON array), as `diffuse run` takes it.
    #[arg(value_name = "TASKS")]
    tasks: Option<PathBuf>,
    /// run only: compute time of a task that gives no `compute_s`, seconds.
    #[arg(long, value_parser = seconds_or_zero, allow_hyphen_values = true)]
    compute_s: Option<f64>,
    /// run only: size of each `tmp://` object (an intermediate's size is not known before the
    /// run), e.g. 100MB.
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true)]
    tmp_size: Option<u64>,
    #[command(flatten)]
    sched: crate::policy_args::PolicyArgs,
    /// Nodes per rack, in the order they join (0: no racks): MixApart's rack-local tier.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    rack_size: u32,
    /// Each rack's uplink each way, as a rate such as 1.25GB/s (10 Gb/s); absent: not a
    /// bottleneck. Peer reads between racks and storage reads cross it.
    #[arg(long, value_parser = crate::transfer_args::rate)]
    rack_uplink: Option<f64>,
    /// Cache size per node, e.g. 2GB, 1.5GB, 512MiB [default: MI 2GB, SW and AP 50GB,
    /// arrivals 10GB].
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true)]
    cache_size: Option<u64>,
    /// Maximum number of nodes [default: the testbed's, MI 64, SW and AP 100, arrivals 6].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    nodes: Option<u32>,
    /// Provisioning [default: MI and arrivals dynamic, SW and AP static].
    #[arg(long, value_enum)]
    provisioning: Option<ProvisioningArg>,
    /// Eviction policy: random, fifo, lru or lfu (each node on its own), or 2mark (the
    /// dispatcher decides for all nodes together: data-diffusion's 2Mark).
    #[arg(long, value_parser = eviction, default_value = "lru")]
    eviction: EvictionArg,
    /// Dynamic provisioning step: one, additive:K, exponential or all [default: exponential;
    /// arrivals: all, as `diffuse dispatcher --step`].
    #[arg(long, value_parser = |s: &str| s.parse::<StepPolicy>())]
    step: Option<StepPolicy>,
    /// Dynamic provisioning: release a node idle this many seconds.
    #[arg(long, default_value_t = 30.0, value_parser = positive_seconds, allow_hyphen_values = true)]
    idle_timeout: f64,
    /// Dynamic provisioning: nodes kept even when idle.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    min_nodes: u32,
    /// Dynamic provisioning: cache hand-off on release, `none` or the most bytes one released
    /// node pushes to surviving nodes with room (objects only it holds: queued tasks' first,
    /// then its hottest), e.g. 1GB.
    #[arg(long, value_parser = handoff_budget, default_value = "none")]
    handoff: HandoffArg,
    /// Dynamic provisioning: seconds a released node may spend on its hand-off pushes (it is
    /// billed until they end); what has not arrived by then is given up.
    #[arg(long, default_value_t = 10.0, value_parser = positive_seconds, allow_hyphen_values = true)]
    handoff_time: f64,
    /// Testbed model: a preset, teragrid-2007 (MI), teragrid-2008 (SW, AP), local (arrivals:
    /// local worker processes on one machine, see docs/simulation.md), tsukuba-2014 or
    /// ec2-2013; or a testbed file (TOML: nodes, slots, cache, disk, NIC, storage rate and
    /// latency, racks, dispatch latency, start-up time; the presets are in testbeds/, and
    /// `diffuse calibrate` writes one) [default: the workload's].
    #[arg(long, value_parser = testbed)]
    testbed: Option<Testbed>,
    /// Slots (cores) per node, in place of the testbed's (the dispatcher's --worker-cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    slots_per_node: Option<u32>,
    /// Seconds from asking for a node to its joining, in place of the testbed's.
    #[arg(long, value_parser = seconds_or_zero, allow_hyphen_values = true)]
    node_startup: Option<f64>,
    /// arrivals only: the JSON Lines file of tasks, one per line:
    /// {"time": s, "compute_s": s, "inputs": [[object_index, bytes], ...], "cores": 1}.
    #[arg(long, value_name = "FILE")]
    arrivals: Option<PathBuf>,
    /// AP compute time per task, seconds (the paper uses 1 and 0.1).
    #[arg(long, default_value_t = 1.0, value_parser = positive_seconds, allow_hyphen_values = true)]
    ap_compute: f64,
    /// Most concurrent peer reads one node serves; a busier holder is passed over for another
    /// holder or for storage (0: no limit).
    #[arg(long, default_value_t = 4, allow_hyphen_values = true)]
    peer_read_limit: u32,
    /// Seed for file choices and random eviction.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    seed: u64,
    /// Print one JSON object (or, for `paper`, a JSON array of rows).
    #[arg(long)]
    json: bool,
    /// Write the time series (demand, throughput, queue, hits, nodes) to this CSV file.
    #[arg(long)]
    series: Option<PathBuf>,
    /// Seconds per row of the time series and plot.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..), allow_hyphen_values = true)]
    series_step: u64,
    /// Draw the time series as SVG to this file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write each task as it ran to this file, JSON Lines in order of completion: its `task`
    /// (position in the workload; for `run`, also its `id`), `node` (by order of joining),
    /// `started_s`, `staged_s` (inputs in), `finished_s`, and its inputs read from the
    /// node's cache (`local`), a `peer` and `storage`, as a live task's report tells them.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// `paper` only: directory for each experiment's plot and series.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Check the core's invariants after every step (slow).
    #[arg(long)]
    check: bool,
}

/// Defaults a workload brings: its testbed, cache size and provisioning, from the paper.
/// Arrivals: the live dispatcher's defaults (`--worker-cache-size 10GB`, a dynamic pool).
pub fn defaults(w: WorkloadArg) -> (Testbed, u64, bool) {
    match w {
        WorkloadArg::Mi => (Testbed::teragrid_2007(), 2_000_000_000, true),
        WorkloadArg::Arrivals | WorkloadArg::Run => (Testbed::local(), 10_000_000_000, true),
        WorkloadArg::Readgf | WorkloadArg::Blast => {
            (Testbed::tsukuba_2014(), 64_000_000_000, false)
        }
        _ => (Testbed::teragrid_2008(), 50_000_000_000, false),
    }
}

/// `custom`: the arrivals read from `--arrivals` (workload `arrivals`).
fn config(a: &SimArgs, custom: Option<Vec<Arrival>>) -> SimConfig {
    let (mut testbed, cache, dynamic) = defaults(a.workload);
    if let Some(t) = &a.testbed {
        testbed = t.clone();
    }
    if let Some(s) = a.slots_per_node {
        testbed.slots_per_node = s;
    }
    if let Some(s) = a.node_startup {
        testbed.node_startup_s = s;
    }
    if a.rack_size > 0 {
        testbed.rack_size = a.rack_size;
    }
    if let Some(bw) = a.rack_uplink {
        testbed.rack_uplink_bw = bw;
    }
    let workload = match a.workload {
        WorkloadArg::Mi => Workload::Mi,
        WorkloadArg::Sw => Workload::Sw,
        WorkloadArg::Ap => Workload::Ap {
            compute_s: a.ap_compute,
        },
        WorkloadArg::Arrivals | WorkloadArg::Run => {
            Workload::Custom(custom.expect("arrivals were read"))
        }
        WorkloadArg::Readgf => Workload::Custom(diffuse_sim::workload::readgf_arrivals()),
        WorkloadArg::Blast => Workload::Custom(diffuse_sim::workload::blast_arrivals()),
        WorkloadArg::Paper | WorkloadArg::Mixapart | WorkloadArg::Stage => {
            unreachable!("paper, mixapart and stage are handled separately")
        }
    };
    let cache = a.cache_size.or(testbed.cache_bytes).unwrap_or(cache);
    let mut cfg = SimConfig::new(workload, testbed, cache);
    if a.workload == WorkloadArg::Readgf {
        cfg.placed = diffuse_sim::workload::readgf_placement(cfg.testbed.nodes);
    }
    if a.workload == WorkloadArg::Blast {
        cfg.placed = diffuse_sim::workload::blast_placement();
    }
    a.sched.apply(&mut cfg.core);
    cfg.eviction = a.eviction.policy;
    cfg.core.two_mark = a.eviction.two_mark;
    cfg.seed = a.seed;
    cfg.core.peer_read_limit = a.peer_read_limit;
    cfg.check_invariants = a.check;
    if let Some(n) = a.nodes {
        cfg.nodes = n;
    }
    let dynamic = a
        .provisioning
        .map_or(dynamic, |p| p == ProvisioningArg::Dynamic);
    if dynamic {
        let step = a.step.unwrap_or(
            if matches!(a.workload, WorkloadArg::Arrivals | WorkloadArg::Run) {
                StepPolicy::AllAtOnce
            } else {
                StepPolicy::Exponential
            },
        );
        cfg.dynamic = Some(DynamicSettings {
            step,
            idle_timeout_s: a.idle_timeout,
            min_nodes: a.min_nodes,
            // A task file is simulated as the live dispatcher runs it.
            check_interval_s: if a.workload == WorkloadArg::Run {
                diffuse_runtime::provisioner::CHECK_INTERVAL.as_secs_f64()
            } else {
                DynamicSettings::default().check_interval_s
            },
        });
        cfg.core.handoff = a.handoff.0.map(|budget| HandoffConfig {
            budget,
            time_bound: std::time::Duration::from_secs_f64(a.handoff_time),
        });
    }
    cfg
}

/// Run `diffuse sim`.
pub fn run(a: SimArgs) -> Result<ExitCode> {
    if a.arrivals.is_some() && a.workload != WorkloadArg::Arrivals {
        eprintln!("error: --arrivals FILE goes with the workload `arrivals` only");
        return Ok(ExitCode::from(2));
    }
    let run_only = a.compute_s.is_some() || a.tmp_size.is_some();
    if (a.tasks.is_some() || run_only) && a.workload != WorkloadArg::Run {
        eprintln!(
            "error: a TASKS file, --compute-s and --tmp-size go with `diffuse sim run TASKS` only"
        );
        return Ok(ExitCode::from(2));
    }
    if let Err(e) = a.sched.check() {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    if a.workload == WorkloadArg::Paper {
        return run_paper(&a);
    }
    if a.workload == WorkloadArg::Stage {
        let rows = diffuse_sim::staging::experiments(a.seed);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            diffuse_sim::staging::print_table(&rows);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.workload == WorkloadArg::Mixapart {
        let rows = diffuse_sim::mixapart::run_all().map_err(anyhow::Error::msg)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            diffuse_sim::mixapart::print_table(&rows);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut ids = Vec::new();
    let custom = if a.workload == WorkloadArg::Run {
        let Some(path) = &a.tasks else {
            eprintln!("error: `diffuse sim run` needs a task file: diffuse sim run TASKS.jsonl");
            return Ok(ExitCode::from(2));
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let fill = crate::sim_tasks::Fill {
            compute_s: a.compute_s,
            tmp_size: a.tmp_size,
        };
        match crate::sim_tasks::arrivals(&text, fill) {
            Ok(list) => {
                let (named, list): (Vec<String>, Vec<Arrival>) = list.into_iter().unzip();
                ids = named;
                Some(list)
            }
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                return Ok(ExitCode::from(2));
            }
        }
    } else {
        None
    };
    let custom = match (&a.arrivals, a.workload == WorkloadArg::Arrivals) {
        _ if custom.is_some() => custom,
        (Some(path), true) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--arrivals: cannot read {}", path.display()))?;
            match read_arrivals(&text) {
                Ok(list) => Some(list),
                Err(e) => {
                    eprintln!("error: {}: {e}", path.display());
                    return Ok(ExitCode::from(2));
                }
            }
        }
        (None, true) => {
            eprintln!("error: the workload `arrivals` needs --arrivals FILE");
            return Ok(ExitCode::from(2));
        }
        _ => None,
    };
    let mut cfg = config(&a, custom);
    cfg.trace = a.trace.is_some();
    let (summary, samples, trace) = Simulation::new(cfg).run_traced()?;
    if let Some(path) = &a.trace {
        write_trace(path, &trace, &ids).with_context(|| format!("--trace: {}", path.display()))?;
    }
    let rows = series(&samples, a.series_step as usize);
    if let Some(path) = &a.series {
        let f = std::fs::File::create(path)
            .with_context(|| format!("--series: cannot create {}", path.display()))?;
        write_csv(&rows, std::io::BufWriter::new(f))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.plot {
        plot(&rows, &title(&summary), path)
            .map_err(anyhow::Error::msg)
            .context("--plot")?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary);
    }
    Ok(ExitCode::SUCCESS)
}

/// The tasks as they ran, a JSON object a line; `ids` names them by position (a task file's).
fn write_trace(path: &Path, trace: &[TaskTrace], ids: &[String]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for t in trace {
        let mut v = serde_json::to_value(t)?;
        if let Some(id) = ids.get(t.task as usize) {
            v["id"] = id.as_str().into();
        }
        writeln!(f, "{v}")?;
    }
    f.flush()?;
    Ok(())
}

fn title(s: &Summary) -> String {
    format!(
        "{} {} {} cache/node, {} provisioning, {} nodes",
        s.workload.to_uppercase(),
        s.policy.to_uppercase(),
        format_size(s.cache_size),
        s.provisioning,
        s.nodes
    )
}

fn print_summary(s: &Summary) {
    println!("{}", title(s));
    println!("  tasks             {}", s.tasks);
    println!(
        "  makespan          {:.0} s (ideal {:.0} s)",
        s.makespan_s, s.ideal_makespan_s
    );
    println!("  efficiency        {:.1}%", s.efficiency * 100.0);
    println!(
        "  accesses          {:.1}% local, {:.1}% peer, {:.1}% miss",
        s.hit_local * 100.0,
        s.hit_peer * 100.0,
        s.miss * 100.0
    );
    println!(
        "  throughput        {:.2} Gb/s average, {:.2} Gb/s peak (p99 of 1 s samples)",
        s.throughput_avg_gbps, s.throughput_peak_gbps
    );
    println!("  response time     {:.2} s average", s.avg_response_s);
    println!("  peak queue        {}", s.peak_queue);
    println!("  CPU-hours         {:.1}", s.cpu_hours);
    let h = &s.handoff;
    if h.planned > 0 {
        println!(
            "  hand-off          {} releases, {} of {} planned pushed ({} of {}), {} cut by the time bound, {} lost, {} read later; {:.1} CPU-hours pushing",
            h.releases,
            h.pushed,
            h.planned,
            format_size(h.pushed_bytes),
            format_size(h.planned_bytes),
            h.cut,
            h.lost,
            h.useful,
            h.cpu_hours
        );
    }
    println!(
        "  bytes             {} local, {} peer, {} storage",
        format_size(s.bytes_local),
        format_size(s.bytes_peer),
        format_size(s.bytes_storage)
    );
    let p = &s.prefetch;
    if p.issued > 0 {
        println!(
            "  prefetch          {} issued ({}), {} landed, {} read by a task, {} evicted unread",
            p.issued,
            format_size(p.issued_bytes),
            p.landed,
            p.read,
            p.evicted_unread
        );
    }
    if s.jobs.len() > 1 {
        for j in &s.jobs {
            println!(
                "  job {:<13} {} tasks in {:.1} s",
                j.job, j.tasks, j.duration_s
            );
        }
    }
    let m = &s.model;
    println!(
        "  model             task time {:.3} s predicted, {:.3} s measured; workload {:.0} s on {} slots",
        m.predicted.task_time_s, m.measured_task_time_s, m.predicted.workload_time_s, m.input.processors
    );
    println!("  simulated in      {:.2} s", s.sim_wall_s);
}

fn run_paper(a: &SimArgs) -> Result<ExitCode> {
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out: cannot create {}", dir.display()))?;
    }
    let rows = paper::run_all(a.seed, a.out.as_deref(), a.series_step as usize, !a.json)
        .map_err(anyhow::Error::msg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        paper::print_table(&rows);
    }
    let failed: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.checks
                .iter()
                .filter(|c| !c.ok)
                .map(move |c| format!("{}: {}", r.id, c.requirement))
        })
        .collect();
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: {} acceptance check(s) failed: {}",
            failed.len(),
            failed.join("; ")
        );
        Ok(ExitCode::from(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_a_file_in_testbeds_and_reads_back_the_same() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbeds");
        for name in Testbed::PRESETS {
            let path = dir.join(format!("{name}.toml"));
            let t = read_testbed(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(Some(t), Testbed::by_name(name), "{}", path.display());
        }
    }
}
