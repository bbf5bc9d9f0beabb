//! `pathlab twin` on a path pathlab did not make (issue 41): the kernel's token bucket
//! (tc's tbf) behind pathlab's delay, measured from h1 against a server in h2. The twin
//! must find the bucket's rate, the queue it holds, that it drops at the tail, and the
//! delay each way. The twin file then reads back with `spec --twin`, and `twin check`
//! runs the same workloads on the path and on the twin.

use pathlab_os::topology::{R_PORT_H1, R_PORT_H2};

use pathlab_twin::check::LOADED_RTT_WITHIN;

use crate::shaped::kernel_tbf;
use crate::util::emulated::{privileged_paired, Lab, ServerInH2, PATHLAB};
use crate::util::late::{ms, Lateness, Quantile};

/// The delay each way, ms (pathlab's emulator in r).
const DELAY_MS: f64 = 10.0;
/// The bucket up: 10 Mbit/s, a 5 kB bucket, a queue of 50 ms (tc's tbf counts frames).
/// Down, 20 Mbit/s with the same bucket and queue.
const RATE_BPS: f64 = 10e6;
const BURST_BYTES: f64 = 5.0 * 1024.0;
const LATENCY_S: f64 = 0.05;
/// The share of a loaded round trip both crossings of one emulator may add and the test
/// still judge it: half the 10% bound ([`LOADED_RTT_WITHIN`]) of the path's own figure.
/// (A fixed 1 ms, half the bound at the 20 ms base RTT, said "cannot judge" beside other
/// tests at p99 1.4 ms late, where the path's loaded RTT of 61-71 ms allows 3.1-3.5.) The
/// bond's twin test judges by it too.
pub const LATENESS_SHARE: f64 = LOADED_RTT_WITHIN / 2.0;

/// A figure of a direction in `twin -J`'s output.
fn figure(twin: &serde_json::Value, direction: &str, name: &str) -> f64 {
    twin[direction]["figures"][name]["value"]
        .as_f64()
        .unwrap_or_else(|| panic!("{direction}.{name} in {twin:#}"))
}

