//! Latency under load ("bufferbloat"): what the phases of `pathlab bloat` measured, turned
//! into added latency, a grade, responsiveness in round trips per minute and a verdict.
//!
//! A bloat run is a sequence of phases ([`Phase`]): idle (round-trip probes only), then
//! probes while TCP saturates the path downwards, upwards, or both ways at once. Each
//! phase leaves a [`PhaseRecord`] (the probes' [`RttReport`] and the load's
//! [`TcpTestReport`], as measured); [`summarize`] turns one into a [`PhaseSummary`] and
//! [`analyse`] a whole run into a [`BloatReport`]. Nothing here opens a socket or reads
//! a clock: the records carry every time as a number.
//!
//! # What is counted
//!
//! Probes are isochronous: request `seq` leaves `seq` probe intervals after the phase's
//! probes start, so which probes belong to the counted window is decided by sequence
//! number ([`BloatSettings::counted_seqs`]). In a loaded phase the first
//! [`BloatSettings::ramp_up_ns`] (TCP's slow start, while the queue builds) are not
//! counted, and neither is the drain after the load stops (probes go on for
//! [`BloatSettings::drain_ns`] so that replies held in a deep queue still come back).
//! The load's throughput and its connections' smoothed RTTs are taken over the same
//! window, on the load's own clock (its streams start within a few round trips of the
//! probes).
//!
//! # Grade
//!
//! The grade comes from the median added latency (loaded median RTT minus idle median
//! RTT), with DSLReports' bands ([`GRADE_LIMITS`]). DSLReports grades the average
//! "uplift" during load, i.e. the standing queue, not its spikes; the median is that
//! typical value without being dragged by a handful of outliers (one 2 s spike among 450
//! probes moves a mean by 4 ms, a median not at all). The spikes are reported beside it
//! (p90, p99) and weigh in the responsiveness, whose trimmed mean keeps 95% of the
//! samples.
//!
//! # Responsiveness (RPM)
//!
//! As draft-ietf-ippm-responsiveness-06, section "Aggregating the Measurements", TCP-only
//! case: `Foreign = 60000 / ((TM(tcp_f) + TM(http_f)) / 2)`, `Loaded = 60000 /
//! TM(http_l)`, `RPM = (Foreign + Loaded) / 2`, where TM is the single-sided trimmed mean
//! keeping the lowest 95% ([`trimmed_mean`]) and times are in milliseconds. Our probes
//! are UDP round trips on a connection of their own: one such round trip is what a TCP
//! handshake (`tcp_f`) and a 1-byte HTTP GET on an idle connection (`http_f`) each take,
//! so both terms are the trimmed mean of the probes and `Foreign = 60000 / TM(probes)`.
//! For the self probes (`http_l`), which the draft multiplexes on the load-generating
//! connections, we take the draft's fallback for when that is impossible: "the TCP stack
//! estimated round-trip-time", here the load connections' `TCP_INFO` smoothed RTT
//! samples. The idle phase has no load connections and its RPM is the foreign one.

use std::fmt;
use std::ops::Range;

use pathlab_core::format::{self, Digits};
use serde::{Deserialize, Serialize};

use crate::control::TcpDirection;
use crate::rtt::{percentiles, Percentiles, RttReport};
use crate::tcp::{StreamReport, TcpTestReport};

/// One phase of a bloat run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Probes only: the baseline.
    Idle,
    /// Probes while the server sends TCP to the client.
    Download,
    /// Probes while the client sends TCP to the server.
    Upload,
    /// Probes while TCP goes both ways at once.
    Both,
}

