//! End-to-end tests of `pathlab emulate`, `pathlab shell` and `pathlab lab clean` on
//! namespaces: h1 - r - h2 with the emulator in r, checked against theory and against the
//! emulator's own recorded truth.
//!
//! They need CAP_NET_ADMIN. Without it they fail when `CI=true` (CI runs as root, so a
//! missing capability is a broken CI, not a reason to skip) and skip with a message
//! elsewhere.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use pathlab_io::emulator::EmulatorStats;
use pathlab_io::ping::{PingResult, Pinger};
use pathlab_io::topology::{Line, Middle, H1_V4, H2_V4, H2_V6, HOST_PORT, R_PORT_H1, R_PORT_H2};
use pathlab_results::recording::{read_recording, Recording};

const PATHLAB: &str = env!("CARGO_BIN_EXE_pathlab");

/// Whether the test may run: true with CAP_NET_ADMIN; panics without it in CI.
fn privileged(test: &str) -> bool {
    if pathlab_io::require_net_admin("the namespace tests").is_ok() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: CI=true but this process lacks CAP_NET_ADMIN; CI must run the tests as root"
    );
    eprintln!("skipping {test}: needs CAP_NET_ADMIN (run the tests as root)");
    false
}

/// A scratch directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("pathlab-emulate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("can create a temp dir");
        TempDir(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// h1 - r - h2 with `pathlab emulate` running in r. Dropping it stops the emulator and
/// destroys the namespaces.
struct Lab {
    line: Line,
    emulator: Option<Child>,
    name: String,
    dir: TempDir,
}

impl Lab {
    /// Builds the line and starts `pathlab emulate --between r-h1 r-h2 SPEC [extra...]`
    /// with a recording, and waits until its control socket answers.
    fn start(test: &str, spec: &str, extra: &[&str], static_neighbors: bool) -> Lab {
        let line = Line::build(Middle::Emulator, static_neighbors).expect("namespaces build");
        let name = format!("t{}-{test}", std::process::id());
        let dir = TempDir::new(test);
        let mut command = line.r.command(PATHLAB);
        command
            .args(["emulate", "--between", R_PORT_H1, R_PORT_H2, spec, "--name", &name, "-J"])
            .arg("--record")
            .arg(dir.path("record.jsonl"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let emulator = command.spawn().expect("pathlab emulate starts");
        let lab = Lab {
            line,
            emulator: Some(emulator),
            name,
            dir,
        };
        lab.wait_ready();
        lab
    }

    fn wait_ready(&self) {
        for _ in 0..200 {
            if pathlab(&["emulate", "stats", "--name", &self.name]).status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("emulator {} did not come up", self.name);
    }

    fn stats(&self) -> EmulatorStats {
        let output = pathlab(&["emulate", "stats", "--name", &self.name, "-J"]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).expect("stats are JSON")
    }

    fn set(&self, spec: &str) {
        let output = pathlab(&["emulate", "set", "--name", &self.name, spec]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }

    /// Stops the emulator with SIGTERM (as Ctrl-C would) and returns its final counters
    /// and recording.
    fn stop(&mut self) -> (EmulatorStats, Recording) {
        let child = self.emulator.take().expect("running");
        pathlab_io::kill(child.id(), libc_sigterm()).expect("signal");
        let output = child.wait_with_output().expect("emulator exits");
        assert!(output.status.success(), "emulator failed: {}", String::from_utf8_lossy(&output.stderr));
        let stats: EmulatorStats = serde_json::from_slice(&output.stdout).expect("final stats are JSON");
        let file = std::fs::File::open(self.dir.path("record.jsonl")).expect("recording exists");
        let recording = read_recording(std::io::BufReader::new(file)).expect("recording reads");
        (stats, recording)
    }

    fn ping(&self, target: IpAddr, count: usize, interval: Duration, payload: usize) -> Vec<PingResult> {
        let mut pinger = self.line.h1.run(|| Pinger::new(target, payload)).unwrap().expect("raw ICMP socket");
        pinger.run(count, interval, Duration::from_secs(2)).expect("ping runs")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut child) = self.emulator.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn libc_sigterm() -> i32 {
    15
}

fn pathlab(args: &[&str]) -> Output {
    Command::new(PATHLAB).args(args).output().expect("pathlab runs")
}

fn rtts_ms(results: &[PingResult]) -> Vec<f64> {
    let mut rtts: Vec<f64> = results.iter().filter_map(|r| r.rtt).map(|d| d.as_secs_f64() * 1e3).collect();
    rtts.sort_by(f64::total_cmp);
    rtts
}

fn median(sorted: &[f64]) -> f64 {
    sorted[sorted.len() / 2]
}

/// Every direction's truth adds up: what entered the link left it or was dropped (nothing
/// is inside once stopped), and what left was sent.
fn assert_conservation(stats: &EmulatorStats) {
    for d in &stats.directions {
        assert_eq!(d.link.packets_in, d.packets_received + d.link.duplicated, "{} -> {}: link saw every packet", d.from, d.to);
        assert_eq!(
            d.link.packets_in,
            d.link.packets_out + d.link.dropped_total() + d.in_flight,
            "{} -> {}: in = out + dropped + inside",
            d.from,
            d.to
        );
        assert_eq!(d.link.packets_out, d.forwarded + d.send_errors, "{} -> {}: out = forwarded + failed", d.from, d.to);
    }
}

#[test]
fn delay_20ms_each_way_gives_a_40ms_ping() {
    if !privileged("delay_20ms_each_way_gives_a_40ms_ping") {
        return;
    }
    let mut lab = Lab::start("delay", "delay 20ms", &[], false);
    // The first ping also waits for ARP, which crosses the emulator twice.
    lab.ping(IpAddr::V4(H2_V4), 1, Duration::from_millis(10), 56);
    let results = lab.ping(IpAddr::V4(H2_V4), 100, Duration::from_millis(20), 56);
    let rtts = rtts_ms(&results);
    assert_eq!(rtts.len(), 100, "no ping lost on a lossless link");
    let median = median(&rtts);
    assert!((median - 40.0).abs() <= 0.5, "median RTT {median:.3} ms, expected 40 +- 0.5 ms");
    // IPv6 crosses too (neighbour discovery, then echo).
    let v6 = lab.ping(IpAddr::V6(H2_V6), 5, Duration::from_millis(50), 56);
    assert!(v6.iter().skip(1).all(|r| r.rtt.is_some()), "IPv6 pings: {v6:?}");
    let (stats, recording) = lab.stop();
    assert_conservation(&stats);
    // The recorded truth: every ICMP echo (98-byte frames) spent 20 ms in the link.
    for dir in 0..2 {
        for record in recording.packets(dir).filter(|r| r.len_bytes == 98) {
            let departed = record.departed.expect("nothing was dropped");
            assert_eq!((departed - record.arrived).as_nanos(), 20_000_000, "{record:?}");
        }
    }
    // What h2 received is what the emulator forwarded towards it.
    let h2 = Line::interface(&lab.line.h2, HOST_PORT).expect("h2's eth0");
    assert_eq!(h2.rx_packets, stats.directions[0].forwarded, "h2 received exactly what was forwarded");
    let _ = H1_V4;
}
