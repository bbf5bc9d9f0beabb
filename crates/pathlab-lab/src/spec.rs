//! Experiment specs: a TOML file of nodes, links with a link SPEC per direction, workloads
//! and events on a timeline. Parsing and every check happen here, before anything is
//! built, and every error names the line it is about (docs/lab.md has the format).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;
use std::time::Duration;

use pathlab_core::spec::RateSpec;
use pathlab_core::LinkSpec;
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::addressing::Addressing;

/// A checked experiment.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// Its name (file names and titles).
    pub name: String,
    /// What it shows, for the report.
    pub description: String,
    /// How long the run lasts.
    pub duration: Duration,
    /// Hosts and routers, each a network namespace.
    pub nodes: Vec<Node>,
    /// Links between two nodes.
    pub links: Vec<Link>,
    /// What runs, when.
    pub workloads: Vec<Workload>,
    /// Link changes at given times, in time order.
    pub events: Vec<Event>,
    /// The run's length with `--quick`, if the spec gives one.
    pub quick: Option<Duration>,
    /// The fidelity guard's bound on every emulated link (`late_warn`): a second whose
    /// p99 send lateness exceeds it is late, and the run is marked; `None`: off.
    pub late_bound: Option<pathlab_core::Duration>,
}

impl Experiment {
    /// Its nodes' names, in order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The experiment shortened to its `quick` length: every start, duration and event
    /// time scaled by the same factor. Unchanged without a `quick` length.
    pub fn quick(mut self) -> Experiment {
        let Some(quick) = self.quick else { return self };
        let factor = quick.as_secs_f64() / self.duration.as_secs_f64();
        let scale = |d: Duration| d.mul_f64(factor);
        self.duration = quick;
        for workload in &mut self.workloads {
            workload.start = scale(workload.start);
            workload.duration = scale(workload.duration);
        }
        for event in &mut self.events {
            event.at = scale(event.at);
            for spec in [&mut event.forward, &mut event.reverse]
                .into_iter()
                .flatten()
            {
                scale_schedule(spec, factor);
            }
        }
        for link in &mut self.links {
            scale_schedule(&mut link.forward, factor);
            scale_schedule(&mut link.reverse, factor);
        }
        self
    }
}

/// A rate schedule is part of the timeline: its steps scale with the experiment.
fn scale_schedule(spec: &mut LinkSpec, factor: f64) {
    if let Some(RateSpec::Schedule(schedule)) = &mut spec.rate {
        schedule.step = pathlab_core::Duration::from_secs_f64(schedule.step.as_secs_f64() * factor);
    }
}

/// One run of a sweep: its label (`queue=10`) and the spec text with `{queue}` replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepPoint {
    /// `KEY=VALUE, ...`, empty without a sweep.
    pub label: String,
    /// `(KEY, VALUE)` of each sweep key, in the sweep's order; a number gets the unit the
    /// spec writes after its placeholder (`delay {delay}ms` gives `10ms`).
    pub parameters: Vec<(String, String)>,
    /// The text to parse.
    pub text: String,
}

/// Expands a spec's `[sweep]` table (`queue = [10, 50, 100]`): one text per combination
/// of values, `{queue}` replaced in each. With `quick`, a key's values in `[quick_sweep]`
/// (a thinner grid for `--quick`) replace its `[sweep]` values. A spec without a sweep
/// gives itself.
pub fn expand(text: &str, quick: bool) -> Result<Vec<SweepPoint>, SpecFileError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| SpecFileError {
        file: None,
        line: e.span().map_or(1, |span| {
            Checker {
                text,
                twins: &no_twins,
            }
            .line(&span)
        }),
        message: e.message().trim().to_owned(),
    })?;
    let mut points = vec![SweepPoint {
        label: String::new(),
        parameters: Vec::new(),
        text: text.to_owned(),
    }];
    let Some(sweep) = table.get("sweep") else {
        return Ok(points);
    };
    let line = header_line(text, "[sweep]");
    let bad = |message: String| line_error(line, message);
    let sweep = sweep
        .as_table()
        .ok_or_else(|| bad("sweep: a table of KEY = [values]".into()))?;
    let quick_sweep = quick_sweep_table(&table, sweep, text)?;
    for (key, values) in sweep {
        let values = quick_sweep
            .and_then(|q| q.get(key))
            .filter(|_| quick)
            .unwrap_or(values);
        let values = values.as_array().filter(|v| !v.is_empty()).ok_or_else(|| {
            bad(format!(
                "sweep.{key}: a list of values, as in [10, 50, 100]"
            ))
        })?;
        let placeholder = format!("{{{key}}}");
        if !text.contains(&placeholder) {
            return Err(bad(format!(
                "sweep.{key}: the spec never says {placeholder}"
            )));
        }
        let unit = placeholder_unit(text, &placeholder);
        let mut next = Vec::new();
        for point in &points {
            for value in values {
                let value = sweep_value_text(key, value, line)?;
                let label = if point.label.is_empty() {
                    format!("{key}={value}")
                } else {
                    format!("{}, {key}={value}", point.label)
                };
                let mut parameters = point.parameters.clone();
                let with_unit = if value.parse::<f64>().is_ok() {
                    format!("{value}{unit}")
                } else {
                    value.clone()
                };
                parameters.push((key.clone(), with_unit));
                next.push(SweepPoint {
                    label,
                    parameters,
                    text: point.text.replace(&placeholder, &value),
                });
            }
        }
        points = next;
    }
    Ok(points)
}

/// The 1-based line of a table's header (`[sweep]`) in the spec's text, or 1 when it has
/// none (the table was written inline).
fn header_line(text: &str, header: &str) -> usize {
    text.lines()
        .position(|l| l.trim() == header)
        .map_or(1, |i| i + 1)
}

