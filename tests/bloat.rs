//! End-to-end tests of `pathlab bloat`: through the emulator (h1 - r - h2, a server in
//! h2, the command in h1) against the emulator's recorded queue delays, and its answers to
//! bad input.
//!
//! The emulated tests need CAP_NET_ADMIN: without it they fail when `CI=true` and skip
//! elsewhere.

use std::process::{Command, Output};
use std::time::Duration;

use pathlab_os::topology::H2_V4;
use pathlab_probe::bloat::{BloatReport, Grade, Phase, PhaseSummary};
use pathlab_results::recording::Recording;

use crate::util;
use crate::util::emulated::{privileged_paired, with_server_in_h2, Lab, PATHLAB};
use crate::util::late::{Lateness, Quantile};

/// The link of both tests: 10 Mbit/s, 10 ms each way, 1000 packets of queue (a tail-drop
/// FIFO unless the queue says otherwise).
const TAIL_DROP: &str = "rate 10mbit delay 10ms limit 1000";
const FQ_CODEL: &str = "rate 10mbit delay 10ms limit 1000 queue fq_codel";

/// One probe on the wire: 64 bytes of UDP payload + 8 UDP + 20 IPv4 + 14 Ethernet.
const PROBE_FRAME_BYTES: f64 = 106.0;

/// Runs `pathlab bloat 198.18.0.2 ARGS -J` in h1 against a server in h2.
fn bloat_through(lab: &Lab, args: &[&str]) -> Output {
    with_server_in_h2(lab, |first| {
        drop(first);
        // A child forked from this thread lives in its namespace, h1.
        Ok(Command::new(PATHLAB)
            .args(["bloat", &H2_V4.to_string()])
            .args(args)
            .arg("-J")
            .output()
            .expect("pathlab bloat runs"))
    })
}

/// The report a successful `-J` run printed.
fn report(output: &Output) -> BloatReport {
    assert!(
        output.status.success(),
        "pathlab bloat failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the report is JSON")
}

fn phase(report: &BloatReport, which: Phase) -> &PhaseSummary {
    report
        .phases
        .iter()
        .find(|p| p.phase == which)
        .expect("the phase ran")
}

/// The median queue delay (dequeued - arrived) the emulator recorded in `dir` for the
/// packets that arrived in `[from, until)` (Unix ns) and were not dropped, with how many
/// there were; `only_len` keeps packets of that length alone.
fn recorded_queue_delay_ms(
    recording: &Recording,
    dir: u8,
    from: u64,
    until: u64,
    only_len: Option<u32>,
) -> (f64, usize) {
    let zero = recording
        .header
        .as_ref()
        .expect("header")
        .clock_zero_unix_ns;
    let delays: Vec<f64> = recording
        .packets(dir)
        .filter(|p| only_len.is_none_or(|len| p.len_bytes == len))
        .filter(|p| (from..until).contains(&(zero + p.arrived.as_nanos())))
        .filter_map(|p| p.dequeued.map(|d| (d - p.arrived).as_nanos() as f64 / 1e6))
        .collect();
    assert!(
        !delays.is_empty(),
        "the emulator recorded packets in the window"
    );
    let count = delays.len();
    (util::median(&delays), count)
}

/// One upload run through `spec`: the report, the emulator's recording and its lateness.
fn upload_through(spec: &str, test: &str) -> (BloatReport, Recording, Lateness) {
    let mut lab = Lab::start(test, spec, &[], true);
    // Reno fills a tail-drop queue and halves on loss (BBR would keep it near empty); a
    // 1 MB buffer per stream (2 MB in the kernel) lets 4 streams hold more than the
    // queue's 1.5 MB.
    let output = bloat_through(
        &lab,
        &[
            "--direction",
            "up",
            "-t",
            "5s",
            "-C",
            "reno",
            "-w",
            "1M",
            "-P",
            "4",
        ],
    );
    let (stats, recording) = lab.stop();
    (report(&output), recording, Lateness::of_stats(&stats))
}

