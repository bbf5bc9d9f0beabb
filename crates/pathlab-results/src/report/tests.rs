use std::path::{Path, PathBuf};

use super::*;
use crate::plot::tests::{decode_png, png_size};
use crate::plot::{HEIGHT, WIDTH};
use crate::recording::{write_header, write_line};
use crate::series::tests::{synthetic_recording, synthetic_run};

/// A scratch directory removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("pathlab-results-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a run's result file and its recording into `dir`.
fn save(dir: &Path, run: &LabRun) {
    std::fs::create_dir_all(dir).unwrap();
    let file = ResultFile::new(RunResult::Lab(Box::new(run.clone())), vec![], Some(1));
    std::fs::write(dir.join(RESULT_FILE), file.to_json()).unwrap();
    let recording = synthetic_recording();
    let mut bytes = Vec::new();
    write_header(&mut bytes, recording.header.as_ref().unwrap()).unwrap();
    for line in &recording.lines {
        write_line(&mut bytes, line).unwrap();
    }
    std::fs::write(dir.join("link-r1-h2.jsonl"), bytes).unwrap();
}

fn with_parameters(parameters: &[(&str, &str)], goodput_bps: f64) -> LabRun {
    let mut run = synthetic_run();
    run.parameters = parameters
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    if let LabOutcome::Tcp(report) = &mut run.workloads[0].outcome {
        report.up_bps = goodput_bps;
    }
    run
}

fn images(html: &str) -> Vec<Vec<u8>> {
    html.split("<img src=\"data:image/png;base64,")
        .skip(1)
        .map(|rest| {
            let encoded = &rest[..rest.find('"').unwrap()];
            decode_base64(encoded)
        })
        .collect()
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let n = chunk
            .iter()
            .take_while(|&&c| c != b'=')
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | u32::from(value(c)) << (18 - 6 * i));
        let bytes = chunk.iter().filter(|&&c| c != b'=').count() - 1;
        out.extend(&n.to_be_bytes()[1..=bytes]);
    }
    out
}

#[test]
fn a_run_gets_csv_files_figures_and_a_self_contained_page() {
    let scratch = Scratch::new("one-run");
    let dir = scratch.0.join("run");
    save(&dir, &synthetic_run());
    let run = load_run(&dir).expect("loads");
    assert!(run.notes.is_empty(), "{:?}", run.notes);
    let out = scratch.0.join("report");
    let files = write_report(&[run], &out, &ReportOptions::default()).expect("writes");

    // CSV: one file per series, with the unit in the header, on the run's clock.
    let queue = std::fs::read_to_string(out.join("csv/queue-packets-r1-h2.csv")).unwrap();
    let mut lines = queue.lines();
    assert_eq!(lines.next(), Some("time_s,queue_packets"));
    assert_eq!(lines.next(), Some("-0.250000000,1"));
    assert!(queue.contains("\n1.000000000,7\n"), "{queue}");
    let delivered = std::fs::read_to_string(out.join("csv/delivered-rate-r1-h2.csv")).unwrap();
    assert!(
        delivered.starts_with("time_s,delivered_bps\n1.503000000,48448\n"),
        "{delivered}"
    );
    let rtt = std::fs::read_to_string(out.join("csv/rtt-probes.csv")).unwrap();
    assert!(rtt.starts_with("time_s,rtt_s\n0.500000000,0.02\n"), "{rtt}");
    let throughput = std::fs::read_to_string(out.join("csv/throughput-bulk.csv")).unwrap();
    assert!(throughput.starts_with("time_s,throughput_bps\n0.500000000,8000000\n"));
    for file in &files.csv {
        let text = std::fs::read_to_string(file).unwrap();
        let header = text.lines().next().unwrap();
        assert!(
            header.starts_with("time_s,"),
            "{}: {header}",
            file.display()
        );
        assert!(text.lines().skip(1).all(|l| l.split(',').count() == 2));
    }
    assert!(files.csv.len() >= 9, "{:?}", files.csv);

    // Figures: a PNG of the fixed size and an SVG for each.
    let stems: Vec<String> = files
        .png
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "queue-packets",
        "queue-delay",
        "drops",
        "delivered-rate",
        "rtt",
        "rtt-cdf",
        "cwnd",
        "throughput",
        "retransmissions",
    ] {
        assert_listed(&stems, expected);
    }
    assert_eq!(files.png.len(), files.svg.len());
    for png in &files.png {
        let bytes = std::fs::read(png).unwrap();
        assert_eq!(png_size(&bytes), Some((WIDTH, HEIGHT)), "{}", png.display());
    }

    // The page: every figure inline, decodable, and nothing from outside.
    let html = std::fs::read_to_string(&files.html).unwrap();
    let inline = images(&html);
    assert_eq!(inline.len(), files.png.len());
    for png in &inline {
        let (w, h, _) = decode_png(png);
        assert_eq!((w, h), (WIDTH, HEIGHT));
    }
    assert!(!html.contains("<script") && !html.contains("http") && !html.contains("<link"));
    // Text from the run is escaped.
    assert!(
        html.contains("a &lt;made-up&gt; run &amp; its &quot;data&quot;"),
        "not escaped"
    );
    assert!(!html.contains("<made-up>"));
    // The summary: plateau theory, goodput against the bottleneck, link ground truth.
    assert!(html.contains("32.1 ms"), "no plateau theory");
    assert!(
        html.contains("9.50 Mbit/s") && html.contains("95.0%"),
        "no goodput vs bottleneck"
    );
    assert!(html.contains("1 (1 queue-full)"), "no drops by reason");
    assert!(html.contains("2023-11-14 22:13:20 UTC"), "no date");
}

