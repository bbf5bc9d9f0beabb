//! The node config: everything one pod (or container) needs to play its node of an exported
//! lab with no other file, as `pathlab node CONFIG` reads it. One TOML file per node,
//! versioned ([`VERSION`]); times are integer nanoseconds from the start of the run, as in
//! result files.
//!
//! It is derived from the same pure code a one-machine run uses ([`Addressing`],
//! [`installed_routes`], [`port_name`], [`workload_target`], [`workload_port`]), so a node
//! has the addresses, routes, interface names and ports it would have in `pathlab lab`,
//! and results compare. Each interface carries the node's half of its link: the spec of
//! packets *leaving* the node through it (the link's `spec` at its `a` end, its `reverse`
//! at its `b` end) and that direction's events.
//!
//! The file is outside input to `pathlab node`: [`NodeConfig::parse`] bounds every number
//! and length where it reads it, checks every name, and refuses keys it does not know.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use pathlab_core::LinkSpec;
use serde::{Deserialize, Serialize};

use crate::excerpt;
use pathlab_lab::addressing::Addressing;
use pathlab_lab::run::{blocks_responders, workload_port, workload_target};
use pathlab_lab::spec::{
    valid_experiment_name, valid_name, Experiment, Link, WorkloadKind, MAX_NAME,
};
use pathlab_lab::topology::{installed_routes, port_name, Topology};

/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

/// Largest config file: a hub of [`Addressing::MAX_LINKS`] links at about 400 bytes per
/// interface and route fits.
pub const MAX_TEXT_BYTES: usize = 64 << 20;

/// Longest time anywhere in a config (a run, a start, an interval): 30 days.
pub const MAX_TIME_NS: u64 = 30 * 24 * 3600 * 1_000_000_000;

/// How far a workload may end past the run: `--quick` scales starts and durations
/// separately, and each rounds to the nanosecond.
const END_SLACK_NS: u64 = 1_000;

/// Longest interface name: the kernel's IFNAMSIZ (16) less its NUL.
pub const MAX_INTERFACE_NAME: usize = 15;

/// Most workloads one node takes part in.
pub const MAX_WORKLOADS: usize = 65_536;

/// Most events on one interface.
pub const MAX_EVENTS: usize = 65_536;

/// Longest workload name, sweep label or command argument, bytes.
pub const MAX_TEXT_FIELD: usize = 4_096;

/// Longest link SPEC, bytes (specs are a few dozen; the parser behind it is fuzzed too).
pub const MAX_SPEC: usize = 4_096;

/// Most arguments of a `command` workload.
pub const MAX_COMMAND_ARGS: usize = 1_024;

/// Longest congestion control name: the kernel's TCP_CA_NAME_MAX (16) less its NUL.
pub const MAX_CONGESTION_NAME: usize = 15;

/// Largest TCP window, bytes (the kernel caps socket buffers near 2 GB).
pub const MAX_WINDOW_BYTES: u32 = 1 << 30;

/// Largest block of a `blocks` workload, bytes.
pub const MAX_BLOCK_BYTES: u32 = 1 << 30;

/// Highest probe rate of an `owd` workload: 1 Tbit/s.
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000;

/// One node's part of an exported lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeConfig {
    /// The format version: [`VERSION`].
    pub version: u32,
    /// The lab's (experiment's) name.
    pub lab: String,
    /// The sweep point exported (`queue=10`), if the lab is a sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<String>,
    /// This node's name.
    pub node: String,
    /// Whether the spec calls the node a router (`pathlab node` turns forwarding on in
    /// every pod: a pod's sysctls cost nothing, unlike those of 10,000 namespaces on one
    /// machine).
    pub router: bool,
    /// How long the run lasts, ns.
    pub duration_ns: u64,
    /// Seed of the emulators' random choices (a one-machine run seeds link i's emulator
    /// with seed + i).
    pub seed: u64,
    /// The emulators' lateness bound (`late_warn`), ns; absent: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_warn_ns: Option<u64>,
    /// Where the node serves its results and Prometheus metrics.
    pub control: SocketAddr,
    /// Its interfaces, one per link, in the spec's order of links.
    #[serde(default, rename = "interface", skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    /// Its routes, IPv4 and IPv6.
    #[serde(default, rename = "route", skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// The workloads it runs (`client`) and those it answers (`server`).
    #[serde(default, rename = "workload", skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<NodeWorkload>,
}

/// One interface of the node: its end of a link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interface {
    /// Its name in the node (`to-PEER`, at most [`MAX_INTERFACE_NAME`] bytes).
    pub name: String,
    /// The link's name (`A-B`, as the spec's events name it).
    pub link: String,
    /// The link's id, unique in the lab: its index in the spec (KNE's and meshnet's uid).
    pub id: u32,
    /// The node at the other end.
    pub peer: String,
    /// The peer's interface on the link.
    pub peer_interface: String,
    /// This end's IPv4 address.
    pub ipv4: Ipv4Addr,
    /// The prefix length of the link's IPv4 subnet.
    pub ipv4_prefix_len: u8,
    /// This end's IPv6 address.
    pub ipv6: Ipv6Addr,
    /// The prefix length of the link's IPv6 subnet.
    pub ipv6_prefix_len: u8,
    /// The peer's IPv4 address (the gateway of routes through it, a static neighbour).
    pub peer_ipv4: Ipv4Addr,
    /// The peer's IPv6 address.
    pub peer_ipv6: Ipv6Addr,
    /// The link SPEC of packets leaving the node through this interface, as `pathlab
    /// emulate` takes it (empty: a plain cable).
    pub egress: String,
    /// Changes of that spec during the run, in time order.
    #[serde(default, rename = "event", skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EgressEvent>,
}

