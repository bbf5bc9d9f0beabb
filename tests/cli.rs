//! End-to-end tests of the `pathlab` binary: what a user types, what they get, exit codes.

use std::process::{Command, Output};

use crate::util;
use crate::util::TempDir;

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
        util::assert_refused(&["spec", spec], message);
    }
}

#[test]
fn spec_preset_shows_both_directions_and_its_sources() {
    let output = pathlab(&["spec", "--preset", "lte"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let text = stdout(&output);
    for expected in [
        "lte: 4G LTE",
        "downlink (asked): preset lte = delay 25ms rate 21mbit slot 1ms",
        "uplink: preset lte-up = delay 25ms rate 6mbit slot 1ms",
        "round trip: 50.000 ms",
        "sources: ",
        "docs/presets.md",
    ] {
        assert!(text.contains(expected), "missing '{expected}' in:\n{text}");
    }
    // What --preset prints is what `preset NAME` parses to, in canonical form.
    let spec = pathlab(&["spec", "preset lte-up"]);
    assert_eq!(stdout(&spec).trim(), "delay 25ms rate 6mbit slot 1ms");
    let json = pathlab(&["spec", "-J", "--preset", "geo-up"]);
    let value: serde_json::Value = serde_json::from_str(&stdout(&json)).expect("valid JSON");
    assert_eq!(value["uplink"]["name"], "geo-up");
    assert_eq!(value["uplink"]["spec"]["delay"]["delay"], 300_000_000);
}

#[test]
fn spec_lists_presets_one_line_each() {
    let listed = pathlab(&["spec", "--list-presets"]);
    assert!(listed.status.success(), "stderr: {}", stderr(&listed));
    assert_eq!(
        stdout(&pathlab(&["spec", "--preset", "list"])),
        stdout(&listed)
    );
    let lines: Vec<_> = stdout(&listed).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), pathlab_core::spec::preset::PRESETS.len());
    assert!(lines[0].starts_with("adsl adsl-up "), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("transatlantic ")),
        "{lines:?}"
    );
}