#[test]
fn a_sweep_gets_figures_against_its_parameters_and_a_compare_view() {
    let scratch = Scratch::new("sweep");
    let mut n = 0;
    for queue in ["10", "50"] {
        for loss in ["0", "0.01"] {
            n += 1;
            let loss_percent = format!("{loss}%");
            let run = with_parameters(
                &[("queue", queue), ("loss", &loss_percent)],
                f64::from(n) * 1e6,
            );
            save(&scratch.0.join(format!("queue-{queue}_loss-{loss}")), &run);
        }
    }
    let found = find_results(&scratch.0).expect("finds the runs");
    assert_eq!(found.len(), 4);
    let runs: Vec<RunData> = found.iter().map(|f| load_run(f).unwrap()).collect();
    assert_eq!(figures::numeric_parameters(&runs), vec!["queue", "loss"]);
    let files = write_report(&runs, &scratch.0, &ReportOptions { compare: true }).unwrap();
    let names: Vec<String> = files
        .png
        .iter()
        .map(|p| p.strip_prefix(&scratch.0).unwrap().display().to_string())
        .collect();
    for expected in [
        "plots/sweep/goodput-vs-queue.png",
        "plots/sweep/goodput-vs-loss.png",
        "plots/sweep/goodput-heatmap-queue-loss.png",
        "plots/sweep/rtt-plateau-vs-queue.png",
        "plots/compare/rtt-probes.png",
        "plots/compare/rtt-probes-cdf.png",
        "plots/queue-10_loss-0/rtt.png",
    ] {
        assert_listed(&names, expected);
    }
    assert!(scratch
        .0
        .join("csv/queue-50_loss-0.01/rtt-probes.csv")
        .is_file());
    // The unit written after the numbers labels the axis.
    let svg = std::fs::read_to_string(scratch.0.join("plots/sweep/goodput-vs-loss.svg")).unwrap();
    assert!(svg.contains("loss (%)"), "no unit on the axis");
    assert_eq!(split_number("0.5%"), Some((0.5, "%")));
    assert_eq!(split_number("10ms"), Some((10.0, "ms")));
    assert_eq!(split_number("100"), Some((100.0, "")));
    assert_eq!(split_number("codel"), None);
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert_eq!(images(&html).len(), files.png.len());
    // The table of all runs, one row per run.
    assert!(html.contains("<td>queue=50, loss=0.01%</td><td class=\"n\">4.00 Mbit/s</td>"));

    // Without --compare, no overlays; the sweep figures stay.
    let out = scratch.0.join("plain");
    let files = write_report(&runs, &out, &ReportOptions::default()).unwrap();
    assert!(files
        .png
        .iter()
        .all(|p| !p.starts_with(out.join("plots/compare"))));
    assert!(files
        .png
        .iter()
        .any(|p| p.starts_with(out.join("plots/sweep"))));
}