/// A change of an interface's egress spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressEvent {
    /// When, ns after the start of the run.
    pub at_ns: u64,
    /// The new spec.
    pub egress: String,
}

/// A route, IPv4 or IPv6.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// The destination prefix's address (`0.0.0.0` or `::` with length 0: the default).
    pub destination: IpAddr,
    /// The destination prefix's length.
    pub prefix_len: u8,
    /// The gateway, of the destination's family.
    pub via: IpAddr,
    /// The interface it leaves by (one of the node's).
    pub interface: String,
}

/// Which side of a workload the node plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// It runs the workload (the spec's `from`).
    Client,
    /// It answers it (the spec's `to`): listens on `port`, on every address.
    Server,
}

/// A workload the node runs or answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeWorkload {
    /// Its name in the results.
    pub name: String,
    /// Whether the node runs or answers it.
    pub role: Role,
    /// The node at the other side (the server of a client, the client of a server); a
    /// `command` without `to` has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The address the client reaches the server at (its `address`, else the server's lab
    /// address); for a server, the client's lab address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_address: Option<IpAddr>,
    /// The port the client connects to and the server listens on; none for `ping` and
    /// `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// When it starts, ns after the start of the run.
    pub start_ns: u64,
    /// How long it runs, ns.
    pub duration_ns: u64,
    /// Watch its TCP connections as `pathlab inspect` does (clients only).
    #[serde(default)]
    pub inspect: bool,
    /// What it is, with its parameters (`kind = "tcp"`, ...), in the config's names and
    /// units (`window_bytes`, `interval_ns`, `size_bytes`, `command`).
    #[serde(flatten)]
    pub kind: WorkloadKind,
}

/// Why a node config is refused: what, and where in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeConfigError {
    /// Larger than [`MAX_TEXT_BYTES`].
    #[error("{bytes} bytes: a node config has at most {MAX_TEXT_BYTES}")]
    TooLarge {
        /// The file's size.
        bytes: usize,
    },
    /// Not TOML, or a value of the wrong type.
    #[error("line {line}: {message}")]
    Toml {
        /// 1-based line.
        line: usize,
        /// What the TOML reader said.
        message: String,
    },
    /// A version other than [`VERSION`] (or none).
    #[error("version {found}: this pathlab reads node configs of version {VERSION}")]
    Version {
        /// What the file says.
        found: String,
    },
    /// A key this version does not know (a typo, or a newer writer).
    #[error("{key}: not a key of a node config (version {VERSION})")]
    UnknownKey {
        /// Its path (`workload[2].windw`).
        key: String,
    },
    /// A value outside its bounds or an inconsistent one.
    #[error("{field}: {problem}")]
    Invalid {
        /// Its path (`interface[0].name`).
        field: String,
        /// What was expected.
        problem: String,
    },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> NodeConfigError {
    NodeConfigError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Nanoseconds of a time of the spec; beyond `u64` they are refused by the check.
fn nanos(time: Duration) -> u64 {
    u64::try_from(time.as_nanos()).unwrap_or(u64::MAX)
}

/// What every node config of one export shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabSettings {
    /// The sweep point's label, if the lab is a sweep.
    pub point: Option<String>,
    /// Seed of the emulators' random choices.
    pub seed: u64,
    /// Where each node serves its results and metrics.
    pub control: SocketAddr,
}

impl NodeConfig {
    /// Node `node`'s config in `experiment` (as run: quick or not), checked as
    /// [`NodeConfig::parse`] checks a file, so every config written reads back.
    pub fn for_node(
        experiment: &Experiment,
        node: usize,
        settings: &LabSettings,
    ) -> Result<NodeConfig, NodeConfigError> {
        let names: Vec<&str> = experiment.nodes.iter().map(|n| n.name.as_str()).collect();
        let addressing = Addressing::for_links(experiment.links.len());
        let interfaces = node_interfaces(experiment, node, &names, addressing);
        let routes = node_routes(&experiment.links, addressing, &names, node);
        let workloads = node_workloads(experiment, node, &names);
        let config = NodeConfig {
            version: VERSION,
            lab: experiment.name.clone(),
            point: settings.point.clone(),
            node: names[node].to_owned(),
            router: experiment.nodes[node].router,
            duration_ns: nanos(experiment.duration),
            seed: settings.seed,
            late_warn_ns: experiment.late_bound.map(pathlab_core::Duration::as_nanos),
            control: settings.control,
            interfaces,
            routes,
            workloads,
        };
        config.check()?;
        Ok(config)
    }