/// A spec error on `line` of a file not yet named.
fn line_error(line: usize, message: String) -> SpecFileError {
    SpecFileError {
        file: None,
        line,
        message,
    }
}

/// The spec's `[quick_sweep]` table, if it has one, checked to name only keys of `sweep`
/// (it can only thin a sweep's values).
fn quick_sweep_table<'t>(
    table: &'t toml::Table,
    sweep: &toml::Table,
    text: &str,
) -> Result<Option<&'t toml::Table>, SpecFileError> {
    let Some(quick_sweep) = table.get("quick_sweep") else {
        return Ok(None);
    };
    let line = header_line(text, "[quick_sweep]");
    let bad = |message: String| line_error(line, message);
    let quick_sweep = quick_sweep
        .as_table()
        .ok_or_else(|| bad("quick_sweep: a table of KEY = [values]".into()))?;
    if let Some(key) = quick_sweep.keys().find(|k| !sweep.contains_key(*k)) {
        return Err(bad(format!(
            "quick_sweep.{key}: not a key of [sweep] (it can only thin a sweep's values)"
        )));
    }
    Ok(Some(quick_sweep))
}

/// A sweep value as the text that replaces its placeholder; only strings and numbers are
/// values (the error is on the `[sweep]` header's `line`).
fn sweep_value_text(key: &str, value: &toml::Value, line: usize) -> Result<String, SpecFileError> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(x) => Ok(x.to_string()),
        other => Err(line_error(
            line,
            format!(
                "sweep.{key}: a {} is not a string or number",
                other.type_str()
            ),
        )),
    }
}

/// The unit written right after `placeholder` (`ms` in `delay {delay}ms`, `%` in
/// `loss {loss}%`) where every such use agrees; empty otherwise.
fn placeholder_unit(text: &str, placeholder: &str) -> String {
    let units: BTreeSet<&str> = text
        .match_indices(placeholder)
        .map(|(at, _)| {
            let rest = &text[at + placeholder.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphabetic() || c == '%'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|unit| !unit.is_empty())
        .collect();
    match units.len() {
        1 => units.into_iter().next().unwrap_or_default().to_owned(),
        _ => String::new(),
    }
}

/// A host or a router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name (1 to 12 of a-z, 0-9, `-`).
    pub name: String,
    /// Routers only forward; hosts run workloads (both forward when they have two links or
    /// more, so any graph routes; a node of one link has nowhere else to forward to).
    pub router: bool,
}

/// A link between nodes `a` and `b` (indices into [`Experiment::nodes`]).
#[derive(Debug, Clone)]
pub struct Link {
    /// `A-B`, as events name it.
    pub name: String,
    /// One end.
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// What a packet from `a` to `b` goes through.
    pub forward: LinkSpec,
    /// What a packet from `b` to `a` goes through.
    pub reverse: LinkSpec,
}

impl Link {
    /// Whether an emulator must sit on the link (some direction is not a perfect wire, or
    /// an event will change it).
    pub fn emulated(&self, events: &[Event], index: usize) -> bool {
        !self.forward.is_passthrough()
            || !self.reverse.is_passthrough()
            || events.iter().any(|e| e.link == index)
    }
}

/// What a workload does.
///
/// It is also a workload's kind and parameters in the node config `pathlab export` writes
/// (`kind = "tcp"`, ...): there its fields take the file's names and units (`window_bytes`,
/// `interval_ns`, `size_bytes`, `command`), which the serde attributes give.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum WorkloadKind {
    /// Bulk TCP from `from` to `to` (pathlab's `tcp`).
    Tcp {
        /// Parallel streams.
        streams: u32,
        /// Congestion control (`reno`, `bbr`, ...), the kernel's default if `None`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        congestion: Option<String>,
        /// Socket buffers at both ends, bytes.
        #[serde(
            default,
            rename = "window_bytes",
            skip_serializing_if = "Option::is_none"
        )]
        window: Option<u32>,
    },
    /// Isochronous round trips (pathlab's `rtt`).
    Rtt {
        /// Between requests.
        #[serde(rename = "interval_ns", with = "nanoseconds")]
        interval: Duration,
        /// UDP payload bytes.
        #[serde(rename = "size_bytes")]
        size: u32,
    },
    /// ICMP echo requests, as `ping -i INTERVAL -s SIZE` (no server needed).
    Ping {
        /// Between requests.
        #[serde(rename = "interval_ns", with = "nanoseconds")]
        interval: Duration,
        /// ICMP payload bytes.
        #[serde(rename = "size_bytes")]
        size: u32,
    },
    /// One-way probes at a rate (pathlab's `owd`).
    Owd {
        /// Bits per second of UDP payload.
        rate_bps: u64,
        /// UDP payload bytes.
        #[serde(rename = "size_bytes")]
        size: u32,
    },
    /// An application that works in blocks (seed 003's Lotus Notes, 16 kB): it writes a
    /// block of `size` bytes to `to` over TCP and waits for a one-byte answer before the
    /// next, so it moves at most one block per round trip whatever the window.
    Blocks {
        /// Bytes per block.
        #[serde(rename = "size_bytes")]
        size: u32,
        /// Congestion control of the writer, the kernel's default if `None`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        congestion: Option<String>,
    },
    /// A program run in `from`'s namespace (`{to}` in its arguments becomes `to`'s address).
    Command {
        /// Program and arguments.
        #[serde(rename = "command")]
        argv: Vec<String>,
    },
}

/// A time written as integer nanoseconds, as the node config writes times; one beyond
/// `u64` nanoseconds is written as `u64::MAX`, which the config's bounds refuse.
mod nanoseconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `time` as its nanoseconds.
    pub fn serialize<S: Serializer>(time: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(pathlab_core::Duration::from(*time).as_nanos())
    }

    /// Reads a time from its nanoseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_nanos)
    }
}

