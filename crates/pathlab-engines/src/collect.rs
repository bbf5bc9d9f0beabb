//! `pathlab lab collect`: runs an exported lab whose nodes (`pathlab node`) an engine
//! started, and gathers their results into one, as a one-machine `pathlab lab` run would
//! have written it.
//!
//! It waits until every node is ready (interfaces found, emulators in front, underlay
//! measured), gives them all one start instant a little ahead, waits for the run to end,
//! then reads each node's result, recordings and outputs. A link's two directions were
//! emulated at its two ends: [`merge_recordings`] makes them one recording, direction 0
//! from the link's `a` end, on one time zero. Everything a node sends is checked against
//! the config the export wrote for it ([`wire`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pathlab_results::lab::{LabLink, LabOutcome, LabRun, LinkChange};
use pathlab_results::recording::{
    read_recording, write_header, write_line, DirectionInfo, RecordingHeader,
};

use crate::export::node::NodeConfig;
use crate::node::wire::{self, NodeResult, NodeStatus, Phase, StartRequest, Underlay};
use pathlab_lab::spec::{Experiment, SweepPoint};
use pathlab_lab::sweep::{save_result, PlannedRun, SaveError};
use pathlab_lab::topology::{CABLE_A, CABLE_B};

/// A collection, as `pathlab lab collect` makes it: which lab, where its nodes are, how
/// long to wait for them, where its result goes.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    /// The lab as it was exported: one sweep point, `--quick` applied.
    pub run: PlannedRun,
    /// Each node's config as the export wrote it, in the experiment's order of nodes.
    pub configs: Vec<NodeConfig>,
    /// Each node's control address (`HOST:PORT`), in the experiment's order of nodes.
    pub addresses: Vec<String>,
    /// The nodes' bearer token.
    pub token: Option<String>,
    /// How long to wait for every node to be ready, and for the results after the run.
    pub wait: Duration,
    /// How far ahead of the order the run starts (every node must have it by then).
    pub lead: Duration,
    /// Where the result, recordings and outputs go.
    pub out: PathBuf,
    /// The command line that asked for the collection, recorded in the result file.
    pub command_line: Vec<String>,
}

/// How far ahead of the order to start a lab's nodes: every node must have it by then,
/// and two seconds is many round trips even across a cluster.
pub const DEFAULT_LEAD: Duration = Duration::from_secs(2);

/// Why `--address` gives no address to some node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// A pair that is not `NODE=HOST:PORT`.
    #[error("'{pair}' is not NODE=HOST:PORT")]
    NotAPair {
        /// The pair as given.
        pair: String,
    },
    /// A node the lab does not have.
    #[error("the lab has no node '{node}' (its nodes: {})", .nodes.join(", "))]
    NoSuchNode {
        /// The name given.
        node: String,
        /// The lab's nodes.
        nodes: Vec<String>,
    },
    /// A node given no address.
    #[error("no address for node '{node}'")]
    Missing {
        /// The node.
        node: String,
    },
}

/// Each node's control address from `pattern`: a pattern in which `{node}` and `{lab}`
/// are replaced by the node's and the lab's names (`clab-{lab}-{node}:8080`), or
/// `NODE=HOST:PORT,...`, one for each of `nodes` by name.
pub fn addresses(pattern: &str, lab: &str, nodes: &[String]) -> Result<Vec<String>, AddressError> {
    if !pattern.contains('=') {
        return Ok(nodes
            .iter()
            .map(|node| pattern.replace("{node}", node).replace("{lab}", lab))
            .collect());
    }
    let mut given = std::collections::HashMap::new();
    for pair in pattern.split(',') {
        let Some((node, address)) = pair.split_once('=') else {
            return Err(AddressError::NotAPair {
                pair: pair.to_owned(),
            });
        };
        if !nodes.iter().any(|n| n == node) {
            return Err(AddressError::NoSuchNode {
                node: node.to_owned(),
                nodes: nodes.to_vec(),
            });
        }
        given.insert(node.to_owned(), address.to_owned());
    }
    nodes
        .iter()
        .map(|node| {
            given
                .remove(node)
                .ok_or_else(|| AddressError::Missing { node: node.clone() })
        })
        .collect()
}

