//! The tests of `lab_scale` that need the machine to themselves (see `alone.rs`).

use crate::util::emulated::{privileged, PATHLAB};
use crate::util::TempDir;
use std::process::Command;

use crate::lab_scale::*;

#[test]
fn under_a_hard_limit_too_low_a_lab_raises_it_or_says_what_it_needs_before_building() {
    let Some(_serial) = privileged("under_a_hard_limit_too_low_a_lab_raises_it") else {
        return;
    };
    let dir = TempDir::new("lab-scale-hard");
    let (spec, needed, out) = write_star(&dir);
    // `ulimit -n` in sh sets the soft and the hard limit.
    let output = Command::new("sh")
        .args(["-c", "ulimit -n 256 && exec \"$0\" \"$@\"", PATHLAB, "lab"])
        .args([spec.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if may_raise_hard_limits() {
        assert!(output.status.success(), "{stderr}");
        return;
    }
    eprintln!("{}", stderr.trim());
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let wanted = needed + (needed as f64 * pathlab_lab::descriptors::HEADROOM).ceil() as u64;
    assert!(
        stderr.contains(&format!("holds up to {wanted} file descriptors"))
            && stderr.contains("may open 256"),
        "{stderr}"
    );
    // Nothing was built: no link's recording.
    let built = std::fs::read_dir(&out).map_or(0, |entries| {
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("link-"))
            .count()
    });
    assert_eq!(built, 0, "links built before the refusal");
}

/// Whether this process has CAP_SYS_RESOURCE (bit 24 of its effective set), which raising
/// a hard limit needs.
fn may_raise_hard_limits() -> bool {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let effective = text
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    effective & (1 << 24) != 0
}