impl Phase {
    /// The phase's name as the report prints it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Download => "download",
            Phase::Upload => "upload",
            Phase::Both => "both",
        }
    }

    /// Which way the load goes (none when idle).
    pub fn tcp_direction(self) -> Option<TcpDirection> {
        match self {
            Phase::Idle => None,
            Phase::Download => Some(TcpDirection::Down),
            Phase::Upload => Some(TcpDirection::Up),
            Phase::Both => Some(TcpDirection::Both),
        }
    }

    /// What the user would be doing in this phase, for the verdict.
    fn activity(self) -> &'static str {
        match self {
            Phase::Idle => "while the line is idle",
            Phase::Download => "while someone downloads",
            Phase::Upload => "while someone uploads",
            Phase::Both => "while someone uploads and someone else downloads",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A bufferbloat grade, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Grade {
    /// Under 5 ms added.
    #[serde(rename = "A+")]
    APlus,
    /// 5 to 30 ms.
    #[serde(rename = "A")]
    A,
    /// 30 to 60 ms.
    #[serde(rename = "B")]
    B,
    /// 60 to 200 ms.
    #[serde(rename = "C")]
    C,
    /// 200 to 400 ms.
    #[serde(rename = "D")]
    D,
    /// 400 ms or more.
    #[serde(rename = "F")]
    F,
}

/// The upper bounds (exclusive, ns of added latency) of every grade but F.
///
/// From DSLReports' speed test FAQ "Bufferbloat Grades" (<https://www.dslreports.com/faq/17930>):
/// "Less than 5ms (average of down bloat and up bloat) - A+, Less than 30ms - A, Less
/// than 60ms - B, Less than 200ms - C, Less than 400ms - D, 400ms+ - F (there is no "E"
/// grade)". The LibreQoS bufferbloat test uses the same bands ("Increase: < 5 ms" A+,
/// "5–30 ms" A, "30–60 ms" B, "60–200 ms" C, "200–400 ms" D, "≥ 400 ms" F). Unlike
/// DSLReports, which averages the upload and download uplifts into one grade, pathlab
/// grades each loaded phase and gives the run its worst phase's grade: a line that is
/// fine one way and bloated the other is bloated.
pub const GRADE_LIMITS: [(Grade, i64); 5] = [
    (Grade::APlus, 5_000_000),
    (Grade::A, 30_000_000),
    (Grade::B, 60_000_000),
    (Grade::C, 200_000_000),
    (Grade::D, 400_000_000),
];

impl Grade {
    /// The grade of `added_ns` of added latency (negative counts as none).
    pub fn for_added_latency_ns(added_ns: i64) -> Grade {
        GRADE_LIMITS
            .iter()
            .find(|&&(_, below)| added_ns < below)
            .map_or(Grade::F, |&(grade, _)| grade)
    }

    /// `A+`, `A`, ... `F`.
    pub fn as_str(self) -> &'static str {
        match self {
            Grade::APlus => "A+",
            Grade::A => "A",
            Grade::B => "B",
            Grade::C => "C",
            Grade::D => "D",
            Grade::F => "F",
        }
    }
}

impl fmt::Display for Grade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Percent of the samples the draft's trimmed mean keeps (its `TMP`, default 95%).
pub const TRIMMED_MEAN_PERCENT: usize = 95;

/// The single-sided trimmed mean of draft-ietf-ippm-responsiveness: the mean of the lowest
/// `ceil(95% of n)` values (those at or below the 95th percentile). None when empty.
pub fn trimmed_mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    // ceil(n * 95 / 100) in integers: 0.95 * n in floating point can land just above an
    // integer and keep one value too many.
    let keep = (sorted.len() * TRIMMED_MEAN_PERCENT).div_ceil(100).max(1);
    Some(sorted[..keep].iter().sum::<f64>() / keep as f64)
}

/// Responsiveness in round trips per minute, as the draft computes it (see the module
/// doc for how our probes map onto its probe types).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Responsiveness {
    /// Trimmed mean of the probes' round trips (the draft's `TM(tcp_f)` and `TM(http_f)`), ms.
    pub foreign_trimmed_mean_ms: f64,
    /// `60000 / foreign_trimmed_mean_ms`.
    pub foreign_rpm: f64,
    /// Probe round trips it is computed from.
    pub foreign_samples: usize,
    /// Trimmed mean of the load connections' smoothed RTT (the draft's `TM(http_l)`), ms;
    /// none without load.
    pub loaded_trimmed_mean_ms: Option<f64>,
    /// `60000 / loaded_trimmed_mean_ms`.
    pub loaded_rpm: Option<f64>,
    /// `TCP_INFO` samples it is computed from.
    pub loaded_samples: usize,
    /// `(foreign_rpm + loaded_rpm) / 2`, or `foreign_rpm` without load.
    pub rpm: f64,
}

/// Responsiveness from probe round trips (`foreign_rtts_ns`) and the load connections'
/// smoothed RTT samples (`loaded_rtts_ns`, empty when idle). None without probes.
pub fn responsiveness(foreign_rtts_ns: &[i64], loaded_rtts_ns: &[u64]) -> Option<Responsiveness> {
    let to_ms = |ns: f64| ns / 1e6;
    let foreign: Vec<f64> = foreign_rtts_ns.iter().map(|&ns| to_ms(ns as f64)).collect();
    let foreign_ms = trimmed_mean(&foreign)?;
    let foreign_rpm = 60_000.0 / foreign_ms;
    let loaded: Vec<f64> = loaded_rtts_ns.iter().map(|&ns| to_ms(ns as f64)).collect();
    let loaded_ms = trimmed_mean(&loaded);
    let loaded_rpm = loaded_ms.map(|ms| 60_000.0 / ms);
    Some(Responsiveness {
        foreign_trimmed_mean_ms: foreign_ms,
        foreign_rpm,
        foreign_samples: foreign.len(),
        loaded_trimmed_mean_ms: loaded_ms,
        loaded_rpm,
        loaded_samples: loaded.len(),
        rpm: loaded_rpm.map_or(foreign_rpm, |loaded| foreign_rpm.midpoint(loaded)),
    })
}

