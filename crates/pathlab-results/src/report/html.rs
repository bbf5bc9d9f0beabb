//! The report page: one self-contained HTML file (images as data URIs, inline CSS, no
//! script, no link), every text escaped.

use std::fmt::Write as _;
use std::path::PathBuf;

use pathlab_core::format::{self, Digits};

use super::figures::{links_text, run_heading};
use super::{mbit_per_sec, ms, versus, DrawnFigure, RunData};
use crate::lab::{lateness_text, LabLink, LabOutcome, LabRun, LabWorkload, PathTheory};
use pathlab_probe::owd::OneWayResult;
use pathlab_probe::tcp::{BlocksReport, TcpTestReport};

/// One run's part of the page.
#[derive(Debug)]
pub(super) struct RunSection<'a> {
    pub run: &'a RunData,
    pub figures: Vec<DrawnFigure>,
    /// Its CSV files, relative to the report's directory.
    pub csv: Vec<PathBuf>,
}

/// `text` safe inside HTML elements and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Standard base64 (RFC 4648, with padding): how the page inlines its images.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A Unix time (ns) as `2026-11-23 11:13:15 UTC`.
pub(super) fn utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let of_day = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

fn opt(value: Option<String>) -> String {
    value.unwrap_or_else(|| "–".to_owned())
}

