//! Which figures a report draws, from the runs' series and theory.

use std::collections::BTreeMap;

use pathlab_core::spec::LinkSpec;
use pathlab_core::units::FRAME_BYTES;

use super::{mbit_per_sec, ms, RunData};
use crate::lab::{LabOutcome, LabRun, PathTheory};
use crate::plot::{Chart, Heatmap, LegendAt, Line, LineFigure, LineStyle};
use crate::series::{slug, Metric, Series};

/// A figure to draw: its file name (without extension), caption and chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// File name without extension.
    pub stem: String,
    /// What it shows, for the page.
    pub caption: String,
    /// The chart.
    pub chart: Chart,
}

const TIME_AXIS: &str = "time since the run started (s)";

/// `bufferbloat (queue=10)`.
pub(super) fn run_heading(run: &RunData) -> String {
    let parameters = run.parameters_label();
    if parameters.is_empty() {
        run.run.name.clone()
    } else {
        format!("{} ({parameters})", run.run.name)
    }
}

/// Every link's specs in one line: `h1-r1: delay 5ms | r1-h2: delay 5ms rate 10mbit limit
/// 10, back: delay 5ms`.
pub(super) fn links_text(run: &LabRun) -> String {
    run.links
        .iter()
        .map(|link| {
            if link.forward.is_empty() && link.reverse.is_empty() {
                format!("{}: a plain wire", link.name)
            } else if link.forward == link.reverse {
                format!("{}: {}", link.name, link.forward)
            } else {
                format!("{}: {}, back: {}", link.name, link.forward, link.reverse)
            }
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// One line per series, in the palette's order, with the metric's plot scale.
fn lines_of(series: &[&Series], style: LineStyle) -> Vec<Line> {
    series
        .iter()
        .enumerate()
        .map(|(i, s)| Line {
            label: s.subject.clone(),
            points: scaled(s),
            style,
            color: i,
        })
        .collect()
}

fn scaled(series: &Series) -> Vec<(f64, f64)> {
    let scale = series.metric.plot_scale();
    series.points.iter().map(|&(t, v)| (t, v * scale)).collect()
}

fn of(run: &RunData, metric: Metric) -> impl Iterator<Item = &Series> {
    run.series
        .iter()
        .filter(move |s| s.metric == metric && !s.points.is_empty())
}

/// A dashed level `y` across `(x0, x1)`: a theory's figure on a plot over time.
fn horizontal(label: String, y: f64, (x0, x1): (f64, f64), color: usize) -> Line {
    Line {
        label,
        points: vec![(x0, y), (x1, y)],
        style: LineStyle::Dashed,
        color,
    }
}

/// Adds to `lines` a dashed level for each of `levels` that is known (label, level,
/// colour), spanning the time the lines already there cover.
fn push_levels(
    lines: &mut Vec<Line>,
    levels: impl IntoIterator<Item = Option<(String, f64, usize)>>,
) {
    let span = time_span(lines);
    for (label, y, color) in levels.into_iter().flatten() {
        lines.push(horizontal(label, y, span, color));
    }
}

fn time_span(lines: &[Line]) -> (f64, f64) {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    if lo.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    }
}

/// The spec of a link direction named by a series' subject (`r1->h2`), from the run's links.
fn direction_spec<'a>(run: &'a RunData, subject: &str) -> Option<&'a str> {
    run.links
        .iter()
        .find(|d| d.subject == subject)
        .map(|d| d.spec.as_str())
}

/// A direction's queue limit (packets) and the delay of a full queue of full-size frames
/// (seconds), if its spec has a fixed rate.
fn queue_theory(spec: &str) -> Option<(u32, f64)> {
    let spec = LinkSpec::parse(spec).ok()?;
    let limit = spec.queue.effective_limit_packets();
    let rate = spec.frame_rate_bps(FRAME_BYTES)?;
    Some((limit, f64::from(limit) * FRAME_BYTES * 8.0 / rate))
}

