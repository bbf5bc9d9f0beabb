//! End-to-end tests of the `pathlab` binary: what a user types, what they get, exit codes.

use std::process::{Command, Output};

mod util;
use util::TempDir;

fn pathlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pathlab"))
        .args(args)
        .output()
        .expect("pathlab runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn spec_prints_canonical_form_that_parses_back_to_itself() {
    let pasted = "delay 25ms 5ms 25% distribution normal loss 0.5% 25% duplicate 1% \
                  corrupt 0.1% reorder 25% 50% gap 5 rate 10mbit 20 1500 limit 100";
    let first = pathlab(&["spec", pasted]);
    assert!(first.status.success(), "stderr: {}", stderr(&first));
    let canonical = stdout(&first).trim().to_owned();
    assert!(canonical.contains("delay 25ms 5ms"), "{canonical}");
    let second = pathlab(&["spec", &canonical]);
    assert_eq!(stdout(&second).trim(), canonical);
}

#[test]
fn spec_json_is_json() {
    let output = pathlab(&["spec", "-J", "delay 20ms rate 10mbit queue codel"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("valid JSON");
    assert_eq!(value["delay"]["delay"], 20_000_000);
    assert_eq!(value["queue"]["discipline"]["kind"], "codel");
}

#[test]
fn bad_specs_exit_2_naming_the_token() {
    for (spec, message) in [
        ("loss 150%", "loss must be between 0% and 100%, got 150%"),
        (
            "delay fast",
            "expected a time like 25ms after 'delay', got 'fast'",
        ),
        ("rate 10mbit frobnicate", "frobnicate"),
    ] {
        let output = pathlab(&["spec", spec]);
        assert_eq!(output.status.code(), Some(2), "{spec}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(message),
            "{spec}: stderr was {}",
            stderr(&output)
        );
    }
}

#[test]
fn missing_trace_file_is_a_usage_error_naming_the_file() {
    let output = pathlab(&["spec", "trace /nonexistent/pathlab.trace"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("/nonexistent/pathlab.trace"));
}

/// The README's main job: bufferbloat on a 10 Mbit/s line, checked against theory.
#[test]
fn sim_json_matches_queueing_theory() {
    let output = pathlab(&[
        "sim",
        "rate 10mbit limit 100",
        "--load",
        "cbr:15mbit:1500",
        "-t",
        "30s",
        "-J",
    ]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    let load = &report["loads"][0];
    let delivered = load["delivered_bps"].as_f64().expect("a number");
    // Delivered = the line rate within 0.5%.
    assert!(
        (delivered - 10e6).abs() / 10e6 < 0.005,
        "delivered {delivered}"
    );
    // Median queue delay = 100 x 1500 x 8 / 10e6 = 120 ms within 2%.
    let p50 = load["queue_delay"]["p50"].as_f64().expect("ns") / 1e9;
    assert!((p50 - 0.120).abs() / 0.120 < 0.02, "p50 {p50}");
}

#[test]
fn sim_saves_a_result_file_and_csv() {
    let dir = TempDir::new("save");
    let save = dir.path("run.json");
    let csv = dir.path("run.csv");
    let output = pathlab(&[
        "sim",
        "delay 10ms rate 5mbit limit 50",
        "--load",
        "cbr:6mbit:1000",
        "-t",
        "2s",
        "--save",
        save.to_str().expect("utf-8"),
        "--csv",
        csv.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert!(stdout(&output).contains("cbr:6mbit:1000"));
    let file =
        pathlab_results::ResultFile::from_json(&std::fs::read_to_string(&save).expect("saved"))
            .expect("a valid result file");
    let pathlab_results::RunResult::Sim(report) = file.result else {
        panic!("a sim result")
    };
    assert_eq!(
        report.samples.len(),
        201,
        "0 to 2 s inclusive, one sample per 10 ms"
    );
    let rows = std::fs::read_to_string(&csv).expect("csv").lines().count();
    assert_eq!(rows, 202, "a header and a row per sample");
}

#[test]
fn bad_loads_and_times_exit_2() {
    for (args, message) in [
        (vec!["sim", "rate 1mbit", "--load", "cbr:fast:1500"], "fast"),
        (
            vec!["sim", "rate 1mbit", "--load", "zigzag:1mbit:1500"],
            "zigzag",
        ),
        (vec!["sim", "rate 1mbit", "--load", "cbr:1mbit:0"], "size"),
        (
            vec!["sim", "rate 1mbit", "--load", "cbr:1mbit:100", "-t", "soon"],
            "soon",
        ),
    ] {
        let output = pathlab(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(message),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn emulate_print_tc_needs_no_privileges_and_says_what_tc_cannot_do() {
    let output = pathlab(&[
        "emulate",
        "--between",
        "eth0",
        "eth1",
        "delay 20ms loss 1% rate 10mbit limit 100 queue codel",
        "--reverse",
        "delay 20ms",
        "--print-tc",
    ]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("tc qdisc replace dev eth1 root handle 1: netem delay 20ms loss 1%"),
        "{text}"
    );
    assert!(
        text.contains("tc qdisc add dev eth1 parent 2:1 handle 10: codel limit 100"),
        "{text}"
    );
    assert!(
        text.contains("tc qdisc replace dev eth0 root netem delay 20ms"),
        "{text}"
    );
    assert!(
        text.contains(
            "# note: netem's limit (1000) counts the packets in its delay line: above 606 Mbit/s"
        ),
        "{text}"
    );
}

#[test]
fn emulate_with_a_bad_spec_exits_2_before_anything_else() {
    let output = pathlab(&["emulate", "--between", "eth0", "eth1", "loss 150%"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("loss must be between 0% and 100%, got 150%"),
        "{}",
        stderr(&output)
    );
    let output = pathlab(&[
        "emulate",
        "set",
        "--name",
        "no-such-emulator-here",
        "delay 1ms",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no emulator named 'no-such-emulator-here' is running"),
        "{}",
        stderr(&output)
    );
}
