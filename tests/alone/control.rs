//! `pathlab emulate --control`: the HTTP API, Prometheus metrics and the live page, on
//! h1 - r - h2 with the emulator in r, every change checked on the wire by ping.
//!
//! They need CAP_NET_ADMIN (fail in CI without it, SKIPPED elsewhere); the page test also
//! needs Chromium, which `.ci/run` installs.

use std::io::BufReader;
use std::net::IpAddr;
use std::time::Duration;

use pathlab_emulator::emulator::EmulatorStats;
use pathlab_http::ClientResponse;
use pathlab_os::topology::H2_V4;
use pathlab_probe_driver::ping::PingResult;
use pathlab_results::recording::{read_recording, Recording, RecordingLine};
use serde_json::{json, Value};

use crate::util;
use crate::util::browser::{find_chromium, Browser};
use crate::util::emulated::{privileged, Lab, PATHLAB};
use crate::util::late::ms;
use crate::util::output::OutputLog;
use crate::util::recorded::{
    assert_delay_changed, judge_round_trips, recorded_pings, SeenPing, ECHO_FRAME, HOST_JITTER_MS,
};

const TOKEN: &str = "pathlab-test-token-0123456789";

/// Starts the lab with `--control 127.0.0.1:0 --control-token FILE --record-dir DIR` and
/// returns it with the address the emulator printed and DIR; its stderr keeps being read
/// (into `log`).
fn start(test: &str, spec: &str) -> (Lab, String, OutputLog, util::TempDir) {
    let dir = util::TempDir::new(&format!("{test}-token"));
    let token_file = dir.path("token");
    util::write_secret(&token_file, &format!("{TOKEN}\n"));
    let token_arg = token_file.display().to_string();
    let recordings = util::TempDir::new(&format!("{test}-recordings"));
    let record_dir = recordings.root().display().to_string();
    let mut lab = Lab::start(
        test,
        spec,
        &[
            "--control",
            "127.0.0.1:0",
            "--control-token",
            &token_arg,
            "--record-dir",
            &record_dir,
        ],
        true,
    );
    let log = OutputLog::follow(lab.emulator.as_mut().unwrap());
    let addr = log.http_address();
    // The token was read at start, before the address was printed.
    drop(dir);
    (lab, addr, log, recordings)
}

/// One request from inside r, where the control address is.
fn call(
    lab: &Lab,
    addr: &str,
    method: &str,
    path: &str,
    token: bool,
    body: Option<Value>,
) -> ClientResponse {
    let body = body.map(|b| b.to_string().into_bytes());
    lab.line
        .r
        .run(|| pathlab_http::request(addr, method, path, token.then_some(TOKEN), body.as_deref()))
        .unwrap()
        .expect("the control address answers")
}

/// `PUT /api/v1/spec` of `body`, with the token or without.
fn put_spec(lab: &Lab, addr: &str, token: bool, body: Value) -> ClientResponse {
    call(lab, addr, "PUT", "/api/v1/spec", token, Some(body))
}

/// `POST /api/v1/recording` of a file `name`, with the token.
fn record(lab: &Lab, addr: &str, name: &str) -> ClientResponse {
    call(
        lab,
        addr,
        "POST",
        "/api/v1/recording",
        true,
        Some(json!({ "name": name })),
    )
}

fn json_of(reply: &ClientResponse) -> Value {
    serde_json::from_slice(&reply.body).expect("a JSON body")
}

