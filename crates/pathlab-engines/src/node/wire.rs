//! What `pathlab node` and `pathlab lab collect` say to each other over the node's control
//! address: the node's status, the order to start, and its part of the results. Sans-IO:
//! types and the checks that bound what a node sends (the collector's outside input) and
//! what a collector sends (the node's).
//!
//! | method and path | what |
//! |---|---|
//! | `GET /api/v1/node` | [`NodeStatus`]: the phase, what is missing, the underlay measured |
//! | `POST /api/v1/node/start` | [`StartRequest`]: start the run at a Unix time (token) |
//! | `GET /api/v1/node/result` | [`NodeResult`], once the run is over (409 before) |
//! | `GET /api/v1/node/recording/LINK` | the recording of the node's emulator on LINK (JSON lines) |
//! | `GET /api/v1/node/output/WORKLOAD` | a `command` workload's output |
//! | `GET /metrics`, `/api/v1/links...` | the emulators, as `pathlab lab --control` serves them |

pub use pathlab_results::lab::LinkUnderlay as Underlay;
use pathlab_results::lab::{LabOutcome, LinkChange, SendLateness};
use serde::{Deserialize, Serialize};

use super::super::export::node::{NodeConfig, Role, MAX_TIME_NS};

/// The status path.
pub const STATUS_PATH: &str = "/api/v1/node";
/// The start path.
pub const START_PATH: &str = "/api/v1/node/start";
/// The result path.
pub const RESULT_PATH: &str = "/api/v1/node/result";
/// The recordings' path, followed by the link's name.
pub const RECORDING_PATH: &str = "/api/v1/node/recording/";
/// The outputs' path, followed by the workload's name.
pub const OUTPUT_PATH: &str = "/api/v1/node/output/";

/// Largest status a collector reads: a hub of 10,000 interfaces' underlay at ~300 bytes.
pub const MAX_STATUS_BYTES: usize = 16 << 20;
/// Largest result a collector reads (a TCP workload's 10 ms samples are ~100 kB a minute).
pub const MAX_RESULT_BYTES: usize = 256 << 20;
/// Largest recording or output a collector fetches.
pub const MAX_FILE_BYTES: usize = 1 << 30;
/// How far in the future a start may be asked for: a collector starts a run seconds ahead.
pub const MAX_START_AHEAD_NS: u64 = 3_600 * 1_000_000_000;
/// How far from the instant it was ordered to start a node may say it started: its clock's
/// error and an order that came late.
pub const MAX_START_SKEW_NS: u64 = 60 * 1_000_000_000;
/// Longest message (a failure's reason) a collector keeps.
const MAX_MESSAGE: usize = 4_096;

/// Where a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Waiting for its interfaces (meshnet adds them after the pod starts).
    Waiting,
    /// Addressing them, putting its emulators in front of them.
    Configuring,
    /// Measuring the underlay to each link's far end.
    Measuring,
    /// Ready: waiting for the order to start.
    Ready,
    /// Started: waiting for the start instant, or running.
    Running,
    /// The run is over: its result can be read.
    Done,
    /// It cannot go on: `message` says why.
    Failed,
}

/// `GET /api/v1/node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node's name.
    pub node: String,
    /// The lab's.
    pub lab: String,
    /// SHA-256 of its config as read and written back ([`NodeConfig::to_toml`]), hex:
    /// the collector checks it is the one the export writes, comments and layout aside.
    pub config_sha256: String,
    /// Where it is.
    pub phase: Phase,
    /// The interfaces it still waits for.
    #[serde(default)]
    pub missing: Vec<String>,
    /// The underlay under each link, once measured.
    #[serde(default)]
    pub underlay: Vec<Underlay>,
    /// When the run starts (or started), ns since the Unix epoch.
    #[serde(default)]
    pub start_unix_ns: Option<u64>,
    /// Why it failed.
    #[serde(default)]
    pub message: Option<String>,
}

/// `POST /api/v1/node/start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// When to start, ns since the Unix epoch (each node's clock: the machines' clocks
    /// are as one as NTP keeps them).
    pub at_unix_ns: u64,
}

/// Why a message is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not the JSON of the message.
    #[error("not a {what}: {message}")]
    Json {
        /// Which message.
        what: &'static str,
        /// The JSON reader's words.
        message: String,
    },
    /// A value out of its bounds, or one that does not match the config.
    #[error("{0}")]
    Invalid(String),
}

fn json<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &'static str) -> Result<T, WireError> {
    serde_json::from_slice(bytes).map_err(|e| WireError::Json {
        what,
        message: e.to_string(),
    })
}

