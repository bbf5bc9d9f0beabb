//! The recipes the emulator's claims rest on (bufferbloat, AQM, the WAN sweep, owd probing), run
//! by `pathlab lab --quick` with their sweeps thinned to the points judged, against queueing
//! theory and the links' recordings.

use crate::util::emulated::{privileged_paired, run_quick_recipe, run_quick_recipe_points};
use crate::util::late::{ms, Lateness, Quantile};
use crate::util::recorded::recorded_delay_trend;
use crate::util::{median, TempDir};
use pathlab_probe::owd::QueueVerdict;
use pathlab_results::recording::read_recording;

use super::*;

/// The RTT series of a lab run's `rtt` workload named `name`.
fn lab_rtts(result: &std::path::Path, name: &str) -> (u64, Vec<(u64, i64)>) {
    let run = read_lab_run(result);
    assert!(!run.interrupted);
    let workload = run
        .workloads
        .iter()
        .find(|w| w.name == name)
        .expect("workload");
    let pathlab_results::lab::LabOutcome::Rtt(report) = &workload.outcome else {
        panic!("{name}: {:?}", workload.outcome);
    };
    (report.sent, report.series.clone())
}

#[test]
fn the_bufferbloat_recipe_reaches_the_queueing_theory_plateau_for_each_queue() {
    let Some(_serial) = privileged_paired(
        "the_bufferbloat_recipe_reaches_the_queueing_theory_plateau_for_each_queue",
    ) else {
        return;
    };
    let dir = TempDir::new("lab-bufferbloat");
    let out = dir.path("run");
    // The smallest and the largest queue: the theory is the same claim at every size, and
    // the plateau's growth shows between two (users' --quick runs 50 too).
    run_quick_recipe_points("bufferbloat", &[("queue", "[10, 100]")], &out);
    let mut plateaus = Vec::new();
    for queue in [10u32, 100] {
        let (sent, series) = lab_rtts(&out.join(format!("queue-{queue}/result.json")), "probes");
        assert!(
            series.len() as u64 >= sent * 9 / 10,
            "queue {queue}: most probes answered"
        );
        // The plateau: the 99th percentile of the second half, once Reno keeps the queue
        // between half and full. Theory: 4 x 5 ms + a full queue of 1514-byte frames.
        let mut late: Vec<f64> = series
            .iter()
            .filter(|(seq, _)| *seq >= sent / 2)
            .map(|(_, ns)| *ns as f64 / 1e6)
            .collect();
        late.sort_by(f64::total_cmp);
        let plateau = late[(late.len() - 1) * 99 / 100];
        let theory = 20.0 + f64::from(queue) * 1514.0 * 8.0 / 10e6 * 1e3;
        // Late probes are on top: the two links' emulators' lateness at its p99, both ways
        // (past a quarter of the theory a link, the plateau is theirs: the test cannot judge).
        let result = out.join(format!("queue-{queue}/result.json"));
        let budget = Duration::from_secs_f64(theory / 4.0 * 1e-3);
        let late_ms: f64 = ["h1-r1", "r1-h2"]
            .iter()
            .map(|link| {
                ms(Lateness::of_lab_link(&result, link).slack(Quantile::P99, &[0, 1], budget))
            })
            .sum();
        eprintln!(
            "queue {queue}: plateau {plateau:.1} ms, theory {theory:.1} ms, the emulators late by \
             {late_ms:.3} ms"
        );
        assert!(
            (-0.10 * theory..=0.10 * theory + late_ms).contains(&(plateau - theory)),
            "queue {queue}: plateau {plateau:.1} ms against {theory:.1} ms (+-10%, + {late_ms:.3} \
             ms of the emulators' lateness)"
        );
        plateaus.push(plateau);
    }
    assert!(
        plateaus.windows(2).all(|w| w[0] < w[1]),
        "the plateau grows with the queue: {plateaus:?}"
    );
    // The queue's oscillation (the seed: "the period grows as the square of the queue"):
    // overflows of the emulator's queue, spaced as one Reno flow's sawtooth.
    for queue in [10, 100] {
        let run_dir = out.join(format!("queue-{queue}"));
        let run = read_lab_run(&run_dir.join("result.json"));
        let experiment = pathlab_lab::spec::Experiment::parse(&run.spec).expect("parses");
        let sawtooths = pathlab_lab::summary::sawtooths(&experiment, &run, &run_dir);
        let [sawtooth] = sawtooths.as_slice() else {
            panic!("queue {queue}: {sawtooths:?}");
        };
        let theory = sawtooth.theory_s.expect("a fixed bottleneck");
        eprintln!(
            "queue {queue}: period {:.2} s over {} cycles, theory {theory:.2} s",
            sawtooth.period_s, sawtooth.cycles
        );
        assert!(
            (sawtooth.period_s / theory - 1.0).abs() <= 0.15,
            "queue {queue}: {sawtooth:?}"
        );
    }
    for queue in [10, 100] {
        let recording = out.join(format!("queue-{queue}/link-r1-h2.jsonl"));
        let file = std::fs::File::open(&recording).expect("the bottleneck was recorded");
        let recording = read_recording(std::io::BufReader::new(file)).expect("recording reads");
        let peak = recording
            .queue_samples(0)
            .map(|(_, packets, _)| packets)
            .max();
        assert_eq!(
            peak,
            Some(queue),
            "the emulator's queue filled to its limit"
        );
    }
}

