//! `pathlab node CONFIG`: one node of an exported lab, in the pod or container an engine
//! (KNE, containerlab) runs it in. It
//!
//! 1. waits for its interfaces (meshnet and containerlab add them after the container
//!    starts);
//! 2. puts an emulator in front of each ([`pathlab_os::interpose`]: the interface keeps
//!    its name, MAC and index as the node's programs see them), with no impairment yet,
//!    and gives each its addresses; adds its routes; starts the servers its peers'
//!    workloads measure against;
//! 3. measures the underlay under each link: echo requests to the far end through both
//!    ends' emulators, still without impairments ([`wire::Underlay`]), and warns when the
//!    underlay alone is slower than the link's spec;
//! 4. waits for the order to start ([`wire::StartRequest`], from `pathlab lab collect`,
//!    which gives every node the same instant once all are ready); then sets each link's
//!    egress spec, runs its events and its workloads at their times, as `pathlab lab`
//!    would on one machine;
//! 5. stops its emulators (their recordings complete), puts the interfaces back, and
//!    serves its [`wire::NodeResult`], recordings and outputs until it is stopped.
//!
//! Every phase shows on the control address ([`wire::NodeStatus`]); a failure is kept
//! there, with its reason, until the node is stopped. [`setup`] reads what the command line
//! gives a node (its config file, its token) and runs it from a [`setup::NodeRunConfig`].

pub mod setup;
pub mod wire;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pathlab_core::LinkSpec;
use pathlab_emulator::api::LabControl;
use pathlab_emulator::emulator::{self, EmulatorConfig, EmulatorHandle, OnInterfaceGone, Record};
use pathlab_emulator::port::{PacketPort, Port};
use pathlab_http::{HttpServer, Request, Response};
use pathlab_os::files::Dir;
use pathlab_os::interpose::{self, Interposed};
use pathlab_os::netlink::Netlink;

use crate::export::node::{Interface, NodeConfig, Role};
use pathlab_lab::run::{queue_sample_interval, receive_mode, SERVER_PORT};
use pathlab_lab::spec::WorkloadKind;
use pathlab_lab::workload::{self, sleep_until, Timed};
use wire::{HalfLink, NodeOutcome, NodeResult, NodeStatus, Phase, StartRequest, Underlay};

/// How a node runs.
#[derive(Debug)]
pub struct NodeOptions {
    /// Its config, read and checked.
    pub config: NodeConfig,
    /// SHA-256 of the config file, hex (shown in the status).
    pub config_sha256: String,
    /// Where its recordings, outputs and result go: every file written there is one the
    /// node made ([`Dir::replace`]), and only those are served.
    pub out: Arc<Dir>,
    /// How long to wait for its interfaces, and for each link's far end to answer.
    pub wait: Duration,
    /// Set by a signal: stop, put everything back, return.
    pub stop: Arc<AtomicBool>,
    /// The control address, bound.
    pub server: Arc<HttpServer>,
    /// Where a spec sent to the control address may name trace files.
    pub trace_dir: Option<Arc<pathlab_os::files::Dir>>,
    /// Where to serve the emulators' `/metrics` alone, in plain HTTP (`--metrics`), for a
    /// scraper without the lab's CA; the control address serves them too, in TLS.
    pub metrics: Option<Arc<HttpServer>>,
    /// How the emulators' forwarding threads are scheduled (`--priority`, `--cpus`).
    pub scheduling: pathlab_os::scheduling::Request,
}

/// Why a node could not play its part.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Interfaces that never appeared.
    #[error(
        "interfaces {} did not appear within {} s (the engine adds them; are the links in \
         its topology?)",
        .missing.join(", "), .waited.as_secs()
    )]
    Missing {
        /// Their names.
        missing: Vec<String>,
        /// How long it waited.
        waited: Duration,
    },
    /// An emulator could not be put in front of an interface.
    #[error("interface {interface}: {message}")]
    Emulator {
        /// Which.
        interface: String,
        /// Why.
        message: String,
    },
    /// The far end of a link never answered.
    #[error(
        "link {link}: {peer} ({address}) did not answer through {interface} within {} s",
        .waited.as_secs()
    )]
    Silent {
        /// The link.
        link: String,
        /// The interface.
        interface: String,
        /// The node at the far end.
        peer: String,
        /// Its address.
        address: IpAddr,
        /// How long it waited.
        waited: Duration,
    },
    /// Stopped before the run ended.
    #[error("stopped")]
    Stopped,
}

fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
    let context = context.into();
    move |source| NodeError::Io { context, source }
}

/// What the control address's thread and the node share.
#[derive(Debug)]
struct Shared {
    status: Mutex<NodeStatus>,
    start: Mutex<Option<u64>>,
    started: Condvar,
    result: Mutex<Option<Vec<u8>>>,
    control: Mutex<Option<Arc<LabControl>>>,
    out: Arc<Dir>,
    links: Vec<String>,
    commands: Vec<String>,
}

impl Shared {
    fn set_phase(&self, phase: Phase) {
        lock(&self.status).phase = phase;
    }

    fn answer(&self, request: &Request) -> Response {
        let path = request.path.as_str();
        let method = request.method.as_str();
        match path {
            wire::STATUS_PATH => {
                if method != "GET" {
                    return Response::error(405, "GET only");
                }
                Response::json(200, &*lock(&self.status))
            }
            wire::START_PATH => {
                if method != "POST" {
                    return Response::error(405, "POST only");
                }
                let order = match StartRequest::parse(&request.body, pathlab_os::unix_now_ns()) {
                    Ok(order) => order,
                    Err(e) => return Response::error(400, &e.to_string()),
                };
                let phase = lock(&self.status).phase;
                if phase != Phase::Ready {
                    return Response::error(
                        409,
                        &format!("the node is {phase:?}, not ready: it starts once").to_lowercase(),
                    );
                }
                *lock(&self.start) = Some(order.at_unix_ns);
                self.started.notify_all();
                Response::json(202, &order)
            }
            wire::RESULT_PATH => match &*lock(&self.result) {
                Some(json) => Response::new(200, "application/json", json.clone()),
                None => Response::error(409, "the run is not over"),
            },
            _ => {
                if let Some(link) = path.strip_prefix(wire::RECORDING_PATH) {
                    return self.file(link, &self.links, |l| format!("link-{l}.jsonl"));
                }
                if let Some(name) = path.strip_prefix(wire::OUTPUT_PATH) {
                    return self.file(name, &self.commands, |w| format!("{w}.out"));
                }
                let control = lock(&self.control).clone();
                match control {
                    Some(control) => control.answer(request),
                    None => Response::error(503, "the emulators are not running yet"),
                }
            }
        }
    }

    /// The answer of the metrics address: the emulators' `/metrics` (503 until they run),
    /// nothing else (404 saying where the metrics are).
    fn metrics(&self, request: &Request) -> Response {
        if request.path == pathlab_http::metrics::PATH {
            return self.answer(request);
        }
        pathlab_http::metrics::route(request, &|| Err(String::new()))
    }

