//! `pathlab emulate --netns NS --iface IF`: an emulator put in front of an interface of
//! someone else's namespace (a container's, a pod's), named by `ip netns` name, by path
//! and by pid, on a veth, a VXLAN device and a macvlan. The interface as the namespace's
//! programs see it (name, index, MAC, MTU, addresses, routes of every table, permanent
//! neighbours, sysctls) is compared before, during and after; pings check the specs;
//! SIGTERM and SIGKILL + `lab clean` must both give it back exactly.

use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pathlab_emulator::emulator::EmulatorStats;
use pathlab_os::interpose::{view, InterfaceView};
use pathlab_os::netns::Netns;
use pathlab_probe_driver::ping::Pinger;

use super::{median, rtts_ms};
use crate::util::emulated::{end, libc_sigterm, pathlab, privileged_shared, PATHLAB};

/// How far a ping's median RTT may be from the specs' sum: the bound.
pub(crate) const RTT_TOLERANCE_MS: f64 = 0.5;

/// A process that stays in a namespace so that `pid:PID` names it; killed when dropped.
pub(crate) struct Resident(Child);

impl Resident {
    pub(crate) fn in_netns(netns: &Netns) -> Resident {
        let child = netns
            .command("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .expect("sleep starts in the namespace");
        Resident(child)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `pathlab emulate --iface`, stopped with SIGTERM when dropped.
pub(crate) struct Emulator {
    child: Option<Child>,
    name: String,
}

impl Emulator {
    pub(crate) fn start(
        name: &str,
        netns: &str,
        iface: &str,
        spec: &str,
        reverse: &str,
    ) -> Emulator {
        Emulator::start_with(name, netns, iface, spec, reverse, &[])
    }

    /// [`Emulator::start`] with `env` added to its environment (the test hooks).
    pub(crate) fn start_with(
        name: &str,
        netns: &str,
        iface: &str,
        spec: &str,
        reverse: &str,
        env: &[(&str, &str)],
    ) -> Emulator {
        let child = Command::new(PATHLAB)
            .envs(env.iter().copied())
            .args([
                "emulate",
                "--netns",
                netns,
                "--iface",
                iface,
                spec,
                "--reverse",
                reverse,
                "--name",
                name,
                "-J",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pathlab emulate starts");
        let mut emulator = Emulator {
            child: Some(child),
            name: name.to_owned(),
        };
        for _ in 0..200 {
            if pathlab(&["emulate", "stats", "--name", name])
                .status
                .success()
            {
                return emulator;
            }
            if let Some(status) = emulator
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let output = emulator.child.take().expect("child").wait_with_output();
                panic!(
                    "emulator {name} ended ({status}): {}",
                    output
                        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                        .unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("emulator {name} did not come up");
    }

    /// SIGTERM, as Ctrl-C: its final counters; it must exit 0 and say nothing went wrong.
    pub(crate) fn stop(mut self) -> EmulatorStats {
        let child = self.child.take().expect("running");
        pathlab_os::kill(child.id(), libc_sigterm()).expect("signal");
        let output = child.wait_with_output().expect("emulator exits");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "emulator {} failed: {stderr}",
            self.name
        );
        assert!(!stderr.contains("not restored"), "{stderr}");
        serde_json::from_slice(&output.stdout).expect("final stats are JSON")
    }

    /// Its counters now (`emulate stats -J`), its lateness among them.
    pub(crate) fn stats(&self) -> EmulatorStats {
        let output = pathlab(&["emulate", "stats", "--name", &self.name, "-J"]);
        assert!(output.status.success(), "emulate stats {}", self.name);
        serde_json::from_slice(&output.stdout).expect("stats are JSON")
    }

    /// SIGKILL: nothing of its own is undone.
    pub(crate) fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            end(child);
        }
    }
}

pub(crate) fn seen(netns: &Netns, name: &str) -> InterfaceView {
    netns
        .run(|| view(name))
        .unwrap()
        .expect("view")
        .unwrap_or_else(|| panic!("{name} is there"))
}

/// The median RTT (ms) of 20 pings from `netns` to `target`, none lost.
pub(crate) fn ping_ms(netns: &Netns, target: &str) -> f64 {
    let target: IpAddr = target.parse().unwrap();
    let mut pinger = netns
        .run(|| Pinger::new(target, 56))
        .unwrap()
        .expect("raw ICMP socket");
    // A first exchange resolves the neighbours (ARP and NDP cross the emulators too).
    pinger
        .run(2, Duration::from_millis(50), Duration::from_secs(2))
        .expect("ping runs");
    let results = pinger
        .run(20, Duration::from_millis(50), Duration::from_secs(2))
        .expect("ping runs");
    let rtts = rtts_ms(&results);
    assert_eq!(
        rtts.len(),
        20,
        "every ping to {target} answered: {results:?}"
    );
    median(&rtts)
}

#[test]
fn a_missing_namespace_or_interface_is_refused_with_the_reason() {
    // Shared: refusals; its namespace is its own, the names it tries carry this pid.
    let Some(_guard) = privileged_shared("a_missing_namespace_or_interface_is_refused") else {
        return;
    };
    let pid = std::process::id();
    let netns = Netns::new().expect("namespace");
    let resident = Resident::in_netns(&netns);
    let cases = [
        (
            format!("plt{pid}-none"),
            "lo0",
            format!("no network namespace 'plt{pid}-none'"),
        ),
        (
            "pid:4194304".to_owned(),
            "lo0",
            "no network namespace 'pid:4194304'".to_owned(),
        ),
        (
            format!("pid:{}", resident.pid()),
            "eth9",
            format!(
                "no interface 'eth9' in namespace 'pid:{}' (it has: lo)",
                resident.pid()
            ),
        ),
        (
            format!("pid:{}", resident.pid()),
            "lo",
            "has no Ethernet address".to_owned(),
        ),
        ("pid:0".to_owned(), "lo", "is not a process id".to_owned()),
    ];
    for (ns, iface, reason) in cases {
        let output = pathlab(&["emulate", "--netns", &ns, "--iface", iface, "delay", "1ms"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{ns} {iface}: {stderr}");
        assert!(stderr.contains(&reason), "{ns} {iface}: {stderr}");
    }
}