/// How fast a spec's bottleneck passes full-size frames, bits/s (`None`: no bottleneck,
/// or one that varies).
fn fixed_rate_bps(spec: &str) -> Option<f64> {
    LinkSpec::parse(spec).ok()?.frame_rate_bps(FRAME_BYTES)
}

/// A figure of `lines` over the run's time, `y_label` up, the legend upper right.
fn line_figure(
    stem: String,
    caption: String,
    title: String,
    subtitle: String,
    y_label: &str,
    lines: Vec<Line>,
) -> Figure {
    lines_figure(
        stem,
        caption,
        title,
        subtitle,
        [TIME_AXIS, y_label],
        LegendAt::UpperRight,
        lines,
    )
}

/// A figure of `lines`, from zero up, saved as `stem` with `caption`: its `title` and
/// `subtitle`, its axes labelled as `axes` says (across, up), its legend at `legend`.
pub(super) fn lines_figure(
    stem: String,
    caption: String,
    title: String,
    subtitle: String,
    axes: [&str; 2],
    legend: LegendAt,
    lines: Vec<Line>,
) -> Figure {
    Figure {
        stem,
        caption,
        chart: Chart::Lines(LineFigure {
            title,
            subtitle,
            x_label: axes[0].to_owned(),
            y_label: axes[1].to_owned(),
            lines,
            y_from_zero: true,
            legend,
        }),
    }
}

/// The first path theory of the run's workloads that has `pick`.
fn theory<T>(run: &LabRun, pick: impl Fn(&PathTheory) -> Option<T>) -> Option<T> {
    run.workloads
        .iter()
        .filter_map(|w| w.path.as_ref())
        .find_map(pick)
}

/// The figures of one run: queue length, queue delay, drops, RTT per probe and its CDF,
/// cwnd, throughput, retransmissions, OWD deviation (those it has data for).
pub(super) fn run_figures(run: &RunData) -> Vec<Figure> {
    let heading = run_heading(run);
    let links = links_text(&run.run);
    let mut out = Vec::new();
    for metric in [
        Metric::QueuePackets,
        Metric::QueueDelay,
        Metric::Drops,
        Metric::DeliveredRate,
    ] {
        out.extend(link_figure(run, metric, &heading));
    }
    out.extend(rtt_figures(run, &heading, &links));
    out.extend(tcp_figures(run, &heading, &links));
    let owd: Vec<&Series> = of(run, Metric::OwdDeviation).collect();
    if !owd.is_empty() {
        out.push(line_figure(
            "owd-deviation".into(),
            format!("One-way delay of every probe above the recent minimum ({heading})"),
            format!("One-way delay deviation — {heading}"),
            links,
            Metric::OwdDeviation.axis(),
            lines_of(&owd, LineStyle::Solid),
        ));
    }
    out
}