/// Every parameter of a bloat run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BloatSettings {
    /// The phases, in the order they run (idle first).
    pub phases: Vec<Phase>,
    /// Length of each phase (its load, and its counted probes), ns.
    pub phase_ns: u64,
    /// Start of each loaded phase not counted (TCP's ramp-up), ns.
    pub ramp_up_ns: u64,
    /// How long probes go on after a loaded phase's load stops, uncounted, ns.
    pub drain_ns: u64,
    /// Interval between probes, ns.
    pub probe_interval_ns: u64,
    /// UDP payload bytes of each probe (replies are the same size).
    pub probe_size: u32,
    /// Parallel TCP streams per loaded direction.
    pub streams: u32,
    /// Socket buffer size asked for at both ends (SO_SNDBUF/SO_RCVBUF), if any.
    pub window_bytes: Option<u32>,
    /// Congestion control of the senders, if not the hosts' default.
    pub congestion: Option<String>,
    /// Interval the load's receivers count bytes in, ns.
    pub tcp_interval_ns: u64,
    /// How often the load's senders sample `TCP_INFO`, ns.
    pub tcp_sample_ns: u64,
}

/// Fewest probes a phase must count for percentiles to mean something.
pub const MIN_COUNTED_PROBES: u64 = 20;

/// Why settings cannot make a run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BloatError {
    /// A phase would be over before its ramp-up is.
    #[error("each phase must last more than its {ramp_up_ms} ms ramp-up (TCP's slow start, not counted); {phase_ms} ms is too short")]
    PhaseTooShort {
        /// The phase, ms.
        phase_ms: u64,
        /// The ramp-up, ms.
        ramp_up_ms: u64,
    },
    /// Too few probes would be counted.
    #[error("a probe every {interval_ms} ms counts only {counted} probes per phase (at least {MIN_COUNTED_PROBES} are needed for percentiles); probe more often or run longer")]
    TooFewProbes {
        /// The interval, ms.
        interval_ms: f64,
        /// Probes a loaded phase would count.
        counted: u64,
    },
    /// No phases, or the first is not idle.
    #[error("a run starts with the idle phase (the baseline) and has at least one loaded phase")]
    BadPlan,
    /// No probe came back while idle: there is no baseline.
    #[error("no probe came back in the idle phase ({sent} sent): the server does not answer UDP, or the path drops it")]
    NoBaseline {
        /// Probes sent.
        sent: u64,
    },
}

impl BloatSettings {
    /// Checks that the settings make a meaningful run.
    pub fn validate(&self) -> Result<(), BloatError> {
        if self.phases.first() != Some(&Phase::Idle) || self.phases.len() < 2 {
            return Err(BloatError::BadPlan);
        }
        if self.phase_ns <= self.ramp_up_ns {
            return Err(BloatError::PhaseTooShort {
                phase_ms: self.phase_ns / 1_000_000,
                ramp_up_ms: self.ramp_up_ns / 1_000_000,
            });
        }
        let counted = self.counted_seqs(Phase::Upload);
        let counted = counted.end.saturating_sub(counted.start);
        if counted < MIN_COUNTED_PROBES {
            return Err(BloatError::TooFewProbes {
                interval_ms: self.probe_interval_ns as f64 / 1e6,
                counted,
            });
        }
        Ok(())
    }

    /// Probes a phase sends: over the phase, and in a loaded phase over the drain too.
    pub fn probe_count(&self, phase: Phase) -> u64 {
        let drain = if phase == Phase::Idle {
            0
        } else {
            self.drain_ns
        };
        ((self.phase_ns + drain) / self.probe_interval_ns.max(1)).max(1)
    }

    /// The sequence numbers of a phase's counted probes: from the end of the ramp-up (a
    /// loaded phase) to the end of the load.
    pub fn counted_seqs(&self, phase: Phase) -> Range<u64> {
        let interval = self.probe_interval_ns.max(1);
        let first = if phase == Phase::Idle {
            0
        } else {
            self.ramp_up_ns.div_ceil(interval)
        };
        first..(self.phase_ns / interval).max(first)
    }

    /// The window of a phase's load that is counted, ns since the load started.
    fn counted_load_window(&self, phase: Phase) -> Range<u64> {
        let from = if phase == Phase::Idle {
            0
        } else {
            self.ramp_up_ns
        };
        from..self.phase_ns
    }
}