pub(super) const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;\
max-width:1100px;padding:1em 2em;color:#222;line-height:1.4}\
h1{font-size:1.6em;border-bottom:2px solid #1f77b4;padding-bottom:.2em}\
h2{font-size:1.3em;margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1.05em;margin-top:1.4em}\
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.9em}\
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#f2f4f7}td.n{text-align:right;font-variant-numeric:tabular-nums}\
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;font-size:.95em}\
dt{font-weight:600}dd{margin:0}code{font-size:.9em;background:#f5f5f5;padding:0 .2em}\
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #ddd}\
figcaption{font-size:.9em;color:#555}.note{background:#fff7e0;border-left:4px solid #e0a000;padding:.4em .8em}\
.files{font-size:.85em;color:#555}\
.late{background:#fdecea;border-left:4px solid #c62828;padding:.4em .8em;font-weight:600}";

pub(super) fn table(out: &mut String, head: &[&str], rows: &[Vec<String>]) {
    out.push_str("<table><thead><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            // Cells that start with a digit, sign or dash are numbers: right-aligned.
            let numeric = cell
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit() || c == '+' || c == '-' || c == '–');
            let _ = write!(
                out,
                "<td{}>{}</td>",
                if numeric { " class=\"n\"" } else { "" },
                escape(cell)
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>\n");
}

pub(super) fn figure(out: &mut String, drawn: &DrawnFigure) {
    let _ = writeln!(
        out,
        "<figure><img src=\"data:image/png;base64,{}\" width=\"{}\" height=\"{}\" alt=\"{}\">\
         <figcaption>{}</figcaption></figure>",
        base64(&drawn.png),
        crate::plot::WIDTH,
        crate::plot::HEIGHT,
        escape(&drawn.caption),
        escape(&drawn.caption)
    );
}

fn outcome_text(outcome: &LabOutcome) -> String {
    match outcome {
        LabOutcome::Tcp(report) => match report.starved() {
            Some(starved) => format!("tcp, {}", starved.summary()),
            None => "tcp".into(),
        },
        LabOutcome::Rtt(_) => "rtt".into(),
        LabOutcome::Owd(_) => "owd".into(),
        LabOutcome::Ping(_) => "ping".into(),
        LabOutcome::Blocks(_) => "blocks".into(),
        LabOutcome::Command { exit_code, output } => format!(
            "command, {}, output in {output}",
            exit_code.map_or_else(
                || "killed at its end or by a signal".to_owned(),
                |c| format!("exit code {c}")
            )
        ),
        LabOutcome::Failed(why) => format!("failed: {why}"),
        LabOutcome::NotStarted => "not started (the run ended first)".into(),
    }
}

/// The rows of a run's summary tables, one table per kind of workload, gathered workload
/// by workload before any table is written.
#[derive(Default)]
struct SummaryRows {
    /// RTT and ping workloads.
    rtt: Vec<Vec<String>>,
    /// TCP workloads.
    tcp: Vec<Vec<String>>,
    /// One-way delay workloads.
    owd: Vec<Vec<String>>,
    /// Applications in blocks.
    blocks: Vec<Vec<String>>,
    /// What `pathlab inspect` said limited each connection.
    verdicts: Vec<Vec<String>>,
}

impl SummaryRows {
    /// Adds `workload`'s rows: one per inspected connection, and one in its kind's table.
    fn add(&mut self, workload: &LabWorkload) {
        let path = workload.path;
        for connection in workload.inspect.iter().flat_map(|i| &i.connections) {
            self.verdicts.push(vec![
                workload.name.clone(),
                connection.last.name(),
                connection.verdict.limit.name().to_owned(),
                format::fraction_as_percent(connection.verdict.share, Digits::fixed(0)),
                connection.verdict.sentence.clone(),
            ]);
        }
        match &workload.outcome {
            LabOutcome::Rtt(_) | LabOutcome::Ping(_) => self.rtt.push(rtt_row(workload)),
            LabOutcome::Tcp(report) => self.tcp.push(tcp_row(&workload.name, report, path)),
            LabOutcome::Owd(result) => self.owd.push(owd_row(&workload.name, result)),
            LabOutcome::Blocks(report) => {
                self.blocks.push(blocks_row(&workload.name, report, path));
            }
            LabOutcome::Command { .. } | LabOutcome::Failed(_) | LabOutcome::NotStarted => {}
        }
    }

    /// Writes the tables that have rows, each under its heading.
    fn write(&self, out: &mut String) {
        titled_table(
            out,
            "Applications in blocks",
            &[
                "workload",
                "block",
                "throughput",
                "bound: a block per round trip",
                "vs bound",
                "block time p50",
                "base RTT",
                "blocks",
            ],
            &self.blocks,
        );
        titled_table(
            out,
            "What limited each connection (pathlab inspect)",
            &["workload", "connection", "limit", "share", "verdict"],
            &self.verdicts,
        );
        titled_table(
            out,
            "Round trips",
            &[
                "workload",
                "RTT p50",
                "RTT p99",
                "plateau (p99, 2nd half)",
                "theory: full queue",
                "plateau vs theory",
                "theory: base RTT",
                "lost up / down",
                "replies / sent",
                "clock",
            ],
            &self.rtt,
        );
        titled_table(
            out,
            "TCP",
            &[
                "workload",
                "goodput",
                "bottleneck",
                "of bottleneck",
                "Mathis bound",
                "vs Mathis",
                "path loss",
                "retransmitted segments",
                "streams",
            ],
            &self.tcp,
        );
        titled_table(
            out,
            "One-way delay",
            &[
                "workload",
                "verdict",
                "delay trend (95% CI)",
                "deviation p50",
                "deviation p95",
                "deviation max",
                "queue growth",
                "lost / sent",
                "achieved rate",
            ],
            &self.owd,
        );
    }
}

/// A table under an `<h3>` heading, or nothing when it has no rows.
fn titled_table(out: &mut String, title: &str, head: &[&str], rows: &[Vec<String>]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "<h3>{title}</h3>");
    table(out, head, rows);
}

/// The round-trips row of an RTT or ping workload: percentiles, plateau against theory,
/// losses, replies and which clock timed them.
fn rtt_row(workload: &LabWorkload) -> Vec<String> {
    let path = workload.path;
    let trips = workload.outcome.round_trips().expect("rtt or ping");
    let plateau = trips.plateau_s();
    let theory = path.and_then(|p| p.plateau_rtt_s);
    let lost = match &workload.outcome {
        LabOutcome::Rtt(report) => format!("{} / {}", report.lost_up, report.lost_down),
        // ICMP cannot tell which way a request was lost.
        _ => format!("{} (either way)", trips.sent - trips.series.len() as u64),
    };
    vec![
        workload.name.clone(),
        ms(trips.rtt.p50_ns as f64 * 1e-9),
        ms(trips.rtt.p99_ns as f64 * 1e-9),
        opt(plateau.map(ms)),
        opt(theory.map(ms)),
        opt(plateau.zip(theory).map(|(m, t)| versus(m, t))),
        opt(path.map(|p| ms(p.base_rtt_s))),
        lost,
        format!("{} / {}", trips.series.len(), trips.sent),
        trips.timed_by.describe(),
    ]
}

/// The TCP row of workload `name`: goodput against the bottleneck and the Mathis bound,
/// the path's loss, retransmissions and streams.
fn tcp_row(name: &str, report: &TcpTestReport, path: Option<PathTheory>) -> Vec<String> {
    let goodput = report.up_bps + report.down_bps;
    let bottleneck = path.and_then(|p| p.bottleneck_bps);
    let mathis = path.and_then(|p| p.mathis_bps);
    let retransmitted = report.retransmitted_segments();
    vec![
        name.to_owned(),
        mbit_per_sec(goodput),
        opt(bottleneck.map(mbit_per_sec)),
        opt(bottleneck.map(|b| format::fraction_as_percent(goodput / b, Digits::fixed(1)))),
        opt(mathis.map(mbit_per_sec)),
        opt(mathis.map(|m| versus(goodput, m))),
        opt(path
            .and_then(|p| p.loss)
            .map(|l| format::fraction_as_percent(l, Digits::fixed(3)))),
        retransmitted.to_string(),
        (report.up.len() + report.down.len()).to_string(),
    ]
}

/// The one-way delay row of workload `name`: verdict, trend, deviation, queue growth,
/// losses and the rate achieved.
fn owd_row(name: &str, result: &OneWayResult) -> Vec<String> {
    let owd = &result.owd;
    vec![
        name.to_owned(),
        owd.verdict.text().to_owned(),
        format!(
            "{:+.0} ± {:.0} us/s",
            owd.trend_us_per_s, owd.trend_ci95_us_per_s
        ),
        ms(owd.deviation_p50_ns as f64 * 1e-9),
        ms(owd.deviation_p95_ns as f64 * 1e-9),
        ms(owd.deviation_max_ns as f64 * 1e-9),
        ms(owd.queue_growth_ns as f64 * 1e-9),
        format!("{} / {}", result.sequence.lost, result.sequence.sent),
        mbit_per_sec(result.achieved_rate_bps),
    ]
}

/// The blocks row of workload `name`: throughput against a block per round trip, block
/// time and count.
fn blocks_row(name: &str, report: &BlocksReport, path: Option<PathTheory>) -> Vec<String> {
    let bound = path.map(|p| crate::lab::blocks_bound_bps(report.size, &p));
    vec![
        name.to_owned(),
        format!("{} B", report.size),
        mbit_per_sec(report.throughput_bps),
        opt(bound.map(mbit_per_sec)),
        opt(bound.map(|b| versus(report.throughput_bps, b))),
        ms(report.block_time.p50_ns as f64 * 1e-9),
        opt(path.map(|p| ms(p.base_rtt_s))),
        report.blocks.to_string(),
    ]
}

/// The summary tables of one run: RTT, TCP, OWD workloads and link directions.
fn summaries(out: &mut String, data: &RunData) {
    let mut rows = SummaryRows::default();
    for workload in &data.run.workloads {
        rows.add(workload);
    }
    rows.write(out);
    link_directions_table(out, data);
}

/// The table of every link direction's ground truth from the emulators' recordings:
/// packets, queue length and delay, drops by reason, CE marks (nothing without
/// recordings).
fn link_directions_table(out: &mut String, data: &RunData) {
    let rows: Vec<Vec<String>> = data
        .links
        .iter()
        .map(|d| {
            let drops = if d.drops.is_empty() {
                "0".to_owned()
            } else {
                let reasons = d
                    .drops
                    .iter()
                    .map(|(reason, n)| format!("{n} {reason}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("{} ({reasons})", d.drops_total())
            };
            vec![
                d.subject.clone(),
                d.spec.clone(),
                d.packets.to_string(),
                opt(d.queue_max_packets.map(|q| q.to_string())),
                opt(d.queue_median_packets.map(|q| q.to_string())),
                opt(d.queue_delay_p50_s.map(ms)),
                opt(d.queue_delay_p99_s.map(ms)),
                opt(d.queue_delay_max_s.map(ms)),
                drops,
                d.ce_marked.to_string(),
            ]
        })
        .collect();
    titled_table(
        out,
        "Links (the emulators' ground truth)",
        &[
            "direction",
            "spec",
            "packets",
            "queue max (packets)",
            "queue median",
            "queue delay p50",
            "queue delay p99",
            "queue delay max",
            "drops",
            "CE marks",
        ],
        &rows,
    );
}

/// One run's section of the page: its facts and notes, its links and workloads, its
/// summary tables, figures and CSV files.
fn run_section(out: &mut String, section: &RunSection<'_>) {
    let data = section.run;
    let _ = writeln!(out, "<section><h2>{}</h2>", escape(&run_heading(data)));
    run_facts(out, data);
    links_and_workloads(out, &data.run);
    summaries(out, data);
    if !section.figures.is_empty() {
        out.push_str("<h3>Figures</h3>\n");
        for drawn in &section.figures {
            figure(out, drawn);
        }
    }
    if !section.csv.is_empty() {
        let names = section
            .csv
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "<p class=\"files\">Every series as CSV (next to this page): {}</p>",
            escape(&names)
        );
    }
    out.push_str("</section>\n");
}

/// A run's facts as a definition list (experiment, description, parameters, start,
/// duration, kernel, result file), then its warnings that the emulator sent late, the
/// changes made to its links by hand, and the report's notes on it.
fn run_facts(out: &mut String, data: &RunData) {
    let run = &data.run;
    out.push_str("<dl>");
    let mut item = |key: &str, value: &str| {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(key), escape(value));
    };
    item("experiment", &run.name);
    if !run.description.is_empty() {
        item("description", &run.description);
    }
    if !run.parameters.is_empty() {
        item("parameters", &data.parameters_label());
    }
    item("started", &utc(run.started_unix_ns));
    item(
        "duration",
        &format!(
            "{:.1} s{}",
            run.duration_ns as f64 * 1e-9,
            if run.interrupted {
                " (interrupted: what was recorded until then)"
            } else {
                ""
            }
        ),
    );
    item("kernel", &run.kernel);
    item("result file", &data.source.display().to_string());
    out.push_str("</dl>\n");
    // The emulator could not keep up: first thing after the facts, before any figure.
    for warning in run.late_warnings() {
        let _ = writeln!(out, "<p class=\"late\">{}</p>", escape(&warning));
    }
    for note in run.change_notes() {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(&note));
    }
    for note in &data.notes {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(note));
    }
}

/// The tables of a run's links (specs both ways, recording, lateness) and of its
/// workloads (endpoints, start, duration, outcome).
fn links_and_workloads(out: &mut String, run: &LabRun) {
    out.push_str("<h3>Links</h3>\n");
    table(
        out,
        &[
            "link",
            "A to B",
            "B to A",
            "recording",
            "emulator sent late",
        ],
        &run.links
            .iter()
            .map(|l| {
                vec![
                    l.name.clone(),
                    l.forward.clone(),
                    l.reverse.clone(),
                    l.recording.clone().unwrap_or_else(|| "not emulated".into()),
                    lateness_cell(l),
                ]
            })
            .collect::<Vec<_>>(),
    );
    out.push_str("<h3>Workloads</h3>\n");
    table(
        out,
        &[
            "workload",
            "from",
            "to",
            "start",
            "duration",
            "kind / outcome",
        ],
        &run.workloads
            .iter()
            .map(|w| {
                vec![
                    w.name.clone(),
                    w.from.clone(),
                    w.to.clone().unwrap_or_else(|| "–".into()),
                    format!("{:.1} s", w.start_ns as f64 * 1e-9),
                    format!("{:.1} s", w.duration_ns as f64 * 1e-9),
                    outcome_text(&w.outcome),
                ]
            })
            .collect::<Vec<_>>(),
    );
}

/// How late a link's emulator sent, each direction: `r1 to h2: p99 12 us, max 80 us, late
/// 0 of 20 s; ...` (`–` without figures).
fn lateness_cell(link: &LabLink) -> String {
    if link.lateness.is_empty() {
        return "–".into();
    }
    link.lateness
        .iter()
        .map(|l| {
            let late = match l.bound_ns {
                Some(bound) => format!(
                    ", over {} in {} of {} s",
                    lateness_text(bound),
                    l.late_seconds,
                    l.seconds
                ),
                None => String::new(),
            };
            format!(
                "{} to {}: p99 {}, max {}{late}",
                l.from,
                l.to,
                lateness_text(l.p99_ns),
                lateness_text(l.max_ns)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One row per run: what a sweep changes and what came of it.
fn comparison_table(out: &mut String, runs: &[RunData]) {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|data| {
            let rtt = data
                .run
                .workloads
                .iter()
                .find_map(|w| w.outcome.round_trips().map(|trips| (trips, w.path)));
            let owd = data.run.workloads.iter().find_map(|w| match &w.outcome {
                LabOutcome::Owd(result) => Some(result),
                _ => None,
            });
            let queue_max = data.links.iter().filter_map(|d| d.queue_max_packets).max();
            let drops: u64 = data
                .links
                .iter()
                .map(super::super::series::RecordedDirectionSummary::drops_total)
                .sum();
            vec![
                data.label(),
                opt(data.tcp_goodput_bps().map(mbit_per_sec)),
                opt(rtt.map(|(r, _)| ms(r.rtt.p50_ns as f64 * 1e-9))),
                opt(rtt.and_then(|(r, _)| r.plateau_s()).map(ms)),
                opt(rtt.and_then(|(_, p)| p?.plateau_rtt_s).map(ms)),
                opt(queue_max.map(|q| q.to_string())),
                if data.links.is_empty() {
                    "–".into()
                } else {
                    drops.to_string()
                },
                opt(owd.map(|o| o.owd.verdict.text().to_owned())),
                late_seconds(&data.run),
            ]
        })
        .collect();
    table(
        out,
        &[
            "run",
            "TCP goodput",
            "RTT p50",
            "RTT plateau",
            "theory: full queue",
            "queue max (packets)",
            "drops",
            "OWD verdict",
            "emulator late",
        ],
        &rows,
    );
}

/// A run's late seconds, summed over its links' directions, for the comparison table:
/// `4 s` when some emulator sent late, `none` when none did, `–` without figures.
fn late_seconds(run: &crate::lab::LabRun) -> String {
    let mut figures = run.links.iter().flat_map(|l| &l.lateness).peekable();
    if figures.peek().is_none() {
        return "–".into();
    }
    match figures.map(|l| l.late_seconds).sum::<u64>() {
        0 => "none".into(),
        late => format!("{late} s"),
    }
}

/// The whole page.
pub(super) fn page(
    runs: &[RunData],
    comparison: &[DrawnFigure],
    sections: &[RunSection<'_>],
) -> String {
    let name = runs.first().map_or("", |r| r.run.name.as_str());
    let several = runs.len() > 1;
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>pathlab report: {}</title><style>{STYLE}</style></head><body>\n\
         <h1>pathlab report: {}</h1>\n",
        escape(name),
        escape(name)
    );
    if several {
        let _ = writeln!(
            out,
            "<p>{} runs of <code>{}</code>. Links at the first: {}.</p>",
            runs.len(),
            escape(name),
            escape(&links_text(&runs[0].run))
        );
        let late: Vec<String> = runs
            .iter()
            .filter(|r| !r.run.late_warnings().is_empty())
            .map(RunData::label)
            .collect();
        if !late.is_empty() {
            let _ = writeln!(
                out,
                "<p class=\"late\">An emulator sent late in {} of {} runs ({}): their \
                 results may reflect the emulator, not the links (see each run).</p>",
                late.len(),
                runs.len(),
                escape(&late.join("; "))
            );
        }
        out.push_str("<section><h2>All runs</h2>\n");
        comparison_table(&mut out, runs);
        for drawn in comparison {
            figure(&mut out, drawn);
        }
        out.push_str("</section>\n");
    }
    for section in sections {
        run_section(&mut out, section);
    }
    out.push_str(
        "<p class=\"files\">Made by pathlab from the runs' result files and the emulators' \
         recordings; times are seconds since each run started.</p>\n</body></html>\n",
    );
    out
}