/// Something that runs from `start` for `duration`.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Its name in the results (`tcp-1`, or as given).
    pub name: String,
    /// What it is.
    pub kind: WorkloadKind,
    /// Where it runs (the client).
    pub from: usize,
    /// Its peer (the server), if it has one.
    pub to: Option<usize>,
    /// The address `to` is measured at, when not its lab address: one a tunnel or a
    /// program the run starts gives it (`pathlab bond`'s inner address).
    pub address: Option<std::net::IpAddr>,
    /// When it starts.
    pub start: Duration,
    /// How long it runs.
    pub duration: Duration,
    /// Watch its TCP connections as `pathlab inspect` does (every 100 ms, from `from`'s
    /// namespace, connections to `to`), and keep what limited them.
    pub inspect: bool,
}

/// A link's spec changes at `at`.
#[derive(Debug, Clone)]
pub struct Event {
    /// When.
    pub at: Duration,
    /// Which link (index into [`Experiment::links`]).
    pub link: usize,
    /// The new spec from `a` to `b`, if it changes.
    pub forward: Option<LinkSpec>,
    /// The new spec from `b` to `a`, if it changes.
    pub reverse: Option<LinkSpec>,
}

/// Why a spec file is not an experiment: what and on which line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}line {line}: {message}", .file.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct SpecFileError {
    /// The file, when known.
    pub file: Option<String>,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExperiment {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    duration: Spanned<String>,
    #[serde(default, rename = "node")]
    nodes: Vec<Spanned<RawNode>>,
    #[serde(default, rename = "link")]
    links: Vec<Spanned<RawLink>>,
    #[serde(default, rename = "workload")]
    workloads: Vec<Spanned<RawWorkload>>,
    #[serde(default, rename = "event")]
    events: Vec<Spanned<RawEvent>>,
    /// Expanded before parsing ([`expand`]); accepted here so the text parses as is.
    #[serde(default)]
    #[allow(dead_code)]
    sweep: Option<toml::Table>,
    /// Also expanded before parsing.
    #[serde(default)]
    #[allow(dead_code)]
    quick_sweep: Option<toml::Table>,
    /// The run's length with `--quick` ([`Experiment::quick`]).
    #[serde(default)]
    quick: Option<Spanned<String>>,
    /// The fidelity guard's bound, or `off` ([`Experiment::late_bound`]).
    #[serde(default)]
    late_warn: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Spanned<String>,
    #[serde(default)]
    kind: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    between: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    spec: Option<Spanned<String>>,
    #[serde(default)]
    reverse: Option<Spanned<String>>,
    #[serde(default)]
    twin: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    kind: Spanned<String>,
    #[serde(default)]
    name: Option<String>,
    from: Spanned<String>,
    #[serde(default)]
    to: Option<Spanned<String>>,
    #[serde(default)]
    address: Option<Spanned<String>>,
    #[serde(default)]
    start: Option<Spanned<String>>,
    #[serde(default)]
    duration: Option<Spanned<String>>,
    #[serde(default)]
    streams: Option<u32>,
    #[serde(default)]
    congestion: Option<String>,
    #[serde(default)]
    window: Option<Spanned<String>>,
    #[serde(default)]
    interval: Option<Spanned<String>>,
    #[serde(default)]
    size: Option<u32>,
    #[serde(default)]
    rate: Option<Spanned<String>>,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    inspect: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at: Spanned<String>,
    link: Spanned<String>,
    #[serde(default)]
    spec: Option<Spanned<String>>,
    #[serde(default)]
    reverse: Option<Spanned<String>>,
}

/// Longest node name: interface names are `to-NAME` within the kernel's 15 bytes.
pub const MAX_NAME: usize = 12;
/// Longest experiment name (it names files and directories).
pub const MAX_EXPERIMENT_NAME: usize = 40;
/// Most links: as many subnets as the addressing has ([`Addressing::MAX_LINKS`]).
const MAX_LINKS: usize = Addressing::MAX_LINKS;

/// Looks a node name up, or says on its line that there is no such node.
type FindNode<'a> = dyn Fn(&Spanned<String>, &str) -> Result<usize, SpecFileError> + 'a;

struct Checker<'a> {
    text: &'a str,
    /// Reads a link's `twin = "FILE"` into its two specs (up, down).
    twins: &'a TwinReader<'a>,
}

/// What reads a link's `twin = "FILE"` into its two specs, `(up, down)`, or says why not:
/// the spec's text is parsed without touching files, the reader is the caller's (a spec
/// file's reads the twin beside it, [`crate::sweep::ExperimentSource`]).
pub type TwinReader<'a> = dyn Fn(&str) -> Result<(LinkSpec, LinkSpec), String> + 'a;

/// The [`TwinReader`] of a spec that came from no file (a recipe, a test's text).
pub fn no_twins(_: &str) -> Result<(LinkSpec, LinkSpec), String> {
    Err("a twin file is read beside a spec file; this spec came from none".into())
}

impl Checker<'_> {
    fn line(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text[..end].bytes().filter(|&b| b == b'\n').count() + 1
    }

    fn error(&self, span: &Range<usize>, message: impl Into<String>) -> SpecFileError {
        SpecFileError {
            file: None,
            line: self.line(span),
            message: message.into(),
        }
    }

    fn time(&self, value: &Spanned<String>, what: &str) -> Result<Duration, SpecFileError> {
        parse_time(value.get_ref())
            .map_err(|problem| self.error(&value.span(), format!("{what}: {problem}")))
    }

    /// A link's two specs: `spec` from its first node to its second (none: a plain
    /// cable) and `reverse` back (none: `spec`), or a measured path's, `twin`'s up spec
    /// from the first node and its down spec back.
    fn link_specs(&self, link: &RawLink) -> Result<(LinkSpec, LinkSpec), SpecFileError> {
        if let Some(twin) = &link.twin {
            if link.spec.is_some() || link.reverse.is_some() {
                return Err(self.error(
                    &twin.span(),
                    "twin: a link takes a twin or spec and reverse, not both",
                ));
            }
            return (self.twins)(twin.get_ref())
                .map_err(|e| self.error(&twin.span(), format!("twin '{}': {e}", twin.get_ref())));
        }
        let forward = match &link.spec {
            Some(spec) => self.link_spec(spec)?,
            None => LinkSpec::default(),
        };
        let reverse = match &link.reverse {
            Some(spec) => self.link_spec(spec)?,
            None => forward.clone(),
        };
        Ok((forward, reverse))
    }

    fn link_spec(&self, value: &Spanned<String>) -> Result<LinkSpec, SpecFileError> {
        LinkSpec::parse(value.get_ref()).map_err(|e| {
            self.error(
                &value.span(),
                format!("bad SPEC '{}': {e}", value.get_ref()),
            )
        })
    }
}