/// The figures of one direction that sent late in `late` of 20 seconds (worst second's
/// p99 3.2 ms against a 1 ms bound).
fn lateness(from: &str, to: &str, late: u64) -> crate::lab::SendLateness {
    crate::lab::SendLateness {
        from: from.into(),
        to: to.into(),
        packets: 1_000_000,
        p50_ns: 12_000,
        p99_ns: if late > 0 { 2_100_000 } else { 40_000 },
        max_ns: 9_000_000,
        bound_ns: Some(1_000_000),
        seconds: 20,
        late_seconds: late,
        worst_second_p99_ns: if late > 0 { 3_200_000 } else { 40_000 },
    }
}

#[test]
fn a_run_whose_emulator_sent_late_is_marked_with_the_figure_and_one_on_time_is_not() {
    let scratch = Scratch::new("late");
    let mut late = with_parameters(&[("rate", "40gbit")], 1e9);
    late.links[0].lateness = vec![lateness("r1", "h2", 4), lateness("h2", "r1", 0)];
    let mut on_time = with_parameters(&[("rate", "1gbit")], 1e9);
    on_time.links[0].lateness = vec![lateness("r1", "h2", 0), lateness("h2", "r1", 0)];
    save(&scratch.0.join("rate-40gbit"), &late);
    save(&scratch.0.join("rate-1gbit"), &on_time);
    let mut runs: Vec<RunData> = find_results(&scratch.0)
        .unwrap()
        .iter()
        .map(|f| load_run(f).unwrap())
        .collect();
    sort_by_parameters(&mut runs);
    // What the lab saved is what the report reads.
    let read = runs.iter().find(|r| r.label() == "rate=40gbit").unwrap();
    assert_eq!(read.run.links[0].lateness, late.links[0].lateness);
    let files = write_report(&runs, &scratch.0, &ReportOptions::default()).unwrap();
    let html = std::fs::read_to_string(&files.html).unwrap();
    let warning =
        "link r1-h2 sent late (r1 to h2): p99 up to 3.2 ms, over 1 ms in 4 of 20 s \u{2014} \
                   results may reflect the emulator, not the link";
    assert_eq!(
        html.matches(warning).count(),
        1,
        "once, in the late run's section"
    );
    assert_eq!(html.matches("<p class=\"late\">").count(), 2, "{html}");
    assert!(html
        .contains("An emulator sent late in 1 of 2 runs (rate=40gbit): their results may reflect"));
    // The warning is in the late run's section, before its figures.
    let late_section = &html[html
        .find("<h2>synthetic (rate=40gbit)")
        .expect("the late run's section")..];
    let late_section = &late_section[..late_section.find("</section>").unwrap()];
    assert!(late_section.find(warning).unwrap() < late_section.find("<figure>").unwrap());
    let on_time_section = &html[html
        .find("<h2>synthetic (rate=1gbit)")
        .expect("the on-time run's section")..];
    let on_time_section = &on_time_section[..on_time_section.find("</section>").unwrap()];
    assert!(!on_time_section.contains("class=\"late\""));
    // The links table has each direction's figures; the comparison, the late seconds.
    assert!(late_section.contains(
        "r1 to h2: p99 2.1 ms, max 9 ms, over 1 ms in 4 of 20 s; \
         h2 to r1: p99 40 us, max 9 ms, over 1 ms in 0 of 20 s"
    ));
    assert!(html.contains("<td class=\"n\">4 s</td>") && html.contains("<td>none</td>"));
}

#[test]
fn a_lab_result_from_before_the_fidelity_guard_reads_without_figures() {
    let run = synthetic_run();
    let json = ResultFile::new(RunResult::Lab(Box::new(run)), vec![], Some(1)).to_json();
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let link = &mut value["result"]["data"]["links"][0];
    assert!(
        link.as_object_mut().unwrap().remove("lateness").is_some(),
        "{json}"
    );
    let old = value.to_string();
    let RunResult::Lab(read) = ResultFile::from_json(&old).unwrap().result else {
        panic!("a lab result");
    };
    assert!(read.links[0].lateness.is_empty());
    assert!(read.late_warnings().is_empty());
}