/// Pings h1 -> h2 in phases, each judged once the recording that holds its packets is
/// read: the link must have held each ping its phase's round trip in the model (the
/// spec's delays: the change took effect in the emulator), and the pinger's round trips
/// (the kernel's stamps) must be what the same packets spent in the emulator as sent (the
/// model's time plus the emulator's own lateness for each, recorded) plus the hosts' own
/// part, whose median stays within [`HOST_JITTER_MS`] (the wire followed). No bound on the
/// emulator's lateness is needed: each ping is judged against its own packets.
#[derive(Default)]
struct PingPhases(Vec<(f64, &'static str, Vec<PingResult>)>);

impl PingPhases {
    /// 15 pings, 20 ms apart, whose round trip through the link should be `expected_ms`.
    fn ping(&mut self, lab: &Lab, expected_ms: f64, what: &'static str) {
        let pings = lab.ping(IpAddr::V4(H2_V4), 15, Duration::from_millis(20), 56);
        assert!(
            pings.iter().all(|p| p.rtt.is_some()),
            "{what}: a ping had no reply: {pings:?}"
        );
        self.0.push((expected_ms, what, pings));
    }

    /// Judges every phase against `recording`, which holds their echo requests and replies
    /// and no other ICMP echo of that size.
    fn judge(&self, recording: &Recording) {
        let recorded = recorded_pings(recording, ECHO_FRAME, 0);
        let total: usize = self.0.iter().map(|(_, _, pings)| pings.len()).sum();
        assert_eq!(recorded.len(), total, "each request crossed the link once");
        let mut records = recorded.iter();
        for (expected_ms, what, pings) in &self.0 {
            let (mut model, mut host) = (Vec::new(), Vec::new());
            for (ping, record) in pings.iter().zip(records.by_ref()) {
                let model_ns = record.in_link_ns().expect("forwarded both ways");
                let wire_ns = record.on_wire_ns().expect("sent both ways");
                model.push(model_ns as f64 / 1e6);
                host.push(ms(ping.rtt.expect("replied")) - wire_ns as f64 / 1e6);
            }
            let (model_ms, host_ms) = (util::median(&model), util::median(&host));
            eprintln!(
                "{what}: the link held the pings {model_ms:.3} ms (median, model), the hosts' part \
                 {host_ms:.3} ms beyond the emulator's sends"
            );
            assert!(
                (model_ms - expected_ms).abs() < 0.01,
                "{what}: the link held the pings {model_ms:.3} ms (median) for {expected_ms}: \
                 {model:.3?}"
            );
            assert!(
                (-0.05..HOST_JITTER_MS).contains(&host_ms),
                "{what}: the round trips took {host_ms:.3} ms (median) beyond what their packets \
                 spent in the emulator as sent, at most {HOST_JITTER_MS} for the hosts: \
                 {host:.3?}"
            );
        }
    }
}

#[test]
fn the_http_api_reads_and_changes_the_emulator_behind_its_token_and_the_wire_follows() {
    let Some(_guard) = privileged("control_api") else {
        return;
    };
    let (mut lab, addr, log, recordings) = start("control-api", "delay 10ms");
    check_reads_without_the_token_and_no_change(&lab, &addr);

    let specs = json_of(&call(&lab, &addr, "GET", "/api/v1/spec", true, None));
    assert_eq!(
        specs,
        json!({ "forward": "delay 10ms", "reverse": "delay 10ms" })
    );
    let mut phases = PingPhases::default();
    phases.ping(&lab, 20.0, "before");

    check_bad_specs_change_nothing(&lab, &addr);
    set_spec_through_the_api(&lab, &addr);
    phases.ping(&lab, 50.0, "after the API");

    // The client command from "another machine": `emulate set --remote`.
    let token_dir = util::TempDir::new("control-api-client");
    let token_file = token_dir.path("token");
    util::write_secret(&token_file, TOKEN);
    let token_arg = token_file.display().to_string();
    set_spec_with_remote_client(&lab, &addr, &token_arg, &mut phases);
    check_recordings_through_the_api(&lab, &addr, &recordings, &phases);
    check_every_reader_sees_the_same_counters(&lab, &addr, &token_arg);

    assert_eq!(call(&lab, &addr, "GET", "/nothing", true, None).status, 404);
    assert_eq!(
        call(&lab, &addr, "POST", "/api/v1/stats", true, None).status,
        405
    );

    // Every change was logged with who made it.
    drop(lab.stop());
    check_every_change_was_logged(&log);
}

/// `pathlab emulate ARGS` run in r, where the control address is: the client command from
/// "another machine".
fn emulate_in_r(lab: &Lab, args: &[&str]) -> std::process::Output {
    lab.line
        .r
        .command(PATHLAB)
        .args(["emulate"])
        .args(args)
        .output()
        .unwrap()
}

/// Without the token: reads from loopback (where `call` is) but no change; the page is
/// served.
fn check_reads_without_the_token_and_no_change(lab: &Lab, addr: &str) {
    assert_eq!(
        call(lab, addr, "GET", "/api/v1/stats", false, None).status,
        200
    );
    assert_eq!(call(lab, addr, "GET", "/metrics", false, None).status, 200);
    let refused = put_spec(lab, addr, false, json!({ "forward": "delay 1ms" }));
    assert_eq!(refused.status, 401);
    let page = call(lab, addr, "GET", "/", false, None);
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("<title>pathlab emulate</title>"));
}

/// A bad spec: 400 with the parser's own message, and nothing changes; a body that is not
/// an object of specs: 400.
fn check_bad_specs_change_nothing(lab: &Lab, addr: &str) {
    let bad = put_spec(lab, addr, true, json!({ "forward": "delay banana" }));
    assert_eq!(bad.status, 400);
    let parser = pathlab_emulator::load_spec("delay banana")
        .unwrap_err()
        .to_string();
    assert_eq!(json_of(&bad)["error"], format!("forward: {parser}"));
    let not_json = put_spec(lab, addr, true, json!("delay 5ms"));
    assert_eq!(not_json.status, 400);
}

/// A change through the API (30 ms forward, 20 ms back), answered with the specs now in
/// force.
fn set_spec_through_the_api(lab: &Lab, addr: &str) {
    let set = put_spec(
        lab,
        addr,
        true,
        json!({ "forward": "delay 30ms", "reverse": "delay 20ms" }),
    );
    assert_eq!(set.status, 200, "{}", String::from_utf8_lossy(&set.body));
    assert_eq!(
        json_of(&set),
        json!({ "forward": "delay 30ms", "reverse": "delay 20ms" })
    );
}

/// `emulate set --remote` with the token file `token_arg` sets 5 ms both ways (pinged as
/// a phase of `phases`); a bad spec is a usage error and no token is refused.
fn set_spec_with_remote_client(lab: &Lab, addr: &str, token_arg: &str, phases: &mut PingPhases) {
    let out = emulate_in_r(
        lab,
        &["set", "--remote", addr, "--token", token_arg, "delay 5ms"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    phases.ping(lab, 10.0, "after --remote");
    let out = emulate_in_r(
        lab,
        &["set", "--remote", addr, "--token", token_arg, "delay", "x"],
    );
    assert_eq!(out.status.code(), Some(2), "a bad spec is a usage error");
    let out = emulate_in_r(lab, &["set", "--remote", addr, "delay 5ms"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs its token"));
}

/// Recording started and stopped through the API holds what crossed meanwhile: a new
/// file of --record-dir, named by the request. Judges `phases` on --record's recording,
/// whole once the API stopped it.
fn check_recordings_through_the_api(
    lab: &Lab,
    addr: &str,
    recordings: &util::TempDir,
    phases: &PingPhases,
) {
    let file = recordings.path("api-recording.jsonl");
    let path = record(lab, addr, &file.display().to_string());
    assert_eq!(path.status, 403, "a name, not a path");
    let start = record(lab, addr, "api-recording.jsonl");
    assert_eq!(
        start.status, 409,
        "--record's recording is under way already"
    );
    assert_eq!(
        call(lab, addr, "DELETE", "/api/v1/recording", true, None).status,
        200
    );
    // --record's recording, now whole, holds the three phases' pings.
    phases.judge(&lab.recording());
    assert_eq!(
        call(lab, addr, "DELETE", "/api/v1/recording", true, None).status,
        409
    );
    let start = record(lab, addr, "api-recording.jsonl");
    assert_eq!(
        start.status,
        200,
        "{}",
        String::from_utf8_lossy(&start.body)
    );
    assert_eq!(
        call(lab, addr, "DELETE", "/api/v1/recording", true, None).status,
        200
    );
    let again = record(lab, addr, "api-recording.jsonl");
    assert_eq!(again.status, 400, "an existing file is never overwritten");
    let start = record(lab, addr, "api-recording-2.jsonl");
    assert_eq!(start.status, 200);
    let file = recordings.path("api-recording-2.jsonl");
    let pings = lab.ping(IpAddr::V4(H2_V4), 10, Duration::from_millis(10), 56);
    assert!(pings.iter().all(|p| p.rtt.is_some()));
    let recording = json_of(&call(lab, addr, "GET", "/api/v1/recording", true, None));
    assert_eq!(recording["recording"], json!(file));
    assert_eq!(
        call(lab, addr, "DELETE", "/api/v1/recording", true, None).status,
        200
    );
    let recorded = read_recording(BufReader::new(std::fs::File::open(&file).unwrap())).unwrap();
    assert_eq!(
        recorded.header.as_ref().unwrap().directions[0].spec,
        "delay 5ms"
    );
    let packets = |dir: u8| {
        recorded
            .lines
            .iter()
            .filter(|l| matches!(l, RecordingLine::Packet { dir: d, .. } if *d == dir))
            .count()
    };
    // Ten echo requests one way, ten replies back; with static neighbours the hosts send
    // little else (an IPv6 report now and then).
    for dir in 0..2 {
        assert!(
            (10..=14).contains(&packets(dir)),
            "direction {dir}: {} packets",
            packets(dir)
        );
    }
}

/// The counters `emulate stats` reads of each direction: forwarded packets and bytes,
/// packets received, packets whose lateness was measured.
fn direction_counters(stats: &EmulatorStats) -> Vec<(u64, u64, u64, u64)> {
    stats
        .directions
        .iter()
        .map(|d| {
            (
                d.forwarded,
                d.forwarded_bytes,
                d.link.packets_in,
                d.lateness.packets,
            )
        })
        .collect()
}

/// Prometheus, the API's stats and `stats --remote` (with the token file `token_arg`) are
/// the counters `emulate stats` reads.
fn check_every_reader_sees_the_same_counters(lab: &Lab, addr: &str, token_arg: &str) {
    // Each read is compared with the stats read before and after it, and taken only
    // when those two agree: a packet that crosses in between (an IPv6 report, now and
    // then; a busy run saw 59 received against 60) changes them.

    let quiet = (0..10)
        .find_map(|_| {
            let before = lab.stats();
            let metrics = call(lab, addr, "GET", "/metrics", true, None);
            assert_eq!(metrics.status, 200);
            let api: EmulatorStats =
                serde_json::from_slice(&call(lab, addr, "GET", "/api/v1/stats", true, None).body)
                    .unwrap();
            let out = emulate_in_r(
                lab,
                &["stats", "--remote", addr, "--token", token_arg, "-J"],
            );
            let remote_stats: EmulatorStats = serde_json::from_slice(&out.stdout).unwrap();
            let after = lab.stats();
            (direction_counters(&before) == direction_counters(&after)).then_some((
                after,
                metrics,
                api,
                remote_stats,
            ))
        })
        .expect("the counters held still over one round of reads in ten");
    let (stats, metrics, api, remote_stats) = quiet;
    let text = String::from_utf8(metrics.body).unwrap();
    let families = pathlab_http::prometheus::parse(&text).expect("the exposition parses");
    let value = |name: &str, direction: &str| {
        pathlab_http::prometheus::value(&families, name, &[("direction", direction)])
            .unwrap_or_else(|| panic!("{name} {direction}"))
    };
    for d in &stats.directions {
        let direction = format!("{} -> {}", d.from, d.to);
        assert_eq!(
            value("pathlab_emulator_forwarded_packets_total", &direction),
            d.forwarded as f64
        );
        assert_eq!(
            value("pathlab_emulator_forwarded_bytes_total", &direction),
            d.forwarded_bytes as f64
        );
        assert_eq!(
            value("pathlab_emulator_received_packets_total", &direction),
            d.link.packets_in as f64
        );
        assert_eq!(
            value("pathlab_emulator_lateness_seconds_count", &direction),
            d.lateness.packets as f64
        );
    }
    assert_eq!(direction_counters(&api), direction_counters(&stats));
    assert_eq!(
        direction_counters(&remote_stats),
        direction_counters(&stats)
    );
}

/// The emulator's log (read after it stopped) names every change and the recording the
/// API started, with who made them.
fn check_every_change_was_logged(log: &OutputLog) {
    let logged = log.lines();
    let sets = logged.iter().filter(|l| l.contains(" set to '")).count();
    assert_eq!(
        sets,
        2 + 2,
        "two API changes of both ways, one --remote of both: {logged:?}"
    );
    assert!(logged
        .iter()
        .any(|l| l.contains("set to 'delay 30ms' by http 127.0.0.1:")));
    assert!(logged
        .iter()
        .any(|l| l.contains("recording into") && l.contains("started by http")));
}

#[test]
fn a_control_address_beyond_loopback_needs_a_token() {
    let Some(_guard) = privileged("control_needs_token") else {
        return;
    };
    let lab = Lab::start("control-token", "delay 1ms", &[], true);
    let out = lab
        .line
        .r
        .command(PATHLAB)
        .args([
            "emulate",
            "--between",
            "r-h1",
            "r-h2",
            "--name",
            "other",
            "--control",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--control-token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_live_page_updates_and_a_spec_changed_on_it_takes_effect_on_the_wire() {
    let Some(_guard) = privileged("control_page") else {
        return;
    };
    let Some(chromium) = find_chromium() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but Chromium is missing; .ci/run installs it"
        );
        pathlab_os::testing::skipped("control_page", "needs Chromium, which .ci/run installs");
        return;
    };
    let (mut lab, addr, _log, _recordings) = start("control-page", "delay 10ms");
    let profile = util::TempDir::new("control-page-chromium");
    let url = format!("http://{addr}/#token={TOKEN}");
    lab.line
        .r
        .run(|| {
            let mut page = Browser::open(lab.line.r.command(chromium), profile.root(), &url);
            page.wait_for(
                "document.getElementById('spec-0') && document.getElementById('spec-0').value",
                Duration::from_secs(20),
                |v| v == "delay 10ms",
            );
            // The graphs grow a point a second.
            let points =
                "Number(document.querySelector('#dir-0 .chart-throughput').dataset.points || 0)";
            let first = page.wait_for(points, Duration::from_secs(10), |v| v.as_u64() >= Some(1));
            let first = first.as_u64().unwrap();
            page.wait_for(points, Duration::from_secs(10), |v| {
                v.as_u64() >= Some(first + 2)
            });
            // A bad spec shows the parser's message and changes nothing.
            page.eval(
                "document.getElementById('spec-0').value = 'delay banana'; \
                 document.getElementById('apply-0').click(); true",
            );
            let parser = pathlab_emulator::load_spec("delay banana")
                .unwrap_err()
                .to_string();
            page.wait_for(
                "document.getElementById('error-0').textContent",
                Duration::from_secs(10),
                |v| v.as_str().is_some_and(|t| t.contains(&parser)),
            );
            // Good ones, from the page: a preset picked one way (transatlantic: 39 ms),
            // a spec typed the other.
            let presets = page.eval("document.getElementById('preset-0').options.length");
            assert!(
                presets.as_u64() > Some(10),
                "the presets are offered: {presets}"
            );
            page.eval(
                "const pick = document.getElementById('preset-0'); \
                 pick.value = 'preset transatlantic'; \
                 pick.dispatchEvent(new Event('change')); \
                 document.getElementById('spec-1').value = 'delay 25ms'; \
                 document.getElementById('apply-0').click(); \
                 document.getElementById('apply-1').click(); true",
            );
            for i in 0..2 {
                page.wait_for(
                    &format!("document.getElementById('error-{i}').textContent"),
                    Duration::from_secs(10),
                    |v| v.as_str().is_some_and(|t| t.starts_with("applied")),
                );
            }
        })
        .unwrap();
    // transatlantic's 39 ms one way, 25 ms typed the other.
    let mut phases = PingPhases::default();
    phases.ping(&lab, 64.0, "after the page's change");
    // The page shows the figures of the traffic that just crossed.
    lab.line
        .r
        .run(|| {
            let mut page = Browser::open(lab.line.r.command(chromium), profile.root(), &url);
            page.wait_for(
                "(document.querySelector('#dir-0 .throughput') || {}).textContent || ''",
                Duration::from_secs(10),
                |v| v.as_str().is_some_and(|t| t.contains("packets/s")),
            );
        })
        .unwrap();
    phases.judge(&lab.stop().1);
}

/// `pathlab lab --control`: a link's spec changed over HTTP in the middle of a run shows in
/// the run's own ping series, and every link's metrics are there while it runs.
/// `pathlab lab --control`: a link's spec changed over HTTP in the middle of a run shows in
/// the run's own ping series, and every link's metrics are there while it runs.
#[test]
fn a_labs_links_are_read_and_changed_over_http_while_it_runs() {
    let Some(_guard) = privileged("control_lab") else {
        return;
    };
    let dir = util::TempDir::new("control-lab");
    let spec = write_control_lab_spec(&dir);
    let token_file = dir.path("token");
    util::write_secret(&token_file, TOKEN);
    let mut child = std::process::Command::new(PATHLAB)
        .args(["lab"])
        .arg(&spec)
        .args(["--control", "127.0.0.1:0", "--control-token"])
        .arg(&token_file)
        .args(["--out"])
        .arg(dir.path("out"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = OutputLog::follow(&mut child);
    let addr = log.http_address();
    change_the_link_mid_run(&addr);
    check_metrics_while_it_runs(&addr);
    let output = child.wait_with_output().unwrap();
    let log = log.lines();
    assert!(output.status.success(), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.contains("set to 'delay 30ms' by http 127.0.0.1:")),
        "{log:?}"
    );
    let result = check_the_change_is_in_the_result(&dir, &output);
    check_the_change_on_the_recording(&dir, &result);
}

/// Writes `DIR/lab.toml`, the lab of these tests: h1 - h2 over a 10 ms link, pinged every
/// 20 ms for 5 s; returns its path.
fn write_control_lab_spec(dir: &util::TempDir) -> std::path::PathBuf {
    let spec = dir.path("lab.toml");
    std::fs::write(
        &spec,
        r#"
name = "control"
duration = "5s"
quick = "5s"
[[node]]
name = "h1"
[[node]]
name = "h2"
[[link]]
between = ["h1", "h2"]
spec = "delay 10ms"
[[workload]]
kind = "ping"
from = "h1"
to = "h2"
interval = "20ms"
"#,
    )
    .unwrap();
    spec
}

/// One request to the lab's control address `addr`, from loopback: reads need no token,
/// a change does.
fn lab_call(addr: &str, method: &str, path: &str, body: Option<Value>) -> ClientResponse {
    let token = (method != "GET").then_some(TOKEN);
    let body = body.map(|b| b.to_string().into_bytes());
    pathlab_http::request(addr, method, path, token, body.as_deref()).unwrap()
}

/// Once the topology is built, reads the links and changes h1-h2 to 30 ms both ways 2 s
/// into the workload; a change without the token or with a bad spec is refused, an
/// unknown link is not found.
fn change_the_link_mid_run(addr: &str) {
    // The workload starts once the topology is built; change the delay 2 s into it.
    let links = loop {
        let reply = lab_call(addr, "GET", "/api/v1/links", None);
        if reply.status == 200 {
            break json_of(&reply);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        links,
        json!([{ "name": "h1-h2", "emulated": true, "forward": "delay 10ms", "reverse": "delay 10ms" }])
    );
    std::thread::sleep(Duration::from_secs(2));
    let set = lab_call(
        addr,
        "PUT",
        "/api/v1/links/h1-h2/spec",
        Some(json!({ "forward": "delay 30ms", "reverse": "delay 30ms" })),
    );
    assert_eq!(set.status, 200, "{}", String::from_utf8_lossy(&set.body));
    let unsigned = pathlab_http::request(
        addr,
        "PUT",
        "/api/v1/links/h1-h2/spec",
        None,
        Some(br#"{"forward": "delay 1ms"}"#),
    )
    .unwrap();
    assert_eq!(
        unsigned.status, 401,
        "a change needs the token on loopback too"
    );
    let bad = lab_call(
        addr,
        "PUT",
        "/api/v1/links/h1-h2/spec",
        Some(json!({ "forward": "delay banana" })),
    );
    assert_eq!(bad.status, 400);
    assert_eq!(
        lab_call(addr, "GET", "/api/v1/links/h9-h2/stats", None).status,
        404
    );
}

/// Every link's metrics are there while the lab runs, and agree with its stats.
fn check_metrics_while_it_runs(addr: &str) {
    let metrics = lab_call(addr, "GET", "/metrics", None);
    let text = String::from_utf8(metrics.body).unwrap();
    let families = pathlab_http::prometheus::parse(&text).expect("the exposition parses");
    let stats: EmulatorStats =
        serde_json::from_slice(&lab_call(addr, "GET", "/api/v1/links/h1-h2/stats", None).body)
            .unwrap();
    let forwarded = pathlab_http::prometheus::value(
        &families,
        "pathlab_emulator_forwarded_packets_total",
        &[
            ("emulator", "h1-h2"),
            (
                "direction",
                &format!("{} -> {}", stats.directions[0].from, stats.directions[0].to),
            ),
        ],
    )
    .unwrap();
    // Pings keep crossing between the two reads: the later read has as many or more.
    assert!(forwarded > 0.0 && forwarded <= stats.directions[0].forwarded as f64);
}

/// The result and the summary (the run's `output`) say the run was changed by hand, when
/// and by whom; returns the result file's JSON.
fn check_the_change_is_in_the_result(dir: &util::TempDir, output: &std::process::Output) -> Value {
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path("out").join("result.json")).unwrap(),
    )
    .unwrap();
    // The result and the summary say the run was changed by hand, when and by whom.
    let changes = result
        .pointer("/result/data/links/0/changes")
        .expect("the change in the result")
        .as_array()
        .unwrap();
    assert_eq!(
        changes.len(),
        1,
        "the bad spec changed nothing: {changes:?}"
    );
    assert_eq!(changes[0]["forward"], "delay 30ms");
    assert_eq!(changes[0]["reverse"], "delay 30ms");
    let at_s = changes[0]["at_ns"].as_f64().unwrap() / 1e9;
    assert!((1.0..4.0).contains(&at_s), "changed {at_s} s into the run");
    assert!(changes[0]["by"]
        .as_str()
        .unwrap()
        .starts_with("http 127.0.0.1:"));
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(
        summary.contains("note: link h1-h2 changed") && summary.contains("'delay 30ms' both ways"),
        "{summary}"
    );
    result
}

/// The change, judged on the link's recording, and the run's pings (in the `result`)
/// judged against it.
fn check_the_change_on_the_recording(dir: &util::TempDir, result: &Value) {
    // The change, judged on the link's recording (model time, exact): from the instant it
    // was made every packet takes 30 ms, every packet that entered before still 10 ms,
    // both ways.
    let recording = read_recording(BufReader::new(
        std::fs::File::open(dir.path("out").join("link-h1-h2.jsonl")).unwrap(),
    ))
    .unwrap();
    assert_delay_changed(&recording, 10, 30);
    // The run's pings, by the recording of their packets: 20 ms before the change, 60 ms
    // after, 40 ms for one in flight across it (its request entered in the 10 ms before the
    // change: one at most, two if the change fell between a request and its turn).
    let ping = result
        .pointer("/result/data/workloads/0/outcome/data")
        .expect("the ping's outcome");
    let sent = ping["sent"].as_u64().expect("pings sent") as usize;
    let recorded = recorded_pings(&recording, ECHO_FRAME, 0);
    assert_eq!(recorded.len(), sent, "every request crossed the link");
    let in_link_ms: Vec<u64> = recorded
        .iter()
        .filter_map(|p| Some(p.in_link_ns()? / 1_000_000))
        .collect();
    let class = |ms: u64| in_link_ms.iter().filter(|&&x| x == ms).count();
    let (before, across, after) = (class(20), class(40), class(60));
    assert_eq!(before + across + after, in_link_ms.len(), "{in_link_ms:?}");
    assert!(
        before > 50 && after > 50 && across <= 2,
        "{before} pings at 20 ms, {across} across, {after} at 60 ms"
    );
    // What the run's pinger saw against that recording: each ping's RTT is its packets'
    // recorded time, each as late as the link's emulator recorded sending it, and the
    // hosts' part.
    let mut seen = vec![
        SeenPing {
            sent: None,
            rtt: None,
            by_kernel: false,
        };
        sent
    ];
    // The result counts the round trips each clock timed; all of them the kernel's, or
    // the pinger's lateness counts for every one.
    let by_kernel = ping["timed_by"]["user_space"].as_u64() == Some(0);
    let series_sent = ping["series_sent_ns"].as_array().expect("when each went");
    for (pair, sent_ns) in ping["series"]
        .as_array()
        .expect("the series")
        .iter()
        .zip(series_sent)
    {
        seen[pair[0].as_u64().unwrap() as usize] = SeenPing {
            sent: Some(Duration::from_nanos(sent_ns.as_u64().unwrap())),
            rtt: Some(Duration::from_nanos(pair[1].as_u64().unwrap())),
            by_kernel,
        };
    }
    judge_round_trips(&seen, &recorded, Duration::from_millis(20));
}
