//! Issue 30, local: what a local user or a crafted file reaches. `lab clean` removes only
//! what pathlab made (not a namespace, interface or table that merely has a name like
//! pathlab's), and `report` refuses a recording that asks for more rate intervals than it
//! counts instead of allocating them.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use pathlab_os::netns::Netns;

use crate::util;
use crate::util::emulated::PATHLAB;

pub(crate) fn tables_in(netns: &Netns) -> Vec<String> {
    netns
        .run(pathlab_os::nat::tables)
        .expect("enters the namespace")
        .expect("lists nftables tables")
}

/// A `pathlab shell`, SIGKILLed and reaped when dropped (also when a test fails).
pub(crate) struct Shell(pub(crate) Child);

impl Shell {
    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// SIGKILL, and reaped (a zombie still counts as its own process).
pub(crate) fn kill(shell: Shell) {
    drop(shell);
}

/// `pathlab report DIR` with at most 1 GiB of address space (`ulimit -v`), so an
/// allocation the file asks for fails instead of taking the machine; how it ended, and
/// how long it took.
fn report_in_1_gib(dir: &std::path::Path) -> (Output, Duration) {
    let started = Instant::now();
    let output = std::process::Command::new("sh")
        .args([
            "-c",
            "ulimit -v 1048576 && exec \"$0\" \"$@\"",
            PATHLAB,
            "report",
        ])
        .arg(dir)
        .arg("--out")
        .arg(dir.join("report"))
        .output()
        .expect("sh runs");
    (output, started.elapsed())
}

#[test]
fn report_refuses_a_recording_asking_for_billions_of_rate_intervals() {
    use pathlab_core::packet::Ecn;
    use pathlab_core::record::PacketRecord;
    use pathlab_core::time::Instant as ModelInstant;
    use pathlab_results::recording::{write_line, RecordingLine};

    let dir = util::TempDir::new("hostile-report-bins");
    let run = dir.path("run");
    util::lab_fixture::write_lab_run(&run, 10);
    // The fixture's report fits in the limit.
    let (fine, _) = report_in_1_gib(&run);
    assert!(
        fine.status.success(),
        "{}",
        String::from_utf8_lossy(&fine.stderr)
    );
    // One more packet, leaving the queue 2^62 ns (146 years) after the others: counting
    // the delivered rate per 0.5 s from the first to it takes 9.2e9 counters, 74 GB.
    let late_ns = 1u64 << 62;
    let record = PacketRecord {
        id: 1_000,
        tag: 0,
        flow: 1,
        len_bytes: 1514,
        arrived: ModelInstant::from_nanos(late_ns - 1_000_000),
        ecn_on_arrival: Ecn::NotEct,
        queue_len_on_arrival: Some(0),
        dequeued: Some(ModelInstant::from_nanos(late_ns)),
        transmitted: Some(ModelInstant::from_nanos(late_ns + 1_211_200)),
        departed: Some(ModelInstant::from_nanos(late_ns + 6_211_200)),
        dropped: None,
        duplicate_of: None,
        ce_marked: false,
        corrupted: false,
        sent: None,
    };
    let recording = run.join("link-r1-h2.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&recording)
        .expect("the fixture's recording");
    write_line(&mut file, &RecordingLine::Packet { dir: 0, record }).expect("appends");
    drop(file);

    let (output, took) = report_in_1_gib(&run);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{:?}: {stderr}",
        output.status
    );
    assert!(
        stderr.contains(&recording.display().to_string())
            && stderr.contains("link r1-h2, direction r1->h2")
            && stderr.contains("(1000000 intervals of 0.5 s)")
            && stderr.contains("is the recording damaged?"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    eprintln!("refused in {took:?}: {}", stderr.trim());
}
