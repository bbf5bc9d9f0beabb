//! The `modem-pps` recipe (seed 000's packet-rate table) in namespaces: what each line
//! delivered against the theory of its spec, and against the seed.
//!
//! Theory, per probe stream: a line saturated by frames of `size + 42` bytes delivers one
//! per service time, so it carries min(sent, capacity) packets per second, with capacity
//! = min(N, R / (8 frame)) for `rate R pps N` and R / (8 x 53 x ceil((frame + O) / 48))
//! for `rate R O 48 5` (netem's cells, ATM's 48 bytes of payload in 53).
//!
//! Tolerance 2%: the arrivals are counted over their span (2.6 s per stream with
//! `--quick`), and the emulator's late sends on this busy 2-core machine shift either end
//! of it (p99 lateness up to 20 ms was seen in a second of a run: 0.8% of the span at
//! each end).

use crate::util;

use crate::util::emulated::{privileged_paired, run_quick_recipe};
use pathlab_core::spec::RateSpec;
use pathlab_core::LinkSpec;
use pathlab_results::lab::{LabOutcome, LabRun};

const TOLERANCE: f64 = 0.02;

/// Packets per second the line of `spec` carries of frames of `frame` bytes, from the
/// formulas above.
fn capacity(spec: &LinkSpec, frame: u32) -> f64 {
    let Some(RateSpec::Fixed(fixed)) = spec.rate else {
        panic!("a fixed rate: {spec}")
    };
    let rate = fixed.rate.as_f64();
    if fixed.cell_size == 0 {
        let n = f64::from(spec.packet_rate.expect("a packet rate").get());
        n.min(rate / (8.0 * f64::from(frame)))
    } else {
        assert_eq!((fixed.cell_size, fixed.cell_overhead), (48, 5), "ATM cells");
        let cells = (i64::from(frame) + i64::from(fixed.packet_overhead)).div_euclid(48)
            + i64::from((i64::from(frame) + i64::from(fixed.packet_overhead)) % 48 != 0);
        rate / (8.0 * 53.0 * cells as f64)
    }
}

fn lab_run(path: &std::path::Path) -> LabRun {
    let text = std::fs::read_to_string(path).expect("result.json");
    match pathlab_results::ResultFile::from_json(&text)
        .expect("a result file")
        .result
    {
        pathlab_results::RunResult::Lab(run) => *run,
        _ => panic!("not a lab run"),
    }
}

#[test]
fn the_modem_pps_recipe_delivers_what_each_explanation_predicts_and_the_seeds_rates() {
    let Some(_serial) = privileged_paired("modem_pps_recipe") else {
        return;
    };
    let dir = util::TempDir::new("lab-modem-pps");
    let out = dir.path("run");
    let printed = run_quick_recipe("modem-pps", &out);
    let run = lab_run(&out.join("result.json"));
    // (explanation, size) -> delivered packets/s, and the theory's.
    let mut delivered = std::collections::BTreeMap::new();
    let mut theories = std::collections::BTreeMap::new();
    let mut sent_200 = None;
    for workload in &run.workloads {
        let LabOutcome::Owd(result) = &workload.outcome else {
            panic!("{}: {:?}", workload.name, workload.outcome)
        };
        let to = workload.to.as_deref().expect("a peer");
        let link = run
            .links
            .iter()
            .find(|l| l.name == format!("server-{to}"))
            .expect("the line to the client");
        let spec = LinkSpec::parse(&link.forward).expect("the spec as run");
        let frame = result.size + 42;
        let sent = result.achieved_pps;
        let theory = sent.min(capacity(&spec, frame));
        let measured = result.delivered_pps().expect("probes arrived");
        eprintln!(
            "{}: sent {sent:.0}/s, delivered {measured:.0}/s, theory {theory:.0}/s",
            workload.name
        );
        assert!(
            (measured / theory - 1.0).abs() < TOLERANCE,
            "{} through '{spec}': delivered {measured:.0} packets/s, theory {theory:.0}",
            workload.name
        );
        let explanation = workload.name.split('-').next().unwrap().to_owned();
        if result.size == 200 {
            sent_200.get_or_insert(sent);
        }
        theories.insert((explanation.clone(), result.size), theory);
        delivered.insert((explanation, result.size), measured);
    }
    assert_eq!(delivered.len(), 8, "4 sizes through each of 2 lines");
    // Against the seed: the packet-rate line passes 5485 of the 200-byte probes (the
    // fit's N), and both pass 400 bytes as the seed saw (3126/s, 3125 sent).
    let seed_200 = 5485.0;
    let pps_200 = delivered[&("pps".to_owned(), 200)];
    assert!(
        (pps_200 / seed_200 - 1.0).abs() < TOLERANCE,
        "{pps_200} against the seed's {seed_200}"
    );
    for line in ["pps", "atm"] {
        let at_400 = delivered[&(line.to_owned(), 400)];
        assert!(
            (at_400 / 3126.0 - 1.0).abs() < TOLERANCE,
            "{line}: {at_400}"
        );
    }
    // The cells carry fewer 200-byte probes than the packet rate (theory 5341 against
    // 5485, 2.7% fewer): the two explanations differ where the seed measured. Both lines
    // are measured against that only when the senders kept them saturated (a sender
    // starved of its core on a busy machine sends fewer than either line carries, and
    // the theory follows it down).
    let key = |line: &str| (line.to_owned(), 200);
    let atm_200 = delivered[&key("atm")];
    let (atm_theory, pps_theory) = (theories[&key("atm")], theories[&key("pps")]);
    assert!(
        atm_theory <= pps_theory,
        "{atm_theory} against {pps_theory}"
    );
    if atm_theory < pps_theory {
        assert!(atm_200 < pps_200, "atm {atm_200} against pps {pps_200}");
    } else {
        eprintln!("the senders did not saturate either line at 200 B: not compared");
    }
    // The summary gives the fits and the comparison.
    assert!(
        printed.contains("a packet-rate limit explains the seed better"),
        "{printed}"
    );
    assert!(
        printed.contains("pps: 'rate 11501kbit pps 5485'"),
        "{printed}"
    );
    assert!(
        printed.contains("atm: 'rate 13587kbit 23 48 5'"),
        "{printed}"
    );
    // Its table gives the rate the 200-byte probes were sent at (as recorded: 6250/s
    // asked, less on a busy machine) beside the seed's 5485 delivered.
    let sent_200 = sent_200.expect("200-byte probes");
    let row = format!("200 B {sent_200:>7.0}   5485");
    assert!(printed.contains(&row), "'{row}' in {printed}");
}