/// What one phase measured, as it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRecord {
    /// Which phase.
    pub phase: Phase,
    /// Wall clock (ns since the Unix epoch) when the phase's clients asked the server for
    /// their tests; the probes start about one round trip later, the load a few.
    pub start_unix_ns: u64,
    /// Wall clock when the probes and the load had both ended.
    pub end_unix_ns: u64,
    /// The probes, all of them (ramp-up and drain included).
    pub probes: RttReport,
    /// The load (none when idle).
    pub load: Option<TcpTestReport>,
}

/// Added latency under load: a loaded percentile minus the idle median, ns (negative when
/// the loaded figure is below the idle median).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddedLatency {
    /// Loaded median minus idle median.
    pub p50_ns: i64,
    /// Loaded 90th percentile minus idle median.
    pub p90_ns: i64,
    /// Loaded 99th percentile minus idle median.
    pub p99_ns: i64,
}

/// One phase, analysed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// Which phase.
    pub phase: Phase,
    /// As [`PhaseRecord::start_unix_ns`].
    pub start_unix_ns: u64,
    /// As [`PhaseRecord::end_unix_ns`].
    pub end_unix_ns: u64,
    /// Wall clock of the first counted probe's schedule (phase start + ramp-up when
    /// loaded), ns since the Unix epoch; the probes' schedule starts about one round trip
    /// after `start_unix_ns`, so this is that much early.
    pub counted_from_unix_ns: u64,
    /// Wall clock of the end of the counted probes' schedule (phase start + phase length).
    pub counted_until_unix_ns: u64,
    /// Probes sent in the counted window.
    pub probes_sent: u64,
    /// Of those, how many replies came back.
    pub probes_answered: u64,
    /// `1 - answered / sent`.
    pub probe_loss: f64,
    /// Round trips of the counted probes.
    pub rtt: Percentiles,
    /// Added latency (none when idle, or when no counted probe came back).
    pub added: Option<AddedLatency>,
    /// Goodput of the upward load over the counted window, bits/s.
    pub load_up_bps: f64,
    /// Goodput of the downward load over the counted window, bits/s.
    pub load_down_bps: f64,
    /// Segments the load's senders retransmitted over the whole phase.
    pub retransmitted_segments: u64,
    /// Responsiveness (none when no counted probe came back).
    pub responsiveness: Option<Responsiveness>,
    /// The grade from the median added latency (none when idle).
    pub grade: Option<Grade>,
    /// One line a non-expert understands.
    pub verdict: String,
}

/// A whole bloat run, analysed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BloatReport {
    /// Every parameter used.
    pub settings: BloatSettings,
    /// The idle median round trip every added latency is counted from, ns.
    pub baseline_rtt_ns: u64,
    /// Each phase, in the order they ran.
    pub phases: Vec<PhaseSummary>,
    /// The worst loaded phase's grade.
    pub grade: Grade,
    /// The worst loaded phase's verdict.
    pub verdict: String,
    /// What each phase measured, every sample (left out of printed JSON).
    #[serde(default)]
    pub records: Vec<PhaseRecord>,
}

/// What a bloat run had measured when it was cut short (a server that stopped answering, a
/// path that went down): the phases that finished, analysed as in [`BloatReport`], and
/// this end's side of the phase that failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BloatProgress {
    /// Every parameter used (`phases` lists those planned, not those run).
    pub settings: BloatSettings,
    /// The idle median round trip, once the idle phase finished, ns.
    pub baseline_rtt_ns: Option<u64>,
    /// The phases that finished, in the order they ran.
    pub phases: Vec<PhaseSummary>,
    /// What they measured.
    pub records: Vec<PhaseRecord>,
    /// The phase that failed, as this end saw it: every probe sent and reply received (the
    /// server's count of what it received never came), the load's client side (see
    /// `pathlab tcp`'s partial results). Not analysed: before and after the failure mix.
    pub interrupted: Option<PhaseRecord>,
}

/// The counted probes' round trips and how many were sent.
fn counted_probes(probes: &RttReport, seqs: &Range<u64>) -> (Vec<i64>, u64) {
    let rtts = probes
        .series
        .iter()
        .filter(|(seq, _)| seqs.contains(seq))
        .map(|&(_, rtt)| rtt)
        .collect();
    // The sender sent every scheduled probe, but a sender that sent fewer (an old record)
    // cannot have lost what it never sent.
    let sent = seqs.end.min(probes.sent).saturating_sub(seqs.start);
    (rtts, sent)
}

/// Goodput of `streams` over `window` (ns since each receiver started), from their
/// per-interval byte counts: whole intervals only, from the first that starts at or
/// after the window's start to the last that ends at or before its end.
pub fn window_goodput_bps(streams: &[StreamReport], interval_ns: u64, window: &Range<u64>) -> f64 {
    let interval_ns = interval_ns.max(1);
    let first = window.start.div_ceil(interval_ns) as usize;
    let end = (window.end / interval_ns) as usize;
    if end <= first || streams.is_empty() {
        return 0.0;
    }
    let bytes: u64 = streams
        .iter()
        .flat_map(|s| s.interval_bytes.iter().take(end).skip(first))
        .sum();
    bytes as f64 * 8.0 / ((end - first) as f64 * interval_ns as f64 * 1e-9)
}

