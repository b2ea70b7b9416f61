//! DAD's readgf in the simulator (dad-data-aware-dispatch-gfarm-torque.txt, section V-B): 20
//! files of 1 GB, five on each of four nodes' disks, 20 tasks reading one each, on the
//! tsukuba-2014 model (GbE, 800 MB/s local disks, five slots a node).

use diffuse_core::{DadConfig, PolicyKind};
use diffuse_sim::testbed::Testbed;
use diffuse_sim::workload::{readgf_arrivals, readgf_placement, Workload};
use diffuse_sim::{simulate, SimConfig, Summary};

fn readgf(policy: PolicyKind, dad: DadConfig) -> Summary {
    let tb = Testbed::tsukuba_2014();
    let mut cfg = SimConfig::new(Workload::Custom(readgf_arrivals()), tb, 64_000_000_000);
    cfg.core.policy = policy;
    cfg.core.dad = dad;
    cfg.placed = readgf_placement(4);
    cfg.check_invariants = true;
    simulate(cfg).expect("simulation").0
}

fn close(got: f64, want: f64) {
    assert!((got - want).abs() < 0.01, "got {got}, want {want}");
}

#[test]
fn dad_reads_every_file_where_it_is_and_fa_reads_them_all_remotely() {
    // DAD: each node reads its own five files, 5 GB at 800 MB/s: 6.25 s.
    let dad = readgf(PolicyKind::Dad, DadConfig::default());
    assert_eq!(
        (dad.bytes_local, dad.bytes_peer, dad.bytes_storage),
        (20_000_000_000, 0, 0)
    );
    close(dad.makespan_s, 6.25);
    // FA, the paper's FIFO: every file through the network, 20 GB at 4 x 125 MB/s: 40 s.
    let fa = readgf(PolicyKind::Fa, DadConfig::default());
    assert_eq!(fa.bytes_storage, 20_000_000_000);
    close(fa.makespan_s, 40.0);
}

#[test]
fn with_beta_zero_dad_only_balances_load_and_reads_remotely() {
    let dad = readgf(
        PolicyKind::Dad,
        DadConfig {
            beta: 0.0,
            local_threshold: 0.0,
            delay: 2,
            ..DadConfig::default()
        },
    );
    assert!(dad.bytes_peer > 0, "{dad:?}");
    assert!(dad.makespan_s > 2.0 * 6.25, "{}", dad.makespan_s);
}

fn blast(policy: PolicyKind, beta: f64, delay: u32) -> Summary {
    let tb = Testbed::tsukuba_2014();
    let arrivals = diffuse_sim::workload::blast_arrivals();
    let mut cfg = SimConfig::new(Workload::Custom(arrivals), tb, 64_000_000_000);
    cfg.core.policy = policy;
    cfg.core.dad = DadConfig {
        beta,
        local_threshold: beta.min(0.5),
        delay,
        ..DadConfig::default()
    };
    cfg.placed = diffuse_sim::workload::blast_placement();
    cfg.check_invariants = true;
    simulate(cfg).expect("simulation").0
}

/// The shape of the paper's Fig. 7 and 9 on the BLAST-like mix: the best case (beta 0.8,
/// delay 2) reads everything where it is; beta 1 does as well (the load is no bottleneck);
/// beta 0 only balances load and reads remotely; no delay runs tasks remotely that a short wait
/// would have run locally; a longer delay gains nothing more; all beat FIFO (FA).
#[test]
fn the_beta_and_delay_sweep_has_the_papers_shape() {
    let best = blast(PolicyKind::Dad, 0.8, 2);
    assert_eq!(best.bytes_peer + best.bytes_storage, 0, "all local");
    let beta1 = blast(PolicyKind::Dad, 1.0, 2);
    close(beta1.makespan_s, best.makespan_s);
    let beta0 = blast(PolicyKind::Dad, 0.0, 2);
    assert!(beta0.bytes_peer > 0 && beta0.makespan_s > best.makespan_s);
    let no_delay = blast(PolicyKind::Dad, 0.8, 0);
    assert!(no_delay.bytes_peer > 0 && no_delay.makespan_s > best.makespan_s);
    let long_delay = blast(PolicyKind::Dad, 0.8, 4);
    close(long_delay.makespan_s, best.makespan_s);
    let fifo = blast(PolicyKind::Fa, 0.8, 2);
    assert!(fifo.makespan_s > beta0.makespan_s.max(no_delay.makespan_s));
}
