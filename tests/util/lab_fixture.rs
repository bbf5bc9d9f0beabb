//! A small saved lab run (result file and one link recording) for the report tests: no
//! root, no namespaces, and every number known.

use std::path::Path;

use pathlab_core::packet::Ecn;
use pathlab_core::record::PacketRecord;
use pathlab_core::time::Instant;
use pathlab_probe::rtt::{OffsetBasis, Percentiles, RttReport};
use pathlab_probe::tcp::{StreamReport, TcpSample, TcpTestReport};
use pathlab_results::lab::{LabLink, LabOutcome, LabRun, LabWorkload, PathTheory};
use pathlab_results::recording::{
    write_header, write_line, DirectionInfo, RecordingHeader, RecordingLine, RECORDING_MAGIC,
    RECORDING_VERSION,
};
use pathlab_results::{ResultFile, RunResult};

/// When the run started, ns since the Unix epoch.
pub const STARTED_UNIX_NS: u64 = 1_700_000_000_000_000_000;

/// Writes `DIR/result.json` and `DIR/link-r1-h2.jsonl`: a 4-second run of the bufferbloat
/// shape with `queue` as its sweep parameter: a TCP flow `bulk` and RTT probes `probes`
/// every 100 ms whose RTT rises from 20 ms by `queue` x 0.1 ms per probe.
pub fn write_lab_run(dir: &Path, queue: u32) {
    std::fs::create_dir_all(dir).expect("can create the run's directory");
    let run = bufferbloat_run(queue);
    let file = ResultFile::new(RunResult::Lab(Box::new(run)), vec![], Some(1_700_000_004));
    std::fs::write(dir.join("result.json"), file.to_json()).expect("can write result.json");

    let bytes = link_recording(queue);
    std::fs::write(dir.join("link-r1-h2.jsonl"), bytes).expect("can write the recording");
}

/// The theory of the path h1 - r1 - h2: 20 ms base RTT, a 10 Mbit/s bottleneck with a
/// queue of `queue` packets, no loss.
fn path_theory(queue: u32) -> PathTheory {
    PathTheory {
        base_rtt_s: 0.02,
        bottleneck_bps: Some(10e6),
        queue_packets: Some(queue),
        plateau_rtt_s: Some(0.02 + f64::from(queue) * 1514.0 * 8.0 / 10e6),
        loss: Some(0.0),
        mathis_bps: None,
        sawtooth_period_s: None,
    }
}

/// The report of the TCP flow `bulk`: one upload stream of 4.8 MB in 4 s with a TCP
/// sample every 100 ms.
fn bulk_flow_report() -> TcpTestReport {
    let samples = (0..40u32)
        .map(|i| TcpSample {
            at_ns: u64::from(i) * 100_000_000,
            cwnd: 10 + i % 20,
            ssthresh: if i < 20 { 0x7fff_ffff } else { 15 },
            srtt_us: 20_000 + i * 500,
            retrans_segments: i / 20,
            mss: 1448,
            ..TcpSample::default()
        })
        .collect();
    TcpTestReport {
        interval_ns: 500_000_000,
        up: vec![StreamReport {
            index: 0,
            interval_bytes: vec![600_000; 8],
            bytes: 4_800_000,
            receive_ns: 4_000_000_000,
            samples,
            starved: None,
        }],
        down: vec![],
        up_bps: 9.6e6,
        down_bps: 0.0,
        client_cpu_s: 0.1,
        server_cpu_s: 0.1,
    }
}

/// The report of the RTT probes `probes`: 40 probes 100 ms apart whose RTT rises from
/// 20 ms by `queue` x 0.1 ms per probe.
fn probe_report(queue: u32) -> RttReport {
    let series: Vec<(u64, i64)> = (0..40u64)
        .map(|seq| (seq, 20_000_000 + (seq * u64::from(queue) * 100_000) as i64))
        .collect();
    RttReport {
        sent: 40,
        reflector_received: 40,
        reflector_dropped: 0,
        replies: 40,
        lost_up: 0,
        lost_down: 0,
        duplicates: 0,
        rtt: Percentiles {
            min_ns: 20_000_000,
            p50_ns: 22_000_000,
            p90_ns: 24_000_000,
            p99_ns: 25_000_000,
            max_ns: 25_000_000,
            mean_ns: 22e6,
        },
        up: Percentiles::default(),
        down: Percentiles::default(),
        clock_offset_ns: 0,
        offset_basis: OffsetBasis::ClocksAgree,
        send_error: Percentiles::default(),
        series,
        series_sent_ns: (0..40).map(|seq| seq * 100_000_000).collect(),
        timed_by: pathlab_probe::rtt::RoundTripClocks::default(),
    }
}

