//! End-to-end tests of `pathlab tune`: the advice on fixture directories of sysctl values
//! (`--root`, no root privileges needed), the input errors, and the RTT measured against a
//! `pathlab server` on loopback.

use crate::util;

use std::process::{Command, Output};

use crate::util::server_process::ServerProcess;
use crate::util::TempDir;
use serde_json::Value;

const PATHLAB: &str = env!("CARGO_BIN_EXE_pathlab");

/// Debian 12's defaults (amd64, 8 GB of RAM: tcp_mem scales with memory).
const DEBIAN: [(&str, &str); 15] = [
    ("kernel/osrelease", "6.1.0-25-amd64"),
    ("net/ipv4/tcp_rmem", "4096\t131072\t6291456"),
    ("net/ipv4/tcp_wmem", "4096\t16384\t4194304"),
    ("net/core/rmem_max", "212992"),
    ("net/core/wmem_max", "212992"),
    ("net/ipv4/tcp_mem", "188319\t251092\t376638"),
    ("net/ipv4/tcp_adv_win_scale", "1"),
    ("net/ipv4/tcp_moderate_rcvbuf", "1"),
    ("net/ipv4/tcp_window_scaling", "1"),
    ("net/ipv4/tcp_timestamps", "1"),
    ("net/ipv4/tcp_sack", "1"),
    ("net/ipv4/tcp_no_metrics_save", "0"),
    ("net/ipv4/tcp_congestion_control", "cubic"),
    ("net/ipv4/tcp_available_congestion_control", "reno cubic"),
    ("net/core/default_qdisc", "pfifo_fast"),
];

/// Values above what 1 Gbit/s over 170 ms needs (42.5 MB buffers, 21.25 MB caps).
const TUNED: [(&str, &str); 6] = [
    ("net/ipv4/tcp_rmem", "4096\t131072\t67108864"),
    ("net/ipv4/tcp_wmem", "4096\t16384\t67108864"),
    ("net/core/rmem_max", "67108864"),
    ("net/core/wmem_max", "67108864"),
    ("net/ipv4/tcp_no_metrics_save", "1"),
    ("net/core/default_qdisc", "fq"),
];

const PAGE_SIZE: usize = 4096;

/// A copy of a machine's settings: `proc/sys`, one interface with txqueuelen 1000 (and
/// `lo`, which is skipped), and an auxiliary vector carrying the page size.
fn fixture(name: &str, overrides: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new(name);
    for (file, value) in DEBIAN.iter().chain(overrides) {
        let path = dir.root().join("proc/sys").join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{value}\n")).unwrap();
    }
    for (interface, length) in [("eth0", "1000"), ("lo", "1000")] {
        let path = dir.root().join("sys/class/net").join(interface);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("tx_queue_len"), format!("{length}\n")).unwrap();
    }
    // AT_PAGESZ (6) = 4096, then AT_NULL, as native words.
    let auxv: Vec<u8> = [6, PAGE_SIZE, 0, 0]
        .iter()
        .flat_map(|word: &usize| word.to_ne_bytes())
        .collect();
    std::fs::create_dir_all(dir.root().join("proc/self")).unwrap();
    std::fs::write(dir.root().join("proc/self/auxv"), auxv).unwrap();
    dir
}

fn pathlab(args: &[&str]) -> Output {
    Command::new(PATHLAB)
        .args(args)
        .output()
        .expect("pathlab runs")
}

fn tune_json(args: &[&str]) -> Value {
    let output = pathlab(&[&["tune", "-J"], args].concat());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

fn row<'a>(report: &'a Value, setting: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["setting"] == setting)
        .unwrap_or_else(|| panic!("no row {setting} in {report:#}"))
}

fn root_arg(dir: &TempDir) -> String {
    dir.root().to_str().unwrap().to_owned()
}