/// The figure of one link-direction `metric` (queue length, queue delay, drops or delivered
/// rate) across every direction that has it, with each direction's theory dashed: its
/// queue's limit, a full queue's delay, its rate. `None` without data.
fn link_figure(run: &RunData, metric: Metric, heading: &str) -> Option<Figure> {
    let series: Vec<&Series> = of(run, metric).collect();
    if series.is_empty() || (metric == Metric::Drops && series.iter().all(|s| s.points.is_empty()))
    {
        return None;
    }
    let mut lines: Vec<Line> = lines_of(&series, LineStyle::Solid);
    let span = time_span(&lines);
    for (i, s) in series.iter().enumerate() {
        let spec = direction_spec(run, &s.subject);
        lines.extend(link_theory_line(metric, spec, span, i));
    }
    let specs = series
        .iter()
        .map(|s| {
            format!(
                "{}: {}",
                s.subject,
                direction_spec(run, &s.subject).unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join(" | ");
    Some(line_figure(
        metric.slug().to_owned(),
        if metric == Metric::DeliveredRate {
            format!(
                "What every bottleneck sent per {} s, frames as the emulator counts them \
                 ({heading}); dashed: its rate",
                crate::series::DELIVERED_RATE_INTERVAL_S
            )
        } else {
            format!(
                "{} of every bottleneck ({heading}); dashed: the queue's limit",
                metric.title()
            )
        },
        format!("{} — {heading}", metric.title()),
        specs,
        metric.axis(),
        lines,
    ))
}

/// The dashed theory line of one link direction with spec `spec` on a `metric` figure
/// spanning `span` (seconds), in the direction's colour: the rate on the delivered-rate
/// figure, the queue's limit on the queue-length one, a full queue's delay on the
/// queue-delay one. `None` when the spec has no fixed rate, or for drops.
fn link_theory_line(
    metric: Metric,
    spec: Option<&str>,
    span: (f64, f64),
    color: usize,
) -> Option<Line> {
    if metric == Metric::DeliveredRate {
        let rate_bps = spec.and_then(fixed_rate_bps)?;
        return Some(horizontal(
            format!("rate {}", mbit_per_sec(rate_bps)),
            rate_bps / 1e6,
            span,
            color,
        ));
    }
    let (limit, full_delay_s) = spec.and_then(queue_theory)?;
    match metric {
        Metric::QueuePackets => Some(horizontal(
            format!("limit {limit} packets"),
            f64::from(limit),
            span,
            color,
        )),
        Metric::QueueDelay => Some(horizontal(
            format!("full queue: {}", ms(full_delay_s)),
            full_delay_s * 1e3,
            span,
            color,
        )),
        _ => None,
    }
}

/// A run's RTT figures: the RTT of every probe against when it was sent, with the path's
/// base RTT and full-queue plateau dashed, and its CDF (none without probes).
fn rtt_figures(run: &RunData, heading: &str, links: &str) -> Vec<Figure> {
    let rtt: Vec<&Series> = of(run, Metric::Rtt).collect();
    if rtt.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<Line> = lines_of(&rtt, LineStyle::Points);
    let base = theory(&run.run, |p| Some(p.base_rtt_s));
    let plateau = theory(&run.run, |p| p.plateau_rtt_s);
    push_levels(
        &mut lines,
        [
            plateau.map(|p| (format!("theory: full queue {}", ms(p)), p * 1e3, 3)),
            base.map(|b| (format!("theory: base RTT {}", ms(b)), b * 1e3, 7)),
        ],
    );
    let per_probe = line_figure(
        "rtt".into(),
        format!("RTT of every probe against when it was sent ({heading}); dashed: theory"),
        format!("RTT per probe — {heading}"),
        links.to_owned(),
        Metric::Rtt.axis(),
        lines,
    );
    let mut lines: Vec<Line> = rtt
        .iter()
        .enumerate()
        .map(|(i, s)| cdf_line(s.subject.clone(), s, i))
        .collect();
    if let Some(plateau) = plateau {
        lines.push(Line {
            label: format!("theory: full queue {}", ms(plateau)),
            points: vec![(plateau * 1e3, 0.0), (plateau * 1e3, 1.0)],
            style: LineStyle::Dashed,
            color: 3,
        });
    }
    let distribution = lines_figure(
        "rtt-cdf".into(),
        format!("Distribution of the RTT ({heading})"),
        format!("CDF of the RTT — {heading}"),
        links.to_owned(),
        RTT_CDF_AXES,
        LegendAt::LowerRight,
        lines,
    );
    vec![per_probe, distribution]
}

/// A run's TCP figures: every stream's congestion window (ssthresh dashed), its throughput
/// against the bottleneck and the Mathis bound, and its retransmissions (those it has data
/// for).
fn tcp_figures(run: &RunData, heading: &str, links: &str) -> Vec<Figure> {
    let mut out = Vec::new();
    let cwnd: Vec<&Series> = of(run, Metric::Cwnd).collect();
    if !cwnd.is_empty() {
        let mut lines = Vec::new();
        for (i, s) in cwnd.iter().enumerate() {
            lines.push(Line {
                label: format!("{} cwnd", s.subject),
                points: scaled(s),
                style: LineStyle::Solid,
                color: i,
            });
            if let Some(ssthresh) = of(run, Metric::Ssthresh).find(|t| t.subject == s.subject) {
                lines.push(Line {
                    label: format!("{} ssthresh", s.subject),
                    points: scaled(ssthresh),
                    style: LineStyle::Dashed,
                    color: i,
                });
            }
        }
        out.push(line_figure(
            "cwnd".into(),
            format!("Congestion window of every TCP stream, from TCP_INFO ({heading})"),
            format!("Congestion window — {heading}"),
            links.to_owned(),
            Metric::Cwnd.axis(),
            lines,
        ));
    }
    let throughput: Vec<&Series> = of(run, Metric::Throughput).collect();
    if !throughput.is_empty() {
        let mut lines: Vec<Line> = lines_of(&throughput, LineStyle::Solid);
        let level = |name: &str, bps: f64, color| {
            (format!("{name} {}", mbit_per_sec(bps)), bps * 1e-6, color)
        };
        push_levels(
            &mut lines,
            [
                theory(&run.run, |p| p.bottleneck_bps).map(|b| level("bottleneck", b, 7)),
                theory(&run.run, |p| p.mathis_bps).map(|m| level("Mathis bound", m, 3)),
            ],
        );
        out.push(line_figure(
            "throughput".into(),
            format!("What each TCP stream's receiver got per interval ({heading}); dashed: theory"),
            format!("Throughput per interval — {heading}"),
            links.to_owned(),
            Metric::Throughput.axis(),
            lines,
        ));
    }
    let retransmissions: Vec<&Series> = of(run, Metric::Retransmissions)
        .filter(|s| s.points.iter().any(|p| p.1 > 0.0))
        .collect();
    if !retransmissions.is_empty() {
        out.push(line_figure(
            "retransmissions".into(),
            format!("Segments every TCP sender retransmitted so far ({heading})"),
            format!("Retransmissions — {heading}"),
            links.to_owned(),
            Metric::Retransmissions.axis(),
            lines_of(&retransmissions, LineStyle::Solid),
        ));
    }
    out
}

/// A series' empirical CDF as a solid line labelled `label` in palette colour `color`.
fn cdf_line(label: String, series: &Series, color: usize) -> Line {
    Line {
        label,
        points: cdf(series),
        style: LineStyle::Solid,
        color,
    }
}

/// The axes of a figure of RTT distributions (lines from [`cdf_line`]): RTT in ms
/// across, the fraction of probes at or below it up; its legend goes lower right.
const RTT_CDF_AXES: [&str; 2] = ["RTT (ms)", "fraction of probes"];

/// The empirical CDF of a series' values, plotted: `(value, fraction at or below)`.
fn cdf(series: &Series) -> Vec<(f64, f64)> {
    let scale = series.metric.plot_scale();
    cdf_points(series.points.iter().map(|p| p.1 * scale).collect())
}

/// The empirical CDF of `values`, plotted: `(value, fraction at or below)` in order.
pub(super) fn cdf_points(mut values: Vec<f64>) -> Vec<(f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, (i + 1) as f64 / n))
        .collect()
}

/// Several runs' same series on one figure, one line per run: queue length and delay,
/// RTT per probe and its CDF, cwnd, throughput, OWD deviation.
pub(super) fn compare_figures(runs: &[RunData]) -> Vec<Figure> {
    let metrics = [
        Metric::Rtt,
        Metric::QueuePackets,
        Metric::QueueDelay,
        Metric::DeliveredRate,
        Metric::Cwnd,
        Metric::Throughput,
        Metric::OwdDeviation,
    ];
    let mut out = Vec::new();
    for metric in metrics {
        for subject in subjects(runs, metric) {
            out.extend(compare_subject_figures(runs, metric, subject));
        }
    }
    out
}

/// The subjects of `metric`'s series across `runs`, each once, in the order the first run
/// that has them lists them.
fn subjects(runs: &[RunData], metric: Metric) -> Vec<&str> {
    let mut subjects: Vec<&str> = Vec::new();
    for run in runs {
        for s in of(run, metric) {
            if !subjects.contains(&s.subject.as_str()) {
                subjects.push(&s.subject);
            }
        }
    }
    subjects
}

/// The comparison of one subject's `metric` across the runs that have it, one line per run
/// (for the RTT, each run's full-queue theory dashed, and a second figure of the CDFs);
/// nothing when fewer than two runs have it.
fn compare_subject_figures(runs: &[RunData], metric: Metric, subject: &str) -> Vec<Figure> {
    let name = &runs[0].run.name;
    let with: Vec<(usize, &RunData, &Series)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, run)| {
            of(run, metric)
                .find(|s| s.subject == subject)
                .map(|s| (i, run, s))
        })
        .collect();
    if with.len() < 2 {
        return Vec::new();
    }
    let mut lines: Vec<Line> = with
        .iter()
        .map(|&(i, run, s)| Line {
            label: run.label(),
            points: scaled(s),
            style: LineStyle::Solid,
            color: i,
        })
        .collect();
    if metric == Metric::Rtt {
        let plateaus = with.iter().map(|&(i, run, _)| {
            theory(&run.run, |p| p.plateau_rtt_s).map(|plateau| {
                (
                    format!("{}: theory {}", run.label(), ms(plateau)),
                    plateau * 1e3,
                    i,
                )
            })
        });
        push_levels(&mut lines, plateaus.collect::<Vec<_>>());
    }
    let labels = with
        .iter()
        .map(|(_, run, _)| run.label())
        .collect::<Vec<_>>()
        .join(" | ");
    let stem = format!("{}-{}", metric.slug(), slug(subject));
    let mut out = vec![line_figure(
        stem.clone(),
        format!("{} of {subject}, every run on one figure", metric.title()),
        format!(
            "{} of {subject} — {name}, {} runs",
            metric.title(),
            with.len()
        ),
        labels.clone(),
        metric.axis(),
        lines,
    )];
    if metric == Metric::Rtt {
        out.push(lines_figure(
            format!("{stem}-cdf"),
            format!("Distribution of the RTT of {subject}, every run on one figure"),
            format!("CDF of the RTT of {subject} — {name}, {} runs", with.len()),
            labels,
            RTT_CDF_AXES,
            LegendAt::LowerRight,
            with.iter()
                .map(|&(i, run, s)| cdf_line(run.label(), s, i))
                .collect(),
        ));
    }
    out
}