    /// The config as TOML, as [`NodeConfig::parse`] reads it.
    ///
    /// # Panics
    ///
    /// On a number above `i64::MAX` (TOML's largest integer), which no config that
    /// [`NodeConfig::for_node`] made or [`NodeConfig::parse`] read holds.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a node config is plain tables, strings and numbers")
    }

    /// Reads a node config, refusing what this version does not know and anything out of
    /// its bounds; the error names the line or the key.
    pub fn parse(text: &str) -> Result<NodeConfig, NodeConfigError> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(NodeConfigError::TooLarge { bytes: text.len() });
        }
        let line = |span: Option<std::ops::Range<usize>>| {
            let end = span.map_or(0, |s| s.start.min(text.len()));
            text.as_bytes()[..end].split(|&b| b == b'\n').count()
        };
        let toml_error = |e: toml::de::Error| NodeConfigError::Toml {
            line: line(e.span()),
            message: e.message().trim().to_owned(),
        };
        // The version first: a newer file is refused as such, not for its new keys.
        let table: toml::Table = toml::from_str(text).map_err(toml_error)?;
        match table.get("version") {
            Some(toml::Value::Integer(v)) if *v == i64::from(VERSION) => {}
            Some(other) => {
                return Err(NodeConfigError::Version {
                    found: other.to_string().chars().take(40).collect(),
                })
            }
            None => {
                return Err(NodeConfigError::Version {
                    found: "missing".into(),
                })
            }
        }
        let config: NodeConfig = toml::from_str(text).map_err(toml_error)?;
        // A flattened workload kind takes unknown keys silently: every key must be one the
        // config writes back.
        let known = toml::Table::try_from(&config).map_err(|e| invalid("", e.to_string()))?;
        if let Some(key) = unknown_key(&table, &known, "") {
            return Err(NodeConfigError::UnknownKey { key });
        }
        config.check()?;
        Ok(config)
    }

    /// Every bound and consistency rule of the format.
    fn check(&self) -> Result<(), NodeConfigError> {
        if self.version != VERSION {
            return Err(NodeConfigError::Version {
                found: self.version.to_string(),
            });
        }
        if !valid_experiment_name(&self.lab) {
            return Err(invalid(
                "lab",
                format!("'{}' is not a lab name", excerpt(&self.lab)),
            ));
        }
        if let Some(point) = &self.point {
            check_text("point", point)?;
        }
        check_node_name("node", &self.node)?;
        check_time("duration_ns", self.duration_ns, 1)?;
        if let Some(bound) = self.late_warn_ns {
            check_time("late_warn_ns", bound, 1)?;
        }
        if i64::try_from(self.seed).is_err() {
            return Err(invalid(
                "seed",
                format!(
                    "{} is not a seed of 0 to {} (TOML's integers)",
                    self.seed,
                    i64::MAX
                ),
            ));
        }
        if self.control.port() == 0 {
            return Err(invalid("control", "port 0 is no port to serve on"));
        }
        if self.interfaces.len() > Addressing::MAX_LINKS {
            return Err(invalid(
                "interface",
                format!("at most {} interfaces", Addressing::MAX_LINKS),
            ));
        }
        let mut names = BTreeSet::new();
        let mut ids = BTreeSet::new();
        for (i, interface) in self.interfaces.iter().enumerate() {
            let at = format!("interface[{i}]");
            self.check_interface(&at, interface)?;
            if !names.insert(interface.name.as_str()) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("a second interface named '{}'", interface.name),
                ));
            }
            if !ids.insert(interface.id) {
                return Err(invalid(
                    format!("{at}.id"),
                    format!("a second interface on link {}", interface.id),
                ));
            }
        }
        if self.routes.len() > 2 * Addressing::MAX_LINKS {
            return Err(invalid(
                "route",
                format!("at most {} routes", 2 * Addressing::MAX_LINKS),
            ));
        }
        for (i, route) in self.routes.iter().enumerate() {
            let at = format!("route[{i}]");
            let max = if route.destination.is_ipv4() { 32 } else { 128 };
            if route.prefix_len > max {
                return Err(invalid(
                    format!("{at}.prefix_len"),
                    format!("{} is not a prefix length of 0 to {max}", route.prefix_len),
                ));
            }
            if route.via.is_ipv4() != route.destination.is_ipv4() {
                return Err(invalid(
                    format!("{at}.via"),
                    "a gateway of another family than the destination",
                ));
            }
            if !names.contains(route.interface.as_str()) {
                return Err(invalid(
                    format!("{at}.interface"),
                    format!(
                        "'{}' is not an interface of the node",
                        excerpt(&route.interface)
                    ),
                ));
            }
        }
        if self.workloads.len() > MAX_WORKLOADS {
            return Err(invalid(
                "workload",
                format!("at most {MAX_WORKLOADS} workloads"),
            ));
        }
        for (i, workload) in self.workloads.iter().enumerate() {
            self.check_workload(&format!("workload[{i}]"), workload)?;
        }
        Ok(())
    }

    fn check_interface(&self, at: &str, interface: &Interface) -> Result<(), NodeConfigError> {
        check_interface_name(&format!("{at}.name"), &interface.name)?;
        check_interface_name(&format!("{at}.peer_interface"), &interface.peer_interface)?;
        check_node_name(&format!("{at}.peer"), &interface.peer)?;
        if interface.peer == self.node {
            return Err(invalid(format!("{at}.peer"), "the node itself"));
        }
        let ends = [
            format!("{}-{}", self.node, interface.peer),
            format!("{}-{}", interface.peer, self.node),
        ];
        if !ends.contains(&interface.link) {
            return Err(invalid(
                format!("{at}.link"),
                format!(
                    "'{}' is not the link between {} and {} (NODE-PEER or PEER-NODE)",
                    excerpt(&interface.link),
                    self.node,
                    interface.peer
                ),
            ));
        }
        if interface.id as usize >= Addressing::MAX_LINKS {
            return Err(invalid(
                format!("{at}.id"),
                format!(
                    "{} is not a link id below {}",
                    interface.id,
                    Addressing::MAX_LINKS
                ),
            ));
        }
        for (field, len, max) in [
            ("ipv4_prefix_len", interface.ipv4_prefix_len, 32),
            ("ipv6_prefix_len", interface.ipv6_prefix_len, 128),
        ] {
            if len == 0 || len > max {
                return Err(invalid(
                    format!("{at}.{field}"),
                    format!("{len} is not a prefix length of 1 to {max}"),
                ));
            }
        }
        check_spec(&format!("{at}.egress"), &interface.egress)?;
        if interface.events.len() > MAX_EVENTS {
            return Err(invalid(
                format!("{at}.event"),
                format!("at most {MAX_EVENTS} events"),
            ));
        }
        let mut previous = None;
        for (j, event) in interface.events.iter().enumerate() {
            let field = format!("{at}.event[{j}]");
            if event.at_ns >= self.duration_ns {
                return Err(invalid(
                    format!("{field}.at_ns"),
                    format!(
                        "{} is not within the run ({} ns)",
                        event.at_ns, self.duration_ns
                    ),
                ));
            }
            if previous.is_some_and(|p| event.at_ns <= p) {
                return Err(invalid(
                    format!("{field}.at_ns"),
                    "events are in time order, one per instant",
                ));
            }
            previous = Some(event.at_ns);
            check_spec(&format!("{field}.egress"), &event.egress)?;
        }
        Ok(())
    }

    fn check_workload(&self, at: &str, workload: &NodeWorkload) -> Result<(), NodeConfigError> {
        check_text(&format!("{at}.name"), &workload.name)?;
        if let Some(peer) = &workload.peer {
            check_node_name(&format!("{at}.peer"), peer)?;
        }
        check_time(&format!("{at}.start_ns"), workload.start_ns, 0)?;
        check_time(&format!("{at}.duration_ns"), workload.duration_ns, 1)?;
        if workload.start_ns.saturating_add(workload.duration_ns)
            > self.duration_ns.saturating_add(END_SLACK_NS)
        {
            return Err(invalid(
                at,
                format!(
                    "runs from {} ns to {} ns, past the end of the run ({} ns)",
                    workload.start_ns,
                    workload.start_ns.saturating_add(workload.duration_ns),
                    self.duration_ns
                ),
            ));
        }
        if workload.port == Some(0) {
            return Err(invalid(format!("{at}.port"), "port 0"));
        }
        let listens = !matches!(
            workload.kind,
            WorkloadKind::Ping { .. } | WorkloadKind::Command { .. }
        );
        if listens != workload.port.is_some() {
            return Err(invalid(
                format!("{at}.port"),
                "tcp, rtt, owd and blocks workloads have a port, ping and command none",
            ));
        }
        if workload.role == Role::Server {
            if !listens {
                return Err(invalid(
                    format!("{at}.role"),
                    "nothing to serve for a ping or command workload",
                ));
            }
            if workload.inspect {
                return Err(invalid(
                    format!("{at}.inspect"),
                    "the client watches its connections, not the server",
                ));
            }
        }
        let needs_peer = !matches!(workload.kind, WorkloadKind::Command { .. });
        if needs_peer && (workload.peer.is_none() || workload.peer_address.is_none()) {
            return Err(invalid(
                at,
                "a workload with a peer needs peer and peer_address",
            ));
        }
        check_workload_kind(at, &workload.kind)
    }
}