impl StartRequest {
    /// Reads a start order received at `now_unix_ns`: a time at most
    /// [`MAX_START_AHEAD_NS`] ahead (one in the past starts at once).
    pub fn parse(bytes: &[u8], now_unix_ns: u64) -> Result<StartRequest, WireError> {
        let request: StartRequest = json(bytes, "start request")?;
        if request.at_unix_ns > now_unix_ns.saturating_add(MAX_START_AHEAD_NS) {
            return Err(WireError::Invalid(format!(
                "at_unix_ns {} is more than an hour ahead of this node's clock ({now_unix_ns})",
                request.at_unix_ns
            )));
        }
        Ok(request)
    }
}

impl NodeStatus {
    /// Reads a node's status, checking it against `config`, the node the collector
    /// expects there: its name, lab and config, and every underlay on one of its links.
    pub fn parse(
        bytes: &[u8],
        config: &NodeConfig,
        config_sha256: &str,
    ) -> Result<NodeStatus, WireError> {
        let status: NodeStatus = json(bytes, "node status")?;
        if status.node != config.node || status.lab != config.lab {
            return Err(WireError::Invalid(format!(
                "it is node {} of lab {}, not {} of {}",
                crate::excerpt(&status.node),
                crate::excerpt(&status.lab),
                config.node,
                config.lab
            )));
        }
        if status.config_sha256 != config_sha256 {
            return Err(WireError::Invalid(format!(
                "node {} runs another config than the export writes for this lab (edited, or \
                 exported with another --point, --quick or --seed)",
                config.node
            )));
        }
        if status.missing.len() > config.interfaces.len()
            || status
                .missing
                .iter()
                .any(|m| !config.interfaces.iter().any(|i| &i.name == m))
        {
            return Err(WireError::Invalid(
                "it waits for interfaces its config does not have".into(),
            ));
        }
        check_underlay(&status.underlay, config)?;
        if status
            .message
            .as_ref()
            .is_some_and(|m| m.len() > MAX_MESSAGE)
        {
            return Err(WireError::Invalid(format!(
                "a message of more than {MAX_MESSAGE} bytes"
            )));
        }
        Ok(status)
    }
}

/// Every underlay on a different link of the node's, with times within bounds.
fn check_underlay(underlay: &[Underlay], config: &NodeConfig) -> Result<(), WireError> {
    let mut seen = std::collections::BTreeSet::new();
    for u in underlay {
        let known = config
            .interfaces
            .iter()
            .any(|i| i.link == u.link && i.name == u.interface);
        if !known || !seen.insert(&u.link) {
            return Err(WireError::Invalid(format!(
                "an underlay on link {} it does not have, or twice",
                crate::excerpt(&u.link)
            )));
        }
        if u.device.len() > 16 {
            return Err(WireError::Invalid("a device kind of over 16 bytes".into()));
        }
        for ns in [u.rtt_min_ns, u.rtt_p50_ns, u.spec_delay_ns] {
            check_time(ns)?;
        }
    }
    Ok(())
}

fn check_time(ns: u64) -> Result<(), WireError> {
    if ns > MAX_TIME_NS {
        return Err(WireError::Invalid(format!(
            "a time of {ns} ns, beyond {MAX_TIME_NS}"
        )));
    }
    Ok(())
}

/// A workload the node ran, and what came of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeOutcome {
    /// Its name.
    pub name: String,
    /// What came of it.
    pub outcome: LabOutcome,
    /// What watching its connections saw, when it asked to be watched.
    #[serde(default)]
    pub inspect: Option<pathlab_diagnose::diagnosis::InspectReport>,
}

/// The node's half of one link: the direction leaving it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HalfLink {
    /// The link.
    pub link: String,
    /// The egress spec at the start, canonical.
    pub egress: String,
    /// What the fidelity guard found of that direction.
    pub lateness: Option<SendLateness>,
    /// Changes made over the node's control address, on the run's clock; `forward` is the
    /// egress, `reverse` what enters the node (an emulator's two directions).
    #[serde(default)]
    pub changes: Vec<LinkChange>,
}

/// `GET /api/v1/node/result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    /// The node.
    pub node: String,
    /// Its kernel (`Linux 6.1.0`).
    pub kernel: String,
    /// When its run started, ns since the Unix epoch (its clock).
    pub started_unix_ns: u64,
    /// How long it lasted, ns.
    pub duration_ns: u64,
    /// Whether it was cut short.
    pub interrupted: bool,
    /// The workloads it ran (its `client` ones), in its config's order.
    pub workloads: Vec<NodeOutcome>,
    /// Its links' halves, in its config's order.
    pub links: Vec<HalfLink>,
    /// The underlay under each link, as measured before the run.
    pub underlay: Vec<Underlay>,
    /// How its emulators' forwarding threads were scheduled.
    #[serde(default)] // added with --priority
    pub scheduling: Option<pathlab_results::lab::Scheduling>,
}