/// The saved lab run: link `r1-h2` (recorded) and the workloads `bulk` and `probes` over
/// 4 s, with `queue` as its sweep parameter.
fn bufferbloat_run(queue: u32) -> LabRun {
    let path = path_theory(queue);
    let tcp = bulk_flow_report();
    let rtt = probe_report(queue);
    LabRun {
        name: "bufferbloat".into(),
        description: "h1 - r1 - h2 <synthetic> & small".into(),
        spec: String::new(),
        kernel: "Linux test".into(),
        started_unix_ns: STARTED_UNIX_NS,
        duration_ns: 4_000_000_000,
        interrupted: false,
        scheduling: None,
        parameters: vec![("queue".into(), queue.to_string())],
        links: vec![LabLink {
            name: "r1-h2".into(),
            forward: format!("delay 5ms rate 10mbit limit {queue}"),
            reverse: "delay 5ms".into(),
            recording: Some("link-r1-h2.jsonl".into()),
            lateness: Vec::new(),
            changes: Vec::new(),
            underlay: Vec::new(),
        }],
        workloads: vec![
            LabWorkload {
                name: "bulk".into(),
                from: "h1".into(),
                to: Some("h2".into()),
                start_ns: 0,
                duration_ns: 4_000_000_000,
                path: Some(path),
                outcome: LabOutcome::Tcp(Box::new(tcp)),
                inspect: None,
            },
            LabWorkload {
                name: "probes".into(),
                from: "h1".into(),
                to: Some("h2".into()),
                start_ns: 0,
                duration_ns: 4_000_000_000,
                path: Some(path),
                outcome: LabOutcome::Rtt(Box::new(rtt)),
                inspect: None,
            },
        ],
    }
}

/// The recording of link `r1-h2`, as its file's bytes: a queue sample every 10 ms and
/// 400 packets, every 50th of them dropped.
fn link_recording(queue: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    let header = RecordingHeader {
        magic: RECORDING_MAGIC.into(),
        version: RECORDING_VERSION,
        pathlab_version: "test".into(),
        command: vec![],
        // The emulator started 0.1 s before the run's clock.
        clock_zero_unix_ns: STARTED_UNIX_NS - 100_000_000,
        directions: vec![
            DirectionInfo {
                from: "a".into(),
                to: "b".into(),
                spec: format!("delay 5ms rate 10mbit limit {queue}"),
            },
            DirectionInfo {
                from: "b".into(),
                to: "a".into(),
                spec: "delay 5ms".into(),
            },
        ],
        queue_sample_interval_ns: 10_000_000,
    };
    write_header(&mut bytes, &header).expect("writes to memory");
    for i in 0..410u64 {
        let line = RecordingLine::Queue {
            dir: 0,
            at: Instant::from_nanos(i * 10_000_000),
            packets: (i % 100) as u32 * queue / 100,
            bytes: 0,
        };
        write_line(&mut bytes, &line).expect("writes to memory");
    }
    for id in 0..400u64 {
        let arrived = 100_000_000 + id * 10_000_000;
        let waited = (id % 100) * u64::from(queue) * 12_000;
        let dropped = id % 50 == 49;
        let record = PacketRecord {
            id,
            tag: 0,
            flow: 1,
            len_bytes: 1514,
            arrived: Instant::from_nanos(arrived),
            ecn_on_arrival: Ecn::NotEct,
            queue_len_on_arrival: Some(0),
            dequeued: (!dropped).then(|| Instant::from_nanos(arrived + waited)),
            transmitted: (!dropped).then(|| Instant::from_nanos(arrived + waited + 1_211_200)),
            departed: (!dropped).then(|| Instant::from_nanos(arrived + waited + 6_211_200)),
            dropped: dropped.then(|| {
                (
                    Instant::from_nanos(arrived),
                    pathlab_core::verdict::DropReason::QueueFull,
                )
            }),
            duplicate_of: None,
            ce_marked: false,
            corrupted: false,
            sent: None,
        };
        write_line(&mut bytes, &RecordingLine::Packet { dir: 0, record })
            .expect("writes to memory");
    }
    bytes
}

/// Decodes a PNG fully (signature, chunks, checksums, compressed data): width and height.
pub fn png_size(bytes: &[u8]) -> (u32, u32) {
    let decoder = png::Decoder::new(bytes);
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).expect("PNG image data");
    (info.width, info.height)
}

/// Every file under `dir` whose name ends in `.ext`, sorted.
pub fn files_with(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_with(&path, ext));
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
    out.sort();
    out
}