/// The round trips of a lab run's `rtt` workload `name` as `(when it was sent on the
/// clock of the link `link`'s emulator, s; rtt, ms)`: the clock a rate schedule runs on.
fn rtts_on_emulator_clock(run_dir: &std::path::Path, name: &str, link: &str) -> Vec<(f64, f64)> {
    let run = read_lab_run(&run_dir.join("result.json"));
    let file = std::fs::File::open(run_dir.join(format!("link-{link}.jsonl"))).expect("recorded");
    let recording = read_recording(std::io::BufReader::new(file)).expect("recording reads");
    let zero = recording.header.expect("header").clock_zero_unix_ns as f64;
    let workload = run
        .workloads
        .iter()
        .find(|w| w.name == name)
        .expect("workload");
    let pathlab_results::lab::LabOutcome::Rtt(report) = &workload.outcome else {
        panic!("{name}: {:?}", workload.outcome);
    };
    assert_eq!(report.series_sent_ns.len(), report.series.len());
    let start = run.started_unix_ns as f64 + workload.start_ns as f64 - zero;
    report
        .series_sent_ns
        .iter()
        .zip(&report.series)
        .map(|(&sent, &(_, rtt))| ((start + sent as f64) / 1e9, rtt as f64 / 1e6))
        .collect()
}

