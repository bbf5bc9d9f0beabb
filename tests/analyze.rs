//! End-to-end tests of `pathlab analyze` on captures `pathlab emulate --pcap` wrote of TCP
//! transfers between namespaces (h1 - r - h2, the emulator in r), checked against what the
//! emulator knows: the drops it marked in the capture and counted, the delay it was given,
//! the bytes the transfer carried.
//!
//! They need CAP_NET_ADMIN. Without it they fail when `CI=true` and skip with a message
//! elsewhere.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use pathlab_diagnose::capture::{decode, CaptureReader};
use pathlab_diagnose::diagnosis::Limit;
use pathlab_diagnose::tcpflow::{CaptureAnalysis, FlowReport, VantageKind};

use crate::util;
use crate::util::emulated::{privileged_paired, Lab, PATHLAB};

/// The receiving end in h2.
const SERVER: &str = "198.18.0.2:5001";

/// Sends `bytes` from h1 to h2 over one TCP connection (the receiver's socket buffer
/// `receive_buffer` if given) and returns the sender's address and what h2 received.
fn transfer(lab: &Lab, bytes: usize, receive_buffer: Option<u32>) -> (SocketAddr, usize) {
    let server: SocketAddr = SERVER.parse().unwrap();
    let listener = lab
        .line
        .h2
        .run(|| {
            pathlab_os::testing::tcp_listen_with_receive_buffer(
                server,
                receive_buffer.map(|size| size as usize),
            )
        })
        .unwrap()
        .expect("listener in h2");
    let receiver = std::thread::spawn(move || -> std::io::Result<usize> {
        let (mut stream, _) = listener.accept()?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut buffer = vec![0u8; 64 * 1024];
        let mut total = 0;
        loop {
            match stream.read(&mut buffer)? {
                0 => return Ok(total),
                n => total += n,
            }
        }
    });
    let mut stream = lab
        .line
        .h1
        .run(|| TcpStream::connect_timeout(&server, Duration::from_secs(5)))
        .unwrap()
        .expect("connect from h1");
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let client = stream.local_addr().unwrap();
    stream.write_all(&vec![0x5A; bytes]).expect("send");
    stream.shutdown(std::net::Shutdown::Write).expect("FIN");
    let received = receiver.join().unwrap().expect("receive");
    drop(stream);
    // The last ACKs and FINs cross the 10 ms delays before the emulator stops.
    std::thread::sleep(Duration::from_millis(200));
    (client, received)
}