/// The most notes a node's scheduling may carry, and the longest of its texts.
const MAX_SCHEDULING_NOTES: usize = 16;
const MAX_SCHEDULING_TEXT: usize = 512;

impl NodeResult {
    /// Checks the node's start against the instant it was ordered to start at
    /// (`ordered_unix_ns`): within [`MAX_START_SKEW_NS`] of it.
    pub fn check_start(&self, ordered_unix_ns: u64) -> Result<(), WireError> {
        if self.started_unix_ns.abs_diff(ordered_unix_ns) > MAX_START_SKEW_NS {
            return Err(WireError::Invalid(format!(
                "it says it started at {} ns since 1970, {} s from the instant it was ordered \
                 to start at ({ordered_unix_ns}; at most {} s apart)",
                self.started_unix_ns,
                self.started_unix_ns.abs_diff(ordered_unix_ns) / 1_000_000_000,
                MAX_START_SKEW_NS / 1_000_000_000
            )));
        }
        Ok(())
    }

    /// Reads a node's result, checking it against `config`: the node's name, each of its
    /// client workloads and links at most once and no other, times within bounds.
    pub fn parse(bytes: &[u8], config: &NodeConfig) -> Result<NodeResult, WireError> {
        let result: NodeResult = json(bytes, "node result")?;
        if result.node != config.node {
            return Err(WireError::Invalid(format!(
                "the result of node {}, not {}",
                crate::excerpt(&result.node),
                config.node
            )));
        }
        check_time(result.duration_ns)?;
        if result.kernel.len() > 256 {
            return Err(WireError::Invalid("a kernel name of over 256 bytes".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for workload in &result.workloads {
            let known = config
                .workloads
                .iter()
                .any(|w| w.role == Role::Client && w.name == workload.name);
            if !known || !names.insert(&workload.name) {
                return Err(WireError::Invalid(format!(
                    "a result for workload {} it does not run, or twice",
                    crate::excerpt(&workload.name)
                )));
            }
        }
        let mut links = std::collections::BTreeSet::new();
        for half in &result.links {
            if !config.interfaces.iter().any(|i| i.link == half.link) || !links.insert(&half.link) {
                return Err(WireError::Invalid(format!(
                    "a half of link {} it does not have, or twice",
                    crate::excerpt(&half.link)
                )));
            }
            for change in &half.changes {
                check_time(change.at_ns)?;
            }
        }
        check_underlay(&result.underlay, config)?;
        if let Some(scheduling) = &result.scheduling {
            let texts = [&scheduling.asked, &scheduling.policy, &scheduling.cpus];
            if scheduling.notes.len() > MAX_SCHEDULING_NOTES
                || texts
                    .into_iter()
                    .chain(&scheduling.notes)
                    .any(|t| t.len() > MAX_SCHEDULING_TEXT)
                || scheduling.priority > 99
            {
                return Err(WireError::Invalid(
                    "a scheduling report past its bounds (16 notes of 512 bytes, priority 99)"
                        .into(),
                ));
            }
        }
        Ok(result)
    }
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    pathlab_core::format::hex(&sha2::Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::node::LabSettings;

    /// h1 of the bufferbloat recipe (one link to r1, a client of every workload).
    fn h1() -> NodeConfig {
        let text = pathlab_lab::recipes::recipe("bufferbloat").unwrap();
        let point = pathlab_lab::spec::expand(text, true).unwrap().remove(0);
        let experiment = pathlab_lab::spec::Experiment::parse(&point.text)
            .unwrap()
            .quick();
        let settings = LabSettings {
            point: None,
            seed: 1,
            control: "0.0.0.0:8080".parse().unwrap(),
        };
        NodeConfig::for_node(&experiment, 0, &settings).unwrap()
    }

    fn status(config: &NodeConfig) -> NodeStatus {
        NodeStatus {
            node: config.node.clone(),
            lab: config.lab.clone(),
            config_sha256: sha256_hex(config.to_toml().as_bytes()),
            phase: Phase::Ready,
            missing: Vec::new(),
            underlay: vec![Underlay {
                interface: config.interfaces[0].name.clone(),
                link: config.interfaces[0].link.clone(),
                device: "vxlan".into(),
                remote: Some("198.19.200.2".parse().unwrap()),
                samples: 50,
                rtt_min_ns: 3_300_000,
                rtt_p50_ns: 3_500_000,
                spec_delay_ns: 1_000_000,
                timed_by: pathlab_probe::rtt::RoundTripClocks {
                    kernel: 50,
                    user_space: 0,
                },
            }],
            start_unix_ns: None,
            message: None,
        }
    }

    #[test]
    fn a_status_is_read_only_for_the_node_and_config_the_collector_expects() {
        let config = h1();
        let sha = sha256_hex(config.to_toml().as_bytes());
        let good = status(&config);
        let bytes = |s: &NodeStatus| serde_json::to_vec(s).unwrap();
        assert_eq!(
            NodeStatus::parse(&bytes(&good), &config, &sha),
            Ok(good.clone())
        );
        let refused = |s: &NodeStatus| {
            NodeStatus::parse(&bytes(s), &config, &sha)
                .unwrap_err()
                .to_string()
        };
        let other_node = NodeStatus {
            node: "r1".into(),
            ..good.clone()
        };
        assert!(refused(&other_node).contains("it is node r1"));
        let other_config = NodeStatus {
            config_sha256: "00".into(),
            ..good.clone()
        };
        assert!(refused(&other_config).contains("another config"));
        let mut foreign = good.clone();
        foreign.underlay[0].link = "r1-h2".into();
        assert!(refused(&foreign).contains("does not have"));
        let mut twice = good.clone();
        twice.underlay.push(twice.underlay[0].clone());
        assert!(refused(&twice).contains("twice"));
        let mut far = good.clone();
        far.underlay[0].rtt_p50_ns = MAX_TIME_NS + 1;
        assert!(refused(&far).contains("beyond"));
        let waiting = NodeStatus {
            missing: vec!["eth9".into()],
            ..good
        };
        assert!(refused(&waiting).contains("does not have"));
        assert!(NodeStatus::parse(b"[]", &config, &sha).is_err());
    }

    #[test]
    fn a_start_more_than_an_hour_ahead_is_refused_and_the_underlay_warns_past_the_spec() {
        let now = 1_800_000_000_000_000_000;
        let at = |ns: u64| format!("{{\"at_unix_ns\": {ns}}}");
        assert_eq!(
            StartRequest::parse(at(now + 2_000_000_000).as_bytes(), now),
            Ok(StartRequest {
                at_unix_ns: now + 2_000_000_000
            })
        );
        assert!(StartRequest::parse(at(now + MAX_START_AHEAD_NS + 1).as_bytes(), now).is_err());
        assert!(StartRequest::parse(b"{\"at_unix_ns\": 1, \"x\": 2}", now).is_err());
        // 3.5 ms round trip: 1.75 ms one way, over a 1 ms spec.
        let underlay = status(&h1()).underlay.remove(0);
        assert_eq!(underlay.one_way_ns(), 1_750_000);
        let warning = underlay.warning().unwrap();
        assert!(
            warning.contains("1.75 ms one way") && warning.contains("1 ms"),
            "{warning}"
        );
        let slower_spec = Underlay {
            spec_delay_ns: 2_000_000,
            ..underlay
        };
        assert_eq!(slower_spec.warning(), None);
    }

    #[test]
    fn a_result_names_only_the_nodes_own_client_workloads_and_links_once() {
        let config = h1();
        let good = NodeResult {
            node: config.node.clone(),
            kernel: "Linux test".into(),
            started_unix_ns: 1,
            duration_ns: 2,
            interrupted: false,
            workloads: Vec::new(),
            links: vec![HalfLink {
                link: config.interfaces[0].link.clone(),
                egress: String::new(),
                lateness: None,
                changes: Vec::new(),
            }],
            underlay: Vec::new(),
            scheduling: None,
        };
        let parse = |r: &NodeResult| NodeResult::parse(&serde_json::to_vec(r).unwrap(), &config);
        assert_eq!(parse(&good), Ok(good.clone()));
        let mut twice = good.clone();
        twice.links.push(twice.links[0].clone());
        assert!(parse(&twice).is_err());
        let mut stranger = good.clone();
        stranger.workloads.push(NodeOutcome {
            name: "not-a-workload".into(),
            outcome: LabOutcome::NotStarted,
            inspect: None,
        });
        assert!(parse(&stranger).is_err());
        let mut noisy = good.clone();
        noisy.scheduling = Some(pathlab_results::lab::Scheduling {
            notes: vec!["n".repeat(513)],
            ..Default::default()
        });
        assert!(parse(&noisy).is_err());
        let long = NodeResult {
            duration_ns: MAX_TIME_NS + 1,
            ..good
        };
        assert!(parse(&long).is_err());
    }
}