#[test]
fn debian_defaults_on_a_gigabit_over_170ms_need_the_seeds_21_mb_window() {
    let dir = fixture("tune-debian", &[]);
    let report = tune_json(&[
        "--rate",
        "1gbit",
        "--rtt",
        "170ms",
        "--root",
        &root_arg(&dir),
    ]);
    // R x T / 8 = 1e9 x 0.170 / 8 = 21.25e6 bytes, within the byte the rounding may add;
    // the seed writes it "21 MB".
    let window = report["window_bytes"].as_u64().unwrap();
    assert!((window as f64 - 1e9 * 0.170 / 8.0).abs() <= 1.0, "{window}");
    assert_eq!((window as f64 / 1e6).round(), 21.0);
    assert_eq!(report["bdp_bits"], 170_000_000);
    // The kernel offers half of a receive buffer as window, and keeps two windows in the
    // send buffer: both buffers need 2 x 21.25 MB; SO_RCVBUF/SO_SNDBUF caps need one.
    for (setting, command, kept) in [
        (
            "net.ipv4.tcp_rmem",
            "sysctl -w net.ipv4.tcp_rmem='4096 131072 42500000'",
            "net.ipv4.tcp_rmem = 4096 131072 42500000",
        ),
        (
            "net.ipv4.tcp_wmem",
            "sysctl -w net.ipv4.tcp_wmem='4096 16384 42500000'",
            "net.ipv4.tcp_wmem = 4096 16384 42500000",
        ),
        (
            "net.core.rmem_max",
            "sysctl -w net.core.rmem_max=21250000",
            "net.core.rmem_max = 21250000",
        ),
        (
            "net.core.wmem_max",
            "sysctl -w net.core.wmem_max=21250000",
            "net.core.wmem_max = 21250000",
        ),
    ] {
        let row = row(&report, setting);
        assert_eq!(row["status"], "change", "{row:#}");
        assert_eq!(row["commands"][0], command);
        assert_eq!(row["persist"]["file"], "/etc/sysctl.d/90-pathlab.conf");
        assert_eq!(row["persist"]["line"], kept);
    }
    assert_eq!(
        row(&report, "net.ipv4.tcp_no_metrics_save")["status"],
        "change"
    );
    assert_eq!(row(&report, "net.core.default_qdisc")["status"], "change");
    for fine in [
        "net.ipv4.tcp_mem",
        "net.ipv4.tcp_moderate_rcvbuf",
        "net.ipv4.tcp_window_scaling",
        "net.ipv4.tcp_timestamps",
        "net.ipv4.tcp_sack",
        "net.ipv4.tcp_congestion_control",
    ] {
        assert_eq!(row(&report, fine)["status"], "ok", "{fine}");
    }
    // 1 Gbit/s x 10 ms / 8 / 1500 = 833.3: 834 packets, and eth0 has 1000; lo is skipped.
    assert_eq!(report["txqueuelen_needed"], 834);
    assert_eq!(row(&report, "txqueuelen eth0")["status"], "ok");
    assert!(report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|row| row["setting"] != "txqueuelen lo"));
    // The sender's 4194304-byte buffer keeps half of it in flight: 2097152 bytes, which
    // carry 2097152 x 8 / 0.170 s = 98.69 Mbit/s.
    let summary = &report["summary"];
    assert_eq!(summary["to_change"], 6);
    assert_eq!(summary["window_bytes"], 2_097_152);
    assert_eq!(summary["send_limited_by"], "net.ipv4.tcp_wmem max");
    let cap = summary["throughput_cap_bps"].as_f64().unwrap();
    assert!((cap - 2_097_152.0 * 8.0 / 0.170).abs() < 1.0, "{cap}");
    assert!(report["rtt_measurement"].is_null());
}

#[test]
fn a_tuned_host_gets_no_change_for_its_buffers() {
    let dir = fixture("tune-tuned", &TUNED);
    let report = tune_json(&[
        "--rate",
        "1gbit",
        "--rtt",
        "170ms",
        "--root",
        &root_arg(&dir),
    ]);
    for setting in [
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
        "net.core.rmem_max",
        "net.core.wmem_max",
    ] {
        let row = row(&report, setting);
        assert_eq!(row["status"], "ok", "{row:#}");
        assert_eq!(row["commands"].as_array().unwrap().len(), 0);
    }
    assert_eq!(report["summary"]["to_change"], 0);
    // Half of 64 MiB each way: more than the 21.25 MB the path needs.
    assert_eq!(report["summary"]["window_bytes"], 33_554_432);
}