/// `pathlab analyze FILE -J --out DIR`, parsed.
fn analyze(capture: &std::path::Path, out: &std::path::Path) -> CaptureAnalysis {
    let output = Command::new(PATHLAB)
        .arg("analyze")
        .arg(capture)
        .arg("-J")
        .arg("--out")
        .arg(out)
        .output()
        .expect("pathlab analyze runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("analyze -J prints the analysis")
}

/// The direction of the transfer from `client` in `analysis`.
fn flow_from(analysis: &CaptureAnalysis, client: SocketAddr) -> &FlowReport {
    analysis
        .connections
        .iter()
        .flat_map(|c| c.flows.iter())
        .find(|f| f.from == client && f.to.to_string() == SERVER)
        .expect("the transfer is in the capture")
}

/// Data segments of the flow from `client` the capture marks as dropped, and every
/// packet it marks.
fn marked_drops(capture: &[u8], client: SocketAddr) -> (u64, u64) {
    let mut reader = CaptureReader::new(capture).expect("the emulator's capture reads");
    let (mut flow, mut all) = (0, 0);
    while let Some(packet) = reader.next_packet().expect("every block reads") {
        if !packet.dropped_by_emulator() {
            continue;
        }
        all += 1;
        if let Ok(Some(segment)) = decode(packet.link_type, packet.data, packet.original_len) {
            if segment.source == client && segment.payload_len > 0 {
                flow += 1;
            }
        }
    }
    (flow, all)
}

#[test]
fn analyze_finds_the_emulators_drops_its_delay_and_every_byte() {
    let Some(_serial) =
        privileged_paired("analyze_finds_the_emulators_drops_its_delay_and_every_byte")
    else {
        return;
    };
    let dir = util::TempDir::new("analyze-loss-capture");
    let pcap = dir.path("capture.pcapng");
    let pcap_arg = pcap.to_string_lossy().into_owned();
    let mut lab = Lab::start(
        "analyze-loss",
        "delay 10ms loss 1%",
        &["--pcap", &pcap_arg, "--seed", "17"],
        true,
    );
    let bytes = 3_000_000;
    let (client, received) = transfer(&lab, bytes, None);
    let (stats, _) = lab.stop();
    assert_eq!(received, bytes);
    let capture = std::fs::read(&pcap).expect("capture written");
    let (flow_drops, all_drops) = marked_drops(&capture, client);
    let counted: u64 = stats
        .directions
        .iter()
        .map(|d| d.link.dropped_total())
        .sum();
    assert_eq!(
        all_drops, counted,
        "the capture marks every drop the emulator counted"
    );
    let analysis = analyze(&pcap, &dir.path("out"));
    check_the_analysis_finds_every_drop(&analysis, client, bytes, flow_drops, all_drops);
    let verdict = &flow_from(&analysis, client).verdict.sentence;
    check_the_figures_and_the_saved_result(&dir, verdict);
}

/// The `analysis` of the capture: the flow from `client` carried every one of the `bytes`
/// once; its retransmissions are the emulator's `flow_drops` (of `all_drops`); the capture
/// point is in the middle of a 20 ms round trip; congestion limits it.
fn check_the_analysis_finds_every_drop(
    analysis: &CaptureAnalysis,
    client: SocketAddr,
    bytes: usize,
    flow_drops: u64,
    all_drops: u64,
) {
    let connection = analysis
        .connections
        .iter()
        .find(|c| c.client == client)
        .expect("the connection");
    let flow = flow_from(analysis, client);
    let r = flow.retransmissions;
    eprintln!(
        "delay 10ms loss 1%: {} bytes, {} data segments dropped by the emulator ({} drops in \
         all); analyze: {} retransmissions (fast {}, RTO {}, probe {}, spurious {}), dropped at \
         the capture point {}, RTT min {:.3} ms median {:.3} ms ({} samples), halves {:?}; \
         efficiency {:?}; {}",
        flow.bytes,
        flow_drops,
        all_drops,
        r.total,
        r.fast,
        r.rto,
        r.probe,
        r.spurious,
        flow.dropped_at_capture,
        flow.rtt.min_ns as f64 * 1e-6,
        flow.rtt.median_ns as f64 * 1e-6,
        flow.rtt.samples,
        connection.vantage,
        flow.metrics.tcp_efficiency,
        flow.verdict.sentence
    );
    assert_eq!(flow.bytes, bytes as u64, "every byte, each counted once");
    assert!(flow_drops > 5, "1% of ~2000 segments: {flow_drops} dropped");
    assert_eq!(flow.dropped_at_capture, flow_drops);
    // Each dropped data segment was sent again; a spurious retransmission (a probe whose
    // original was not lost, told by a D-SACK or an earlier ACK) is not a drop.
    assert_eq!(
        r.total - r.spurious,
        flow_drops,
        "retransmissions that repaired a loss = the emulator's drops of the flow"
    );
    // The capture is in the middle: 10 ms each way, plus the hosts' own microseconds.
    assert_eq!(connection.vantage.kind, VantageKind::Middle);
    let min_ms = flow.rtt.min_ns as f64 * 1e-6;
    assert!(
        (20.0..20.2).contains(&min_ms),
        "minimum RTT {min_ms:.3} ms, expected 20 ms (+ under 0.2 ms of host time)"
    );
    assert!(flow.rtt.both_halves);
    assert_eq!(
        flow.verdict.limit,
        Limit::Congestion,
        "{}",
        flow.verdict.sentence
    );
}

/// The figures and the saved result in `DIR/out`, the `verdict` on the report page, and
/// `pathlab report` drawing the saved analysis again into `DIR/again`.
fn check_the_figures_and_the_saved_result(dir: &util::TempDir, verdict: &str) {
    let out = dir.path("out");
    assert!(out.join("result.json").exists());
    let figures = |extension: &str| {
        std::fs::read_dir(out.join("plots"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some(extension.as_ref()))
            .count()
    };
    assert!(
        figures("svg") >= 4 && figures("png") == figures("svg"),
        "figures"
    );
    let page = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        page.contains(&escape_html(verdict)),
        "the verdict is on the page"
    );
    // `pathlab report` draws the saved analysis again.
    let again = dir.path("again");
    let output = util::emulated::pathlab(&[
        "report",
        out.join("result.json").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(again.join("report.html").exists());
}

/// `text` as the report page escapes it.
fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[test]
fn analyze_says_a_small_receive_window_limits_the_transfer() {
    let Some(_serial) =
        privileged_paired("analyze_says_a_small_receive_window_limits_the_transfer")
    else {
        return;
    };
    let dir = util::TempDir::new("analyze-window-capture");
    let pcap = dir.path("capture.pcapng");
    let pcap_arg = pcap.to_string_lossy().into_owned();
    let mut lab = Lab::start(
        "analyze-window",
        "delay 10ms",
        &["--pcap", &pcap_arg, "--seed", "3"],
        true,
    );
    let bytes = 2_000_000;
    // 32 KiB asked, 64 KiB granted (the kernel doubles it), about half of it window.
    let (client, received) = transfer(&lab, bytes, Some(32 * 1024));
    lab.stop();
    assert_eq!(received, bytes);
    let analysis = analyze(&pcap, &dir.path("out"));
    let flow = flow_from(&analysis, client);
    eprintln!(
        "window-limited: {} bytes in {:.3} s ({:.2} Mbit/s), median window {} B, RTT median \
         {:.3} ms; limits {:?}; {}",
        flow.bytes,
        flow.duration_ns as f64 * 1e-9,
        flow.goodput_bps * 1e-6,
        flow.window.median_bytes,
        flow.rtt.median_ns as f64 * 1e-6,
        flow.verdict.limits,
        flow.verdict.sentence
    );
    assert_eq!(flow.bytes, bytes as u64);
    assert_eq!(flow.retransmissions.total, 0, "a lossless path");
    assert_eq!(
        flow.verdict.limit,
        Limit::ReceiverWindow,
        "{}",
        flow.verdict.sentence
    );
    // What it moved is what the window allows over the RTT (window / RTT), within 10%.
    let cap = flow.verdict.cap_bps.expect("a window over an RTT");
    assert!(
        (flow.goodput_bps / cap - 1.0).abs() < 0.1,
        "goodput {:.0} against window/RTT {cap:.0}",
        flow.goodput_bps
    );
}
