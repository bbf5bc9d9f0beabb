//! The file descriptors a lab holds while it runs, known before anything is built: a lab
//! should outgrow the machine's memory or cores, not its file table (a 3,000-link star lab
//! ended with "the emulator of link r-h1272: Too many open files" under a limit of 20,000).
//!
//! [`needed`] counts what the run holds at once; [`plan`] says how the process's limit
//! must change for it (the soft limit up to the hard one, the hard one too where the
//! process may: root, up to `fs.nr_open`), or that it cannot, so the run says so before
//! building anything.

use crate::spec::Experiment;

/// Held whatever the lab: the standard streams, the forwarding pool's threads (an epoll
/// set and a waker each), the termination signals, the control address and its
/// connections, the netlink socket building holds, the result's files.
pub const BASE: u64 = 64;
/// Each node: its namespace.
pub const PER_NODE: u64 = 1;
/// Each emulated link on a cable of its own, as counted in /proc/PID/fd of a 300-link star
/// before the switchboard (12 at first; 9 once the cable's own namespace descriptor was
/// closed when its ports held it, and the sending halves shared their port's socket
/// instead of a duplicate; 8 once recordings were closed between writes). Per port: the
/// namespace it was opened in, a receiving and a sending socket, the lock that says its
/// interface is emulated.
pub const PER_EMULATED_LINK: u64 = 8;
/// Each emulated link on the switchboard: nothing of its own. Its ports share the
/// switchboard's sockets, take no lock (the switchboard is the run's own, no other
/// emulator can reach it) and its recording is closed between writes.
pub const PER_BOARD_LINK: u64 = 0;
/// The switchboard: its namespace and its sending socket, besides a receiving socket per
/// forwarding thread.
pub const SWITCHBOARD: u64 = 2;
/// Each workload: its sockets, output files, a child's pipes (they may all run at once).
pub const PER_WORKLOAD: u64 = 16;
/// Room kept above the count, for what varies (a control client, a report's files).
pub const HEADROOM: f64 = 0.25;

/// The descriptors `experiment` holds at once while it runs on `threads` forwarding
/// threads, at most.
pub fn needed(experiment: &Experiment, threads: usize) -> u64 {
    let emulated = crate::topology::emulated(experiment)
        .iter()
        .filter(|&&e| e)
        .count() as u64;
    let links = if crate::topology::uses_switchboard(experiment) {
        SWITCHBOARD + threads as u64 + PER_BOARD_LINK * emulated
    } else {
        PER_EMULATED_LINK * emulated
    };
    BASE + PER_NODE * experiment.nodes.len() as u64
        + links
        + PER_WORKLOAD * experiment.workloads.len() as u64
}

/// How the process's limit on open files must change before a run that needs `needed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The soft limit is enough.
    Enough,
    /// Set the limit to these (the hard one only ever raised).
    Raise {
        /// The new soft limit.
        soft: u64,
        /// The new hard limit.
        hard: u64,
    },
    /// Even the most the kernel allows a process (`fs.nr_open`) is too little.
    Short {
        /// What the run needs, headroom included.
        needed: u64,
        /// The most it could have.
        most: u64,
    },
}

/// The limit to ask for, from the current one (`soft`, `hard`) and the kernel's ceiling
/// `nr_open`: the count with [`HEADROOM`], within the hard limit if that suffices (no
/// privilege needed), else the hard limit raised too (which needs CAP_SYS_RESOURCE: the
/// caller says so if it is refused).
pub fn plan(needed: u64, soft: u64, hard: u64, nr_open: u64) -> Plan {
    let wanted = needed.saturating_add((needed as f64 * HEADROOM).ceil() as u64);
    if wanted <= soft {
        Plan::Enough
    } else if wanted <= hard {
        Plan::Raise { soft: wanted, hard }
    } else if wanted <= nr_open {
        Plan::Raise {
            soft: wanted,
            hard: wanted,
        }
    } else {
        Plan::Short {
            needed: wanted,
            most: nr_open,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    fn star(links: usize) -> Experiment {
        let mut text = String::from("name = \"star\"\nduration = \"10s\"\n");
        text.push_str("[[node]]\nname = \"r\"\nkind = \"router\"\n");
        for h in 1..=links {
            write!(text, "[[node]]\nname = \"h{h}\"\n").unwrap();
        }
        for h in 1..=links {
            write!(
                text,
                "[[link]]\nbetween = [\"r\", \"h{h}\"]\nspec = \"delay 1ms\"\n"
            )
            .unwrap();
        }
        text.push_str(
            "[[workload]]\nname = \"across\"\nkind = \"ping\"\nfrom = \"h1\"\nto = \"h2\"\n",
        );
        Experiment::parse(&text).unwrap()
    }

    #[test]
    fn a_star_lab_needs_a_namespace_per_node_and_a_few_per_link_or_the_switchboard() {
        assert_eq!(needed(&star(3), 2), BASE + 4 + 8 * 3 + PER_WORKLOAD);
        // Beyond 64 emulated links the switchboard's few sockets serve them all.
        assert_eq!(
            needed(&star(10_000), 2),
            BASE + 10_001 + SWITCHBOARD + 2 + PER_WORKLOAD
        );
    }

    #[test]
    fn the_limit_is_raised_as_little_as_needed_and_a_lab_beyond_the_kernel_is_refused() {
        // Enough already.
        assert_eq!(plan(1000, 20_000, 20_000, 1 << 20), Plan::Enough);
        // 3,000 links of a star: over the soft limit, within the hard one.
        let three = needed(&star(3000), 2);
        assert_eq!(
            plan(three, 1024, 1 << 20, 1 << 20),
            Plan::Raise {
                soft: three + (three as f64 * HEADROOM).ceil() as u64,
                hard: 1 << 20
            }
        );
        // 10,000 links within a hard limit of 20,000 (the switchboard's few descriptors):
        // the soft limit only.
        let ten = needed(&star(10_000), 2);
        let wanted = ten + (ten as f64 * HEADROOM).ceil() as u64;
        assert!(wanted < 20_000, "{wanted}");
        assert_eq!(
            plan(ten, 1024, 20_000, 1 << 20),
            Plan::Raise {
                soft: wanted,
                hard: 20_000
            }
        );
        // Over a hard limit of 10,000: the hard limit too (root may).
        assert_eq!(
            plan(ten, 1024, 10_000, 1 << 20),
            Plan::Raise {
                soft: wanted,
                hard: wanted
            }
        );
        // Beyond what the kernel lets any process hold.
        assert_eq!(
            plan(ten, 1024, 10_000, 12_000),
            Plan::Short {
                needed: wanted,
                most: 12_000
            }
        );
    }
}
