//! What a switch or a flaky link does to packets, on one host of a multi-host test: drop all
//! of them from another host (a partition), lose a share of them, delay them. This kernel has
//! no `sch_netem`, so these are netfilter rules (`iptables`) on what a host receives from its
//! link: DROP for a cut, the `statistic` match for loss, NFQUEUE to a delaying process
//! ([`NetHost::delay`], `delay.py`) for a delay. Dropped on receipt, a packet leaves its sender
//! as usual and is never answered, as across a switch; a sender's own `iptables` DROP would
//! instead fail its send at once (EPERM).
//!
//! A host is a network namespace (its rules go with it) or the machine's own namespace, where
//! the rules live in a chain of their own, jumped to from INPUT for what arrives on one link
//! only, and removed with it ([`NetHost::remove_chain`]).

#![allow(dead_code)] // each test crate uses a different part

use std::process::Command;

/// One host's network, as far as faults go.
#[derive(Clone, Debug)]
pub struct NetHost {
    /// Its network namespace, or None for the machine's own.
    pub netns: Option<String>,
    /// The link its packets arrive on (`eth0` in a namespace, the bridge on the machine).
    pub dev: String,
    /// The chain the rules go in: `INPUT` in a namespace, one of the test's on the machine.
    pub chain: String,
}

impl NetHost {
    /// A host that is the network namespace `netns`, linked by its `eth0`.
    pub fn namespace(netns: &str) -> NetHost {
        NetHost {
            netns: Some(netns.to_string()),
            dev: "eth0".into(),
            chain: "INPUT".into(),
        }
    }

    /// The machine's own namespace, for what arrives on `dev` (a bridge): the rules go in the
    /// chain `chain` (at most 28 characters), made now and jumped to from INPUT for packets
    /// from `dev`. [`NetHost::remove_chain`] undoes it.
    pub fn machine(dev: &str, chain: &str) -> NetHost {
        let h = NetHost {
            netns: None,
            dev: dev.into(),
            chain: chain.into(),
        };
        h.remove_chain();
        h.iptables(&["-N", chain]);
        h.iptables(&["-I", "INPUT", "1", "-i", dev, "-j", chain]);
        h
    }

    /// Remove the chain of [`NetHost::machine`] and its jump, if there (a namespace's rules go
    /// with the namespace).
    pub fn remove_chain(&self) {
        if self.netns.is_some() {
            return;
        }
        let quiet = |args: &[&str]| {
            let _ = Command::new("iptables")
                .args(args)
                .stderr(std::process::Stdio::null())
                .status();
        };
        quiet(&["-D", "INPUT", "-i", &self.dev, "-j", &self.chain]);
        quiet(&["-F", &self.chain]);
        quiet(&["-X", &self.chain]);
    }

    /// A command that runs `program` on this host.
    pub fn command(&self, program: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        }
    }

    /// Run `iptables args`; it must succeed.
    pub fn iptables(&self, args: &[&str]) {
        let st = self
            .command("iptables")
            .args(args)
            .status()
            .unwrap_or_else(|e| {
                panic!("iptables on {self:?}: {e} (install Debian's iptables package)")
            });
        assert!(st.success(), "iptables {args:?} on {self:?}: {st}");
    }

    /// Drop what arrives from `addr` (and matches `extra`, e.g. `-p tcp --dport 80`);
    /// `undo` removes that rule again.
    pub fn drop_from(&self, addr: &str, extra: &[&str], undo: bool) {
        let mut args = vec![if undo { "-D" } else { "-I" }, self.chain.as_str()];
        if !undo {
            args.push("1");
        }
        args.extend(["-s", addr]);
        args.extend(extra);
        args.extend(["-j", "DROP"]);
        self.iptables(&args);
    }

    /// Lose `percent` % of the packets this host receives from its link, each packet alike.
    /// The host then sends one MTU-sized packet per buffer (`gso_max_segs 1`): a veth hands a
    /// TCP segment of up to 64 KB to its peer whole, and losing one such would lose 44
    /// packets at once. Apply it to every host for a loss rate per packet.
    pub fn lose(&self, percent: f64) {
        let ok = self
            .command("ip")
            .args(["link", "set", &self.dev, "gso_max_segs", "1"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "gso_max_segs on {self:?}");
        let p = format!("{}", percent / 100.0);
        self.iptables(&[
            "-I",
            &self.chain,
            "1",
            "-i",
            &self.dev,
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            &p,
            "-j",
            "DROP",
        ]);
    }

    /// Packets this host's DROP rules have dropped so far (a cut's and a loss's).
    pub fn dropped(&self) -> u64 {
        let out = self
            .command("iptables")
            .args(["-L", &self.chain, "-v", "-n", "-x"])
            .output()
            .expect("iptables -L");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.split_whitespace().nth(2) == Some("DROP"))
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }

    /// Delay every packet this host receives from its link by `ms` milliseconds: a rule queues
    /// them (NFQUEUE 0, after any loss rule) and the returned command, run for as long as the
    /// delay should last, lets each through `ms` later (`delay.py`, Python's standard library).
    /// Until it runs, and after it stops, packets pass undelayed (`--queue-bypass`).
    pub fn delay(&self, ms: u32) -> Command {
        self.iptables(&[
            "-A",
            &self.chain,
            "-i",
            &self.dev,
            "-j",
            "NFQUEUE",
            "--queue-num",
            "0",
            "--queue-bypass",
        ]);
        let mut c = self.command("python3");
        c.args(["-c", include_str!("delay.py"), "0"])
            .arg(format!("{}", f64::from(ms) / 1000.0));
        c
    }
}