/// The parameters every run has with a number for a value, taking two or more values.
pub(super) fn numeric_parameters(runs: &[RunData]) -> Vec<String> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .run
        .parameters
        .iter()
        .map(|(key, _)| key.clone())
        .filter(|key| {
            let values: Option<Vec<f64>> = runs.iter().map(|r| parameter(r, key)).collect();
            values.is_some_and(|v| v.iter().any(|&x| x != v[0]))
        })
        .collect()
}

fn parameter(run: &RunData, key: &str) -> Option<f64> {
    run.run
        .parameters
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| super::split_number(v))
        .map(|(number, _)| number)
}

/// `key (unit)` when every run writes the same unit after `key`'s number, else `key`.
fn axis_label(runs: &[RunData], key: &str) -> String {
    let units: std::collections::BTreeSet<&str> = runs
        .iter()
        .filter_map(|r| r.run.parameters.iter().find(|(k, _)| k == key))
        .filter_map(|(_, v)| super::split_number(v).map(|(_, unit)| unit))
        .collect();
    match units.into_iter().collect::<Vec<_>>().as_slice() {
        [unit] if !unit.is_empty() => format!("{key} ({unit})"),
        _ => key.to_owned(),
    }
}

fn parameter_text(run: &RunData, key: &str) -> String {
    run.run
        .parameters
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// A figure of a whole run, if it has one.
type RunFigure = fn(&RunData) -> Option<f64>;

/// A metric of a whole run for the sweep figures, with its theory.
struct SweepMetric {
    stem: &'static str,
    title: &'static str,
    axis: &'static str,
    value: RunFigure,
    /// Figures to compare it with: (name, value).
    theories: &'static [(&'static str, RunFigure)],
}