/// Why a collection failed.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// A node could not be reached or answered wrongly.
    #[error("node {node} at {address}: {message}")]
    Node {
        /// The node.
        node: String,
        /// Its control address.
        address: String,
        /// What went wrong.
        message: String,
    },
    /// Nodes not ready in time.
    #[error("not ready after {} s: {}", .waited.as_secs(), .nodes.join("; "))]
    NotReady {
        /// Each with its phase or why it was not reached.
        nodes: Vec<String>,
        /// How long it waited.
        waited: Duration,
    },
    /// Writing a file.
    #[error("{context}: {source}")]
    Io {
        /// What.
        context: String,
        /// Why.
        source: std::io::Error,
    },
    /// Stopped by a signal.
    #[error("stopped")]
    Stopped,
    /// The gathered run's result file could not be written.
    #[error(transparent)]
    Save(#[from] SaveError),
}

/// One node as the collector sees it.
struct Node<'a> {
    config: &'a NodeConfig,
    sha256: String,
    address: &'a str,
}

impl Node<'_> {
    fn error(&self, message: &dyn std::fmt::Display) -> CollectError {
        CollectError::Node {
            node: self.config.node.clone(),
            address: self.address.to_owned(),
            message: message.to_string(),
        }
    }

    fn get(
        &self,
        path: &str,
        most: usize,
        token: Option<&str>,
    ) -> Result<(u16, Vec<u8>), CollectError> {
        let response =
            pathlab_http::server::request_within(self.address, "GET", path, token, None, most)
                .map_err(|e| self.error(&e))?;
        Ok((response.status, response.body))
    }

    /// The node's status; `Ok(Err(why))` while it does not answer (its pod is starting),
    /// an error when it answers wrongly (another node or config, a refused token): no
    /// use waiting for it.
    fn status(&self, token: Option<&str>) -> Result<Result<NodeStatus, String>, CollectError> {
        let response = match pathlab_http::server::request_within(
            self.address,
            "GET",
            wire::STATUS_PATH,
            token,
            None,
            wire::MAX_STATUS_BYTES,
        ) {
            Ok(response) => response,
            Err(error) => return Ok(Err(self.error(&error).to_string())),
        };
        match response.status {
            200 => NodeStatus::parse(&response.body, self.config, &self.sha256)
                .map(Ok)
                .map_err(|e| self.error(&e)),
            code @ (401 | 403) => Err(self.error(&format!(
                "refused the token ({code}): {}",
                text(&response.body)
            ))),
            code => Ok(Err(self
                .error(&format!("status {code}: {}", text(&response.body)))
                .to_string())),
        }
    }
}

/// A body's first 200 characters, for an error message.
fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
}