/// Node `node`'s interfaces, one per link it is an end of, each with the egress spec and
/// events of the direction leaving the node; `names` are the experiment's node names.
fn node_interfaces(
    experiment: &Experiment,
    node: usize,
    names: &[&str],
    addressing: Addressing,
) -> Vec<Interface> {
    let links = &experiment.links;
    let mut interfaces = Vec::new();
    for (i, link) in links.iter().enumerate() {
        if link.a != node && link.b != node {
            continue;
        }
        let end = usize::from(link.b == node);
        let peer = if end == 0 { link.b } else { link.a };
        let [own, other] = [end, 1 - end].map(|e| addressing.ends(i)[e]);
        let egress = if end == 0 {
            &link.forward
        } else {
            &link.reverse
        };
        let events = experiment
            .events
            .iter()
            .filter(|event| event.link == i)
            .filter_map(|event| {
                let spec = if end == 0 {
                    &event.forward
                } else {
                    &event.reverse
                };
                spec.as_ref().map(|spec| EgressEvent {
                    at_ns: nanos(event.at),
                    egress: spec.to_string(),
                })
            })
            .collect();
        interfaces.push(Interface {
            name: port_name(names[peer]),
            link: link.name.clone(),
            id: u32::try_from(i).unwrap_or(u32::MAX),
            peer: names[peer].to_owned(),
            peer_interface: port_name(names[node]),
            ipv4: own.0,
            ipv4_prefix_len: addressing.v4_subnet(i).1,
            ipv6: own.1,
            ipv6_prefix_len: addressing.v6_subnet(i).1,
            peer_ipv4: other.0,
            peer_ipv6: other.1,
            egress: egress.to_string(),
            events,
        });
    }
    interfaces
}