#[test]
fn a_starved_tcp_workload_is_reported_starved_and_older_files_read_without_the_record() {
    let starved = pathlab_probe::tcp::Starved {
        longest_gap_ns: 17_300_000_000,
        gap_from_ns: 6_100_000_000,
    };
    let mut run = synthetic_run();
    let LabOutcome::Tcp(report) = &mut run.workloads[0].outcome else {
        panic!("the synthetic run's first workload is tcp")
    };
    report.up[0].starved = Some(starved);
    let scratch = Scratch::new("starved");
    let dir = scratch.0.join("run");
    save(&dir, &run);
    let loaded = load_run(&dir).expect("loads");
    let out = scratch.0.join("report");
    let files = write_report(&[loaded], &out, &ReportOptions::default()).expect("writes");
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(html.contains("tcp, starved: no data for 17.3 s"), "{html}");
    // A file from before starved streams: no record, no acknowledged counts in samples.
    let json = ResultFile::new(RunResult::Lab(Box::new(run)), vec![], Some(1)).to_json();
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let stream = &mut value["result"]["data"]["workloads"][0]["outcome"]["data"]["up"][0];
    assert!(stream.as_object_mut().unwrap().remove("starved").is_some());
    for sample in stream["samples"].as_array_mut().unwrap() {
        let sample = sample.as_object_mut().unwrap();
        assert!(sample.remove("acked_bytes").is_some());
        assert!(sample.remove("unanswered_timeouts").is_some());
    }
    let RunResult::Lab(read) = ResultFile::from_json(&value.to_string()).unwrap().result else {
        panic!("a lab result");
    };
    let LabOutcome::Tcp(report) = &read.workloads[0].outcome else {
        panic!("tcp")
    };
    assert_eq!(report.starved(), None);
    assert!(report.up[0].samples.iter().all(|s| s.acked_bytes == 0));
}

#[test]
fn bad_inputs_are_named() {
    let scratch = Scratch::new("bad");
    let missing = scratch.0.join("nope.json");
    let error = load_run(&missing).unwrap_err();
    assert!(matches!(error, ReportError::NotFound { .. }), "{error}");
    assert!(
        error.to_string().contains("nope.json: no such file"),
        "{error}"
    );
    assert!(matches!(
        find_results(&missing),
        Err(ReportError::NotFound { .. })
    ));
    assert!(matches!(
        find_results(&scratch.0),
        Err(ReportError::NoRuns { .. })
    ));

    let garbage = scratch.0.join("garbage.json");
    std::fs::write(&garbage, "hello").unwrap();
    let error = load_run(&garbage).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("garbage.json: not a pathlab result file"),
        "{error}"
    );

    let mut newer = ResultFile::new(RunResult::Lab(Box::new(synthetic_run())), vec![], None);
    newer.version = crate::VERSION + 1;
    let newer_path = scratch.0.join("newer.json");
    std::fs::write(&newer_path, newer.to_json()).unwrap();
    let error = load_run(&newer_path).unwrap_err();
    assert!(
        error.to_string().contains("newer than this pathlab reads"),
        "{error}"
    );

    let rtt = ResultFile::new(
        RunResult::Rtt(Box::new(match &synthetic_run().workloads[1].outcome {
            LabOutcome::Rtt(r) => (**r).clone(),
            _ => unreachable!(),
        })),
        vec![],
        None,
    );
    let rtt_path = scratch.0.join("rtt.json");
    std::fs::write(&rtt_path, rtt.to_json()).unwrap();
    let error = load_run(&rtt_path).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("not a lab result but a pathlab rtt result"),
        "{error}"
    );

    // A broken recording is an error naming it; a missing one a note.
    let dir = scratch.0.join("run");
    save(&dir, &synthetic_run());
    std::fs::write(dir.join("link-r1-h2.jsonl"), "{}\n").unwrap();
    let error = load_run(&dir).unwrap_err();
    assert!(error.to_string().contains("link-r1-h2.jsonl"), "{error}");
    std::fs::remove_file(dir.join("link-r1-h2.jsonl")).unwrap();
    let run = load_run(&dir).unwrap();
    assert_eq!(run.notes.len(), 1);
    assert!(run
        .series
        .iter()
        .all(|s| s.metric != crate::series::Metric::QueuePackets));
    assert!(run
        .series
        .iter()
        .any(|s| s.metric == crate::series::Metric::Rtt));
}

#[test]
fn html_helpers() {
    assert_eq!(
        html::escape("<a href='x'>&\"</a>"),
        "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
    );
    // RFC 4648 test vectors.
    for (plain, encoded) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(html::base64(plain.as_bytes()), encoded);
    }
    assert_eq!(html::utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(
        html::utc(951_782_400_000_000_000),
        "2000-02-29 00:00:00 UTC"
    );
    assert_eq!(
        html::utc(1_700_000_000_000_000_000),
        "2023-11-14 22:13:20 UTC"
    );
}