/// Runs the lab the nodes at `config.addresses` play (`config.configs[k]` at address k,
/// each as the export wrote it) and writes its result to `config.out`, as `pathlab lab`
/// would: `result.json`'s run, each link's recording, each command's output. `progress`
/// hears what it waits for and warns of, a line at a time. A `stop` signal before the
/// nodes start fails it ([`CollectError::Stopped`]); one during the run gathers what the
/// nodes recorded, as an interrupted run.
pub fn run(
    config: &CollectConfig,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> Result<LabRun, CollectError> {
    let PlannedRun { experiment, point } = &config.run;
    let nodes: Vec<Node<'_>> = config
        .configs
        .iter()
        .zip(&config.addresses)
        .map(|(node_config, address)| Node {
            config: node_config,
            sha256: wire::sha256_hex(node_config.to_toml().as_bytes()),
            address,
        })
        .collect();
    std::fs::create_dir_all(&config.out).map_err(|source| CollectError::Io {
        context: format!("creating {}", config.out.display()),
        source,
    })?;

    let underlay = wait_until_ready(&nodes, config, stop, progress)?;
    start_all(&nodes, config)?;
    progress(&format!(
        "started all {} nodes; the run takes {} s",
        nodes.len(),
        experiment.duration.as_secs_f64()
    ));
    let end = Instant::now() + config.lead + experiment.duration;
    let stopped_in_run = !pathlab_lab::workload::sleep_until(end, stop);
    let (results, stopped_after) = node_results(&nodes, config, stop)?;
    let stopped = stopped_in_run || stopped_after;
    save_recordings_and_outputs(experiment, &nodes, &config.out, config.token.as_deref())?;
    let mut run = merge(experiment, point, &results);
    run.interrupted |= stopped;
    for link in &mut run.links {
        link.underlay = underlay
            .iter()
            .filter(|u| u.link == link.name)
            .cloned()
            .collect();
    }
    save_result(&config.out, &run, config.command_line.clone())?;
    Ok(run)
}

/// Waits until every node is ready, saying every 5 s how many are; gives the underlay
/// each measured (after warning of any that is poor). Fails when a node failed or has run
/// already, when they are not all ready within `config.wait`, or on a stop signal.
fn wait_until_ready(
    nodes: &[Node<'_>],
    config: &CollectConfig,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Underlay>, CollectError> {
    let token = config.token.as_deref();
    let deadline = Instant::now() + config.wait;
    let mut ready: Vec<Option<NodeStatus>> = vec![None; nodes.len()];
    let mut said = Instant::now();
    loop {
        let mut waiting = Vec::new();
        for (node, seen) in nodes.iter().zip(&mut ready) {
            if seen.is_some() {
                continue;
            }
            match node.status(token)? {
                Ok(status) if status.phase == Phase::Ready => *seen = Some(status),
                Ok(status) if status.phase == Phase::Failed => {
                    return Err(
                        node.error(&format!("failed: {}", status.message.unwrap_or_default()))
                    )
                }
                Ok(status) if matches!(status.phase, Phase::Running | Phase::Done) => {
                    return Err(node
                        .error(&"it has run already (a node runs once: restart it to run again)"))
                }
                Ok(status) if !status.missing.is_empty() => waiting.push(format!(
                    "{}: waiting for {}",
                    node.config.node,
                    status.missing.join(", ")
                )),
                Ok(status) => waiting.push(format!(
                    "{}: {}",
                    node.config.node,
                    format!("{:?}", status.phase).to_lowercase()
                )),
                Err(why) => waiting.push(why),
            }
        }
        if waiting.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(CollectError::NotReady {
                nodes: waiting,
                waited: config.wait,
            });
        }
        if stop.load(Ordering::SeqCst) {
            return Err(CollectError::Stopped);
        }
        if said.elapsed() >= Duration::from_secs(5) {
            said = Instant::now();
            progress(&format!(
                "{} of {} nodes ready; {}",
                nodes.len() - waiting.len(),
                nodes.len(),
                waiting[0]
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let underlay: Vec<Underlay> = ready
        .into_iter()
        .flatten()
        .flat_map(|status| status.underlay)
        .collect();
    for u in &underlay {
        if let Some(warning) = u.warning() {
            progress(&format!("warning: {warning}"));
        }
    }
    Ok(underlay)
}

/// Orders every node to start at one instant, `config.lead` from now.
fn start_all(nodes: &[Node<'_>], config: &CollectConfig) -> Result<(), CollectError> {
    let token = config.token.as_deref();
    let at_unix_ns = pathlab_os::unix_now_ns() + config.lead.as_nanos() as u64;
    let order = serde_json::to_vec(&StartRequest { at_unix_ns }).expect("serializes");
    for node in nodes {
        let response =
            pathlab_http::request(node.address, "POST", wire::START_PATH, token, Some(&order))
                .map_err(|e| node.error(&e))?;
        if response.status != 202 {
            return Err(node.error(&format!(
                "refused to start ({}): {}",
                response.status,
                text(&response.body)
            )));
        }
    }
    Ok(())
}

/// Each node's result once the run is over, waiting up to `config.wait` for those not
/// yet written; and whether a stop signal came meanwhile (the run is then interrupted).
fn node_results(
    nodes: &[Node<'_>],
    config: &CollectConfig,
    stop: &AtomicBool,
) -> Result<(Vec<NodeResult>, bool), CollectError> {
    let token = config.token.as_deref();
    let mut stopped = false;
    let result_deadline = Instant::now() + config.wait;
    let mut results = Vec::new();
    for node in nodes {
        let result = loop {
            let (code, body) = node.get(wire::RESULT_PATH, wire::MAX_RESULT_BYTES, token)?;
            if code == 200 {
                break NodeResult::parse(&body, node.config).map_err(|e| node.error(&e))?;
            }
            if code != 409 || Instant::now() >= result_deadline {
                return Err(node.error(&format!("no result ({code}): {}", text(&body))));
            }
            if stop.load(Ordering::SeqCst) {
                stopped = true;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        results.push(result);
    }
    Ok((results, stopped))
}

/// Writes to `out` each link's recording, its two ends' halves merged, and each command
/// workload's output.
fn save_recordings_and_outputs(
    experiment: &Experiment,
    nodes: &[Node<'_>],
    out: &Path,
    token: Option<&str>,
) -> Result<(), CollectError> {
    for link in &experiment.links {
        let halves = [link.a, link.b].map(|end| {
            let node = &nodes[end];
            let path = format!("{}{}", wire::RECORDING_PATH, link.name);
            let (code, body) = node.get(&path, wire::MAX_FILE_BYTES, token)?;
            if code != 200 {
                return Err(node.error(&format!("no recording of {} ({code})", link.name)));
            }
            Ok(body)
        });
        let [a, b] = halves;
        let merged = merge_recordings(&a?, &b?).map_err(|message| CollectError::Node {
            node: experiment.nodes[link.a].name.clone(),
            address: nodes[link.a].address.to_owned(),
            message: format!("the recording of link {}: {message}", link.name),
        })?;
        write(out, &format!("link-{}.jsonl", link.name), &merged)?;
    }
    for workload in &experiment.workloads {
        if let pathlab_lab::spec::WorkloadKind::Command { .. } = workload.kind {
            let node = &nodes[workload.from];
            let path = format!("{}{}", wire::OUTPUT_PATH, workload.name);
            let (code, body) = node.get(&path, wire::MAX_FILE_BYTES, token)?;
            if code == 200 {
                write(out, &format!("{}.out", workload.name), &body)?;
            }
        }
    }
    Ok(())
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), CollectError> {
    std::fs::write(dir.join(name), bytes).map_err(|source| CollectError::Io {
        context: format!("writing {}", dir.join(name).display()),
        source,
    })
}

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
            .map(|r| (r.started_unix_ns + r.duration_ns).saturating_sub(started))
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

/// One recording of a link from its two ends' recordings: the `a` end's egress
/// (its direction 0) as direction 0, the `b` end's as direction 1, both on the earlier
/// time zero.
pub fn merge_recordings(a: &[u8], b: &[u8]) -> Result<Vec<u8>, String> {
    let read = |bytes: &[u8]| read_recording(bytes).map_err(|e| e.to_string());
    let (a, b) = (read(a)?, read(b)?);
    let (Some(ha), Some(hb)) = (&a.header, &b.header) else {
        return Err("a recording without its header".into());
    };
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
                spec: spec(ha),
            },
            DirectionInfo {
                from: CABLE_B.to_owned(),
                to: CABLE_A.to_owned(),
                spec: spec(hb),
            },
        ],
        queue_sample_interval_ns: ha.queue_sample_interval_ns.min(hb.queue_sample_interval_ns),
    };
    let mut out = Vec::new();
    write_header(&mut out, &header).map_err(|e| e.to_string())?;
    for (recording, header, dir) in [(a.lines, ha, 0u8), (b.lines, hb, 1u8)] {
        let by = pathlab_core::time::Duration::from_nanos(header.clock_zero_unix_ns - zero);
        for line in recording.into_iter().filter(|l| l.dir() == 0) {
            write_line(&mut out, &line.shifted(by).with_dir(dir)).map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::wire::{HalfLink, NodeOutcome};
    use pathlab_results::recording::{
        read_recording, RecordingLine, RECORDING_MAGIC, RECORDING_VERSION,
    };

    #[test]
    fn addresses_are_a_pattern_or_one_pair_per_node() {
        let nodes = ["h1".to_owned(), "r1".to_owned()];
        assert_eq!(
            addresses("clab-{lab}-{node}:8080", "lab", &nodes).unwrap(),
            ["clab-lab-h1:8080", "clab-lab-r1:8080"]
        );
        assert_eq!(
            addresses("r1=r.test:80,h1=h.test:80", "lab", &nodes).unwrap(),
            ["h.test:80", "r.test:80"]
        );
        for (pattern, error) in [
            ("h1=a:1,r1", "'r1' is not NODE=HOST:PORT"),
            (
                "h1=a:1,h2=b:1",
                "the lab has no node 'h2' (its nodes: h1, r1)",
            ),
            ("h1=a:1", "no address for node 'r1'"),
        ] {
            assert_eq!(
                addresses(pattern, "lab", &nodes).unwrap_err().to_string(),
                error,
                "{pattern}"
            );
        }
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
        let merged = read_recording(merge_recordings(&a, &b).unwrap().as_slice()).unwrap();
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
        assert!(merge_recordings(b"{}", &b).is_err());
        assert!(merge_recordings(&a, b"").is_err());
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