#[test]
fn in_the_aqm_recipe_codel_and_fq_codel_keep_the_1_mbit_phases_rtt_far_below_tail_drop() {
    let Some(_serial) = privileged_paired(
        "in_the_aqm_recipe_codel_and_fq_codel_keep_the_1_mbit_phases_rtt_far_below_tail_drop",
    ) else {
        return;
    };
    let dir = TempDir::new("lab-aqm");
    let out = dir.path("run");
    // Tail drop against the two AQMs whose figures are judged here. RED and PIE (users'
    // --quick runs them too) are held to their own laws in virtual time, where "below tail
    // drop" is implied: crates/pathlab-core/tests/aqm.rs.
    run_quick_recipe_points(
        "aqm",
        &[("queue", r#"["taildrop", "codel", "fq_codel"]"#)],
        &out,
    );
    // --quick: 18 s in six steps of 3 s at 100, 10, 1, 50, 1, 100 Mbit/s.
    let step = 3.0;
    let mut medians = std::collections::BTreeMap::new();
    for queue in ["taildrop", "codel", "fq_codel"] {
        let run_dir = out.join(format!("queue-{queue}"));
        let mut slow: Vec<f64> = rtts_on_emulator_clock(&run_dir, "probes", "r1-h2")
            .into_iter()
            .filter(|(at, _)| [2.0, 4.0].contains(&(at / step).floor()))
            .map(|(_, rtt)| rtt)
            .collect();
        assert!(
            slow.len() >= 20,
            "{queue}: {} probes in the 1 Mbit/s phases",
            slow.len()
        );
        slow.sort_by(f64::total_cmp);
        let median = median(&slow);
        // Goodput cannot exceed the schedule's mean rate less the headers (1448 of 1514 B).
        let run = read_lab_run(&run_dir.join("result.json"));
        let pathlab_results::lab::LabOutcome::Tcp(tcp) = &run.workloads[0].outcome else {
            panic!("{queue}: {:?}", run.workloads[0].outcome);
        };
        let capacity = (100.0 + 10.0 + 1.0 + 50.0 + 1.0 + 100.0) / 6.0 * 1e6 * 1448.0 / 1514.0;
        eprintln!(
            "{queue}: median RTT at 1 Mbit/s {median:.1} ms ({} probes), goodput {:.2} Mbit/s",
            slow.len(),
            tcp.up_bps / 1e6
        );
        assert!(
            tcp.up_bps > 0.0 && tcp.up_bps <= capacity * 1.01,
            "{queue}: {tcp:?}"
        );
        medians.insert(queue, median);
    }
    // Tail drop: the 100-packet buffer stays nearly full, 100 x 1514 B x 8 / 1 Mbit/s =
    // 1.21 s on top of the 20 ms base (less the slots the probes themselves hold, about
    // a tenth, and the first moments of each phase while the queue fills).
    let full = 20.0 + 100.0 * 1514.0 * 8.0 / 1e6 * 1e3;
    assert!(
        medians["taildrop"] >= 0.7 * full,
        "{medians:?} against {full:.0} ms"
    );
    // CoDel holds the sojourn near 5 ms (plus a 12 ms packet in service) once its control
    // law has caught up, which takes about half of a 3 s phase after a fall from 50 to
    // 1 Mbit/s: its median must be under a fifth of tail drop's (measured: 1/17).
    assert!(medians["codel"] <= medians["taildrop"] / 5.0, "{medians:?}");
    // FQ-CoDel serves the sparse probes ahead of the bulk flow: they wait at most for the
    // packet in service and one quantum, 2 x 12.1 ms, on top of the 20 ms base.
    assert!(
        medians["fq_codel"] <= 20.0 + 2.0 * 12.1 + 5.0,
        "{medians:?}"
    );
    assert!(
        medians["fq_codel"] <= medians["taildrop"] / 20.0,
        "{medians:?}"
    );
}

#[test]
fn in_the_wan_sweep_throughput_falls_with_loss_and_follows_the_mathis_bound() {
    let Some(_serial) = privileged_paired(
        "in_the_wan_sweep_throughput_falls_with_loss_and_follows_the_mathis_bound",
    ) else {
        return;
    };
    let dir = TempDir::new("lab-wan-sweep");
    let out = dir.path("run");
    // Two delays by three losses of the quick grid (users' --quick runs 3 x 4): the Mathis
    // bound at 1 and 5% on two paths, the fall with loss from the line rate. At 0 ms the
    // bound says nothing (no RTT), and 2% lies between 1 and 5.
    run_quick_recipe_points(
        "wan-sweep",
        &[("delay", "[10, 25]"), ("loss", "[0, 1, 5]")],
        &out,
    );
    let line_goodput = 100e6 * 1448.0 / 1514.0;
    for delay in [10u32, 25] {
        let mut goodputs = Vec::new();
        for loss in ["0", "1", "5"] {
            let run_dir = out.join(format!("delay-{delay}_loss-{loss}"));
            let run = read_lab_run(&run_dir.join("result.json"));
            assert!(!run.interrupted);
            let workload = &run.workloads[0];
            let pathlab_results::lab::LabOutcome::Tcp(tcp) = &workload.outcome else {
                panic!("{delay} ms, {loss}%: {:?}", workload.outcome);
            };
            // The steady state: what arrived in the second half of the transfer (the first
            // seconds are slow start, which a model of congestion avoidance does not cover).
            let intervals = &tcp.up[0].interval_bytes;
            let late = &intervals[intervals.len() / 2..];
            let steady = late.iter().sum::<u64>() as f64 * 8.0
                / (late.len() as f64 * tcp.interval_ns as f64 / 1e9);
            assert!(
                tcp.up_bps <= line_goodput * 1.01,
                "{delay} ms, {loss}%: {tcp:?}"
            );
            goodputs.push(tcp.up_bps);
            if loss == "0" || delay == 0 {
                continue;
            }
            // The loss the transfer met, from the emulator's truth: its full-size packets
            // on the way there, and how many of them the loss model took.
            let file =
                std::fs::File::open(run_dir.join("link-client-wan.jsonl")).expect("recorded");
            let recording = read_recording(std::io::BufReader::new(file)).expect("reads");
            let data: Vec<_> = recording
                .packets(0)
                .filter(|p| p.len_bytes > 1000)
                .collect();
            let lost = data
                .iter()
                .filter(|p| matches!(p.dropped, Some((_, pathlab_core::DropReason::Loss))))
                .count();
            let p = lost as f64 / data.len() as f64;
            let nominal: f64 = loss.parse::<f64>().unwrap() / 100.0;
            assert!(
                (p / nominal - 1.0).abs() < 0.5,
                "{delay} ms: applied {p} for {nominal}"
            );
            // Mathis et al.: (MSS / RTT) x sqrt(3/2) / sqrt(p), with the base RTT (the real
            // one is longer, so this errs high). A run's goodput averages the sawtooth
            // cycles its N losses end, so it carries a sampling error of about 1/sqrt(N):
            // allow two of them.
            let rtt = 2.0 * f64::from(delay) / 1e3;
            let bound = pathlab_results::lab::mathis_bps(1448.0, rtt, p);
            let allowance = 1.0 + 2.0 / (lost as f64).sqrt();
            eprintln!(
                "{delay} ms, {loss}%: goodput {:.2} Mbit/s, steady {:.2}, Mathis {:.2} (p {p:.4}, {lost} losses, C = {:.2})",
                tcp.up_bps / 1e6,
                steady / 1e6,
                bound / 1e6,
                steady / bound * 1.5f64.sqrt()
            );
            assert!(
                steady <= bound * allowance,
                "{delay} ms, {loss}%: {steady:.0} bit/s above the Mathis bound {bound:.0} x {allowance:.2}"
            );
        }
        // Throughput falls with loss (where the line rate does not cap both) and loses at
        // least half at 5%.
        assert!(
            goodputs.windows(2).all(|w| w[1] <= w[0] * 1.03),
            "{delay} ms: {goodputs:?}"
        );
        assert!(goodputs[2] < goodputs[0] / 2.0, "{delay} ms: {goodputs:?}");
    }
}

#[test]
fn the_owd_probe_recipe_sees_the_queue_build_at_15_mbits_and_not_at_10() {
    let Some(_serial) =
        privileged_paired("the_owd_probe_recipe_sees_the_queue_build_at_15_mbits_and_not_at_10")
    else {
        return;
    };
    let dir = TempDir::new("lab-owd-probe");
    let out = dir.path("run");
    run_quick_recipe("owd-probe", &out);
    for (rate, building) in [(10e6, false), (15e6, true)] {
        let point = out.join(format!("rate-{}mbit", rate / 1e6));
        let run = read_lab_run(&point.join("result.json"));
        let pathlab_results::lab::LabOutcome::Owd(result) = &run.workloads[0].outcome else {
            panic!("{:?}", run.workloads[0].outcome);
        };
        assert_eq!(result.sequence.lost, 0, "the deep buffer drops nothing");
        // The truth: the same trend test on what the bottleneck link recorded of the probes
        // (frames of 1242 bytes, r1 -> h2), in model time.
        let recording = read_recording(std::io::BufReader::new(
            std::fs::File::open(point.join("link-r1-h2.jsonl")).expect("the link's recording"),
        ))
        .expect("the recording reads");
        let header = recording.header.as_ref().expect("a header");
        let towards_h2 = header
            .directions
            .iter()
            .position(|d| d.spec.contains("rate"))
            .expect("the shaped direction") as u8;
        let truth = recorded_delay_trend(&recording, towards_h2, 1242, result.owd.window as usize);
        let truth_us_per_s = truth.trend_ns_per_s * 1e-3;
        eprintln!(
            "{} Mbit/s: the probe says {:?}, {:.0} +- {:.0} us/s; the link's recording {:?}, \
             {truth_us_per_s:.0} us/s",
            rate / 1e6,
            result.owd.verdict,
            result.owd.trend_us_per_s,
            result.owd.trend_ci95_us_per_s,
            truth.verdict
        );
        assert_eq!(
            result.owd.verdict, truth.verdict,
            "the probe's verdict against the link's recording: {truth:?}"
        );
        // The probe's trend also carries the first hop and the hosts' timing (0.4 ms
        // over the run's 8 s): within that, its own 95% interval, the recording's, and 5%
        // of the recorded one.
        let tolerance = 50.0
            + 0.05 * truth_us_per_s.abs()
            + result.owd.trend_ci95_us_per_s
            + 1.96 * truth.trend_se_ns_per_s * 1e-3;
        assert!(
            (result.owd.trend_us_per_s - truth_us_per_s).abs() <= tolerance,
            "trend {:.0} us/s against {truth_us_per_s:.0} recorded (tolerance {tolerance:.0})",
            result.owd.trend_us_per_s
        );
        if building {
            // Frames of 1242 bytes arrive at lambda = 15 Mbit/s x 1242/1200 and leave at
            // mu = 11 Mbit/s: per second of arrivals the delay grows by (lambda - mu)/lambda.
            let lambda = rate * 1242.0 / 1200.0;
            let theory_us_per_s = (lambda - 11e6) / lambda * 1e6;
            assert_eq!(result.owd.verdict, QueueVerdict::Building);
            assert!(
                (result.owd.trend_us_per_s / theory_us_per_s - 1.0).abs() <= 0.05,
                "trend {:.0} us/s against {theory_us_per_s:.0}",
                result.owd.trend_us_per_s
            );
        } else if truth.verdict == QueueVerdict::Building {
            // 10 Mbit/s into 11 builds no queue when the probes leave on time; a sender
            // late on a busy machine that catches up in bursts does build one, and then the
            // claim judged is the probe's agreement with the recording, above.
            eprintln!("10 Mbit/s: the link's own queue grew (the sender caught up in bursts)");
        } else {
            assert_eq!(truth.verdict, QueueVerdict::NotBuilding);
        }
    }
}
