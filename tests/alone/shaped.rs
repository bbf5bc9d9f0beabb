//! The tests of `shaped` that need the machine to themselves (see `alone.rs`).

use crate::util::emulated::{privileged, ServerInH2, PATHLAB};
use pathlab_os::topology::{Line, R_PORT_H2};

use crate::shaped::*;

#[test]
fn owd_shows_the_kernels_full_buffer_while_overfed_and_a_flat_line_below_its_rate() {
    let Some(_serial) = privileged(
        "owd_shows_the_kernels_full_buffer_while_overfed_and_a_flat_line_below_its_rate",
    ) else {
        return;
    };
    // The seed's two plots on a line pathlab did not make: a 10 Mbit/s tbf with a 100 ms
    // queue. A full buffer delays a frame by the latency plus the bucket's time at the
    // rate (tbf's limit is its rate times its latency plus its bucket).
    let line = bridged();
    kernel_tbf(&line, R_PORT_H2, "10mbit", "2kb", "100ms");
    let buffer_ns = 100e6 + 2048.0 * 8.0 / 10e6 * 1e9;
    let ns = |owd: &serde_json::Value, field: &str| owd[field].as_f64().expect(field);
    // 12 Mbit/s of payload in 1242-byte frames: 12.4 Mbit/s into 10, for 10 s (the lows of
    // a full buffer wander by tens of microseconds: 5 s gave up to 18 ppm of drift, 10 s
    // within 1.5).
    let (over, _) = owd_up(&line, "12M", "10s");
    eprintln!("overfed: {over:#}");
    assert_eq!(over["verdict"], "building");
    let p95 = ns(&over, "deviation_p95_ns");
    assert!(
        (p95 / buffer_ns - 1.0).abs() < 0.1,
        "p95 {p95} ns for a buffer of {buffer_ns}"
    );
    // Both ends share a clock: no drift, and a queue that stays is not taken for one.
    assert!(ns(&over, "clock_drift_ppm").abs() < 5.0, "{over}");
    assert_eq!(over["clock_drift_implausible"], false);
    let (under, under_late) = owd_up(&line, "5M", "5s");
    assert_eq!(under["verdict"], "not-building");
    // Below the rate no queue stays; but a sender the machine held back sends what fell
    // due together, and those probes queue at the tbf for real (at twice the offered
    // rate, a burst waits at most half its first probe's lateness): the bound takes the
    // sender's own lateness, its 99th percentile, as owd reports it.
    let late_p99 = under_late;
    assert!(
        ns(&under, "deviation_p95_ns") < 1e6 + late_p99,
        "p95 above 1 ms + the sender's p99 lateness {late_p99} ns: {under}"
    );
    assert!(ns(&under, "clock_drift_ppm").abs() < 5.0, "{under}");
}

/// `pathlab owd` from h1 to a server in h2: its one direction's delay figures, as JSON, and
/// its sender's 99th-percentile lateness against its schedule, ns.
fn owd_up(line: &Line, rate: &str, time: &str) -> (serde_json::Value, f64) {
    let _server = ServerInH2::start(line);
    let output = line
        .h1
        .command(PATHLAB)
        .args([
            "owd",
            "198.18.0.2",
            "--rate",
            rate,
            "--size",
            "1200",
            "-t",
            time,
            "-J",
        ])
        .output()
        .expect("pathlab owd runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).expect("owd's JSON");
    let late = value[0]["send_lateness"]["p99_ns"]
        .as_f64()
        .expect("owd reports its sender's lateness");
    (value[0]["owd"].clone(), late)
}