/// `expected` is one of `names`.
fn assert_listed(names: &[String], expected: &str) {
    assert!(
        names.iter().any(|n| n == expected),
        "no {expected} in {names:?}"
    );
}

/// A twin check of a path (20 ms, 9.6 Mbit/s, a 40 ms queue under bulk TCP, 2% probe loss)
/// against a twin that queues 48 ms and loses nothing: saved, its page holds the verdict's
/// rows (the loaded RTT and loss named as misses) and nine overlays of both sides, its CSV
/// both sides' points; `pathlab report` reads the file back to the same page.
#[test]
fn a_twin_check_is_saved_with_its_page_of_both_paths_overlaid_and_read_back() {
    use pathlab_twin::check::synthetic::Synthetic;
    use pathlab_twin::check::CheckRecord;
    let scratch = Scratch::new("twin-check");
    let path = Synthetic {
        base_rtt_ms: 20.0,
        goodput_bps: 9.6e6,
        queue_ms: 40.0,
        loss_every: 50,
    };
    let twin = Synthetic {
        base_rtt_ms: 20.3,
        goodput_bps: 9.2e6,
        queue_ms: 48.0,
        loss_every: 0,
    };
    let record = CheckRecord {
        host: "198.18.0.2".into(),
        twin_up: "delay 10ms rate 10mbit limit 60000b".into(),
        twin_down: "delay 10ms".into(),
        congestion: "cubic".into(),
        real: path.runs(),
        twin: twin.runs(),
    };
    let file = ResultFile::new(
        RunResult::TwinCheck(Box::new(record.clone())),
        vec!["pathlab".into(), "twin".into(), "check".into()],
        Some(1_700_000_000),
    );
    let saved = saved::save_page(file.clone(), &scratch.0).expect("saved");
    let text = std::fs::read_to_string(&saved.result).unwrap();
    let RunResult::TwinCheck(back) = ResultFile::from_json(&text).unwrap().result else {
        panic!("not a twin check: {}", &text[..200]);
    };
    assert_eq!(back.comparison(), record.comparison());
    assert_eq!(saved.files.png.len(), 9, "{:?}", saved.files.png);
    assert_eq!(saved.files.svg.len(), 9);
    let page = std::fs::read_to_string(&saved.files.html).unwrap();
    let missed: Vec<String> = record
        .comparison()
        .misses()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(
        missed,
        [
            "RTT p50 loaded up, ms",
            "RTT p95 loaded up, ms",
            "loss up",
            "RTT p50 loaded down, ms",
            "RTT p95 loaded down, ms",
            "loss down"
        ]
    );
    assert!(
        page.contains("The twin misses RTT p50 loaded up, ms"),
        "{page}"
    );
    assert_eq!(page.matches("MISS").count(), 6);
    let svg = std::fs::read_to_string(scratch.0.join("plots/goodput-up.svg")).unwrap();
    let text: String = svg.split_whitespace().collect();
    assert!(
        text.contains(">path<") && text.contains(">twin<"),
        "both legends"
    );
    let csv = std::fs::read_to_string(scratch.0.join("csv/up.csv")).unwrap();
    // 16 quarter-second windows of goodput per side, in Mbit/s.
    let goodput = |side: &str| -> Vec<f64> {
        csv.lines()
            .filter(|l| l.starts_with(&format!("goodput-up,{side},")))
            .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
            .collect()
    };
    assert_eq!(goodput("path").len(), 16);
    assert!(goodput("path").iter().all(|b| (b - 9.6).abs() < 1e-3));
    assert!(goodput("twin").iter().all(|b| (b - 9.2).abs() < 1e-3));
    // Drawn again from the file alone: the same page.
    let again = scratch.0.join("again");
    let source = ReportSource::load(std::slice::from_ref(&saved.result)).expect("read back");
    assert!(matches!(source, ReportSource::TwinCheck { .. }));
    ReportConfig {
        source,
        out: again.clone(),
        options: ReportOptions::default(),
    }
    .write()
    .expect("drawn again");
    assert_eq!(
        std::fs::read_to_string(again.join("report.html")).unwrap(),
        page
    );
}

#[test]
fn a_run_has_no_page_of_its_own_to_save() {
    let scratch = Scratch::new("no-page");
    let file = ResultFile::new(RunResult::Lab(Box::new(synthetic_run())), Vec::new(), None);
    assert!(matches!(
        saved::save_page(file, &scratch.0),
        Err(saved::SaveError::NoPage)
    ));
}