/// The load connections' smoothed RTT samples taken in `window` (ns since each sender
/// started), ns.
pub fn window_srtt_ns(load: &TcpTestReport, window: &Range<u64>) -> Vec<u64> {
    load.up
        .iter()
        .chain(&load.down)
        .flat_map(|s| &s.samples)
        .filter(|s| window.contains(&s.at_ns) && s.srtt_us > 0)
        .map(|s| u64::from(s.srtt_us) * 1_000)
        .collect()
}

/// A duration for a non-expert: `3.2 ms`, `480 ms`, `1.25 s`.
fn human_duration(ns: i64) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// The one-line verdict of a loaded phase.
pub fn verdict(phase: Phase, added_p50_ns: Option<i64>, grade: Grade, probe_loss: f64) -> String {
    let activity = phase.activity();
    let Some(added) = added_p50_ns else {
        return format!("Nothing gets through {activity}: every probe was lost (grade {grade})");
    };
    let effect = match grade {
        Grade::APlus | Grade::A => format!("Video calls and games stay smooth {activity}"),
        Grade::B => format!("Video calls stay fine {activity}, but fast games may notice"),
        Grade::C => format!("Video calls will lag and games feel sluggish {activity}"),
        Grade::D => format!("Video calls will stutter {activity}"),
        Grade::F => format!("Video calls will break up and web pages crawl {activity}"),
    };
    let rise = if added < 500_000 {
        "latency rises by less than 1 ms".to_owned()
    } else {
        format!("latency rises by {}", human_duration(added))
    };
    let loss = if probe_loss >= 0.01 {
        format!(
            " and {} of packets are lost",
            format::fraction_as_percent(probe_loss, Digits::fixed(1))
        )
    } else {
        String::new()
    };
    format!("{effect}: {rise}{loss} (grade {grade})")
}

/// Analyses one phase against the idle median (`baseline_rtt_ns`; none for the idle
/// phase itself, or when unknown).
pub fn summarize(
    settings: &BloatSettings,
    baseline_rtt_ns: Option<u64>,
    record: &PhaseRecord,
) -> PhaseSummary {
    let phase = record.phase;
    let seqs = settings.counted_seqs(phase);
    let (rtts, sent) = counted_probes(&record.probes, &seqs);
    let answered = rtts.len() as u64;
    let probe_loss = if sent == 0 {
        0.0
    } else {
        1.0 - answered.min(sent) as f64 / sent as f64
    };
    let rtt = percentiles(rtts.iter().copied());
    let interval = settings.probe_interval_ns;
    let window = settings.counted_load_window(phase);
    let (load_up_bps, load_down_bps, retransmitted_segments, srtts) = match &record.load {
        Some(load) => (
            window_goodput_bps(&load.up, load.interval_ns, &window),
            window_goodput_bps(&load.down, load.interval_ns, &window),
            load.retransmitted_segments(),
            window_srtt_ns(load, &window),
        ),
        None => (0.0, 0.0, 0, Vec::new()),
    };
    let responsiveness = responsiveness(&rtts, &srtts);
    let loaded = phase != Phase::Idle;
    let added = match baseline_rtt_ns {
        Some(base) if loaded && answered > 0 => Some(AddedLatency {
            p50_ns: rtt.p50_ns as i64 - base as i64,
            p90_ns: rtt.p90_ns as i64 - base as i64,
            p99_ns: rtt.p99_ns as i64 - base as i64,
        }),
        _ => None,
    };
    let grade = match (loaded, baseline_rtt_ns, added) {
        (true, Some(_), Some(added)) => Some(Grade::for_added_latency_ns(added.p50_ns)),
        (true, Some(_), None) => Some(Grade::F),
        _ => None,
    };
    let verdict = match grade {
        Some(grade) => verdict(phase, added.map(|a| a.p50_ns), grade, probe_loss),
        None if answered == 0 => format!("No probe came back {}", phase.activity()),
        None => format!(
            "Round trip {} {} ({:.0} RPM)",
            human_duration(rtt.p50_ns as i64),
            phase.activity(),
            responsiveness.map_or(0.0, |r| r.rpm)
        ),
    };
    PhaseSummary {
        phase,
        start_unix_ns: record.start_unix_ns,
        end_unix_ns: record.end_unix_ns,
        counted_from_unix_ns: record.start_unix_ns + seqs.start * interval,
        counted_until_unix_ns: record.start_unix_ns + seqs.end * interval,
        probes_sent: sent,
        probes_answered: answered,
        probe_loss,
        rtt,
        added,
        load_up_bps,
        load_down_bps,
        retransmitted_segments,
        responsiveness,
        grade,
        verdict,
    }
}