fn first_rtt_plateau_ms(run: &RunData) -> Option<f64> {
    run.run
        .workloads
        .iter()
        .find_map(|w| w.outcome.round_trips())
        .and_then(|trips| trips.plateau_s())
        .map(|s| s * 1e3)
}

fn first_rtt_theory_ms(run: &RunData) -> Option<f64> {
    run.run
        .workloads
        .iter()
        .find(|w| w.outcome.round_trips().is_some())
        .and_then(|w| w.path?.plateau_rtt_s)
        .map(|s| s * 1e3)
}

fn tcp_mathis_mbps(run: &RunData) -> Option<f64> {
    let mut total = None;
    for workload in &run.run.workloads {
        if let (LabOutcome::Tcp(_), Some(bound)) =
            (&workload.outcome, workload.path.and_then(|p| p.mathis_bps))
        {
            *total.get_or_insert(0.0) += bound * 1e-6;
        }
    }
    total
}

fn tcp_bottleneck_mbps(run: &RunData) -> Option<f64> {
    run.run.workloads.iter().find_map(|w| match &w.outcome {
        LabOutcome::Tcp(_) => w.path.and_then(|p| p.bottleneck_bps).map(|b| b * 1e-6),
        _ => None,
    })
}

const SWEEP_METRICS: [SweepMetric; 2] = [
    SweepMetric {
        stem: "goodput",
        title: "TCP goodput",
        axis: "goodput of the TCP workloads (Mbit/s)",
        value: |run| run.tcp_goodput_bps().map(|b| b * 1e-6),
        theories: &[
            ("bottleneck", tcp_bottleneck_mbps),
            ("Mathis bound", tcp_mathis_mbps),
        ],
    },
    SweepMetric {
        stem: "rtt-plateau",
        title: "RTT plateau (p99 of the second half)",
        axis: "RTT plateau (ms)",
        value: first_rtt_plateau_ms,
        theories: &[("theory: full queue", first_rtt_theory_ms)],
    },
];

