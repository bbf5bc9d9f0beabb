//! `pathlab twin check`'s twin side: the twin built in namespaces (a host `near`, a host
//! `far`, one link between them running the twin's two specs) and the check's workloads
//! run on it as a lab, their reports made [`PathFigures`]. The real side is the
//! measurement driver's ([`pathlab_probe_driver::twin::check_real`]).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use pathlab_results::lab::{LabOutcome, LabRun, LabWorkload};
use pathlab_twin::check::{
    DirectionRuns, PathRuns, Plan, PROBE_BYTES, PROBE_RATE_BPS, RTT_BYTES, RTT_INTERVAL_MS,
};

use crate::run::{RunError, RunOptions};
use crate::spec::{Experiment, SweepPoint};

/// Why the twin's side of a check failed.
#[derive(Debug, thiserror::Error)]
pub enum TwinCheckError {
    /// The lab built from the twin did not parse (a spec the twin file's reader passed
    /// and the lab's refused).
    #[error("the twin's lab: {0}")]
    Spec(#[from] crate::spec::SpecFileError),
    /// The lab failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Its result could not be saved.
    #[error(transparent)]
    Save(#[from] crate::sweep::SaveError),
    /// A workload did not end with its report.
    #[error("the twin's {name}: {why}")]
    Workload {
        /// The workload.
        name: String,
        /// What came of it instead.
        why: String,
    },
}

/// The twin side's length under `plan`, seconds: the workloads in turn (the probes of both
/// ways at once), a second between each, and two at the end.
pub fn length_s(plan: &Plan) -> u64 {
    plan.idle_s + 1 + 2 * (plan.bulk_s + 1) + plan.probes_s + 1 + 1
}

/// The lab spec that runs the check's workloads on a twin: `near` to `far` runs the spec
/// `up`, back `down` (the twin's, a trace they name at a path the lab can read).
pub fn lab_spec(up: &str, down: &str, plan: &Plan) -> String {
    let Plan {
        idle_s,
        bulk_s,
        probes_s,
        ref congestion,
    } = *plan;
    let bulk_up = idle_s + 1;
    let bulk_down = bulk_up + bulk_s + 1;
    let probes_up = bulk_down + bulk_s + 1;
    // Each way's probes cross a direction of their own: both at once.
    let probes_down = probes_up;
    let mut spec = format!(
        "name = \"twin-check\"\nduration = \"{}s\"\n[[node]]\nname = \"near\"\n[[node]]\n\
         name = \"far\"\n[[link]]\nbetween = [\"near\", \"far\"]\nspec = {:?}\nreverse = {:?}\n",
        length_s(plan),
        up,
        down
    );
    let rtt = |name: &str, start: u64, seconds: u64| {
        format!(
            "[[workload]]\nname = \"{name}\"\nkind = \"rtt\"\nfrom = \"near\"\nto = \"far\"\n\
             start = \"{start}s\"\nduration = \"{seconds}s\"\ninterval = \"{RTT_INTERVAL_MS}ms\"\n\
             size = {RTT_BYTES}\n"
        )
    };
    let bulk = |name: &str, from: &str, to: &str, start: u64| {
        format!(
            "[[workload]]\nname = \"{name}\"\nkind = \"tcp\"\nfrom = \"{from}\"\nto = \"{to}\"\n\
             start = \"{start}s\"\nduration = \"{bulk_s}s\"\ncongestion = {congestion:?}\n"
        )
    };
    let probes = |name: &str, from: &str, to: &str, start: u64| {
        format!(
            "[[workload]]\nname = \"{name}\"\nkind = \"owd\"\nfrom = \"{from}\"\nto = \"{to}\"\n\
             start = \"{start}s\"\nduration = \"{probes_s}s\"\nrate = \"{PROBE_RATE_BPS}bit\"\n\
             size = {PROBE_BYTES}\n"
        )
    };
    for part in [
        rtt("idle", 0, idle_s),
        bulk("bulk-up", "near", "far", bulk_up),
        rtt("rtt-up", bulk_up, bulk_s),
        bulk("bulk-down", "far", "near", bulk_down),
        rtt("rtt-down", bulk_down, bulk_s),
        probes("probes-up", "near", "far", probes_up),
        probes("probes-down", "far", "near", probes_down),
    ] {
        let _ = write!(spec, "{part}");
    }
    spec
}

/// Runs the check's workloads in namespaces on a twin whose specs are `up` and `down`
/// ([`lab_spec`]), its results in `out`: the lab's `result.json` (with its link's
/// lateness, `command_line` what made it) and the link's recording.
pub fn run_twin(
    up: &str,
    down: &str,
    plan: &Plan,
    out: &Path,
    command_line: Vec<String>,
) -> Result<PathRuns, TwinCheckError> {
    let text = lab_spec(up, down, plan);
    let experiment = Experiment::parse(&text)?;
    let point = SweepPoint {
        label: String::new(),
        parameters: Vec::new(),
        text,
    };
    let run = crate::run::run(
        &experiment,
        &point,
        &RunOptions {
            out: out.to_path_buf(),
            seed: 1,
            stop: Arc::new(AtomicBool::new(false)),
            control: None,
            trace_dir: None,
            scheduling: pathlab_os::scheduling::Request::default(),
        },
    )?;
    crate::sweep::save_result(out, &run, command_line)?;
    runs(&run)
}

/// The reports of the check's lab run.
fn runs(run: &LabRun) -> Result<PathRuns, TwinCheckError> {
    let find = |name: &str| -> Result<&LabWorkload, TwinCheckError> {
        run.workloads
            .iter()
            .find(|w| w.name == name)
            .ok_or_else(|| TwinCheckError::Workload {
                name: name.into(),
                why: "not in the result".into(),
            })
    };
    let failed = |w: &LabWorkload| TwinCheckError::Workload {
        name: w.name.clone(),
        why: format!("{:?}", w.outcome),
    };
    let rtt = |name: &str| match &find(name)?.outcome {
        LabOutcome::Rtt(report) => Ok(report.as_ref().clone()),
        _ => Err(failed(find(name)?)),
    };
    let tcp = |name: &str| match &find(name)?.outcome {
        LabOutcome::Tcp(report) => Ok(report.as_ref().clone()),
        _ => Err(failed(find(name)?)),
    };
    let owd = |name: &str| match &find(name)?.outcome {
        LabOutcome::Owd(report) => Ok(report.as_ref().clone()),
        _ => Err(failed(find(name)?)),
    };
    // Both bulk transfers are the client's upload: near's up, far's down.
    let direction = |way: &str| -> Result<DirectionRuns, TwinCheckError> {
        Ok(DirectionRuns {
            tcp: tcp(&format!("bulk-{way}"))?,
            up: true,
            rtt: rtt(&format!("rtt-{way}"))?,
            owd: owd(&format!("probes-{way}"))?,
        })
    };
    Ok(PathRuns {
        idle: rtt("idle")?,
        up: direction("up")?,
        down: direction("down")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::WorkloadKind;

    #[test]
    fn both_bulk_transfers_run_the_plans_congestion_control_and_the_lab_lasts_its_length() {
        let plan = Plan::for_bulk(4, "reno");
        let text = lab_spec("delay 10ms rate 10mbit limit 66270b", "delay 10ms", &plan);
        let experiment = Experiment::parse(&text).expect("the twin's lab parses");
        let congestion: Vec<Option<&str>> = experiment
            .workloads
            .iter()
            .filter_map(|w| match &w.kind {
                WorkloadKind::Tcp { congestion, .. } => Some(congestion.as_deref()),
                _ => None,
            })
            .collect();
        assert_eq!(congestion, [Some("reno"), Some("reno")], "{text}");
        assert_eq!(experiment.duration.as_secs(), length_s(&plan), "{text}");
        let last_end = experiment
            .workloads
            .iter()
            .map(|w| (w.start + w.duration).as_secs())
            .max();
        assert!(last_end < Some(length_s(&plan)), "{text}");
    }
}