#[test]
fn unknown_preset_exits_2_listing_the_valid_names() {
    for args in [
        &["spec", "--preset", "lte4"][..],
        &["spec", "preset lte4 loss 1%"][..],
    ] {
        let output = pathlab(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let message = stderr(&output);
        assert!(
            message.contains("unknown preset 'lte4' (did you mean 'lte'?)"),
            "{message}"
        );
        assert!(message.contains("adsl, adsl-up"), "{message}");
    }
}

#[test]
fn presets_print_tc_like_any_spec() {
    let output = pathlab(&[
        "emulate",
        "--between",
        "lan0",
        "wan0",
        "--print-tc",
        "preset adsl",
        "--reverse",
        "preset adsl-up distance 1000km",
    ]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("delay 10ms"), "{text}");
    // adsl-up's 10 ms plus 1000 km of fibre (7.5 ms).
    assert!(
        text.contains("netem delay 17500us rate 1mbit 8 48 5"),
        "{text}"
    );
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

/// Regression (issue 30): `tcp -i 1us` was sent to the server, which kept a slot per
/// interval; the client now refuses it before it connects (and servers refuse it too).
/// Without the check the command tries 127.0.0.1 and fails otherwise (exit 1).
#[test]
fn a_tcp_report_interval_under_10ms_exits_2_before_connecting() {
    for args in [
        vec!["tcp", "127.0.0.1", "-i", "1us", "-t", "20"],
        vec!["tcp", "127.0.0.1", "-i", "9ms", "--rfc6349"],
    ] {
        util::assert_refused(&args, "at least 10 ms");
    }
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
        util::assert_refused(&args, message);
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
fn emulate_iface_print_tc_puts_the_reverse_on_an_ifb_and_refuses_between_too() {
    let output = pathlab(&[
        "emulate",
        "--iface",
        "eth1",
        "delay 5ms",
        "--reverse",
        "delay 2ms loss 1%",
        "--print-tc",
    ]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "tc qdisc replace dev eth1 root netem delay 5ms",
        "tc filter add dev eth1 parent ffff: matchall action mirred egress redirect dev ifb0",
        "tc qdisc replace dev ifb0 root netem delay 2ms loss 1%",
    ] {
        assert!(text.lines().any(|l| l == line), "no '{line}' in:\n{text}");
    }
    let output = pathlab(&[
        "emulate",
        "--iface",
        "eth1",
        "--between",
        "a",
        "b",
        "delay 1ms",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot be used with"),
        "{}",
        stderr(&output)
    );
    let output = pathlab(&["emulate", "--iface", "eth1/x", "delay 1ms"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--iface"), "{}", stderr(&output));
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

/// `pathlab report` on a saved run: CSV files with units, PNGs of the fixed size that decode,
/// SVGs, and a page that inlines every PNG and escapes the run's text.
#[test]
fn report_of_a_run_writes_csv_figures_and_a_page_with_every_image() {
    let dir = TempDir::new("report-run");
    let run = dir.path("run");
    util::lab_fixture::write_lab_run(&run, 50);
    let output = pathlab(&["report", run.to_str().unwrap()]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let html_path = run.join("report.html");
    assert!(
        stdout(&output).contains(&format!("report: {}", html_path.display())),
        "{}",
        stdout(&output)
    );

    let rtt = std::fs::read_to_string(run.join("csv/rtt-probes.csv")).expect("rtt csv");
    let mut lines = rtt.lines();
    assert_eq!(lines.next(), Some("time_s,rtt_s"));
    assert_eq!(lines.next(), Some("0.000000000,0.02"));
    assert_eq!(
        lines.nth(9),
        Some("1.000000000,0.07"),
        "probe 10: 20 ms + 10 x 5 ms"
    );
    // The emulator's clock started 0.1 s before the run's: its first sample is at -0.1 s.
    let queue = std::fs::read_to_string(run.join("csv/queue-packets-r1-h2.csv")).expect("csv");
    assert!(
        queue.starts_with("time_s,queue_packets\n-0.100000000,0\n"),
        "{queue}"
    );
    let delay = std::fs::read_to_string(run.join("csv/queue-delay-r1-h2.csv")).expect("csv");
    assert!(delay.starts_with("time_s,queue_delay_s\n0.000000000,0\n0.010000000,0.0006\n"));
    for name in [
        "cwnd-bulk",
        "ssthresh-bulk",
        "srtt-bulk",
        "throughput-bulk",
        "drops-r1-h2",
    ] {
        let text = std::fs::read_to_string(run.join(format!("csv/{name}.csv")))
            .unwrap_or_else(|e| panic!("{name}.csv: {e}"));
        assert!(text.lines().count() > 1, "{name}.csv is empty");
    }

    let pngs = util::lab_fixture::files_with(&run.join("plots"), "png");
    let svgs = util::lab_fixture::files_with(&run.join("plots"), "svg");
    assert!(pngs.len() >= 7, "{pngs:?}");
    assert_eq!(pngs.len(), svgs.len());
    let html = std::fs::read_to_string(&html_path).expect("the page");
    for png in &pngs {
        let bytes = std::fs::read(png).expect("a PNG");
        assert_eq!(
            util::lab_fixture::png_size(&bytes),
            (1024, 640),
            "{}",
            png.display()
        );
        assert!(
            html.contains(&pathlab_results::report::base64(&bytes)),
            "{} is not in the page",
            png.display()
        );
    }
    assert_eq!(
        html.matches("<img src=\"data:image/png;base64,").count(),
        pngs.len()
    );
    assert!(html.contains("h1 - r1 - h2 &lt;synthetic&gt; &amp; small"));
    assert!(!html.contains("<synthetic>") && !html.contains("<script"));
}

/// A sweep's directory: one section per point in parameter order, sweep figures, and with
/// --compare the points' series on shared figures.
#[test]
fn report_of_a_sweep_compares_its_points() {
    let dir = TempDir::new("report-sweep");
    for queue in [100, 10, 50] {
        util::lab_fixture::write_lab_run(&dir.path(&format!("sweep/queue-{queue}")), queue);
    }
    let out = dir.path("out");
    let output = pathlab(&[
        "report",
        dir.path("sweep").to_str().unwrap(),
        "--compare",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    for figure in [
        "plots/compare/rtt-probes.png",
        "plots/compare/rtt-probes-cdf.png",
        "plots/compare/queue-delay-r1-h2.svg",
        "plots/sweep/goodput-vs-queue.png",
        "plots/sweep/rtt-plateau-vs-queue.png",
        "plots/queue-10/rtt.png",
        "csv/queue-100/rtt-probes.csv",
    ] {
        assert!(out.join(figure).is_file(), "no {figure}");
    }
    let html = std::fs::read_to_string(out.join("report.html")).expect("the page");
    let order: Vec<usize> = ["queue=10)", "queue=50)", "queue=100)"]
        .iter()
        .map(|h| html.find(&format!("<h2>bufferbloat ({h}</h2>")).expect(h))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "sections out of order"
    );
    let pngs = util::lab_fixture::files_with(&out.join("plots"), "png");
    assert_eq!(
        html.matches("<img src=\"data:image/png;base64,").count(),
        pngs.len()
    );
}

#[test]
fn report_of_bad_input_exits_2_naming_the_file_and_the_problem() {
    let dir = TempDir::new("report-bad");
    let missing = dir.path("nothing-here");
    let output = pathlab(&["report", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("nothing-here: no such file"),
        "{}",
        stderr(&output)
    );

    let garbage = dir.path("garbage.json");
    std::fs::write(&garbage, "{\"magic\": 3}").unwrap();
    let output = pathlab(&["report", garbage.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("garbage.json: not a pathlab result file"),
        "{}",
        stderr(&output)
    );

    let run = dir.path("run");
    util::lab_fixture::write_lab_run(&run, 10);
    let text = std::fs::read_to_string(run.join("result.json")).unwrap();
    std::fs::write(
        run.join("result.json"),
        text.replacen("\"version\": 1", "\"version\": 99", 1),
    )
    .unwrap();
    let output = pathlab(&["report", run.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("result.json: result file version 99 is newer"),
        "{}",
        stderr(&output)
    );

    // A result of another command is named as such.
    let sim = dir.path("sim.json");
    let output = pathlab(&[
        "sim",
        "rate 10mbit",
        "--load",
        "cbr:1mbit:1000",
        "-t",
        "1s",
        "--save",
        sim.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = pathlab(&["report", sim.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("not a lab result but a pathlab sim result"),
        "{}",
        stderr(&output)
    );
    assert!(!dir.path("report.html").exists());
}

#[test]
fn a_reader_that_closes_the_output_early_ends_the_command_quietly() {
    // The read end is closed before the command starts: its first write fails with EPIPE.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = Command::new(env!("CARGO_BIN_EXE_pathlab"))
        .args(["spec", "--list-presets"])
        .stdout(writer)
        .output()
        .expect("pathlab runs");
    assert_eq!(
        output.status.code(),
        Some(141),
        "as a death by SIGPIPE: {output:?}"
    );
    assert!(
        stderr(&output).is_empty(),
        "no panic message: {}",
        stderr(&output)
    );
}

/// `--priority` takes `realtime` or `normal`, and `--cpus` only CPUs of this machine, in
/// every command that runs emulators: anything else exits 2 naming the choices (before any
/// privilege is needed).
#[test]
fn an_unknown_priority_or_a_cpu_the_machine_lacks_exits_2() {
    let outside = pathlab_os::scheduling::machine_cpus().last().unwrap() + 1;
    let outside = outside.to_string();
    for command in [
        &["emulate", "--between", "a", "b", "delay 1ms"][..],
        &["shell", "delay 1ms"][..],
        &["lab", "bufferbloat"][..],
        &["node", "node.toml"][..],
    ] {
        let mut args = command.to_vec();
        args.extend(["--priority", "fast"]);
        util::assert_refused(&args, "the choices are realtime, normal");
        let mut args = command.to_vec();
        args.extend(["--cpus", &outside]);
        util::assert_refused(&args, "is not one of this machine's: it has");
        let mut args = command.to_vec();
        args.extend(["--cpus", "1-0"]);
        util::assert_refused(&args, "runs backwards");
    }
}

#[test]
fn spec_twin_prints_a_twin_back_and_refuses_a_malformed_figure_with_its_line() {
    let dir = TempDir::new("twin");
    let good = dir.path("good.toml");
    std::fs::write(&good, pathlab_twin::file::EXAMPLE).expect("write");
    let output = pathlab(&["spec", "--twin", good.to_str().expect("utf-8")]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let printed = stdout(&output);
    assert!(
        printed.contains("spec = \"delay 10ms quantiles 0ms 1ms 3ms loss 1%\""),
        "{printed}"
    );
    // What it prints reads back the same.
    std::fs::write(&good, &printed).expect("write");
    assert_eq!(
        stdout(&pathlab(&["spec", "--twin", good.to_str().expect("utf-8")])),
        printed
    );
    let bad = dir.path("bad.toml");
    std::fs::write(
        &bad,
        pathlab_twin::file::EXAMPLE.replacen("low = 0.8", "low = 1.1", 1),
    )
    .expect("write");
    let output = pathlab(&["spec", "--twin", bad.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(2), "stderr: {}", stderr(&output));
    assert!(
        stderr(&output).contains("line 8, up.figures.loss_percent"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn emulate_and_shell_take_a_twin_up_one_way_and_down_the_other() {
    let dir = TempDir::new("twin-emulate");
    let twin = dir.path("line.toml");
    std::fs::write(&twin, pathlab_twin::file::EXAMPLE).expect("write");
    let output = pathlab(&[
        "emulate",
        "--between",
        "eth0",
        "eth1",
        "--twin",
        twin.to_str().expect("utf-8"),
        "--print-tc",
    ]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let text = stdout(&output);
    // Up, eth0 to eth1: 10 ms and the quantiles' mean, (0.5 + 2) / 2 ms; down: 10 ms.
    assert!(
        text.contains("tc qdisc replace dev eth1 root netem delay 11250us loss 1%"),
        "{text}"
    );
    assert!(
        text.contains("tc qdisc replace dev eth0 root netem delay 10ms"),
        "{text}"
    );
    let output = pathlab(&[
        "emulate",
        "--between",
        "eth0",
        "eth1",
        "--twin",
        "/nonexistent.toml",
    ]);
    assert_eq!(output.status.code(), Some(2), "stderr: {}", stderr(&output));
    // `shell --twin` reads it the same way (before it needs any privilege), and takes it
    // instead of SPEC, not beside it.
    let output = pathlab(&["shell", "--twin", "/nonexistent.toml", "--", "true"]);
    assert_eq!(output.status.code(), Some(2), "stderr: {}", stderr(&output));
    assert!(
        stderr(&output).contains("/nonexistent.toml"),
        "{}",
        stderr(&output)
    );
    let twin = twin.to_str().expect("utf-8");
    let output = pathlab(&["shell", "delay 1ms", "--twin", twin, "--", "true"]);
    assert_eq!(output.status.code(), Some(2), "stderr: {}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot be used with"),
        "{}",
        stderr(&output)
    );
    let output = pathlab(&["shell", "--", "true"]);
    assert_eq!(output.status.code(), Some(2), "stderr: {}", stderr(&output));
    assert!(stderr(&output).contains("<SPEC>"), "{}", stderr(&output));
}