#[test]
fn txqueuelen_is_flagged_by_rate_times_10ms_over_1500_bytes() {
    let dir = fixture("tune-txqueue", &TUNED);
    let root = root_arg(&dir);
    // 10 Gbit/s x 10 ms / 8 / 1500 B = 8333.3: 8334 packets, more than eth0's 1000.
    let fast = tune_json(&["--rate", "10gbit", "--rtt", "20ms", "--root", &root]);
    let needed = (10e9 * 0.010 / 8.0 / 1500.0_f64).ceil() as u64;
    assert_eq!(fast["txqueuelen_needed"], needed);
    let eth0 = row(&fast, "txqueuelen eth0");
    assert_eq!(eth0["status"], "change");
    assert_eq!(eth0["interface"], "eth0");
    assert_eq!(eth0["current"], "1000");
    assert_eq!(
        eth0["commands"][0],
        format!("ip link set dev eth0 txqueuelen {needed}")
    );
    assert_eq!(
        eth0["persist"]["line"],
        format!(
            "ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"eth0\", ATTR{{tx_queue_len}}=\"{needed}\""
        )
    );
    // 100 Mbit/s needs 84.
    let slow = tune_json(&["--rate", "100mbit", "--rtt", "20ms", "--root", &root]);
    assert_eq!(slow["txqueuelen_needed"], 84);
    assert_eq!(row(&slow, "txqueuelen eth0")["status"], "ok");
}

#[test]
fn unreadable_and_malformed_settings_are_reported_on_their_row() {
    let dir = fixture(
        "tune-broken",
        &[
            ("net/ipv4/tcp_wmem", "4096 lots"),
            ("net/ipv4/tcp_sack", "yes"),
        ],
    );
    std::fs::remove_file(dir.root().join("proc/sys/net/core/rmem_max")).unwrap();
    std::fs::remove_file(dir.root().join("sys/class/net/eth0/tx_queue_len")).unwrap();
    let root = root_arg(&dir);
    let report = tune_json(&["--rate", "1gbit", "--rtt", "170ms", "--root", &root]);
    let rmem_max = row(&report, "net.core.rmem_max");
    assert_eq!(rmem_max["status"], "unknown");
    assert!(rmem_max["current"].is_null());
    assert_eq!(row(&report, "txqueuelen eth0")["status"], "unknown");
    let wmem = row(&report, "net.ipv4.tcp_wmem");
    assert_eq!(wmem["status"], "malformed");
    assert_eq!(
        wmem["problem"],
        "expected three non-negative integers (min default max), got '4096 lots'"
    );
    assert_eq!(
        row(&report, "net.ipv4.tcp_sack")["problem"],
        "expected 0 or 1, got 'yes'"
    );
    assert_eq!(report["summary"]["unknown"], 2);
    assert_eq!(report["summary"]["malformed"], 2);
    let text = pathlab(&["tune", "--rate", "1gbit", "--rtt", "170ms", "--root", &root]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("net.core.rmem_max = unknown (not readable)"),
        "{text}"
    );
    assert!(
        text.contains("problem: expected 0 or 1, got 'yes'"),
        "{text}"
    );
}

#[test]
fn the_text_report_gives_the_window_the_rows_and_the_summary() {
    let dir = fixture("tune-text", &[]);
    let output = pathlab(&[
        "tune",
        "--rate",
        "1gbit",
        "--rtt",
        "170ms",
        "--root",
        &root_arg(&dir),
    ]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "RTT 170 ms (given)",
        "BDP = 1 Gbit/s x 170 ms = 170 Mbit; the window it needs: 21.25 MB (21250000 bytes",
        "[ change  ] net.ipv4.tcp_rmem = 4096 131072 6291456",
        "fix:     sysctl -w net.ipv4.tcp_rmem='4096 131072 42500000'",
        "keep:    /etc/sysctl.d/90-pathlab.conf: net.ipv4.tcp_rmem = 4096 131072 42500000",
        "summary: 13 settings checked, 6 to change",
        "one connection with a 2.1 MB window carries at most 98.69 Mbit/s at 170 ms",
    ] {
        assert!(text.contains(expected), "'{expected}' missing from\n{text}");
    }
}