/// Node `node`'s routes over `links`, IPv4 and IPv6, each leaving by its port towards the
/// next hop; `names` are the experiment's node names.
fn node_routes(links: &[Link], addressing: Addressing, names: &[&str], node: usize) -> Vec<Route> {
    installed_routes(links, addressing, names.len(), node)
        .into_iter()
        .map(|route| {
            let via = &links[route.via_link];
            let peer = if route.end == 0 { via.b } else { via.a };
            let unspecified = if route.gateway.is_ipv4() {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            } else {
                IpAddr::V6(Ipv6Addr::UNSPECIFIED)
            };
            let (destination, prefix_len) = route.destination.unwrap_or((unspecified, 0));
            Route {
                destination,
                prefix_len,
                via: route.gateway,
                interface: port_name(names[peer]),
            }
        })
        .collect()
}

/// The workloads node `node` runs (as their client) or answers (as the server of one
/// with a port).
fn node_workloads(experiment: &Experiment, node: usize, names: &[&str]) -> Vec<NodeWorkload> {
    let responders = blocks_responders(experiment);
    let mut workloads = Vec::new();
    for workload in &experiment.workloads {
        let port = workload_port(workload, &responders);
        let entry = |role, peer: Option<usize>, peer_address| NodeWorkload {
            name: workload.name.clone(),
            role,
            peer: peer.map(|p| names[p].to_owned()),
            peer_address,
            port,
            start_ns: nanos(workload.start),
            duration_ns: nanos(workload.duration),
            inspect: workload.inspect && role == Role::Client,
            kind: workload.kind.clone(),
        };
        if workload.from == node {
            workloads.push(entry(
                Role::Client,
                workload.to,
                workload_target(experiment, workload),
            ));
        } else if workload.to == Some(node) && port.is_some() {
            workloads.push(entry(
                Role::Server,
                Some(workload.from),
                Topology::address(experiment, workload.from).map(IpAddr::V4),
            ));
        }
    }
    workloads
}