/// The idle median round trip of a run's idle record, if any probe of it came back.
pub fn baseline_rtt_ns(settings: &BloatSettings, idle: &PhaseRecord) -> Option<u64> {
    let (rtts, _) = counted_probes(&idle.probes, &settings.counted_seqs(Phase::Idle));
    (!rtts.is_empty()).then(|| percentiles(rtts.into_iter()).p50_ns)
}

/// Analyses a whole run: the first record must be the idle phase, and one of its probes
/// at least must have come back.
pub fn analyse(
    settings: BloatSettings,
    records: Vec<PhaseRecord>,
) -> Result<BloatReport, BloatError> {
    let idle = records
        .first()
        .filter(|r| r.phase == Phase::Idle)
        .ok_or(BloatError::BadPlan)?;
    let baseline = baseline_rtt_ns(&settings, idle).ok_or(BloatError::NoBaseline {
        sent: idle.probes.sent,
    })?;
    let phases: Vec<PhaseSummary> = records
        .iter()
        .map(|record| summarize(&settings, Some(baseline), record))
        .collect();
    // The worst grade; of equal grades, the first phase's.
    let worst = phases
        .iter()
        .filter_map(|p| p.grade.map(|g| (g, p)))
        .fold(
            None::<(Grade, &PhaseSummary)>,
            |worst, (grade, phase)| match worst {
                Some((w, _)) if w >= grade => worst,
                _ => Some((grade, phase)),
            },
        )
        .ok_or(BloatError::BadPlan)?;
    let (grade, verdict) = (worst.0, worst.1.verdict.clone());
    Ok(BloatReport {
        settings,
        baseline_rtt_ns: baseline,
        phases,
        grade,
        verdict,
        records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtt::{analyse as analyse_rtt, RoundTrip};
    use crate::tcp::TcpSample;

    const MS: i64 = 1_000_000;

    #[test]
    fn grades_change_exactly_at_dslreports_boundaries() {
        let grade = |ns: i64| Grade::for_added_latency_ns(ns);
        assert_eq!(grade(-3 * MS), Grade::APlus, "below the idle median");
        assert_eq!(grade(0), Grade::APlus);
        assert_eq!(grade(5 * MS - 1), Grade::APlus);
        assert_eq!(
            grade(5 * MS),
            Grade::A,
            "'less than 5ms' is A+: 5 ms is not"
        );
        assert_eq!(grade(30 * MS - 1), Grade::A);
        assert_eq!(grade(30 * MS), Grade::B);
        assert_eq!(grade(60 * MS - 1), Grade::B);
        assert_eq!(grade(60 * MS), Grade::C);
        assert_eq!(grade(200 * MS - 1), Grade::C);
        assert_eq!(grade(200 * MS), Grade::D);
        assert_eq!(grade(400 * MS - 1), Grade::D);
        assert_eq!(grade(400 * MS), Grade::F, "'400ms+ - F'");
        assert_eq!(grade(10_000 * MS), Grade::F);
        assert!(Grade::APlus < Grade::F, "better grades sort first");
        assert_eq!(
            serde_json::to_string(&Grade::APlus).unwrap(),
            "\"A+\"",
            "JSON says what the user reads"
        );
    }

    #[test]
    fn the_trimmed_mean_drops_what_lies_above_the_95th_percentile() {
        // 1..=20 ms: ceil(0.95 x 20) = 19 kept, mean of 1..=19 = 10.
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(trimmed_mean(&values), Some(10.0));
        // 1..=100: 95 kept, mean of 1..=95 = 48 (0.95 x 100 is 94.999... in f64, which
        // would keep 95 too, but only by luck; the integer form is exact).
        let values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(trimmed_mean(&values), Some(48.0));
        // Too few to trim: ceil(0.95 x 3) = 3.
        assert_eq!(trimmed_mean(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(trimmed_mean(&[]), None);
    }

    #[test]
    fn rpm_is_the_mean_of_foreign_and_loaded_responsiveness() {
        // Hand-computed (the draft has no worked example): probes of 1..=20 ms have a
        // trimmed mean of 10 ms, 60000 / 10 = 6000 RPM foreign; load connections whose
        // smoothed RTT is 100 ms throughout (plus one 5 s outlier among 20, trimmed away)
        // give 60000 / 100 = 600 RPM loaded; RPM = (6000 + 600) / 2 = 3300.
        let probes: Vec<i64> = (1..=20).map(|ms| ms * MS).collect();
        let mut loaded = vec![100 * MS as u64; 19];
        loaded.push(5_000 * MS as u64);
        let r = responsiveness(&probes, &loaded).expect("probes came back");
        assert!((r.foreign_trimmed_mean_ms - 10.0).abs() < 1e-9);
        assert!((r.foreign_rpm - 6000.0).abs() < 1e-6);
        assert!((r.loaded_rpm.unwrap() - 600.0).abs() < 1e-6);
        assert!((r.rpm - 3300.0).abs() < 1e-6);
        assert_eq!((r.foreign_samples, r.loaded_samples), (20, 20));
        // Idle: the foreign RPM alone.
        let idle = responsiveness(&probes, &[]).unwrap();
        assert_eq!(idle.loaded_rpm, None);
        assert!((idle.rpm - 6000.0).abs() < 1e-6);
        assert_eq!(responsiveness(&[], &loaded), None);
    }

    fn settings() -> BloatSettings {
        BloatSettings {
            phases: vec![Phase::Idle, Phase::Upload],
            phase_ns: 2_000_000_000,
            ramp_up_ns: 1_000_000_000,
            drain_ns: 1_000_000_000,
            probe_interval_ns: 20_000_000,
            probe_size: 64,
            streams: 4,
            window_bytes: None,
            congestion: None,
            tcp_interval_ns: 100_000_000,
            tcp_sample_ns: 10_000_000,
        }
    }

    /// A probe record of `count` probes every 20 ms whose round trip is `rtt(seq)` (None:
    /// lost on the way up).
    fn probes(count: u64, rtt: impl Fn(u64) -> Option<i64>) -> RttReport {
        let replies: Vec<RoundTrip> = (0..count)
            .filter_map(|seq| {
                let sent = 1_000_000_000 + seq * 20_000_000;
                rtt(seq).map(|rtt| RoundTrip {
                    seq,
                    sent_ns: sent,
                    reflector_received_ns: sent + rtt as u64 / 2,
                    reflector_sent_ns: sent + rtt as u64 / 2,
                    received_ns: sent + rtt as u64,
                    timed_by: crate::rtt::TimedBy::Kernel,
                })
            })
            .collect();
        let received = replies.len() as u64;
        analyse_rtt(&replies, count, received, 0, &[])
    }

    /// Four upward streams, each 100 kB per 100 ms interval over 2 s (8 Mbit/s together),
    /// each sampling a 120 ms smoothed RTT every 10 ms but 20 ms during the ramp-up.
    fn load() -> TcpTestReport {
        let stream = |index| StreamReport {
            index,
            interval_bytes: vec![25_000; 20],
            bytes: 500_000,
            receive_ns: 2_000_000_000,
            samples: (0..200u64)
                .map(|i| TcpSample {
                    at_ns: i * 10_000_000,
                    srtt_us: if i < 100 { 20_000 } else { 120_000 },
                    retrans_segments: 3,
                    ..TcpSample::default()
                })
                .collect(),
            starved: None,
        };
        TcpTestReport {
            interval_ns: 100_000_000,
            up: (0..4).map(stream).collect(),
            ..TcpTestReport::default()
        }
    }

    #[test]
    fn counted_windows_skip_the_ramp_up_and_the_drain() {
        let s = settings();
        s.validate().expect("valid");
        assert_eq!(s.probe_count(Phase::Idle), 100);
        assert_eq!(
            s.probe_count(Phase::Upload),
            150,
            "2 s of load plus 1 s of drain"
        );
        assert_eq!(s.counted_seqs(Phase::Idle), 0..100);
        assert_eq!(s.counted_seqs(Phase::Upload), 50..100);
        assert_eq!(
            window_goodput_bps(&load().up, 100_000_000, &(1_000_000_000..2_000_000_000)),
            8_000_000.0
        );
        let srtts = window_srtt_ns(&load(), &(1_000_000_000..2_000_000_000));
        assert_eq!(srtts.len(), 400);
        assert!(
            srtts.iter().all(|&ns| ns == 120_000_000),
            "ramp-up samples left out"
        );
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let mut s = settings();
        s.phase_ns = s.ramp_up_ns;
        assert!(matches!(
            s.validate(),
            Err(BloatError::PhaseTooShort { .. })
        ));
        let mut s = settings();
        s.probe_interval_ns = 100_000_000; // 10 counted probes
        assert!(matches!(
            s.validate(),
            Err(BloatError::TooFewProbes { counted: 10, .. })
        ));
        let mut s = settings();
        s.phases = vec![Phase::Upload];
        assert_eq!(s.validate(), Err(BloatError::BadPlan));
    }

    #[test]
    fn a_bloated_upload_is_graded_from_its_median_and_explained() {
        let s = settings();
        let idle = PhaseRecord {
            phase: Phase::Idle,
            start_unix_ns: 1_000,
            end_unix_ns: 2_000_000_000,
            probes: probes(100, |_| Some(20 * MS)),
            load: None,
        };
        // Ramp-up probes at 30 ms (not counted), then 500 ms of queue, every 10th counted
        // probe lost; the drain's probes at 20 ms (not counted either).
        let upload = PhaseRecord {
            phase: Phase::Upload,
            start_unix_ns: 10_000_000_000,
            end_unix_ns: 13_000_000_000,
            probes: probes(150, |seq| match seq {
                0..50 => Some(30 * MS),
                50..100 if seq % 10 == 0 => None,
                50..100 => Some(520 * MS),
                _ => Some(20 * MS),
            }),
            load: Some(load()),
        };
        let report = analyse(s, vec![idle, upload]).expect("a baseline");
        assert_eq!(report.baseline_rtt_ns, 20 * MS as u64);
        let idle = &report.phases[0];
        assert_eq!((idle.grade, idle.added), (None, None));
        assert_eq!((idle.probes_sent, idle.probes_answered), (100, 100));
        assert!((idle.responsiveness.unwrap().rpm - 3000.0).abs() < 1e-6);
        let up = &report.phases[1];
        assert_eq!((up.probes_sent, up.probes_answered), (50, 45));
        assert!((up.probe_loss - 0.1).abs() < 1e-12);
        // Within the histogram's 0.01%.
        let added = up.added.expect("loaded");
        assert!((added.p50_ns - 500 * MS).abs() <= 52_000, "{added:?}");
        assert_eq!(up.grade, Some(Grade::F));
        assert_eq!(report.grade, Grade::F);
        assert_eq!(up.load_up_bps, 8_000_000.0);
        assert_eq!(up.load_down_bps, 0.0);
        assert_eq!(up.retransmitted_segments, 12);
        // Foreign 60000 / 520 = 115.385, loaded 60000 / 120 = 500: (115.385 + 500) / 2.
        let rpm = up.responsiveness.unwrap();
        assert!((rpm.rpm - 307.692).abs() < 0.01, "{rpm:?}");
        assert_eq!(up.counted_from_unix_ns, 11_000_000_000);
        assert_eq!(up.counted_until_unix_ns, 12_000_000_000);
        assert_eq!(
            report.verdict,
            "Video calls will break up and web pages crawl while someone uploads: \
             latency rises by 500 ms and 10.0% of packets are lost (grade F)"
        );
    }

    #[test]
    fn verdicts_read_as_plain_sentences() {
        assert_eq!(
            verdict(Phase::Download, Some(2 * MS), Grade::APlus, 0.0),
            "Video calls and games stay smooth while someone downloads: latency rises by 2.0 ms (grade A+)"
        );
        assert_eq!(
            verdict(Phase::Upload, Some(300 * MS), Grade::D, 0.0),
            "Video calls will stutter while someone uploads: latency rises by 300 ms (grade D)"
        );
        assert_eq!(
            verdict(Phase::Both, Some(1_250 * MS), Grade::F, 0.0),
            "Video calls will break up and web pages crawl while someone uploads and someone \
             else downloads: latency rises by 1.25 s (grade F)"
        );
        assert_eq!(
            verdict(Phase::Upload, Some(-MS), Grade::APlus, 0.0),
            "Video calls and games stay smooth while someone uploads: latency rises by less than 1 ms (grade A+)"
        );
        assert_eq!(
            verdict(Phase::Upload, None, Grade::F, 1.0),
            "Nothing gets through while someone uploads: every probe was lost (grade F)"
        );
    }

    #[test]
    fn the_worst_phase_decides_and_a_run_without_baseline_is_refused() {
        let mut s = settings();
        s.phases = vec![Phase::Idle, Phase::Download, Phase::Upload];
        let record = |phase, rtt: i64| PhaseRecord {
            phase,
            start_unix_ns: 0,
            end_unix_ns: 0,
            probes: probes(150, |_| Some(rtt)),
            load: None,
        };
        let report = analyse(
            s.clone(),
            vec![
                record(Phase::Idle, 20 * MS),
                record(Phase::Download, 60 * MS),
                record(Phase::Upload, 22 * MS),
            ],
        )
        .unwrap();
        assert_eq!(report.phases[1].grade, Some(Grade::B));
        assert_eq!(report.phases[2].grade, Some(Grade::APlus));
        assert_eq!(report.grade, Grade::B);
        assert!(report.verdict.contains("while someone downloads"));
        let mut silent = record(Phase::Idle, 20 * MS);
        silent.probes = probes(100, |_| None);
        assert_eq!(
            analyse(s, vec![silent, record(Phase::Upload, 30 * MS)]),
            Err(BloatError::NoBaseline { sent: 100 })
        );
    }
}
