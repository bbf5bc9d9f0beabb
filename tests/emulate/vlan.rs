//! The one-port VLAN box (`pathlab emulate --trunk IF --vlans 5,6`, seed 003's layout) on
//! namespaces, without the 8021q module: hand-built tagged frames against the box, and
//! real pings and TCP from a client in VLAN 5 to a server in VLAN 6 through a switch.
//!
//! This kernel has no bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING is off, as
//! 8021q is), so the switch is built from pathlab's own parts: one emulator with an empty
//! spec per access port, joining the access interface (untagged) to its VLAN of the
//! switch's trunk port. The frame test checks the tag bytes the box writes by hand, so a
//! mistake shared by the switch and the box cannot hide there. The box reads its trunk
//! from the socket (`rate 100mbit`, the tag in `PACKET_AUXDATA`) in the frame test and from
//! a ring (no rate, the tag in the ring's frame header) in the others.

use std::process::Child;
use std::time::Duration;

use pathlab_emulator::emulator::EmulatorStats;
use pathlab_os::netns::Netns;

use super::test_frame;
use crate::util::emulated::{libc_sigterm, pathlab, privileged_shared, PATHLAB};

/// The box's trunk port.
pub(crate) const TRUNK: &str = "trunk";

/// A running `pathlab emulate --trunk`, stopped (SIGTERM, then SIGKILL) if the test ends
/// without [`stop_box`], so a failing test leaves no process (nor the namespace it holds).
pub(crate) struct BoxProcess(pub(crate) Option<Child>);

impl Drop for BoxProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = pathlab_os::kill(child.id(), libc_sigterm());
            for _ in 0..100 {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Stops the box as Ctrl-C would and returns its final counters.
pub(crate) fn stop_box(mut process: BoxProcess) -> EmulatorStats {
    let child = process.0.take().expect("running");
    pathlab_os::kill(child.id(), libc_sigterm()).expect("signal");
    let output = child.wait_with_output().expect("the box exits");
    assert!(
        output.status.success(),
        "the box failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("final stats are JSON")
}

/// An 802.1Q tag: priority `pcp`, VLAN `vid`.
pub(crate) fn tag(pcp: u8, vid: u16) -> [u8; 4] {
    let tci = (u16::from(pcp) << 13) | vid;
    let [hi, lo] = tci.to_be_bytes();
    [0x81, 0x00, hi, lo]
}

/// A frame from the test's MAC to the broadcast address: `tags`, an experimental
/// ethertype, and 64 bytes of `fill`.
pub(crate) fn frame(tags: &[u8], fill: u8) -> Vec<u8> {
    test_frame(tags, [0x88, 0xb5], &[fill; 64])
}

#[test]
fn bad_trunk_settings_exit_2_naming_what_was_wrong() {
    let refused = |args: &[&str], says: &str| {
        let output = pathlab(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    let trunk = ["emulate", "--trunk", "eth0", "delay 1ms"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        trunk.iter().copied().chain(extra.iter().copied()).collect()
    };
    refused(
        &with(&["--vlans", "5,5"]),
        "two different VLAN IDs, got 5 twice",
    );
    refused(&with(&["--vlans", "5"]), "exactly two VLAN IDs");
    refused(&with(&["--vlans", "5,6,7"]), "exactly two VLAN IDs");
    refused(&with(&["--vlans", "0,6"]), "'0' is not a VLAN ID");
    refused(&with(&["--vlans", "5,4095"]), "'4095' is not a VLAN ID");
    refused(&with(&[]), "--vlans");
    refused(
        &with(&["--vlans", "5,6", "--between", "a", "b"]),
        "cannot be used with",
    );
    refused(&with(&["--vlans", "5,6", "--wait"]), "cannot be used with");
    refused(
        &["emulate", "--vlans", "5,6", "--between", "a", "b", "x"],
        "--trunk",
    );
    refused(
        &["emulate", "--native-vlan", "5", "--between", "a", "b", "x"],
        "--trunk",
    );
    refused(
        &with(&["--vlans", "5,6", "--native-vlan", "7"]),
        "VLAN 7 is not one of the bridged VLANs 5,6",
    );
    refused(
        &with(&["--vlans", "5,6", "--native-vlan", "4095"]),
        "'4095'",
    );
    // Shared: refusals in an empty namespace of its own, the name `t{pid}-vlan-bad`.
    let Some(_serial) = privileged_shared("bad_trunk_settings_exit_2_naming_what_was_wrong") else {
        return;
    };
    // In an empty namespace of its own: no interface is there but lo.
    let empty = Netns::new().expect("a namespace");
    for (interface, says) in [
        ("nosuch", "no interface named 'nosuch'"),
        ("lo", "'lo' is a loopback interface"),
    ] {
        let output = empty
            .command(PATHLAB)
            .args([
                "emulate",
                "--trunk",
                interface,
                "--vlans",
                "5,6",
                "delay 1ms",
            ])
            .args(["--name", &format!("t{}-vlan-bad", std::process::id())])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}