/// A time in an experiment: `10s`, `250ms`, `1.5s`; a bare number is seconds.
fn parse_time(text: &str) -> Result<Duration, String> {
    pathlab_core::spec::parse_time_secs(text)
        .map(Into::into)
        .map_err(|e| e.to_string())
}

/// Whether `name` may name a node: 1 to [`MAX_NAME`] of a-z, 0-9 and '-', not starting
/// with '-'.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}

/// Whether `name` may name an experiment: 1 to [`MAX_EXPERIMENT_NAME`] of letters, digits,
/// '-' and '_'.
pub fn valid_experiment_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_EXPERIMENT_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Experiment {
    /// Parses and checks a spec's text (one that came from no file: a link's `twin` is
    /// refused).
    pub fn parse(text: &str) -> Result<Experiment, SpecFileError> {
        Experiment::parse_with(text, &no_twins)
    }

    /// Parses and checks a spec's text, a link's `twin = "FILE"` read by `twins`.
    pub fn parse_with(text: &str, twins: &TwinReader<'_>) -> Result<Experiment, SpecFileError> {
        let raw: RawExperiment = toml::from_str(text).map_err(|e| {
            let checker = Checker { text, twins };
            let line = e.span().map_or(1, |span| checker.line(&span));
            SpecFileError {
                file: None,
                line,
                message: e.message().trim().to_owned(),
            }
        })?;
        Checker { text, twins }.experiment(raw)
    }
}