/// A sweep's metrics against each numeric parameter (a line per value of the others, theory
/// dashed), and a heatmap of the goodput over the first two numeric parameters.
pub(super) fn sweep_figures(runs: &[RunData]) -> Vec<Figure> {
    let numeric = numeric_parameters(runs);
    let name = runs[0].run.name.clone();
    let mut out = Vec::new();
    for metric in &SWEEP_METRICS {
        if runs.iter().all(|r| (metric.value)(r).is_none()) {
            continue;
        }
        for key in &numeric {
            // One line per combination of the other parameters' values.
            let groups = by_other_parameters(runs, key);
            let mut lines = Vec::new();
            let mut drawn_theories: Vec<&str> = Vec::new();
            for (color, (others, group)) in groups.iter().enumerate() {
                let mut measured: Vec<(f64, f64)> = group
                    .iter()
                    .filter_map(|r| Some((parameter(r, key)?, (metric.value)(r)?)))
                    .collect();
                measured.sort_by(|a, b| a.0.total_cmp(&b.0));
                let label = if others.is_empty() {
                    "measured".to_owned()
                } else {
                    others.clone()
                };
                lines.push(Line {
                    label,
                    points: measured,
                    style: LineStyle::Points,
                    color,
                });
                for (n, (theory_name, theory)) in metric.theories.iter().enumerate() {
                    let mut points: Vec<(f64, f64)> = group
                        .iter()
                        .filter_map(|r| Some((parameter(r, key)?, theory(r)?)))
                        .collect();
                    if points.is_empty() {
                        continue;
                    }
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    if !drawn_theories.contains(theory_name) {
                        drawn_theories.push(theory_name);
                    }
                    lines.push(Line {
                        label: if others.is_empty() {
                            (*theory_name).to_owned()
                        } else {
                            format!("{others}: {theory_name}")
                        },
                        points,
                        style: LineStyle::Dashed,
                        color: if groups.len() == 1 { 7 - 4 * n } else { color },
                    });
                }
            }
            let values = sorted_values(runs, key)
                .into_iter()
                .map(|v| v.1)
                .collect::<Vec<_>>()
                .join(", ");
            out.push(Figure {
                stem: format!("{}-vs-{}", metric.stem, slug(key)),
                caption: format!(
                    "{} of every run against {key}{}",
                    metric.title,
                    if drawn_theories.is_empty() {
                        String::new()
                    } else {
                        format!("; dashed: {}", drawn_theories.join(", "))
                    }
                ),
                chart: Chart::Lines(LineFigure {
                    title: format!("{} against {key} — {name}", metric.title),
                    subtitle: format!(
                        "{key} = {values} | at the first run: {}",
                        links_text(&runs[0].run)
                    ),
                    x_label: axis_label(runs, key),
                    y_label: metric.axis.to_owned(),
                    lines,
                    y_from_zero: true,
                    legend: LegendAt::LowerRight,
                }),
            });
        }
        if metric.stem == "goodput" && numeric.len() >= 2 {
            out.push(heatmap(runs, &numeric[0], &numeric[1], &name));
        }
    }
    out.extend(workload_sweep_figures(runs, &numeric, &name));
    out
}