#[test]
fn tail_drop_grades_worse_than_fq_codel_and_its_added_latency_is_the_emulators_queue_delay() {
    let Some(_serial) = privileged_paired(
        "tail_drop_grades_worse_than_fq_codel_and_its_added_latency_is_the_emulators_queue_delay",
    ) else {
        return;
    };
    let (tail, recording, lateness) = upload_through(TAIL_DROP, "bloat-taildrop");

    // Idle: 2 x 10 ms of delay plus the probe's serialization each way.
    let expected_idle_ms = 20.0 + 2.0 * PROBE_FRAME_BYTES * 8.0 / 10e6 * 1e3;
    let idle = phase(&tail, Phase::Idle);
    let idle_ms = idle.rtt.p50_ns as f64 / 1e6;
    // The probes crossed the emulator both ways: its median lateness is in their median.
    let late_ms = lateness
        .slack(Quantile::P50, &[0, 1], Duration::from_millis(2))
        .as_secs_f64()
        * 1e3;
    eprintln!(
        "idle median {idle_ms:.3} ms, expected {expected_idle_ms:.3} ms, the emulator late by \
         {late_ms:.3} ms (p50 both ways)"
    );
    assert!(
        (-0.5..=0.5 + late_ms).contains(&(idle_ms - expected_idle_ms)),
        "idle median {idle_ms:.3} ms, the link's is {expected_idle_ms:.3} ms, the emulator late \
         by {late_ms:.3} ms"
    );
    assert_eq!(tail.baseline_rtt_ns, idle.rtt.p50_ns);

    // Upload: the probes' added median against the queue delay the emulator recorded on
    // the way up (direction 0, h1 -> h2) over the same counted window.
    let up = phase(&tail, Phase::Upload);
    let added_ms = up.added.expect("loaded").p50_ns as f64 / 1e6;
    let (queue_ms, packets) = recorded_queue_delay_ms(
        &recording,
        0,
        up.counted_from_unix_ns,
        up.counted_until_unix_ns,
        None,
    );
    let (probe_queue_ms, probes) = recorded_queue_delay_ms(
        &recording,
        0,
        up.counted_from_unix_ns,
        up.counted_until_unix_ns,
        Some(PROBE_FRAME_BYTES as u32),
    );
    eprintln!(
        "tail drop upload: added median {added_ms:.1} ms (p90 {:.1}, p99 {:.1}); emulator's \
         median queue delay {queue_ms:.1} ms over {packets} packets ({probe_queue_ms:.1} ms \
         over the {probes} probes); load {:.2} Mbit/s; {:.0} RPM; grade {}; {}",
        up.added.unwrap().p90_ns as f64 / 1e6,
        up.added.unwrap().p99_ns as f64 / 1e6,
        up.load_up_bps / 1e6,
        up.responsiveness.map_or(0.0, |r| r.rpm),
        tail.grade,
        tail.verdict
    );
    assert!(
        (added_ms - queue_ms).abs() <= 0.15 * queue_ms,
        "added median {added_ms:.1} ms against the recorded {queue_ms:.1} ms (15%)"
    );
    // The load is what made the queue: it ran near the link's rate.
    assert!(
        up.load_up_bps > 0.8 * 10e6 && up.load_up_bps <= 10e6,
        "upload load {:.2} Mbit/s",
        up.load_up_bps / 1e6
    );
    // Every parameter is in the report.
    assert_eq!(tail.settings.phases, vec![Phase::Idle, Phase::Upload]);
    assert_eq!(tail.settings.congestion.as_deref(), Some("reno"));
    assert_eq!(tail.settings.window_bytes, Some(1 << 20));
    assert_eq!(
        (tail.settings.streams, tail.settings.phase_ns),
        (4, 5_000_000_000)
    );
    assert!(
        up.start_unix_ns < up.counted_from_unix_ns && up.counted_until_unix_ns < up.end_unix_ns
    );

    let (fq, _, _) = upload_through(FQ_CODEL, "bloat-fqcodel");
    let fq_up = phase(&fq, Phase::Upload);
    eprintln!(
        "fq_codel upload: added median {:.2} ms, {:.0} RPM, load {:.2} Mbit/s, grade {}; {}",
        fq_up.added.expect("loaded").p50_ns as f64 / 1e6,
        fq_up.responsiveness.map_or(0.0, |r| r.rpm),
        fq_up.load_up_bps / 1e6,
        fq.grade,
        fq.verdict
    );
    assert!(
        fq.grade < tail.grade,
        "fq_codel graded {} and tail drop {}: fq_codel must grade better",
        fq.grade,
        tail.grade
    );
    assert!(
        fq_up.responsiveness.unwrap().rpm > up.responsiveness.unwrap().rpm,
        "fq_codel is more responsive"
    );
    assert_eq!(tail.grade, Grade::F, "a second of queue is an F");
}

fn pathlab_bloat(args: &[&str]) -> Output {
    Command::new(PATHLAB)
        .arg("bloat")
        .args(args)
        .output()
        .expect("pathlab runs")
}

fn assert_fails(output: &Output, code: i32, says: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    for words in says {
        assert!(stderr.contains(words), "'{words}' not in: {stderr}");
    }
}

#[test]
fn bad_input_exits_2_and_a_failed_run_exits_1_each_saying_why() {
    // Input: exit 2, naming what was wrong.
    assert_fails(
        &pathlab_bloat(&["127.0.0.1", "--direction", "sideways"]),
        2,
        &["sideways", "--direction", "down", "up", "both"],
    );
    assert_fails(
        &pathlab_bloat(&["127.0.0.1", "-t", "0"]),
        2,
        &["'0' is no time at all"],
    );
    assert_fails(
        &pathlab_bloat(&["127.0.0.1", "-t", "1s"]),
        2,
        &["-t 1s", "ramp-up"],
    );
    assert_fails(
        &pathlab_bloat(&["127.0.0.1", "-t", "3s", "-i", "500ms"]),
        2,
        &["counts only 4 probes", "probe more often"],
    );
    assert_fails(&pathlab_bloat(&["127.0.0.1", "-w", "lots"]), 2, &["lots"]);
    // A run that cannot happen: nothing listens on the port (taken, then freed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let host = format!("127.0.0.1:{port}");
    assert_fails(
        &pathlab_bloat(&[&host, "-t", "2s"]),
        1,
        &["cannot reach a pathlab server", &host],
    );
    // The help says what -t means.
    let help = String::from_utf8_lossy(&pathlab_bloat(&["--help"]).stdout).into_owned();
    assert!(help.contains("Length of each phase"), "{help}");
}