impl Checker<'_> {
    fn experiment(&self, raw: RawExperiment) -> Result<Experiment, SpecFileError> {
        let name = raw.name.get_ref();
        if !valid_experiment_name(name) {
            return Err(self.error(
                &raw.name.span(),
                format!(
                    "name '{name}': 1 to {MAX_EXPERIMENT_NAME} of letters, digits, '-' and '_' \
                     (it names files)"
                ),
            ));
        }
        let duration = self.time(&raw.duration, "duration")?;
        if duration.is_zero() {
            return Err(self.error(&raw.duration.span(), "duration: must be above zero"));
        }
        let nodes = self.nodes(&raw.nodes)?;
        let index: BTreeMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let find = |name: &Spanned<String>, what: &str| -> Result<usize, SpecFileError> {
            index.get(name.get_ref().as_str()).copied().ok_or_else(|| {
                self.error(
                    &name.span(),
                    format!(
                        "{what} '{}' is not a node (the nodes are: {})",
                        name.get_ref(),
                        nodes
                            .iter()
                            .map(|n| n.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
        };
        let links = self.links(&raw.links, &nodes, &find)?;
        let events = self.events(&raw.events, duration, &links, &nodes)?;
        let workloads = self.workloads(&raw.workloads, &find, duration, &links, nodes.len())?;
        let quick = raw
            .quick
            .as_ref()
            .map(|q| self.time(q, "quick"))
            .transpose()?
            .filter(|q| !q.is_zero() && *q < duration);
        let late_bound = self.late_bound(raw.late_warn.as_ref())?;
        Ok(Experiment {
            name: raw.name.into_inner(),
            description: raw.description,
            quick,
            late_bound,
            duration,
            nodes,
            links,
            workloads,
            events,
        })
    }

    /// The spec's links, each joining two different nodes at most once, at most
    /// [`MAX_LINKS`] of them; a link without `reverse` has `spec` both ways.
    fn links(
        &self,
        raw_links: &[Spanned<RawLink>],
        nodes: &[Node],
        find: &FindNode<'_>,
    ) -> Result<Vec<Link>, SpecFileError> {
        let mut links = Vec::new();
        let mut pairs = BTreeSet::new();
        for raw_link in raw_links {
            let link = raw_link.get_ref();
            let ends = link.between.get_ref();
            if ends.len() != 2 {
                return Err(self.error(
                    &link.between.span(),
                    "between: a link joins exactly two nodes, as in [\"h1\", \"r1\"]",
                ));
            }
            let (a, b) = (find(&ends[0], "link end")?, find(&ends[1], "link end")?);
            if a == b {
                return Err(self.error(&link.between.span(), "a link cannot join a node to itself"));
            }
            if !pairs.insert((a.min(b), a.max(b))) {
                return Err(self.error(
                    &link.between.span(),
                    format!(
                        "a second link between {} and {}",
                        nodes[a].name, nodes[b].name
                    ),
                ));
            }
            let (forward, reverse) = self.link_specs(link)?;
            links.push(Link {
                name: format!("{}-{}", nodes[a].name, nodes[b].name),
                a,
                b,
                forward,
                reverse,
            });
        }
        if links.len() > MAX_LINKS {
            return Err(self.error(
                &raw_links[MAX_LINKS].span(),
                format!("at most {MAX_LINKS} links (one /30 of 198.18.0.0/15 each)"),
            ));
        }
        Ok(links)
    }

    /// The spec's events, each within the run and on a link of the spec, at most one per
    /// link and instant, in time order.
    fn events(
        &self,
        raw_events: &[Spanned<RawEvent>],
        duration: Duration,
        links: &[Link],
        nodes: &[Node],
    ) -> Result<Vec<Event>, SpecFileError> {
        let mut events = Vec::new();
        let mut seen = BTreeMap::new();
        for raw_event in raw_events {
            let event = raw_event.get_ref();
            let at = self.time(&event.at, "at")?;
            if at >= duration {
                return Err(self.error(
                    &event.at.span(),
                    format!("at {at:?} is not within the run ({duration:?})"),
                ));
            }
            let name = event.link.get_ref();
            let link = links
                .iter()
                .position(|l| {
                    l.name == *name || format!("{}-{}", nodes[l.b].name, nodes[l.a].name) == *name
                })
                .ok_or_else(|| {
                    self.error(
                        &event.link.span(),
                        format!(
                            "link '{name}' goes nowhere: the links are {}",
                            links
                                .iter()
                                .map(|l| l.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
            if event.spec.is_none() && event.reverse.is_none() {
                return Err(self.error(&raw_event.span(), "an event needs spec or reverse"));
            }
            if let Some(previous) = seen.insert((link, at), self.line(&raw_event.span())) {
                return Err(self.error(
                    &raw_event.span(),
                    format!(
                        "two events change {} at the same time (the other is on line {previous})",
                        links[link].name
                    ),
                ));
            }
            let forward = event.spec.as_ref().map(|s| self.link_spec(s)).transpose()?;
            // Like a link: a spec without reverse changes both directions.
            let reverse = match &event.reverse {
                Some(spec) => Some(self.link_spec(spec)?),
                None => forward.clone(),
            };
            events.push(Event {
                at,
                link,
                forward,
                reverse,
            });
        }
        events.sort_by_key(|e| e.at);
        Ok(events)
    }

    /// The spec's workloads, each named as given or after its kind and count (`tcp-1`),
    /// no two with the same name.
    fn workloads(
        &self,
        raw_workloads: &[Spanned<RawWorkload>],
        find: &FindNode<'_>,
        duration: Duration,
        links: &[Link],
        node_count: usize,
    ) -> Result<Vec<Workload>, SpecFileError> {
        let mut workloads = Vec::new();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for raw_workload in raw_workloads {
            let workload = self.workload(raw_workload, find, duration, links, node_count)?;
            let workload = Workload {
                name: match &raw_workload.get_ref().name {
                    Some(name) => name.clone(),
                    None => {
                        let kind = raw_workload.get_ref().kind.get_ref().clone();
                        let count = counts.entry(kind.clone()).or_default();
                        *count += 1;
                        format!("{kind}-{count}")
                    }
                },
                ..workload
            };
            if workloads.iter().any(|w: &Workload| w.name == workload.name) {
                return Err(self.error(
                    &raw_workload.span(),
                    format!("a second workload named '{}'", workload.name),
                ));
            }
            workloads.push(workload);
        }
        Ok(workloads)
    }

    /// The fidelity guard's bound from `late_warn`: the default without one, `None` for
    /// `off`, else a time above zero.
    fn late_bound(
        &self,
        late_warn: Option<&Spanned<String>>,
    ) -> Result<Option<pathlab_core::Duration>, SpecFileError> {
        Ok(match late_warn {
            None => Some(pathlab_emulator::fidelity::DEFAULT_LATE_BOUND),
            Some(text) if text.get_ref() == "off" => None,
            Some(text) => Some(
                pathlab_core::spec::parse_time_secs(text.get_ref())
                    .ok()
                    .filter(|bound| !bound.is_zero())
                    .ok_or_else(|| {
                        self.error(
                            &text.span(),
                            format!(
                                "late_warn '{}': a time above zero like \"1ms\", or \"off\"",
                                text.get_ref()
                            ),
                        )
                    })?,
            ),
        })
    }

    fn nodes(&self, raw: &[Spanned<RawNode>]) -> Result<Vec<Node>, SpecFileError> {
        let mut nodes: Vec<Node> = Vec::new();
        for raw_node in raw {
            let node = raw_node.get_ref();
            let name = node.name.get_ref();
            if !valid_name(name) {
                return Err(self.error(
                    &node.name.span(),
                    format!("node name '{name}': 1 to {MAX_NAME} of a-z, 0-9 and '-'"),
                ));
            }
            if nodes.iter().any(|n| n.name == *name) {
                return Err(self.error(&node.name.span(), format!("a second node named '{name}'")));
            }
            let router = match node.kind.as_ref().map(|k| k.get_ref().as_str()) {
                None | Some("host") => false,
                Some("router") => true,
                Some(other) => {
                    return Err(self.error(
                        &node.kind.as_ref().expect("some").span(),
                        format!("kind '{other}': host or router"),
                    ))
                }
            };
            nodes.push(Node {
                name: name.clone(),
                router,
            });
        }
        if nodes.is_empty() {
            return Err(SpecFileError {
                file: None,
                line: 1,
                message: "no [[node]]: an experiment needs at least two".into(),
            });
        }
        Ok(nodes)
    }

    fn workload(
        &self,
        raw: &Spanned<RawWorkload>,
        find: &FindNode<'_>,
        run: Duration,
        links: &[Link],
        node_count: usize,
    ) -> Result<Workload, SpecFileError> {
        let w = raw.get_ref();
        let span = raw.span();
        let from = find(&w.from, "from")?;
        let to = w.to.as_ref().map(|to| find(to, "to")).transpose()?;
        let start = match &w.start {
            Some(start) => self.time(start, "start")?,
            None => Duration::ZERO,
        };
        let duration = match &w.duration {
            Some(d) => self.time(d, "duration")?,
            None => run.saturating_sub(start),
        };
        if duration.is_zero() {
            return Err(self.error(&span, "the workload has no time to run"));
        }
        if start + duration > run {
            return Err(self.error(
                &span,
                format!(
                    "the workload runs from {:?} to {:?}, past the end of the run ({:?})",
                    start,
                    start + duration,
                    run
                ),
            ));
        }
        let kind = self.workload_kind(w, &span)?;
        if !matches!(kind, WorkloadKind::Command { .. }) && to.is_none() {
            return Err(self.error(
                &span,
                format!("a {} workload needs to = \"HOST\"", w.kind.get_ref()),
            ));
        }
        let address = match &w.address {
            Some(_) if to.is_none() => {
                return Err(self.error(&span, "address is where to = \"HOST\" is reached: give to"))
            }
            Some(text) => Some(text.get_ref().parse().map_err(|_| {
                self.error(
                    &text.span(),
                    format!("address: '{}' is not an IP address", text.get_ref()),
                )
            })?),
            None => None,
        };
        if let Some(to) = to {
            if to == from {
                return Err(self.error(&span, "from and to are the same node"));
            }
            if !connected(links, node_count, from, to) {
                return Err(self.error(&span, "no path of links joins from and to"));
            }
        }
        if w.inspect && to.is_none() {
            return Err(self.error(
                &span,
                "inspect watches the connections to to = \"HOST\": give to",
            ));
        }
        Ok(Workload {
            name: String::new(),
            kind,
            from,
            to,
            address,
            start,
            duration,
            inspect: w.inspect,
        })
    }
    /// What a workload does, from its `kind` and that kind's keys, each missing one at its
    /// default; `span` is the workload's, for errors about it as a whole.
    fn workload_kind(
        &self,
        w: &RawWorkload,
        span: &Range<usize>,
    ) -> Result<WorkloadKind, SpecFileError> {
        Ok(match w.kind.get_ref().as_str() {
            "tcp" => WorkloadKind::Tcp {
                streams: w.streams.unwrap_or(1).max(1),
                congestion: w.congestion.clone(),
                window: w
                    .window
                    .as_ref()
                    .map(|s| {
                        pathlab_core::spec::parse_size(s.get_ref())
                            .map(|b| b as u32)
                            .map_err(|e| self.error(&s.span(), format!("window: {e}")))
                    })
                    .transpose()?,
            },
            "rtt" => WorkloadKind::Rtt {
                interval: match &w.interval {
                    Some(i) => self.time(i, "interval")?,
                    None => Duration::from_millis(10),
                },
                size: w.size.unwrap_or(64).max(32),
            },
            "ping" => WorkloadKind::Ping {
                interval: match &w.interval {
                    Some(i) => self.time(i, "interval")?,
                    None => Duration::from_secs(1),
                },
                size: w.size.unwrap_or(56),
            },
            "owd" => WorkloadKind::Owd {
                rate_bps: match &w.rate {
                    Some(r) => pathlab_core::spec::parse_rate(r.get_ref())
                        .map_err(|e| self.error(&r.span(), format!("rate: {e}")))?
                        .bits_per_sec(),
                    None => return Err(self.error(span, "an owd workload needs a rate")),
                },
                size: w.size.unwrap_or(1200).max(32),
            },
            "blocks" => WorkloadKind::Blocks {
                size: match w.size {
                    Some(0) => return Err(self.error(span, "size: a block of 0 bytes")),
                    Some(size) => size,
                    None => 16 * 1024,
                },
                congestion: w.congestion.clone(),
            },
            "command" => WorkloadKind::Command {
                argv: match &w.command {
                    Some(argv) if !argv.is_empty() => argv.clone(),
                    _ => {
                        return Err(self.error(
                            span,
                            "a command workload needs command = [\"program\", ...]",
                        ))
                    }
                },
            },
            other => {
                return Err(self.error(
                    &w.kind.span(),
                    format!("kind '{other}': tcp, rtt, ping, owd, blocks or command"),
                ))
            }
        })
    }
}

/// Whether links join `from` and `to`.
fn connected(links: &[Link], nodes: usize, from: usize, to: usize) -> bool {
    first_hops(links, nodes, from)[to].is_some() || from == to
}

/// For every node, the link `from` sends through to reach it (breadth first: fewest
/// hops, ties to the link declared first); `None` for `from` itself and unreachable nodes.
pub fn first_hops(links: &[Link], nodes: usize, from: usize) -> Vec<Option<usize>> {
    first_hops_and_distances(links, nodes, from).0
}

/// As [`first_hops`], with each node's distance in hops from `from` (0 for itself,
/// `usize::MAX` when unreachable).
pub fn first_hops_and_distances(
    links: &[Link],
    nodes: usize,
    from: usize,
) -> (Vec<Option<usize>>, Vec<usize>) {
    // Each node's links in the file's order, so the search visits them as before it had
    // this list (a lab of 1,000 links searched every link from every node it reached).
    let mut adjacent: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes];
    for (i, link) in links.iter().enumerate() {
        adjacent[link.a].push((i, link.b));
        adjacent[link.b].push((i, link.a));
    }
    let mut hop = vec![None; nodes];
    let mut distance = vec![usize::MAX; nodes];
    distance[from] = 0;
    let mut seen = vec![false; nodes];
    seen[from] = true;
    let mut queue = VecDeque::from([from]);
    while let Some(node) = queue.pop_front() {
        for &(i, next) in &adjacent[node] {
            if !seen[next] {
                seen[next] = true;
                hop[next] = if node == from { Some(i) } else { hop[node] };
                distance[next] = distance[node] + 1;
                queue.push_back(next);
            }
        }
    }
    (hop, distance)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"
name = "line"
duration = "20s"

[[node]]
name = "h1"
[[node]]
name = "r1"
kind = "router"
[[node]]
name = "h2"

[[link]]
between = ["h1", "r1"]
spec = "delay 5ms"
[[link]]
between = ["r1", "h2"]
spec = "delay 5ms rate 10mbit limit 100"
reverse = "delay 5ms"

[[workload]]
kind = "tcp"
from = "h1"
to = "h2"
congestion = "reno"
[[workload]]
kind = "rtt"
from = "h1"
to = "h2"
start = "1s"
duration = "15s"

[[event]]
at = "10s"
link = "r1-h2"
spec = "rate 1mbit"
"#;

    fn error(text: &str) -> SpecFileError {
        Experiment::parse(text).expect_err("refused")
    }

    #[test]
    fn a_line_with_two_workloads_and_an_event() {
        let e = Experiment::parse(LINE).expect("parses");
        assert_eq!(e.duration, Duration::from_secs(20));
        assert_eq!(e.nodes.len(), 3);
        assert!(e.nodes[1].router);
        assert_eq!(e.links[1].name, "r1-h2");
        assert_eq!(
            e.links[0].forward, e.links[0].reverse,
            "spec without reverse: both ways"
        );
        assert_eq!(e.links[1].reverse, LinkSpec::parse("delay 5ms").unwrap());
        assert_eq!(e.workloads[0].name, "tcp-1");
        assert_eq!(
            e.workloads[0].duration,
            Duration::from_secs(20),
            "to the end"
        );
        assert_eq!(e.workloads[1].start, Duration::from_secs(1));
        assert_eq!(e.events[0].link, 1);
        assert_eq!(e.events[0].forward, e.events[0].reverse);
        assert_eq!(first_hops(&e.links, 3, 0), vec![None, Some(0), Some(0)]);
        assert_eq!(first_hops(&e.links, 3, 1), vec![Some(0), None, Some(1)]);
    }

    fn replaced(from: &str, to: &str) -> String {
        assert!(LINE.contains(from), "{from}");
        LINE.replacen(from, to, 1)
    }

    #[test]
    fn a_workload_may_reach_its_peer_at_another_address() {
        let e = Experiment::parse(&replaced(
            "to = \"h2\"\ncongestion",
            "to = \"h2\"\naddress = \"198.19.0.1\"\ncongestion",
        ))
        .expect("parses");
        assert_eq!(e.workloads[0].address, Some("198.19.0.1".parse().unwrap()));
        assert_eq!(e.workloads[1].address, None);
        let e = error(&replaced(
            "to = \"h2\"\ncongestion",
            "to = \"h2\"\naddress = \"tunnel\"\ncongestion",
        ));
        assert_eq!(e.line, 25);
        assert!(e.message.contains("'tunnel' is not an IP address"), "{e}");
    }

    #[test]
    fn an_unknown_host_is_named_with_its_line() {
        let e = error(&replaced(
            "to = \"h2\"\ncongestion",
            "to = \"h9\"\ncongestion",
        ));
        assert_eq!(e.line, 24);
        assert!(
            e.message
                .contains("'h9' is not a node (the nodes are: h1, r1, h2)"),
            "{e}"
        );
    }

    #[test]
    fn a_link_to_nowhere_is_named_with_its_line() {
        let e = error(&replaced("link = \"r1-h2\"", "link = \"r1-h3\""));
        assert_eq!(e.line, 35);
        assert!(
            e.message
                .contains("link 'r1-h3' goes nowhere: the links are h1-r1, r1-h2"),
            "{e}"
        );
        let e = error(&replaced(
            "between = [\"r1\", \"h2\"]",
            "between = [\"r1\", \"h5\"]",
        ));
        assert_eq!(e.line, 17);
        assert!(e.message.contains("'h5' is not a node"), "{e}");
    }

    #[test]
    fn overlapping_and_overrunning_times_are_refused() {
        let twice =
            format!("{LINE}\n[[event]]\nat = \"10s\"\nlink = \"h2-r1\"\nspec = \"rate 2mbit\"\n");
        let e = error(&twice);
        assert_eq!(e.line, 38);
        assert!(
            e.message
                .contains("two events change r1-h2 at the same time (the other is on line 33)"),
            "{e}"
        );
        let e = error(&replaced("duration = \"15s\"", "duration = \"25s\""));
        assert_eq!(e.line, 26);
        assert!(e.message.contains("past the end of the run"), "{e}");
        let e = error(&replaced("at = \"10s\"", "at = \"20s\""));
        assert!(e.message.contains("not within the run"), "{e}");
    }

    #[test]
    fn late_warn_sets_the_fidelity_guards_bound_or_turns_it_off() {
        let default = Experiment::parse(LINE).expect("parses");
        assert_eq!(
            default.late_bound,
            Some(pathlab_core::Duration::from_millis(1))
        );
        let set = |value: &str| {
            Experiment::parse(&replaced(
                "duration = \"20s\"",
                &format!("duration = \"20s\"\nlate_warn = \"{value}\""),
            ))
        };
        assert_eq!(
            set("500us").expect("parses").late_bound,
            Some(pathlab_core::Duration::from_micros(500))
        );
        assert_eq!(set("off").expect("parses").late_bound, None);
        for bad in ["soon", "0ms"] {
            let e = set(bad).expect_err("refused");
            assert_eq!(e.line, 4);
            assert!(
                e.message.contains(&format!(
                    "late_warn '{bad}': a time above zero like \"1ms\", or \"off\""
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn a_bad_spec_is_quoted_with_its_line_and_the_reason() {
        let e = error(&replaced("spec = \"rate 1mbit\"", "spec = \"rate 1 mbit\""));
        assert_eq!(e.line, 36);
        assert!(e.message.starts_with("bad SPEC 'rate 1 mbit':"), "{e}");
        let e = error(&replaced(
            "delay 5ms rate 10mbit",
            "delay 5ms rate 10mbit lose 1%",
        ));
        assert_eq!(e.line, 18);
    }

    #[test]
    fn toml_errors_unknown_keys_and_bad_kinds_name_the_line() {
        let e = error(&replaced("kind = \"router\"", "kind = \"switch\""));
        assert_eq!(
            (e.line, e.message.as_str()),
            (9, "kind 'switch': host or router")
        );
        let e = error(&replaced("congestion = \"reno\"", "congestoin = \"reno\""));
        assert_eq!(e.line, 25);
        assert!(e.message.contains("congestoin"), "{e}");
        let e = error(&replaced("duration = \"20s\"", "duration = 20s"));
        assert_eq!(e.line, 3);
        let e = error(&replaced("kind = \"tcp\"", "kind = \"udp\""));
        assert!(
            e.message
                .contains("kind 'udp': tcp, rtt, ping, owd, blocks or command"),
            "{e}"
        );
    }

    #[test]
    fn a_sweep_gives_one_spec_per_value_and_quick_scales_every_time() {
        let text = format!(
            "{}\nquick = \"10s\"\n[sweep]\nlimit = [10, 100]\n",
            replaced("limit 100", "limit {limit}")
        );
        let text = text.replacen(
            "duration = \"20s\"\n",
            "duration = \"20s\"\nquick = \"10s\"\n",
            1,
        );
        let text = text.replace("\nquick = \"10s\"\n[sweep]", "\n[sweep]");
        let points = expand(&text, false).expect("expands");
        assert_eq!(points.len(), 2);
        assert_eq!(points[1].label, "limit=100");
        let e = Experiment::parse(&points[0].text).expect("parses");
        assert_eq!(
            e.links[1].forward,
            LinkSpec::parse("delay 5ms rate 10mbit limit 10").unwrap()
        );
        let quick = e.quick();
        assert_eq!(quick.duration, Duration::from_secs(10));
        assert_eq!(quick.workloads[1].start, Duration::from_millis(500));
        assert_eq!(quick.workloads[1].duration, Duration::from_millis(7500));
        assert_eq!(quick.events[0].at, Duration::from_secs(5));
        // A rate schedule is a timeline too.
        let scheduled = Experiment::parse(
            &points[0]
                .text
                .replace("rate 10mbit limit 10", "schedule 4s 10mbit 1mbit limit 10"),
        )
        .expect("parses")
        .quick();
        assert_eq!(
            scheduled.links[1].forward,
            LinkSpec::parse("delay 5ms schedule 2s 10mbit 1mbit limit 10").unwrap()
        );
        let e = expand(&text.replace("limit {limit}", "limit 5"), false).expect_err("unused key");
        assert!(e.message.contains("never says {limit}"), "{e}");
        // --quick may thin the grid.
        let thin = format!("{text}[quick_sweep]\nlimit = [10]\n");
        assert_eq!(expand(&thin, false).expect("expands").len(), 2);
        let points = expand(&thin, true).expect("expands");
        assert_eq!(points.len(), 1);
        assert_eq!(
            points[0].parameters,
            [("limit".to_owned(), "10".to_owned())]
        );
        let e = expand(&format!("{text}[quick_sweep]\nqueue = [10]\n"), true)
            .expect_err("not a sweep key");
        assert!(e.message.contains("quick_sweep.queue: not a key"), "{e}");
        assert_eq!(e.line, text.lines().count() + 1);
    }

    #[test]
    fn graphs_without_a_path_or_with_loops_are_refused() {
        let e = error(&replaced(
            "between = [\"r1\", \"h2\"]",
            "between = [\"r1\", \"r1\"]",
        ));
        assert!(e.message.contains("itself"), "{e}");
        let island = LINE
            .replace(
                "[[link]]\nbetween = [\"r1\", \"h2\"]\nspec = \"delay 5ms rate 10mbit limit 100\"\nreverse = \"delay 5ms\"\n",
                "",
            )
            .replace("[[event]]\nat = \"10s\"\nlink = \"r1-h2\"\nspec = \"rate 1mbit\"\n", "");
        let e = error(&island);
        assert!(
            e.message.contains("no path of links joins from and to"),
            "{e}"
        );
    }

    /// A link's `twin = "FILE"`: its specs come from the reader the caller gives, the up
    /// one from the link's first node; beside `spec` or `reverse`, or in a spec that came
    /// from no file, or unreadable, it is refused with its line.
    #[test]
    fn a_link_takes_a_twins_specs_and_a_twin_beside_a_spec_is_refused() {
        let text = LINE.replacen(
            "spec = \"delay 5ms rate 10mbit limit 100\"\nreverse = \"delay 5ms\"",
            "twin = \"office.toml\"",
            1,
        );
        let reader = |name: &str| {
            assert_eq!(name, "office.toml");
            Ok((
                LinkSpec::parse("delay 7ms rate 2mbit").unwrap(),
                LinkSpec::parse("delay 3ms").unwrap(),
            ))
        };
        let e = Experiment::parse_with(&text, &reader).expect("parses");
        assert_eq!(
            e.links[1].forward,
            LinkSpec::parse("delay 7ms rate 2mbit").unwrap()
        );
        assert_eq!(e.links[1].reverse, LinkSpec::parse("delay 3ms").unwrap());
        let line = text.lines().position(|l| l.starts_with("twin")).unwrap() + 1;
        let error = Experiment::parse(&text).expect_err("no file to read it beside");
        assert_eq!(error.line, line);
        assert!(
            error.message.contains("beside a spec file"),
            "{}",
            error.message
        );
        let unreadable = |_: &str| Err("cannot open it".to_owned());
        let error = Experiment::parse_with(&text, &unreadable).expect_err("refused");
        assert_eq!(
            (error.line, error.message.as_str()),
            (line, "twin 'office.toml': cannot open it")
        );
        let both = text.replacen("twin = ", "spec = \"delay 1ms\"\ntwin = ", 1);
        let error = Experiment::parse_with(&both, &reader).expect_err("refused");
        assert!(error.message.contains("not both"), "{}", error.message);
    }
}