/// `runs` grouped by the values of every parameter but `key` (`loss=1, queue=50`; empty
/// when `key` is the only one).
fn by_other_parameters<'a>(runs: &'a [RunData], key: &str) -> BTreeMap<String, Vec<&'a RunData>> {
    let mut groups: BTreeMap<String, Vec<&RunData>> = BTreeMap::new();
    for run in runs {
        let others = run
            .run
            .parameters
            .iter()
            .filter(|(k, _)| k != key)
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        groups.entry(others).or_default().push(run);
    }
    groups
}

/// What each workload moved, bits/s: a TCP test's goodput, a blocks application's rate.
fn workload_throughput_bps(outcome: &LabOutcome) -> Option<f64> {
    match outcome {
        LabOutcome::Tcp(report) => Some(report.up_bps + report.down_bps),
        LabOutcome::Blocks(report) => Some(report.throughput_bps),
        _ => None,
    }
}

/// The bound on what a workload can move, bits/s, and its name: a block per round trip
/// (base RTT and the block's time through the bottleneck) for a blocks application; for a TCP test the smaller of the bottleneck's TCP ideal (1448 B
/// of payload per 1514-byte frame) and the peer's window per base RTT (the window as
/// `inspect` read it, median over the intervals it sent in).
fn workload_bound(workload: &crate::lab::LabWorkload) -> Option<(f64, &'static str)> {
    let path = workload.path?;
    match &workload.outcome {
        LabOutcome::Blocks(report) => Some((
            crate::lab::blocks_bound_bps(report.size, &path),
            "a block per RTT",
        )),
        LabOutcome::Tcp(_) => {
            let line = path.bottleneck_bps.map(|b| b * 1448.0 / 1514.0);
            let window = workload.inspect.as_ref().and_then(|inspect| {
                let windows: Vec<i64> = inspect
                    .connections
                    .iter()
                    .flat_map(|c| &c.intervals)
                    .filter(|i| i.sending && i.peer_window > 0)
                    .map(|i| i64::from(i.peer_window))
                    .collect();
                (!windows.is_empty()).then(|| {
                    pathlab_probe::rtt::percentiles(windows.into_iter()).p50_ns as f64 * 8.0
                        / path.base_rtt_s
                })
            });
            let bound = match (line, window) {
                (Some(l), Some(w)) => l.min(w),
                (l, w) => l.or(w)?,
            };
            Some((bound, "line or window per RTT"))
        }
        _ => None,
    }
}