    /// A file of the run, by a name among `names` (never a path from the request), as the
    /// node made it: opened in its output directory without following a link, at most as
    /// large as a collector takes one ([`wire::MAX_FILE_BYTES`]).
    fn file(&self, name: &str, names: &[String], file: impl Fn(&str) -> String) -> Response {
        if lock(&self.result).is_none() {
            return Response::error(409, "the run is not over");
        }
        let Some(name) = names.iter().find(|n| *n == name) else {
            return Response::error(404, "no such link or workload");
        };
        match self.out.read(&file(name), wire::MAX_FILE_BYTES as u64) {
            Ok(bytes) => Response::new(200, "application/octet-stream", bytes),
            Err(error) => Response::error(404, &error.to_string()),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Plays the node: see the module's text. Serves the control address from the start
/// until `stop`; returns the result (also in `out/node-result.json`) once stopped.
pub fn run(options: &NodeOptions) -> Result<NodeResult, NodeError> {
    let config = &options.config;
    let shared = Arc::new(Shared {
        status: Mutex::new(NodeStatus {
            node: config.node.clone(),
            lab: config.lab.clone(),
            config_sha256: options.config_sha256.clone(),
            phase: Phase::Waiting,
            missing: config.interfaces.iter().map(|i| i.name.clone()).collect(),
            underlay: Vec::new(),
            start_unix_ns: None,
            message: None,
        }),
        start: Mutex::new(None),
        started: Condvar::new(),
        result: Mutex::new(None),
        control: Mutex::new(None),
        out: Arc::clone(&options.out),
        links: config.interfaces.iter().map(|i| i.link.clone()).collect(),
        commands: config
            .workloads
            .iter()
            .filter(|w| w.role == Role::Client && matches!(w.kind, WorkloadKind::Command { .. }))
            .map(|w| w.name.clone())
            .collect(),
    });
    let serving_stop = Arc::new(AtomicBool::new(false));
    let serving = {
        let shared = Arc::clone(&shared);
        let server = Arc::clone(&options.server);
        let stop = Arc::clone(&serving_stop);
        std::thread::spawn(move || server.serve(&stop, &|request| shared.answer(request)))
    };
    let metrics = options.metrics.as_ref().map(|server| {
        let shared = Arc::clone(&shared);
        let server = Arc::clone(server);
        let stop = Arc::clone(&serving_stop);
        std::thread::spawn(move || server.serve(&stop, &|request| shared.metrics(request)))
    });
    let outcome = play(options, &shared);
    match &outcome {
        Ok(result) => {
            let json = serde_json::to_vec_pretty(result).expect("a result serializes");
            if let Err(error) = options.out.write_file("node-result.json", &json) {
                eprintln!("pathlab node {}: {error}", config.node);
            }
            *lock(&shared.result) = Some(json);
            shared.set_phase(Phase::Done);
            eprintln!(
                "pathlab node {}: the run is over; its result is served until stopped",
                config.node
            );
        }
        Err(NodeError::Stopped) => {}
        Err(error) => {
            eprintln!("pathlab node {}: {error}", config.node);
            let mut status = lock(&shared.status);
            status.phase = Phase::Failed;
            status.message = Some(error.to_string());
        }
    }
    // Serve the result (or the failure) until stopped.
    while !options.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    serving_stop.store(true, Ordering::SeqCst);
    let _ = serving.join();
    if let Some(metrics) = metrics {
        let _ = metrics.join();
    }
    outcome
}

/// One interface with an emulator in front, and what the engine made it.
struct Fronted {
    interposed: Interposed,
    device: String,
    remote: Option<IpAddr>,
}

/// Everything up to the result; the interfaces are put back before it returns, whatever
/// happened.
fn play(options: &NodeOptions, shared: &Shared) -> Result<NodeResult, NodeError> {
    let config = &options.config;
    let stop = &options.stop;
    let name = &config.node;
    // 1. The interfaces.
    let devices = wait_for_interfaces(options, shared)?;
    shared.set_phase(Phase::Configuring);
    eprintln!(
        "pathlab node {name}: {} interfaces present; configuring",
        config.interfaces.len()
    );

    // 2. Emulators in front, addresses, routes, servers.
    // Written only when not on already: a container that is not privileged has /proc/sys
    // read-only, and its engine may have set them (containerlab's `sysctls:`).
    let sysctl = |key: &str| {
        let path = format!("/proc/sys/{key}");
        if std::fs::read_to_string(&path).is_ok_and(|v| v.trim() == "1") {
            return Ok(());
        }
        std::fs::write(&path, "1").map_err(io_error(format!("setting {key}")))
    };
    sysctl("net/ipv4/ip_forward")?;
    sysctl("net/ipv6/conf/all/forwarding")?;
    let pool = emulator::Pool::per_core_with(&options.scheduling)
        .map_err(io_error("starting the forwarding threads"))?;
    pathlab_lab::run::announce_scheduling(&format!("pathlab node {name}"), pool.scheduling());
    let (fronted, emulators) = front_all(options, &pool, &devices)?;
    let control = Arc::new(LabControl::new(
        config
            .interfaces
            .iter()
            .zip(&emulators)
            .map(|(i, e)| (i.link.clone(), Some(Arc::clone(e))))
            .collect(),
        options.trace_dir.clone(),
    ));
    *lock(&shared.control) = Some(Arc::clone(&control));
    let result = configure(config)
        .and_then(|()| serve_workloads(config))
        .and_then(|_servers| {
            // 3. The underlay.
            shared.set_phase(Phase::Measuring);
            let underlay = measure_underlay(config, &fronted, options.wait, stop)?;
            announce_underlay(name, &underlay);
            lock(&shared.status).underlay.clone_from(&underlay);
            // 4. The run.
            shared.set_phase(Phase::Ready);
            eprintln!("pathlab node {name}: ready; waiting for the order to start");
            let at = wait_for_start(shared, stop)?;
            lock(&shared.status).start_unix_ns = Some(at);
            shared.set_phase(Phase::Running);
            run_timeline(config, &emulators, &control, at, options, underlay)
        });
    // 5. Emulators stopped (recordings flushed), interfaces put back. The control
    // address lets go of them first: a request being answered holds them for a moment.
    lock(&shared.control).take();
    while Arc::strong_count(&control) > 1 {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(control);
    let stats: Vec<_> = emulators
        .into_iter()
        .map(|e| Arc::into_inner(e).map(EmulatorHandle::stop))
        .collect();
    for f in fronted {
        if let Err(error) = f.interposed.restore() {
            eprintln!("pathlab node {name}: putting an interface back: {error}");
        }
    }
    let mut result = result?;
    result.scheduling = Some(pool.scheduling().clone());
    for ((half, interface), stats) in result.links.iter_mut().zip(&config.interfaces).zip(stats) {
        if let Some(stats) = stats {
            // The emulator's final counters, as `emulate stats -J` gives them.
            let _ = options.out.write_file(
                &format!("stats-{}.json", interface.link),
                &serde_json::to_vec_pretty(&stats).expect("stats serialize"),
            );
            half.lateness = stats
                .directions
                .first()
                .map(|d| pathlab_lab::run::lateness(&d.lateness, name, &interface.peer));
        }
    }
    Ok(result)
}

/// The machine's interfaces once every interface of the node's config is among them
/// (waiting up to `options.wait`, the missing ones in the status meanwhile).
fn wait_for_interfaces(
    options: &NodeOptions,
    shared: &Shared,
) -> Result<Vec<pathlab_os::netlink::LinkInfo>, NodeError> {
    let deadline = Instant::now() + options.wait;
    loop {
        let links = Netlink::open()
            .and_then(|mut n| n.links())
            .map_err(io_error("listing interfaces"))?;
        let missing: Vec<String> = options
            .config
            .interfaces
            .iter()
            .filter(|i| !links.iter().any(|l| l.name == i.name))
            .map(|i| i.name.clone())
            .collect();
        lock(&shared.status).missing.clone_from(&missing);
        if missing.is_empty() {
            return Ok(links);
        }
        if Instant::now() >= deadline {
            return Err(NodeError::Missing {
                missing,
                waited: options.wait,
            });
        }
        if options.stop.load(Ordering::SeqCst) {
            return Err(NodeError::Stopped);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An emulator in front of each interface of the node's config (see [`front`]), and how
/// each was put there, in the config's order.
fn front_all(
    options: &NodeOptions,
    pool: &emulator::Pool,
    devices: &[pathlab_os::netlink::LinkInfo],
) -> Result<(Vec<Fronted>, Vec<Arc<EmulatorHandle>>), NodeError> {
    let config = &options.config;
    let mut fronted = Vec::new();
    let mut emulators = Vec::new();
    for (k, interface) in config.interfaces.iter().enumerate() {
        let device = devices
            .iter()
            .find(|d| d.name == interface.name)
            .expect("every interface is present");
        let emulator_name = format!("{}:{}", config.node, interface.name);
        let interposed =
            interpose::interpose(None, &interface.name, &emulator_name).map_err(|e| {
                NodeError::Emulator {
                    interface: interface.name.clone(),
                    message: e.to_string(),
                }
            })?;
        emulators.push(Arc::new(front(
            pool,
            &interposed,
            interface,
            config,
            k,
            &options.out,
        )?));
        fronted.push(Fronted {
            interposed,
            device: device.kind.clone().unwrap_or_else(|| "device".to_owned()),
            remote: device.remote,
        });
    }
    Ok((fronted, emulators))
}

/// Says on stderr what the underlay of each link measured, and any warning about it.
fn announce_underlay(name: &str, underlay: &[Underlay]) {
    for u in underlay {
        eprintln!(
            "pathlab node {name}: link {} ({}{}): underlay round trip {:.3} ms (min {:.3}), {}",
            u.link,
            u.device,
            u.remote.map(|r| format!(" to {r}")).unwrap_or_default(),
            u.rtt_p50_ns as f64 * 1e-6,
            u.rtt_min_ns as f64 * 1e-6,
            u.timed_by.describe()
        );
        if let Some(warning) = u.warning() {
            eprintln!("pathlab node {name}: warning: {warning}");
        }
    }
}

/// Opens the emulator's two ports in the holder and starts it, with no impairment until
/// the run starts.
fn front(
    pool: &emulator::Pool,
    interposed: &Interposed,
    interface: &Interface,
    config: &NodeConfig,
    k: usize,
    out: &Arc<Dir>,
) -> Result<EmulatorHandle, NodeError> {
    let failed = |message: String| NodeError::Emulator {
        interface: interface.name.clone(),
        message,
    };
    let egress = LinkSpec::parse(&interface.egress).map_err(|e| failed(e.to_string()))?;
    let links = config.interfaces.len();
    let modes = [
        receive_mode(&egress, links),
        receive_mode(&LinkSpec::default(), links),
    ];
    let ports = [interposed.inside(), interposed.outside()];
    let opened = interposed
        .holder()
        .run(|| {
            [0, 1].map(|end| {
                PacketPort::open_with(ports[end], modes[end])
                    .map(|port| Box::new(port) as Box<dyn Port>)
            })
        })
        .map_err(|e| failed(format!("entering the emulator's namespace: {e}")))?;
    let [a, b] = opened;
    let ports = [
        a.map_err(|e| failed(e.to_string()))?,
        b.map_err(|e| failed(e.to_string()))?,
    ];
    let handle = pool
        .spawn(
            ports,
            EmulatorConfig {
                name: interface.link.clone(),
                forward: LinkSpec::default(),
                reverse: LinkSpec::default(),
                seed: config.seed.wrapping_add(u64::from(interface.id)),
                record: Some(Record::Reopened {
                    dir: Arc::clone(out),
                    name: format!("link-{}.jsonl", interface.link),
                }),
                pcap: None,
                queue_sample_interval: queue_sample_interval(
                    egress.has_bottleneck()
                        || interface
                            .events
                            .iter()
                            .any(|e| LinkSpec::parse(&e.egress).is_ok_and(|s| s.has_bottleneck())),
                    config.duration_ns,
                ),
                command: vec![format!("pathlab node {} ({})", config.node, k)],
                on_interface_gone: OnInterfaceGone::Stop,
            },
        )
        .map_err(|e| failed(e.to_string()))?;
    handle.set_late_bound(config.late_warn_ns.map(pathlab_core::Duration::from_nanos));
    Ok(handle)
}

/// The node's addresses (on the stand-ins, which have the interfaces' names) and routes.
fn configure(config: &NodeConfig) -> Result<(), NodeError> {
    let mut netlink = Netlink::open().map_err(io_error("opening netlink"))?;
    let links = netlink.links().map_err(io_error("listing interfaces"))?;
    let index = |name: &str| {
        links
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.index)
            .ok_or_else(|| NodeError::Emulator {
                interface: name.to_owned(),
                message: "gone after the emulator was put in front".into(),
            })
    };
    for interface in &config.interfaces {
        let at = index(&interface.name)?;
        let context = |what: &str| io_error(format!("{what} on {}", interface.name));
        netlink.set_up(at, true).map_err(context("setting it up"))?;
        for (address, len) in [
            (IpAddr::V4(interface.ipv4), interface.ipv4_prefix_len),
            (IpAddr::V6(interface.ipv6), interface.ipv6_prefix_len),
        ] {
            // Already there: an engine (or a restarted node) put it.
            match netlink.add_address(at, address, len, None) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(context(&format!("adding {address}/{len}"))(e))
                }
                _ => {}
            }
        }
    }
    for route in &config.routes {
        let at = index(&route.interface)?;
        let destination = (route.prefix_len > 0).then_some((route.destination, route.prefix_len));
        netlink
            .add_route(destination, Some(route.via), at, route.via.is_ipv6())
            .map_err(io_error(format!(
                "adding the route to {}/{} via {}",
                route.destination, route.prefix_len, route.via
            )))?;
    }
    Ok(())
}

/// The servers a node answers its peers' workloads with, stopped when dropped (the run
/// over, or failed on the way).
/// Not joined: a server thread still sending to a peer cut off by SIGTERM ends by itself,
/// as in `pathlab lab`.
struct Servers {
    stop: Arc<AtomicBool>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The measurement server and the blocks responders this node answers its peers'
/// workloads with.
fn serve_workloads(config: &NodeConfig) -> Result<Servers, NodeError> {
    let servers_stop = Arc::new(AtomicBool::new(false));
    let serving = config.workloads.iter().filter(|w| w.role == Role::Server);
    if serving.clone().any(|w| w.port == Some(SERVER_PORT)) {
        workload::start_server(|| Ok(()), Arc::clone(&servers_stop))
            .map_err(io_error("starting the measurement server"))?;
    }
    let mut responders: Vec<(u16, u32)> = serving
        .filter_map(|w| match (&w.kind, w.port) {
            (WorkloadKind::Blocks { size, .. }, Some(port)) => Some((port, *size)),
            _ => None,
        })
        .collect();
    responders.sort_unstable();
    responders.dedup();
    for (port, size) in responders {
        let listener = std::net::TcpListener::bind((IpAddr::from([0u8; 4]), port)).map_err(
            io_error(format!("starting the blocks responder on port {port}")),
        )?;
        workload::start_responder(listener, size, Arc::clone(&servers_stop));
    }
    Ok(Servers { stop: servers_stop })
}

/// Echo requests sent per link once its far end answers: the median of 50 holds against
/// the few a busy machine delays.
const UNDERLAY_SAMPLES: usize = 50;
/// Between them.
const UNDERLAY_INTERVAL: Duration = Duration::from_millis(10);
/// Links measured at once (a hub of thousands measures them a batch at a time).
const UNDERLAY_AT_ONCE: usize = 64;

/// Measures the underlay under each link: the far end's address, asked until it answers
/// (it may still be configuring), then [`UNDERLAY_SAMPLES`] echo requests.
fn measure_underlay(
    config: &NodeConfig,
    fronted: &[Fronted],
    wait: Duration,
    stop: &AtomicBool,
) -> Result<Vec<Underlay>, NodeError> {
    let deadline = Instant::now() + wait;
    let mut measured = Vec::new();
    for batch in config
        .interfaces
        .iter()
        .zip(fronted)
        .collect::<Vec<_>>()
        .chunks(UNDERLAY_AT_ONCE)
    {
        let results: Vec<Result<Underlay, NodeError>> = std::thread::scope(|scope| {
            let threads: Vec<_> = batch
                .iter()
                .map(|(interface, f)| {
                    scope.spawn(move || underlay_of(interface, f, deadline, wait, stop))
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("measuring does not panic"))
                .collect()
        });
        for result in results {
            measured.push(result?);
        }
    }
    Ok(measured)
}

fn underlay_of(
    interface: &Interface,
    fronted: &Fronted,
    deadline: Instant,
    wait: Duration,
    stop: &AtomicBool,
) -> Result<Underlay, NodeError> {
    let target = IpAddr::V4(interface.peer_ipv4);
    let mut pinger = pathlab_probe_driver::ping::Pinger::new(target, 56)
        .map_err(io_error("opening an ICMP socket"))?;
    // Until the far end answers.
    loop {
        let first = pinger
            .run(1, UNDERLAY_INTERVAL, Duration::from_millis(200))
            .map_err(io_error("sending echo requests"))?;
        if first.iter().any(|r| r.rtt.is_some()) {
            break;
        }
        if stop.load(Ordering::SeqCst) {
            return Err(NodeError::Stopped);
        }
        if Instant::now() >= deadline {
            return Err(NodeError::Silent {
                link: interface.link.clone(),
                interface: interface.name.clone(),
                peer: interface.peer.clone(),
                address: target,
                waited: wait,
            });
        }
    }
    let results = pinger
        .run(UNDERLAY_SAMPLES, UNDERLAY_INTERVAL, Duration::from_secs(1))
        .map_err(io_error("sending echo requests"))?;
    let replies: Vec<i64> = results
        .iter()
        .filter_map(|r| r.rtt.map(|rtt| rtt.as_nanos() as i64))
        .collect();
    let timed_by =
        pathlab_probe::rtt::RoundTripClocks::of(results.iter().filter_map(|r| r.timed_by));
    let rtt = pathlab_probe::rtt::percentiles(replies.iter().copied());
    let spec_delay_ns = LinkSpec::parse(&interface.egress)
        .ok()
        .and_then(|s| s.delay)
        .map_or(0, |d| d.delay.as_nanos());
    Ok(Underlay {
        interface: interface.name.clone(),
        link: interface.link.clone(),
        device: fronted.device.clone(),
        remote: fronted.remote,
        samples: replies.len() as u32,
        rtt_min_ns: rtt.min_ns,
        rtt_p50_ns: rtt.p50_ns,
        spec_delay_ns,
        timed_by,
    })
}

/// Waits for the order to start; its instant, ns since the Unix epoch.
fn wait_for_start(shared: &Shared, stop: &AtomicBool) -> Result<u64, NodeError> {
    let mut start = lock(&shared.start);
    loop {
        if let Some(at) = *start {
            return Ok(at);
        }
        if stop.load(Ordering::SeqCst) {
            return Err(NodeError::Stopped);
        }
        start = shared
            .started
            .wait_timeout(start, Duration::from_millis(100))
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// The run from `at_unix_ns`: egress specs set, events and workloads at their times.
fn run_timeline(
    config: &NodeConfig,
    emulators: &[Arc<EmulatorHandle>],
    control: &LabControl,
    at_unix_ns: u64,
    options: &NodeOptions,
    underlay: Vec<Underlay>,
) -> Result<NodeResult, NodeError> {
    let stop = &options.stop;
    let now = pathlab_os::unix_now_ns();
    let started = Instant::now() + Duration::from_nanos(at_unix_ns.saturating_sub(now));
    if !sleep_until(started, stop) {
        return Err(NodeError::Stopped);
    }
    let set = |k: usize, spec: &str| {
        let spec = LinkSpec::parse(spec).map_err(|e| e.to_string());
        spec.and_then(|spec| emulators[k].set(Some(spec), None))
            .map_err(|message| NodeError::Emulator {
                interface: config.interfaces[k].name.clone(),
                message,
            })
    };
    for (k, interface) in config.interfaces.iter().enumerate() {
        set(k, &interface.egress)?;
    }
    let started_unix_ns = pathlab_os::unix_now_ns();
    let mut threads = Vec::new();
    let clients: Vec<_> = config
        .workloads
        .iter()
        .filter(|w| w.role == Role::Client)
        .collect();
    for w in &clients {
        let timed = Timed {
            name: w.name.clone(),
            kind: w.kind.clone(),
            start: Duration::from_nanos(w.start_ns),
            duration: Duration::from_nanos(w.duration_ns),
            inspect: w.inspect,
            target: w.peer_address,
            port: w.port.unwrap_or(0),
        };
        threads.push(workload::spawn_timed(
            timed,
            started,
            None,
            Arc::clone(stop),
            Arc::clone(&options.out),
        ));
    }
    let events = config.interfaces.iter().enumerate().flat_map(|(k, i)| {
        i.events
            .iter()
            .map(move |e| (Duration::from_nanos(e.at_ns), (k, e.egress.as_str())))
    });
    let end = Duration::from_nanos(config.duration_ns);
    let interrupted =
        pathlab_lab::run::play_events(events, end, started, stop, |(k, spec)| set(k, spec))?;
    let came = workload::join_timed(threads, interrupted);
    let duration_ns = started.elapsed().as_nanos() as u64;
    let mut links: Vec<HalfLink> = config
        .interfaces
        .iter()
        .map(|i| HalfLink {
            link: i.link.clone(),
            egress: LinkSpec::parse(&i.egress).map_or_else(|_| i.egress.clone(), |s| s.to_string()),
            lateness: None,
            changes: Vec::new(),
        })
        .collect();
    for (link, change) in pathlab_lab::run::link_changes(control, started) {
        links[link].changes.push(change);
    }
    Ok(NodeResult {
        node: config.node.clone(),
        kernel: pathlab_lab::run::kernel(),
        started_unix_ns,
        duration_ns,
        interrupted,
        workloads: clients
            .iter()
            .zip(came)
            .map(|(w, (outcome, inspect))| NodeOutcome {
                name: w.name.clone(),
                outcome,
                inspect,
            })
            .collect(),
        links,
        underlay,
        scheduling: None,
    })
}
