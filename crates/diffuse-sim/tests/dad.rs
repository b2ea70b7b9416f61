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
    cfg.policy = policy;
    cfg.dad = dad;
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