/// Each workload's throughput against each numeric parameter, with its bound dashed: how
/// applications of different kinds fall with delay (the `app-limits` recipe). Only for a
/// sweep with more than one workload that moves data.
fn workload_sweep_figures(runs: &[RunData], numeric: &[String], name: &str) -> Vec<Figure> {
    let names: Vec<&str> = runs[0]
        .run
        .workloads
        .iter()
        .filter(|w| workload_throughput_bps(&w.outcome).is_some())
        .map(|w| w.name.as_str())
        .collect();
    if names.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for key in numeric {
        let groups = by_other_parameters(runs, key);
        let mut lines = Vec::new();
        let mut color = 0;
        for (others, group) in &groups {
            for workload in &names {
                let label = if others.is_empty() {
                    (*workload).to_owned()
                } else {
                    format!("{workload} ({others})")
                };
                let mut measured = Vec::new();
                let mut bound = Vec::new();
                let mut bound_name = "";
                for run in group {
                    let Some(x) = parameter(run, key) else {
                        continue;
                    };
                    let Some(w) = run.run.workloads.iter().find(|w| w.name == *workload) else {
                        continue;
                    };
                    if let Some(bps) = workload_throughput_bps(&w.outcome) {
                        measured.push((x, bps * 1e-6));
                    }
                    if let Some((bps, what)) = workload_bound(w) {
                        bound.push((x, bps * 1e-6));
                        bound_name = what;
                    }
                }
                measured.sort_by(|a, b| a.0.total_cmp(&b.0));
                bound.sort_by(|a, b| a.0.total_cmp(&b.0));
                lines.push(Line {
                    label: label.clone(),
                    points: measured,
                    style: LineStyle::Points,
                    color,
                });
                if !bound.is_empty() {
                    lines.push(Line {
                        label: format!("{label}: {bound_name}"),
                        points: bound,
                        style: LineStyle::Dashed,
                        color,
                    });
                }
                color += 1;
            }
        }
        out.push(Figure {
            stem: format!("workloads-vs-{}", slug(key)),
            caption: format!(
                "What each workload moved against {key}; dashed, its bound: a block per \
                 round trip (blocks), the smaller of the line's TCP ideal and the peer's \
                 window (as inspect read it) per base RTT (TCP)"
            ),
            chart: Chart::Lines(LineFigure {
                title: format!("Throughput of each workload against {key} — {name}"),
                subtitle: format!("at the first run: {}", links_text(&runs[0].run)),
                x_label: axis_label(runs, key),
                y_label: "throughput (Mbit/s)".to_owned(),
                lines,
                y_from_zero: true,
                legend: LegendAt::UpperRight,
            }),
        });
    }
    out
}

/// The distinct values `runs` give parameter `key`, ascending, each with its text.
fn sorted_values(runs: &[RunData], key: &str) -> Vec<(f64, String)> {
    let mut values: Vec<(f64, String)> = runs
        .iter()
        .filter_map(|r| Some((parameter(r, key)?, parameter_text(r, key))))
        .collect();
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    values.dedup_by(|a, b| a.0 == b.0);
    values
}

fn heatmap(runs: &[RunData], x_key: &str, y_key: &str, name: &str) -> Figure {
    let xs = sorted_values(runs, x_key);
    let ys = sorted_values(runs, y_key);
    let cells = ys
        .iter()
        .map(|(y, _)| {
            xs.iter()
                .map(|(x, _)| {
                    runs.iter()
                        .find(|r| {
                            parameter(r, x_key) == Some(*x) && parameter(r, y_key) == Some(*y)
                        })
                        .and_then(RunData::tcp_goodput_bps)
                        .map(|b| b * 1e-6)
                })
                .collect()
        })
        .collect();
    Figure {
        stem: format!("goodput-heatmap-{}-{}", slug(x_key), slug(y_key)),
        caption: format!("TCP goodput (Mbit/s) over {x_key} and {y_key}"),
        chart: Chart::Heatmap(Heatmap {
            title: format!("TCP goodput (Mbit/s) over {x_key} and {y_key} — {name}"),
            subtitle: links_text(&runs[0].run),
            x_label: axis_label(runs, x_key),
            y_label: axis_label(runs, y_key),
            x_values: xs.into_iter().map(|v| v.1).collect(),
            y_values: ys.into_iter().map(|v| v.1).collect(),
            cells,
            decimals: 2,
        }),
    }
}
