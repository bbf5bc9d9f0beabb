//! How the nodes' results and recordings become one run: [`merge`], [`merge_recordings`].

use std::io::{BufRead, Read as _, Write};

use pathlab_lab::spec::{Experiment, SweepPoint};
use pathlab_lab::topology::{CABLE_A, CABLE_B};
use pathlab_results::lab::{LabLink, LabOutcome, LabRun, LinkChange};
use pathlab_results::recording::{
    read_recording, write_header, write_line, DirectionInfo, RecordingHeader, RecordingLine,
};

use crate::node::wire::NodeResult;

/// The run the nodes' `results` (one per node, in the experiment's order) make together,
/// as `pathlab lab` would have written it on one machine.
pub fn merge(experiment: &Experiment, point: &SweepPoint, results: &[NodeResult]) -> LabRun {
    let half = |node: usize, link: &str| results[node].links.iter().find(|h| h.link == link);
    let links = experiment
        .links
        .iter()
        .map(|link| {
            let (a, b) = (half(link.a, &link.name), half(link.b, &link.name));
            let mut changes: Vec<LinkChange> = Vec::new();
            for (side, node) in [(a, link.a), (b, link.b)] {
                for change in side.iter().flat_map(|h| &h.changes) {
                    // A node's forward is what leaves it.
                    let (forward, reverse) = if node == link.a {
                        (change.forward.clone(), change.reverse.clone())
                    } else {
                        (change.reverse.clone(), change.forward.clone())
                    };
                    changes.push(LinkChange {
                        at_ns: change.at_ns,
                        forward,
                        reverse,
                        by: format!("{} at {}", change.by, experiment.nodes[node].name),
                    });
                }
            }
            changes.sort_by_key(|c| c.at_ns);
            LabLink {
                name: link.name.clone(),
                forward: link.forward.to_string(),
                reverse: link.reverse.to_string(),
                recording: Some(format!("link-{}.jsonl", link.name)),
                lateness: [a, b]
                    .into_iter()
                    .flatten()
                    .filter_map(|h| h.lateness.clone())
                    .collect(),
                changes,
                underlay: Vec::new(),
            }
        })
        .collect();
    let workloads = experiment
        .workloads
        .iter()
        .map(|workload| {
            let came = results[workload.from]
                .workloads
                .iter()
                .find(|o| o.name == workload.name)
                .map_or_else(
                    || {
                        (
                            LabOutcome::Failed(format!(
                                "node {} sent no result for it",
                                experiment.nodes[workload.from].name
                            )),
                            None,
                        )
                    },
                    |o| (o.outcome.clone(), o.inspect.clone()),
                );
            pathlab_lab::run::lab_workload(experiment, workload, came)
        })
        .collect();
    let mut kernels: Vec<&str> = results.iter().map(|r| r.kernel.as_str()).collect();
    kernels.sort_unstable();
    kernels.dedup();
    let started = results.iter().map(|r| r.started_unix_ns).min().unwrap_or(0);
    LabRun {
        name: experiment.name.clone(),
        description: experiment.description.clone(),
        spec: point.text.clone(),
        kernel: kernels.join("; "),
        started_unix_ns: started,
        duration_ns: results
            .iter()
            .map(|r| {
                r.started_unix_ns
                    .saturating_add(r.duration_ns)
                    .saturating_sub(started)
            })
            .max()
            .unwrap_or(0),
        interrupted: results.iter().any(|r| r.interrupted),
        parameters: point.parameters.clone(),
        links,
        workloads,
        scheduling: merge_scheduling(results),
    }
}

/// The scheduling of a lab's nodes as one: the first node's where all agree, else the
/// first that differs from it, its notes naming the node (a run's timing holds only as
/// far as its worst-scheduled node's).
fn merge_scheduling(results: &[NodeResult]) -> Option<pathlab_results::lab::Scheduling> {
    let first = results.iter().find_map(|r| r.scheduling.as_ref())?;
    let differs = results.iter().find(|r| {
        r.scheduling
            .as_ref()
            .is_some_and(|s| s.policy != first.policy || s.memory_locked != first.memory_locked)
    });
    Some(match differs {
        None => first.clone(),
        Some(result) => {
            let mut merged = result.scheduling.clone().expect("found with one");
            merged.policy = "mixed".into();
            merged.notes = merged
                .notes
                .iter()
                .map(|n| format!("node {}: {n}", result.node))
                .collect();
            merged
        }
    })
}