/// A congestion control's name, if given: 1 to [`MAX_CONGESTION_NAME`] of letters, digits,
/// '_' and '-' (what the kernel registers).
fn check_congestion(at: &str, congestion: Option<&str>) -> Result<(), NodeConfigError> {
    match congestion {
        Some(name)
            if name.is_empty()
                || name.len() > MAX_CONGESTION_NAME
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
        {
            Err(invalid(
                format!("{at}.congestion"),
                format!(
                    "'{}' is not a congestion control name (1 to {MAX_CONGESTION_NAME} of \
                     letters, digits, '_' and '-')",
                    excerpt(name)
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// A workload kind's parameters within the config's bounds; errors name the config's
/// fields (`workload[0].size_bytes`).
fn check_workload_kind(at: &str, kind: &WorkloadKind) -> Result<(), NodeConfigError> {
    let probe_size = |size: u32, least: u32| {
        let most = pathlab_probe::probe::MAX_LEN as u32;
        if size < least || size > most {
            return Err(invalid(
                format!("{at}.size_bytes"),
                format!("{size} is not a size of {least} to {most} bytes"),
            ));
        }
        Ok(())
    };
    match kind {
        WorkloadKind::Tcp {
            streams,
            congestion,
            window,
        } => {
            let most = pathlab_probe::session::MAX_STREAMS;
            if *streams == 0 || *streams > most {
                return Err(invalid(
                    format!("{at}.streams"),
                    format!("{streams} is not 1 to {most} streams"),
                ));
            }
            check_congestion(at, congestion.as_deref())?;
            if let Some(window) = window {
                if *window == 0 || *window > MAX_WINDOW_BYTES {
                    return Err(invalid(
                        format!("{at}.window_bytes"),
                        format!("{window} is not a window of 1 to {MAX_WINDOW_BYTES} bytes"),
                    ));
                }
            }
        }
        WorkloadKind::Rtt { interval, size } | WorkloadKind::Ping { interval, size } => {
            check_time(&format!("{at}.interval_ns"), nanos(*interval), 1)?;
            // An rtt probe holds pathlab's header; an echo request may carry nothing.
            let least = if matches!(kind, WorkloadKind::Rtt { .. }) {
                32
            } else {
                0
            };
            probe_size(*size, least)?;
        }
        WorkloadKind::Owd { rate_bps, size } => {
            if *rate_bps == 0 || *rate_bps > MAX_RATE_BPS {
                return Err(invalid(
                    format!("{at}.rate_bps"),
                    format!("{rate_bps} is not a rate of 1 to {MAX_RATE_BPS} bit/s"),
                ));
            }
            probe_size(*size, 32)?;
        }
        WorkloadKind::Blocks { size, congestion } => {
            if *size == 0 || *size > MAX_BLOCK_BYTES {
                return Err(invalid(
                    format!("{at}.size_bytes"),
                    format!("{size} is not a block of 1 to {MAX_BLOCK_BYTES} bytes"),
                ));
            }
            check_congestion(at, congestion.as_deref())?;
        }
        WorkloadKind::Command { argv } => {
            if argv.is_empty() || argv.len() > MAX_COMMAND_ARGS {
                return Err(invalid(
                    format!("{at}.command"),
                    format!("a program and at most {} arguments", MAX_COMMAND_ARGS - 1),
                ));
            }
            for (k, argument) in argv.iter().enumerate() {
                if argument.len() > MAX_TEXT_FIELD || argument.contains('\0') {
                    return Err(invalid(
                        format!("{at}.command[{k}]"),
                        format!("at most {MAX_TEXT_FIELD} bytes and no NUL"),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_node_name(field: &str, name: &str) -> Result<(), NodeConfigError> {
    let what = format!("a node name (1 to {MAX_NAME} of a-z, 0-9 and '-')");
    check_name(field, name, valid_name(name), &what)
}

/// `name` (of `field`) unless it is not `valid`: then an error saying it is not `what`.
fn check_name(field: &str, name: &str, valid: bool, what: &str) -> Result<(), NodeConfigError> {
    if valid {
        return Ok(());
    }
    Err(invalid(field, format!("'{}' is not {what}", excerpt(name))))
}

/// An interface name the kernel takes: 1 to [`MAX_INTERFACE_NAME`] of ASCII letters,
/// digits, '-', '_' and '.', and not `.` or `..`.
pub fn valid_interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_INTERFACE_NAME
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn check_interface_name(field: &str, name: &str) -> Result<(), NodeConfigError> {
    let what = format!(
        "an interface name (1 to {MAX_INTERFACE_NAME} of letters, digits, '-', '_' and '.')"
    );
    check_name(field, name, valid_interface_name(name), &what)
}

fn check_text(field: &str, text: &str) -> Result<(), NodeConfigError> {
    if text.is_empty() || text.len() > MAX_TEXT_FIELD || text.chars().any(char::is_control) {
        return Err(invalid(
            field,
            format!("1 to {MAX_TEXT_FIELD} bytes without control characters"),
        ));
    }
    Ok(())
}

fn check_time(field: &str, ns: u64, least: u64) -> Result<(), NodeConfigError> {
    if ns < least || ns > MAX_TIME_NS {
        return Err(invalid(
            field,
            format!("{ns} is not a time of {least} to {MAX_TIME_NS} ns (30 days)"),
        ));
    }
    Ok(())
}

fn check_spec(field: &str, spec: &str) -> Result<(), NodeConfigError> {
    if spec.len() > MAX_SPEC {
        return Err(invalid(
            field,
            format!("a SPEC of at most {MAX_SPEC} bytes"),
        ));
    }
    LinkSpec::parse(spec)
        .map(|_| ())
        .map_err(|e| invalid(field, format!("bad SPEC '{}': {e}", excerpt(spec))))
}

/// The first key of `input` that `known` (the config as it writes itself) lacks, as a
/// path. An empty array may be missing from `known`: lists the writer leaves out when
/// empty read back the same.
fn unknown_key(input: &toml::Table, known: &toml::Table, path: &str) -> Option<String> {
    for (key, value) in input {
        let here = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match (value, known.get(key)) {
            (toml::Value::Array(items), None) if items.is_empty() => {}
            (_, None) => return Some(here),
            (toml::Value::Table(inner), Some(toml::Value::Table(known_inner))) => {
                if let Some(found) = unknown_key(inner, known_inner, &here) {
                    return Some(found);
                }
            }
            (toml::Value::Array(items), Some(toml::Value::Array(known_items))) => {
                for (i, (item, known_item)) in items.iter().zip(known_items).enumerate() {
                    if let (toml::Value::Table(item), toml::Value::Table(known_item)) =
                        (item, known_item)
                    {
                        if let Some(found) = unknown_key(item, known_item, &format!("{here}[{i}]"))
                        {
                            return Some(found);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_lab::recipes::RECIPES;
    use pathlab_lab::spec::expand;

    fn settings() -> LabSettings {
        LabSettings {
            point: None,
            seed: 7,
            control: "0.0.0.0:9464".parse().unwrap(),
        }
    }

    fn bufferbloat(node: &str) -> NodeConfig {
        let text =
            &expand(pathlab_lab::recipes::recipe("bufferbloat").unwrap(), false).unwrap()[1].text;
        let experiment = Experiment::parse(text).unwrap();
        let index = experiment
            .nodes
            .iter()
            .position(|n| n.name == node)
            .unwrap();
        NodeConfig::for_node(&experiment, index, &settings()).unwrap()
    }

    #[test]
    fn every_node_of_every_recipe_reads_back_as_written() {
        for (name, text) in RECIPES {
            for quick in [false, true] {
                for point in expand(text, quick).unwrap() {
                    let experiment = Experiment::parse(&point.text).unwrap();
                    let experiment = if quick {
                        experiment.quick()
                    } else {
                        experiment
                    };
                    let settings = LabSettings {
                        point: Some(point.label.clone()).filter(|l| !l.is_empty()),
                        ..settings()
                    };
                    for node in 0..experiment.nodes.len() {
                        let config = NodeConfig::for_node(&experiment, node, &settings)
                            .unwrap_or_else(|e| panic!("{name} {}: {e}", point.label));
                        let text = config.to_toml();
                        let read = NodeConfig::parse(&text)
                            .unwrap_or_else(|e| panic!("{name} {}: {e}\n{text}", point.label));
                        assert_eq!(read, config, "{name} {}", point.label);
                        // The specs read back as the spec's own.
                        for interface in &config.interfaces {
                            let link = &experiment.links[interface.id as usize];
                            let own = if link.a == node {
                                &link.forward
                            } else {
                                &link.reverse
                            };
                            assert_eq!(&LinkSpec::parse(&interface.egress).unwrap(), own);
                        }
                        // The workloads read back as the spec's own kinds, as `pathlab
                        // node` runs them.
                        for workload in &config.workloads {
                            let own = experiment
                                .workloads
                                .iter()
                                .find(|w| w.name == workload.name)
                                .unwrap();
                            assert_eq!(workload.kind, own.kind);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_node_has_the_addresses_routes_and_halves_of_a_one_machine_run() {
        // h1 - r1 - h2: link 0 is h1-r1, link 1 r1-h2 with the bottleneck from r1 to h2.
        let r1 = bufferbloat("r1");
        assert!(r1.router);
        assert_eq!(r1.interfaces.len(), 2);
        let to_h2 = &r1.interfaces[1];
        assert_eq!(
            (
                to_h2.name.as_str(),
                to_h2.peer.as_str(),
                to_h2.peer_interface.as_str()
            ),
            ("to-h2", "h2", "to-r1")
        );
        assert_eq!((to_h2.link.as_str(), to_h2.id), ("r1-h2", 1));
        assert_eq!(to_h2.ipv4, Ipv4Addr::new(198, 18, 1, 1));
        assert_eq!(to_h2.ipv4_prefix_len, 24);
        assert_eq!(to_h2.ipv6, "2001:2:0:1::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(to_h2.peer_ipv4, Ipv4Addr::new(198, 18, 1, 2));
        assert_eq!(to_h2.egress, "delay 5ms rate 10mbit limit 50");
        assert!(
            r1.routes.is_empty(),
            "a router between two stubs needs none"
        );
        let h2 = bufferbloat("h2");
        assert_eq!(
            h2.interfaces[0].egress, "delay 5ms",
            "h2's half: the reverse"
        );
        assert_eq!(
            h2.routes,
            [
                Route {
                    destination: Ipv4Addr::UNSPECIFIED.into(),
                    prefix_len: 0,
                    via: Ipv4Addr::new(198, 18, 1, 1).into(),
                    interface: "to-r1".into(),
                },
                Route {
                    destination: Ipv6Addr::UNSPECIFIED.into(),
                    prefix_len: 0,
                    via: "2001:2:0:1::1".parse::<IpAddr>().unwrap(),
                    interface: "to-r1".into(),
                },
            ]
        );
        // h1 runs both workloads against h2's lab address; h2 serves them on the server's
        // port.
        let h1 = bufferbloat("h1");
        assert_eq!(h1.workloads.len(), 2);
        let bulk = &h1.workloads[0];
        assert_eq!(bulk.role, Role::Client);
        assert_eq!(bulk.peer_address, Some(Ipv4Addr::new(198, 18, 1, 2).into()));
        assert_eq!(bulk.port, Some(pathlab_lab::run::SERVER_PORT));
        assert_eq!(
            bulk.kind,
            WorkloadKind::Tcp {
                streams: 1,
                congestion: Some("reno".into()),
                window: Some(4 << 20)
            }
        );
        assert!(h2.workloads.iter().all(|w| w.role == Role::Server));
        assert_eq!(
            h2.workloads[0].peer_address,
            Some(Ipv4Addr::new(198, 18, 0, 1).into())
        );
    }

    #[test]
    fn events_go_to_the_interface_whose_egress_they_change() {
        let text = pathlab_lab::recipes::recipe("bond").unwrap();
        let experiment = Experiment::parse(text).unwrap();
        let site = NodeConfig::for_node(&experiment, 0, &settings()).unwrap();
        let to_isp1 = interface(&site, "to-isp1");
        assert_eq!(
            to_isp1.events,
            [
                EgressEvent {
                    at_ns: 70_000_000_000,
                    egress: "loss 100%".into()
                },
                EgressEvent {
                    at_ns: 76_000_000_000,
                    egress: "delay 20ms rate 6mbit limit 500".into()
                },
            ]
        );
        let isp1 = NodeConfig::for_node(&experiment, 2, &settings()).unwrap();
        let to_site = interface(&isp1, "to-site");
        assert_eq!(
            to_site.events[1].egress,
            "delay 20ms rate 50mbit limit 1000"
        );
    }

    /// `config`'s interface `name`.
    fn interface<'a>(config: &'a NodeConfig, name: &str) -> &'a Interface {
        config.interfaces.iter().find(|i| i.name == name).unwrap()
    }

    fn refused(text: &str) -> NodeConfigError {
        NodeConfig::parse(text).expect_err("refused")
    }

    #[test]
    fn other_versions_unknown_keys_and_values_out_of_bounds_are_refused_with_where() {
        let good = bufferbloat("h1").to_toml();
        let replaced = |from: &str, to: &str| {
            assert!(good.contains(from), "{from} in\n{good}");
            good.replacen(from, to, 1)
        };
        assert_eq!(
            refused(&replaced("version = 1", "version = 2")),
            NodeConfigError::Version { found: "2".into() }
        );
        assert_eq!(
            refused(&replaced("version = 1\n", "")),
            NodeConfigError::Version {
                found: "missing".into()
            }
        );
        assert_eq!(
            refused(&replaced("streams = 1", "streams = 1\nwindw = 5")),
            NodeConfigError::UnknownKey {
                key: "workload[0].windw".into()
            }
        );
        assert_eq!(
            refused(&replaced(
                "egress = \"delay 5ms\"",
                "egress = \"delay 5ms\"\nmtu = 9000"
            )),
            NodeConfigError::Toml {
                line: good
                    .lines()
                    .position(|l| l == "egress = \"delay 5ms\"")
                    .unwrap()
                    + 2,
                message: "unknown field `mtu`, expected one of `name`, `link`, `id`, `peer`, \
                          `peer_interface`, `ipv4`, `ipv4_prefix_len`, `ipv6`, \
                          `ipv6_prefix_len`, `peer_ipv4`, `peer_ipv6`, `egress`, `event`"
                    .into()
            }
        );
        let problem = |text: &str| match refused(text) {
            NodeConfigError::Invalid { field, problem } => format!("{field}: {problem}"),
            other => panic!("{other}"),
        };
        assert_eq!(
            problem(&replaced(
                "name = \"to-r1\"",
                "name = \"to-a-very-long-name\""
            )),
            "interface[0].name: 'to-a-very-long-name' is not an interface name (1 to 15 of \
             letters, digits, '-', '_' and '.')"
        );
        assert!(problem(&replaced("streams = 1", "streams = 1000"))
            .starts_with("workload[0].streams: 1000 is not 1 to 128 streams"));
        assert!(
            problem(&replaced("congestion = \"reno\"", "congestion = \"re no\""))
                .starts_with("workload[0].congestion: 're no' is not a congestion control name"),
        );
        assert!(problem(&replaced(
            "egress = \"delay 5ms\"",
            "egress = \"delay fast\""
        ))
        .starts_with("interface[0].egress: bad SPEC 'delay fast'"));
        assert!(problem(&replaced(
            "duration_ns = 60000000000\n",
            "duration_ns = 0\n"
        ))
        .starts_with("duration_ns: 0 is not a time of 1 to"));
        assert!(
            problem(&replaced("interface = \"to-r1\"", "interface = \"eth9\""))
                .starts_with("route[0].interface: 'eth9' is not an interface of the node"),
        );
        assert!(problem(&replaced("node = \"h1\"", "node = \"H1\""))
            .starts_with("node: 'H1' is not a node name"));
        assert!(matches!(
            refused(&replaced("seed = 7", "seed = -1")),
            NodeConfigError::Toml { .. }
        ));
        // A seed TOML cannot write is refused when the config is made, not by a panic.
        let experiment = Experiment::parse(pathlab_lab::recipes::recipe("bond").unwrap()).unwrap();
        let too_large = LabSettings {
            seed: u64::MAX,
            ..settings()
        };
        assert!(matches!(
            NodeConfig::for_node(&experiment, 0, &too_large),
            Err(NodeConfigError::Invalid { field, .. }) if field == "seed"
        ));
        assert!(matches!(
            refused("version = 1\nlab = "),
            NodeConfigError::Toml { line: 2, .. }
        ));
        assert_eq!(
            refused(&" ".repeat(MAX_TEXT_BYTES + 1)),
            NodeConfigError::TooLarge {
                bytes: MAX_TEXT_BYTES + 1
            }
        );
    }
}