#[test]
fn bad_inputs_exit_2_naming_the_problem() {
    let dir = fixture("tune-inputs", &[]);
    let root = root_arg(&dir);
    let missing = dir.root().join("nowhere");
    let missing = missing.to_str().unwrap();
    for (args, message) in [
        (vec!["--rtt", "170ms"], "missing --rate"),
        (vec!["--rate", "1gbit"], "missing --rtt"),
        (vec![], "missing --rate and --rtt"),
        (vec!["--rate", "1gbit", "--rtt", "0"], "no time at all"),
        (vec!["--rate", "1gbit", "--rtt", "0ms"], "no time at all"),
        (
            vec!["--rate", "fast", "--rtt", "170ms"],
            "invalid value 'fast'",
        ),
        (
            vec!["--rate", "0mbit", "--rtt", "170ms"],
            "rate 0 bit/s is too low",
        ),
        (
            vec!["--rate", "1gbit", "--rtt", "120s"],
            "is longer than any path",
        ),
        (
            vec!["--rate", "1gbit", "--rtt", "100ns"],
            "is shorter than any path",
        ),
        (
            vec!["--rate", "1gbit", "--rtt", "170ms", "--root", missing],
            "is not a directory",
        ),
        (
            vec![
                "--rate", "1gbit", "--rtt", "170ms", "--root", &root, "--root", "x",
            ],
            "cannot be used multiple times",
        ),
    ] {
        let output = pathlab(&[&["tune"], args.as_slice()].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    // A directory that is no copy of a machine's settings.
    let empty = TempDir::new("tune-empty");
    let output = pathlab(&[
        "tune",
        "--rate",
        "1gbit",
        "--rtt",
        "170ms",
        "--root",
        &root_arg(&empty),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("holds neither proc/sys nor sys/class/net"));
}

#[test]
fn with_a_host_the_rtt_is_measured_and_the_bdp_is_rate_times_it() {
    let dir = fixture("tune-host", &[]);
    let root = root_arg(&dir);
    let server = ServerProcess::start(&[]);
    let address = server.address.to_string();
    let report = tune_json(&[&address, "--rate", "100mbit", "--root", &root]);
    let measurement = &report["rtt_measurement"];
    assert_eq!(measurement["host"], address.as_str());
    assert_eq!(measurement["probes"], 20);
    assert!(measurement["replies"].as_u64().unwrap() > 0);
    let rtt_ns = report["rtt_ns"].as_u64().unwrap();
    assert!(rtt_ns > 0);
    // The minimum is the RTT used, and no reply beats it.
    assert_eq!(measurement["min_ns"], rtt_ns);
    assert!(measurement["median_ns"].as_u64().unwrap() >= rtt_ns);
    // BDP = 1e8 bit/s x RTT, window = BDP / 8, each rounded up to a whole bit or byte.
    let bits = 1e8 * rtt_ns as f64 / 1e9;
    assert_eq!(report["bdp_bits"], bits.ceil() as u64);
    assert_eq!(report["window_bytes"], (bits / 8.0).ceil() as u64);
    // The text says which RTT it measured and how.
    let output = pathlab(&["tune", &address, "--rate", "100mbit", "--root", &root]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(&format!("RTT to {address}: "))
            && text.contains("the minimum of")
            && text.contains("replies to 20 probes 50 ms apart"),
        "{text}"
    );
    // --rtt, when given, is used as is: nothing is measured.
    let given = tune_json(&[
        &address, "--rate", "100mbit", "--rtt", "30ms", "--root", &root,
    ]);
    assert!(given["rtt_measurement"].is_null());
    assert_eq!(given["window_bytes"], 375_000);
}

#[test]
fn with_a_keyed_server_the_client_needs_the_same_psk() {
    let key = TempDir::new("tune-psk");
    let key_file = key.path("key");
    util::write_secret(&key_file, "a pre-shared key of more than sixteen bytes\n");
    let key_file = key_file.to_str().unwrap();
    let server = ServerProcess::start(&["--psk", key_file]);
    let address = server.address.to_string();
    let dir = fixture("tune-psk-root", &[]);
    let root = root_arg(&dir);
    let report = tune_json(&[
        &address, "--rate", "100mbit", "--psk", key_file, "--root", &root,
    ]);
    assert!(report["rtt_ns"].as_u64().unwrap() > 0);
    let unkeyed = pathlab(&["tune", &address, "--rate", "100mbit", "--root", &root]);
    assert_eq!(unkeyed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unkeyed.stderr).contains("authentication failed"));
}