/// One recording of a link from its two ends' recordings `a` and `b`, written to `out`: the
/// `a` end's egress (its direction 0) as direction 0, the `b` end's as direction 1, both
/// on the earlier time zero. Read a line at a time: a recording is never whole in memory.
/// A last line cut short is ignored, as [`pathlab_results::recording::read_recording`]
/// ignores it; any other bad line is an error naming its end and line.
pub fn merge_recordings(
    mut a: impl BufRead,
    mut b: impl BufRead,
    out: &mut impl Write,
) -> Result<(), String> {
    let (ha, hb) = (read_header(&mut a, "a")?, read_header(&mut b, "b")?);
    let zero = ha.clock_zero_unix_ns.min(hb.clock_zero_unix_ns);
    let spec = |h: &RecordingHeader| {
        h.directions
            .first()
            .map(|d| d.spec.clone())
            .unwrap_or_default()
    };
    let header = RecordingHeader {
        magic: ha.magic.clone(),
        version: ha.version,
        pathlab_version: ha.pathlab_version.clone(),
        command: vec!["pathlab lab collect".to_owned()],
        clock_zero_unix_ns: zero,
        directions: vec![
            DirectionInfo {
                from: CABLE_A.to_owned(),
                to: CABLE_B.to_owned(),
                spec: spec(&ha),
            },
            DirectionInfo {
                from: CABLE_B.to_owned(),
                to: CABLE_A.to_owned(),
                spec: spec(&hb),
            },
        ],
        queue_sample_interval_ns: ha.queue_sample_interval_ns.min(hb.queue_sample_interval_ns),
    };
    write_header(out, &header).map_err(|e| e.to_string())?;
    for (reader, header, dir, end) in [
        (&mut a as &mut dyn BufRead, &ha, 0u8, "a"),
        (&mut b as &mut dyn BufRead, &hb, 1u8, "b"),
    ] {
        let by = pathlab_core::time::Duration::from_nanos(header.clock_zero_unix_ns - zero);
        let mut lines = reader.lines().enumerate().peekable();
        while let Some((index, line)) = lines.next() {
            let line = line.map_err(|e| format!("the {end} end's recording: {e}"))?;
            let parsed = match serde_json::from_str::<RecordingLine>(&line) {
                Ok(parsed) => parsed,
                Err(_) if lines.peek().is_none() => break,
                Err(e) => {
                    return Err(format!(
                        "the {end} end's recording, line {}: {e}",
                        index + 2
                    ))
                }
            };
            if parsed.dir() == 0 {
                write_line(out, &parsed.shifted(by).with_dir(dir)).map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// A recording's header line, checked as [`pathlab_results::recording::read_recording`]
/// checks it (`end` names the recording in an error).
fn read_header(reader: &mut impl BufRead, end: &str) -> Result<RecordingHeader, String> {
    let mut first = String::new();
    // A header is a line of a few hundred bytes: a longer one is not read whole.
    reader
        .take(64 * 1024)
        .read_line(&mut first)
        .map_err(|e| format!("the {end} end's recording: {e}"))?;
    let recording =
        read_recording(first.as_bytes()).map_err(|e| format!("the {end} end's recording: {e}"))?;
    recording
        .header
        .ok_or_else(|| format!("the {end} end's recording has no header"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::wire::{HalfLink, NodeOutcome};
    use pathlab_results::recording::{RECORDING_MAGIC, RECORDING_VERSION};

    fn merge_bytes(a: &[u8], b: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        merge_recordings(a, b, &mut out)?;
        Ok(out)
    }

    /// A node's recording: zero at `zero_unix_ns`, its egress (direction 0) with a packet
    /// that arrived at `arrived` ns and a queue sample, its ingress with one packet.
    fn recording(zero_unix_ns: u64, arrived: u64, spec: &str) -> Vec<u8> {
        let header = RecordingHeader {
            magic: RECORDING_MAGIC.into(),
            version: RECORDING_VERSION,
            pathlab_version: "test".into(),
            command: Vec::new(),
            clock_zero_unix_ns: zero_unix_ns,
            directions: vec![
                DirectionInfo {
                    from: "inside".into(),
                    to: "to-x".into(),
                    spec: spec.into(),
                },
                DirectionInfo {
                    from: "to-x".into(),
                    to: "inside".into(),
                    spec: String::new(),
                },
            ],
            queue_sample_interval_ns: 10_000_000,
        };
        let at = pathlab_core::time::Instant::from_nanos;
        let packet = |dir: u8, id: u64| RecordingLine::Packet {
            dir,
            record: pathlab_core::record::PacketRecord {
                id,
                tag: 0,
                flow: pathlab_core::packet::FlowHash::default(),
                len_bytes: 1514,
                arrived: at(arrived),
                ecn_on_arrival: pathlab_core::packet::Ecn::NotEct,
                queue_len_on_arrival: Some(0),
                dequeued: Some(at(arrived)),
                transmitted: Some(at(arrived + 1_000)),
                departed: Some(at(arrived + 5_000_000)),
                dropped: None,
                duplicate_of: None,
                ce_marked: false,
                corrupted: false,
                sent: None,
            },
        };
        let mut out = Vec::new();
        write_header(&mut out, &header).unwrap();
        for line in [
            packet(0, 1),
            RecordingLine::Queue {
                dir: 0,
                at: at(arrived),
                packets: 3,
                bytes: 4542,
            },
            packet(1, 2),
        ] {
            write_line(&mut out, &line).unwrap();
        }
        out
    }

    #[test]
    fn a_links_two_halves_become_one_recording_on_the_earlier_time_zero() {
        // b's emulator started 2 ms after a's: its times move 2 ms later.
        let a = recording(1_000_000_000, 7_000, "delay 5ms");
        let b = recording(1_002_000_000, 9_000, "delay 1ms");
        let merged = read_recording(merge_bytes(&a, &b).unwrap().as_slice()).unwrap();
        let header = merged.header.as_ref().unwrap();
        assert_eq!(header.clock_zero_unix_ns, 1_000_000_000);
        assert_eq!(
            header
                .directions
                .iter()
                .map(|d| (d.from.as_str(), d.to.as_str(), d.spec.as_str()))
                .collect::<Vec<_>>(),
            [
                (CABLE_A, CABLE_B, "delay 5ms"),
                (CABLE_B, CABLE_A, "delay 1ms")
            ]
        );
        // Only each end's egress: its ingress is the other end's egress.
        let arrived = |dir| {
            merged
                .packets(dir)
                .map(|p| p.arrived.as_nanos())
                .collect::<Vec<_>>()
        };
        assert_eq!(arrived(0), [7_000]);
        assert_eq!(arrived(1), [2_009_000]);
        let departed: Vec<u64> = merged
            .packets(1)
            .filter_map(|p| p.departed)
            .map(pathlab_core::Instant::as_nanos)
            .collect();
        assert_eq!(departed, [2_009_000 + 5_000_000]);
        let queued: Vec<_> = merged
            .queue_samples(1)
            .map(|(at, p, _)| (at.as_nanos(), p))
            .collect();
        assert_eq!(queued, [(2_009_000, 3)]);
        // Bad input from a node is an error, not a panic.
        assert!(merge_bytes(b"{}", &b).is_err());
        assert!(merge_bytes(&a, b"").is_err());
    }

    #[test]
    fn the_nodes_results_make_the_run_a_one_machine_run_would_have_written() {
        let text = pathlab_lab::recipes::recipe("bufferbloat").unwrap();
        let point = pathlab_lab::spec::expand(text, true).unwrap().remove(0);
        let experiment = Experiment::parse(&point.text).unwrap().quick();
        let node = |k: usize, started: u64, duration: u64| NodeResult {
            node: experiment.nodes[k].name.clone(),
            kernel: if k == 0 { "Linux a" } else { "Linux b" }.into(),
            started_unix_ns: started,
            duration_ns: duration,
            interrupted: false,
            scheduling: None,
            workloads: experiment
                .workloads
                .iter()
                .filter(|w| w.from == k)
                .map(|w| NodeOutcome {
                    name: w.name.clone(),
                    outcome: LabOutcome::NotStarted,
                    inspect: None,
                })
                .collect(),
            links: experiment
                .links
                .iter()
                .filter(|l| l.a == k || l.b == k)
                .map(|l| HalfLink {
                    link: l.name.clone(),
                    egress: String::new(),
                    lateness: None,
                    changes: vec![LinkChange {
                        at_ns: 1_000 * k as u64,
                        forward: Some("delay 9ms".into()),
                        reverse: None,
                        by: "http".into(),
                    }],
                })
                .collect(),
            underlay: Vec::new(),
        };
        let results: Vec<NodeResult> = (0..experiment.nodes.len())
            .map(|k| node(k, 5_000 + k as u64, 1_000_000))
            .collect();
        let run = merge(&experiment, &point, &results);
        assert_eq!(run.started_unix_ns, 5_000);
        assert_eq!(
            run.duration_ns,
            1_000_000 + (experiment.nodes.len() as u64 - 1)
        );
        assert_eq!(run.kernel, "Linux a; Linux b");
        assert_eq!(run.links.len(), experiment.links.len());
        for (link, spec) in run.links.iter().zip(&experiment.links) {
            assert_eq!(link.forward, spec.forward.to_string());
            assert_eq!(
                link.recording.as_deref(),
                Some(format!("link-{}.jsonl", spec.name).as_str())
            );
            // Each end's change to what leaves it: the a end's is the link's forward, the
            // b end's its reverse.
            let sides: Vec<_> = link
                .changes
                .iter()
                .map(|c| (c.forward.is_some(), c.reverse.is_some()))
                .collect();
            assert_eq!(sides, [(true, false), (false, true)]);
        }
        assert_eq!(run.workloads.len(), experiment.workloads.len());
        for (entry, workload) in run.workloads.iter().zip(&experiment.workloads) {
            assert_eq!(entry.name, workload.name);
            assert_eq!(entry.outcome, LabOutcome::NotStarted);
            assert_eq!(
                entry.path,
                pathlab_lab::summary::path_theory(&experiment, workload)
            );
        }
        // A workload its node sent nothing for is a failure that says which node.
        let mut missing = results.clone();
        let client = experiment.workloads[0].from;
        missing[client].workloads.clear();
        let run = merge(&experiment, &point, &missing);
        assert!(
            matches!(&run.workloads[0].outcome, LabOutcome::Failed(why) if why.contains("sent no result"))
        );
    }
}
