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
//!
//! Each node proves who it is before the collector sends it anything: its control address
//! speaks TLS with a certificate of the lab's CA for its name, and the collector trusts
//! that CA alone ([`NodeAccess`], from the export's directory); then the collector sends
//! that node's own token. Every phase (ready, start, result, gather) has a deadline that
//! no request outlives ([`Stage`]), recordings are streamed to disk as they arrive, and a
//! node's times are checked before they are used.

mod merge;
mod node;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pathlab_os::files::Dir;
use pathlab_results::lab::LabRun;

use crate::export::node::NodeConfig;
use crate::node::wire::{self, NodeResult, NodeStatus, Phase, StartRequest, Underlay};
use node::{text, Node};
use pathlab_lab::spec::Experiment;
use pathlab_lab::sweep::{save_result, PlannedRun, SaveError};

pub use merge::{merge, merge_recordings};
pub use node::{access_from_export, AccessError, NodeAccess, Stage, MAX_RETRIES};

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
    /// How each node proves itself and is driven (its token), in the experiment's order of
    /// nodes; `None`: in the clear without a token, for nodes on loopback only.
    pub access: Option<Vec<NodeAccess>>,
    /// How long to wait for every node to be ready, for the results after the run, and to
    /// gather the recordings: each phase's deadline.
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
    /// Without credentials, an address that is not loopback.
    #[error(
        "node {node} at {address}: not loopback, and no credentials to prove it and drive \
         it (give the export's directory)"
    )]
    InTheClear {
        /// The node.
        node: String,
        /// Its address.
        address: String,
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
        .enumerate()
        .map(|(k, (node_config, address))| Node {
            config: node_config,
            sha256: wire::sha256_hex(node_config.to_toml().as_bytes()),
            address,
            access: config.access.as_ref().and_then(|access| access.get(k)),
        })
        .collect();
    if config.access.is_none() {
        if let Some(node) = nodes.iter().find(|n| !on_loopback(n.address)) {
            return Err(CollectError::InTheClear {
                node: node.config.node.clone(),
                address: node.address.to_owned(),
            });
        }
    }
    // Made, or one no one else can change (a link planted in it is never followed).
    Dir::output(&config.out).map_err(|e| CollectError::Io {
        context: format!("the output directory {}", config.out.display()),
        source: std::io::Error::other(e.to_string()),
    })?;

    let underlay = wait_until_ready(&nodes, config, stop, progress)?;
    let at_unix_ns = start_all(&nodes, config)?;
    progress(&format!(
        "started all {} nodes; the run takes {} s",
        nodes.len(),
        experiment.duration.as_secs_f64()
    ));
    let end = Instant::now() + config.lead + experiment.duration;
    let stopped_in_run = !pathlab_lab::workload::sleep_until(end, stop);
    let (results, stopped_after) = node_results(&nodes, config, at_unix_ns, stop)?;
    let stopped = stopped_in_run || stopped_after;
    save_recordings_and_outputs(experiment, &nodes, config)?;
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

/// Whether every address `address` names is loopback (a name that does not resolve is
/// not).
fn on_loopback(address: &str) -> bool {
    use std::net::ToSocketAddrs as _;
    address.to_socket_addrs().is_ok_and(|mut addrs| {
        let mut any = false;
        addrs.all(|a| {
            any = true;
            pathlab_http::server::is_loopback(a.ip())
        }) && any
    })
}

/// Waits until every node is ready, saying every 5 s how many are; gives the underlay
/// each measured (after warning of any that is poor). Fails when a node failed, has run
/// already or does not prove who it is, when they are not all ready within `config.wait`,
/// or on a stop signal.
fn wait_until_ready(
    nodes: &[Node<'_>],
    config: &CollectConfig,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Underlay>, CollectError> {
    let stage = Stage::new("ready", config.wait);
    let mut ready: Vec<Option<NodeStatus>> = vec![None; nodes.len()];
    let mut said = Instant::now();
    loop {
        let mut waiting = Vec::new();
        for (node, seen) in nodes.iter().zip(&mut ready) {
            if seen.is_some() {
                continue;
            }
            match node.status(&stage)? {
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
        if Instant::now() >= stage.deadline {
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

/// Orders every node to start at one instant, `config.lead` from now (every order must
/// be given by then: the phase's deadline); returns that instant.
fn start_all(nodes: &[Node<'_>], config: &CollectConfig) -> Result<u64, CollectError> {
    let stage = Stage::new("start", config.lead);
    let at_unix_ns = pathlab_os::unix_now_ns().saturating_add(config.lead.as_nanos() as u64);
    let order = serde_json::to_vec(&StartRequest { at_unix_ns }).expect("serializes");
    for node in nodes {
        let response = node
            .call(
                &stage,
                ("POST", wire::START_PATH, Some(&order)),
                pathlab_http::MAX_BODY as u64,
                None,
            )
            .map_err(|e| node.failed(&stage, &e))?;
        if response.status != 202 {
            return Err(node.error(&format!(
                "refused to start ({}): {}",
                response.status,
                text(&response.body)
            )));
        }
    }
    Ok(at_unix_ns)
}

/// Each node's result once the run is over, waiting up to `config.wait` for those not
/// yet written, its start checked against the order's instant `at_unix_ns`; and whether a
/// stop signal came meanwhile (the run is then interrupted).
fn node_results(
    nodes: &[Node<'_>],
    config: &CollectConfig,
    at_unix_ns: u64,
    stop: &AtomicBool,
) -> Result<(Vec<NodeResult>, bool), CollectError> {
    let stage = Stage::new("result", config.wait);
    let mut stopped = false;
    let mut results = Vec::new();
    for node in nodes {
        let result = loop {
            let (code, body) = node.get(&stage, wire::RESULT_PATH, wire::MAX_RESULT_BYTES)?;
            if code == 200 {
                let result = NodeResult::parse(&body, node.config).map_err(|e| node.error(&e))?;
                result.check_start(at_unix_ns).map_err(|e| node.error(&e))?;
                break result;
            }
            if code != 409 || Instant::now() >= stage.deadline {
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

/// Writes to `config.out` each link's recording, its two ends' halves streamed to disk as
/// they arrive (each at most [`wire::MAX_FILE_BYTES`]) and merged from there, and each
/// command workload's output; all within the gather phase's deadline.
fn save_recordings_and_outputs(
    experiment: &Experiment,
    nodes: &[Node<'_>],
    config: &CollectConfig,
) -> Result<(), CollectError> {
    let stage = Stage::new("gather", config.wait);
    let out = Dir::output(&config.out).map_err(|e| CollectError::Io {
        context: format!("opening {}", config.out.display()),
        source: std::io::Error::other(e.to_string()),
    })?;
    for link in &experiment.links {
        let mut halves = Vec::new();
        for (end, side) in [(link.a, "a"), (link.b, "b")] {
            let node = &nodes[end];
            let name = format!(".link-{}.{side}.part", link.name);
            let path = format!("{}{}", wire::RECORDING_PATH, link.name);
            fetch_to_file(
                node,
                &stage,
                &path,
                &out,
                &name,
                &format!("the recording of {}", link.name),
            )?
            .ok_or_else(|| node.error(&format!("no recording of {}", link.name)))?;
            halves.push(name);
        }
        let open = |name: &str| {
            std::fs::File::open(out.path().join(name))
                .map(std::io::BufReader::new)
                .map_err(io_error(&out, name, "reading"))
        };
        let merged_name = format!("link-{}.jsonl", link.name);
        let mut merged = create(&out, &merged_name)?;
        let mut writer = std::io::BufWriter::new(&mut merged);
        merge_recordings(open(&halves[0])?, open(&halves[1])?, &mut writer).map_err(|message| {
            CollectError::Node {
                node: experiment.nodes[link.a].name.clone(),
                address: nodes[link.a].address.to_owned(),
                message: format!("the recording of link {}: {message}", link.name),
            }
        })?;
        writer
            .flush()
            .map_err(io_error(&out, &merged_name, "writing"))?;
        for half in halves {
            let _ = std::fs::remove_file(out.path().join(half));
        }
    }
    for workload in &experiment.workloads {
        if let pathlab_lab::spec::WorkloadKind::Command { .. } = workload.kind {
            let node = &nodes[workload.from];
            let path = format!("{}{}", wire::OUTPUT_PATH, workload.name);
            let name = format!("{}.out", workload.name);
            fetch_to_file(node, &stage, &path, &out, &name, &name)?;
        }
    }
    Ok(())
}

/// GETs `path` from `node` into the new file `name` of `out` as it arrives; `None` (and no
/// file) when the node has none (any status but 200).
fn fetch_to_file(
    node: &Node<'_>,
    stage: &Stage,
    path: &str,
    out: &Dir,
    name: &str,
    what: &str,
) -> Result<Option<()>, CollectError> {
    let mut file = create(out, name)?;
    let mut writer = std::io::BufWriter::new(&mut file);
    let response = node
        .call(
            stage,
            ("GET", path, None),
            wire::MAX_FILE_BYTES as u64,
            Some(&mut writer),
        )
        .map_err(|e| node.failed(stage, &e))
        .map_err(|e| match e {
            CollectError::Node {
                node,
                address,
                message,
            } => CollectError::Node {
                node,
                address,
                message: format!("{what}: {message}"),
            },
            other => other,
        })?;
    writer.flush().map_err(io_error(out, name, "writing"))?;
    drop(writer);
    if response.status != 200 {
        let _ = std::fs::remove_file(out.path().join(name));
        return Ok(None);
    }
    Ok(Some(()))
}

/// A new file `name` in `out`, in place of any of that name ([`Dir::replace`]: never
/// written through one that was there).
fn create(out: &Dir, name: &str) -> Result<std::fs::File, CollectError> {
    out.replace(name).map_err(|e| CollectError::Io {
        context: format!("creating {}", out.shown(name)),
        source: std::io::Error::other(e.to_string()),
    })
}

fn io_error<'a>(
    out: &'a Dir,
    name: &'a str,
    doing: &'a str,
) -> impl FnOnce(std::io::Error) -> CollectError + 'a {
    move |source| CollectError::Io {
        context: format!("{doing} {}", out.shown(name)),
        source,
    }
}

#[cfg(test)]
mod tests;