/// `pathlab twin HOST -t SECONDS --max-rate MAX -J --out OUT` from `from`: the twin's JSON
/// and its stderr (the progress), printed; panics unless it succeeded.
pub fn measure_twin(
    from: &pathlab_os::netns::Netns,
    host: &str,
    seconds: &str,
    max_rate: &str,
    out: &std::path::Path,
) -> (serde_json::Value, String) {
    let output = from
        .command(PATHLAB)
        .args([
            "twin",
            host,
            "-t",
            seconds,
            "--max-rate",
            max_rate,
            "-J",
            "--out",
        ])
        .arg(out)
        .output()
        .expect("pathlab twin runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    let twin: serde_json::Value = serde_json::from_slice(&output.stdout).expect("twin's JSON");
    eprintln!("{stderr}{twin:#}");
    (twin, stderr)
}

#[test]
fn a_twin_of_a_kernel_token_bucket_behind_a_delay_finds_its_rate_queue_and_delays() {
    let Some(_serial) = privileged_paired("a_twin_of_a_kernel_token_bucket") else {
        return;
    };
    let delay = format!("delay {DELAY_MS}ms");
    let lab = Lab::start_with("twin-tbf", &delay, &["--reverse", &delay], true, false);
    kernel_tbf(&lab.line, R_PORT_H2, "10mbit", "5kb", "50ms");
    kernel_tbf(&lab.line, R_PORT_H1, "20mbit", "5kb", "50ms");
    let _server = ServerInH2::start(&lab.line);
    let out = lab.dir.path("tbf.toml");
    let (twin, stderr) = measure_twin(&lab.line.h1, "198.18.0.2", "20s", "40M", &out);
    assert!(
        stderr.contains(
            "overfeeds the path for about 6 s each way (5 s more where its rate may move), at up \
             to 40.00 Mbit/s"
        ),
        "the saturating phases are said at the start: {stderr}"
    );

    // Up: the bucket. Its rate counts frames, as the twin's does.
    let rate = figure(&twin, "up", "rate_mbit") * 1e6;
    assert!(
        (rate / RATE_BPS - 1.0).abs() < 0.05,
        "rate {rate} for {RATE_BPS}"
    );
    // tbf's queue: its rate times its latency plus its bucket, in bytes.
    let queue = RATE_BPS / 8.0 * LATENCY_S + BURST_BYTES;
    let buffer = figure(&twin, "up", "buffer_bytes");
    assert!(
        (buffer / queue - 1.0).abs() < 0.15,
        "buffer {buffer} B for {queue}"
    );
    let onset = figure(&twin, "up", "drop_onset_ms");
    let plateau = figure(&twin, "up", "buffer_delay_ms");
    assert!(
        onset >= 0.5 * plateau,
        "tail drop: onset {onset} ms, plateau {plateau}"
    );
    let up_spec = twin["up"]["spec"].as_str().unwrap();
    assert!(!up_spec.contains("codel"), "{up_spec}");
    // A bucket does not restart slowly after pings (pathlab_twin::restart): its flow after
    // them lost 20-29 ms of its rate after TCP's own start, under what is copied.
    for direction in ["up", "down"] {
        let spec = twin[direction]["spec"].as_str().unwrap();
        assert!(!spec.contains("restart"), "{direction}: {spec}");
    }
    // The delay each way: the emulator's 10 ms; the twin's spec takes out the probes' own
    // time on the bottleneck, which its rate adds back.
    for direction in ["up", "down"] {
        let spec = twin[direction]["spec"].as_str().unwrap();
        let ms = pathlab_core::LinkSpec::parse(spec)
            .expect("the twin's spec parses")
            .delay
            .expect("a delay")
            .delay
            .as_nanos() as f64
            / 1e6;
        assert!(
            (ms - DELAY_MS).abs() < 0.5,
            "{direction}: delay {ms} ms in {spec}"
        );
    }
    // Down: the other bucket, 20 Mbit/s.
    let down = figure(&twin, "down", "rate_mbit") * 1e6;
    assert!((down / 20e6 - 1.0).abs() < 0.05, "rate down {down}");
    // Bulk TCP through a bucket carries its segments as their frames say: the rate the
    // probes found stands (pathlab_twin::calibrate), and the flow's goodput is in the twin,
    // no faster than the bucket carries TCP (its MSS over its frame).
    for (direction, bucket_bps) in [("up", RATE_BPS), ("down", 20e6)] {
        let how = twin[direction]["figures"]["rate_mbit"]["how"]
            .as_str()
            .unwrap();
        assert!(!how.contains("raised"), "{direction}: {how}");
        let goodput = figure(&twin, direction, "tcp_goodput_mbit") * 1e6;
        assert!(
            goodput <= bucket_bps * 1448.0 / 1514.0 * 1.02,
            "{direction}: TCP's goodput {goodput} through a {bucket_bps} bucket"
        );
    }

    // The file reads back.
    let back = lab
        .line
        .h1
        .command(PATHLAB)
        .args(["spec", "--twin"])
        .arg(&out)
        .output()
        .expect("pathlab spec runs");
    assert!(
        back.status.success(),
        "{}",
        String::from_utf8_lossy(&back.stderr)
    );
    assert!(String::from_utf8_lossy(&back.stdout).contains(up_spec));

    check_against_the_path(&lab, &out);
}

/// `pathlab twin` of a real cellular path's capacity (issue 41's third kind): the
/// emulator in r replays a mahimahi trace each way behind 20 ms, and the twin and its
/// check run as on the tbf path, the rows printed and judged. Manual: the traces are
/// mahimahi's (GPL-3.0 data, not in this repository); `PATHLAB_CELLULAR_TRACES=DIR` names
/// a directory with `TMobile-LTE-short.up` and `.down` from mahimahi's `traces/`.
#[test]
#[ignore = "manual: needs mahimahi's cellular traces (PATHLAB_CELLULAR_TRACES=DIR)"]
fn a_twin_of_a_cellular_trace_holds_on_twin_check() {
    let Some(dir) = std::env::var_os("PATHLAB_CELLULAR_TRACES") else {
        panic!("PATHLAB_CELLULAR_TRACES=DIR names mahimahi's traces");
    };
    let Some(_serial) = privileged_paired("a_twin_of_a_cellular_trace") else {
        return;
    };
    let trace = |way: &str| {
        let path = std::path::Path::new(&dir).join(format!("TMobile-LTE-short.{way}"));
        format!("delay 20ms trace {} limit 200", path.display())
    };
    let lab = Lab::start_with(
        "twin-cell",
        &trace("up"),
        &["--reverse", &trace("down")],
        true,
        false,
    );
    let _server = ServerInH2::start(&lab.line);
    let out = lab.dir.path("cell.toml");
    // 30 s a direction: its longer saturating phase then takes 15 s of a trace that moves
    // over tens of them.
    measure_twin(&lab.line.h1, "198.18.0.2", "60s", "80M", &out);
    check_against_the_path(&lab, &out);
}

/// `pathlab twin check TWIN HOST -t SECONDS -C cubic -J --out DIR` from `from`: the check's
/// JSON, with its stderr (the progress) printed; panics unless it printed its JSON.
pub fn run_twin_check(
    from: &pathlab_os::netns::Netns,
    twin: &std::path::Path,
    host: &str,
    seconds: &str,
    dir: &std::path::Path,
) -> serde_json::Value {
    let check = from
        .command(PATHLAB)
        .args(["twin", "check"])
        .arg(twin)
        .args([host, "-t", seconds, "-C", "cubic", "-J", "--out"])
        .arg(dir)
        .output()
        .expect("pathlab twin check runs");
    let stderr = String::from_utf8_lossy(&check.stderr);
    let check: serde_json::Value = serde_json::from_slice(&check.stdout)
        .unwrap_or_else(|e| panic!("twin check's JSON: {e}: {stderr}"));
    eprintln!("{stderr}{check:#}");
    check
}

/// `twin check` of the twin at `out` against the path it copies: the same workloads on
/// both, bulk TCP with cubic on both (not the host's default: this machine's, inherited by
/// every namespace, is bbr, whose queue is of its own making), each figure judged. The
/// round trips under load are judged as issue 41 says (p50 and p95 within 10%) plus what
/// the two emulators' lateness adds to a round trip: the real path's in r during the
/// check (not during `twin`'s saturating phases before it), the twin's in its lab.
fn check_against_the_path(lab: &Lab, out: &std::path::Path) {
    let before = lab.stats();
    let check = run_twin_check(
        &lab.line.h1,
        out,
        "198.18.0.2",
        "3s",
        &lab.dir.path("check"),
    );
    assert_eq!(check["congestion"], "cubic", "{check}");
    let real = Lateness::between(&before, &lab.stats());
    let twin = Lateness::of_lab_link(
        &lab.dir.path("check").join("twin").join("result.json"),
        "near-far",
    );
    the_saved_check_is_the_printed_one_and_its_report_overlays_both(&lab.dir.path("check"), &check);
    for row in check["rows"].as_array().expect("rows") {
        let name = row["name"].as_str().unwrap();
        if !name.starts_with("RTT") {
            assert_eq!(row["within"], true, "{name}: {row}");
            continue;
        }
        let quantile = if name.contains("p50") {
            Quantile::P50
        } else {
            Quantile::P99
        };
        let (on_path, on_twin) = (row["real"].as_f64().unwrap(), row["twin"].as_f64().unwrap());
        let budget = std::time::Duration::from_secs_f64(LATENESS_SHARE * on_path / 1e3);
        let slack_ms = [&real, &twin]
            .iter()
            .map(|l| ms(l.slack(quantile, &[0, 1], budget)))
            .sum::<f64>();
        let bound = LOADED_RTT_WITHIN * on_path + slack_ms;
        assert!(
            (on_twin - on_path).abs() <= bound,
            "{name}: the twin's {on_twin:.2} ms against the path's {on_path:.2} (bound {bound:.2} \
             ms: {:.0}% and {slack_ms:.2} of the emulators' lateness); the twin:\n{}{}",
            LOADED_RTT_WITHIN * 100.0,
            std::fs::read_to_string(out).unwrap_or_default(),
            crate::util::late::cpu_pressure()
        );
    }
}

/// The check saved in `dir` holds every workload's report on both paths, and the figures
/// printed are theirs (the goodput each way is the bulk transfer's own); its page holds
/// the verdict's rows and overlays the path's and the twin's curves, and `pathlab report`
/// draws the same figures again from the file alone.
fn the_saved_check_is_the_printed_one_and_its_report_overlays_both(
    dir: &std::path::Path,
    printed: &serde_json::Value,
) {
    let text = std::fs::read_to_string(dir.join("result.json")).expect("the check's result.json");
    let file: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(file["result"]["kind"], "twin-check", "{}", &text[..200]);
    let record = &file["result"]["data"];
    for side in ["real", "twin"] {
        for way in ["up", "down"] {
            let runs = &record[side][way];
            let key = if runs["up"] == true {
                "up_bps"
            } else {
                "down_bps"
            };
            let saved = runs["tcp"][key].as_f64().expect("goodput");
            let printed_bps = printed[side][way]["goodput_bps"].as_f64().expect("printed");
            assert_eq!(saved, printed_bps, "{side} {way} ({key})");
        }
    }
    let page = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    for stem in [
        "goodput-up",
        "rtt-down-cdf",
        "probe-delay-up-cdf",
        "rtt-idle-cdf",
    ] {
        assert!(
            dir.join("plots").join(format!("{stem}.svg")).is_file(),
            "{stem}"
        );
    }
    let svg = std::fs::read_to_string(dir.join("plots/goodput-down.svg")).expect("svg");
    let text: String = svg.split_whitespace().collect();
    assert!(
        text.contains(">path<") && text.contains(">twin<"),
        "both sides' legends"
    );
    for row in printed["rows"].as_array().expect("rows") {
        let name = row["name"].as_str().expect("name").replace('>', "&gt;");
        assert!(page.contains(&name), "the page's table has {name}");
    }
    let again = dir.join("again");
    let output = std::process::Command::new(PATHLAB)
        .arg("report")
        .arg(dir.join("result.json"))
        .arg("--out")
        .arg(&again)
        .output()
        .expect("pathlab report runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::read(again.join("plots/goodput-down.svg")).expect("redrawn"),
        svg.as_bytes(),
        "the report drawn again from the file is the same"
    );
}

#[test]
fn twin_refuses_bad_options_and_names_a_host_that_is_no_server() {
    crate::util::assert_refused(
        &["twin", "198.18.0.2", "--out", "x.toml", "-t", "5s"],
        "too short",
    );
    crate::util::assert_refused(
        &[
            "twin",
            "198.18.0.2",
            "--out",
            "x.toml",
            "--max-rate",
            "fast",
        ],
        "--max-rate",
    );
    // Refused, not ignored.
    crate::util::assert_refused(
        &["twin", "198.18.0.2", "--out", "x.toml", "--save", "s.json"],
        "--save s.json",
    );
    crate::util::assert_refused(
        &["twin", "check", "x.toml", "198.18.0.2", "--save", "s.json"],
        "--save s.json",
    );
}
