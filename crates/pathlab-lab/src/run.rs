//! Running an experiment: build the topology, start an emulator on every emulated link
//! (recording to `link-NAME.jsonl` in the output directory), a pathlab server in every
//! node a workload measures against, each workload at its time in its node's namespace,
//! each event at its time; then collect everything into a [`LabRun`].
//!
//! Teardown needs no cleanup code: namespaces are held by file descriptors and vanish
//! with the [`Topology`] or the process. Ctrl-C (the `stop` flag) ends the run early; the
//! recordings on disk and the results of finished workloads are kept.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pathlab_core_driver::emulator::Record;
use pathlab_core_driver::emulator::{self, EmulatorConfig, EmulatorHandle, EmulatorStats};
use pathlab_core_driver::port::{PacketPort, Port, ReceiveMode};
use pathlab_core_driver::switchboard::Switchboard;
use pathlab_probe::control::{Direction, Limits, TcpDirection};
use pathlab_probe::tcp::TcpTestReport;
use pathlab_probe_driver::{
    Client, MeasureError, Partial, Server, ServerConfig, TcpOptions, TcpTest,
};
use pathlab_results::lab::{LabLink, LabOutcome, LabRun, LabWorkload, PingReport, SendLateness};

use crate::spec::{Experiment, SweepPoint, Workload, WorkloadKind};
use crate::summary::path_theory;
use crate::topology::{board_port, Topology, CABLE_A, CABLE_B};

/// Port of the servers the lab starts.
pub const SERVER_PORT: u16 = 4920;

/// Port of the first responder of `blocks` workloads (the i-th of
/// [`blocks_responders`] listens on this + i).
pub const BLOCKS_PORT: u16 = 4921;

/// The address `workload` reaches its `to` node at: its `address`, else `to`'s lab address
/// ([`Topology::address`]); `None` without a `to`.
pub fn workload_target(experiment: &Experiment, workload: &Workload) -> Option<IpAddr> {
    workload.address.or_else(|| {
        workload
            .to
            .and_then(|to| Topology::address(experiment, to))
            .map(IpAddr::V4)
    })
}

/// Whether a workload of `kind` measures against the lab's server in its `to` node
/// (`tcp`, `rtt`, `owd`); `ping` needs none (the kernel answers), `blocks` has its own
/// responder, and `command` starts what it needs.
pub fn needs_server(kind: &WorkloadKind) -> bool {
    !matches!(
        kind,
        WorkloadKind::Command { .. } | WorkloadKind::Ping { .. } | WorkloadKind::Blocks { .. }
    )
}

/// The `blocks` responders a run starts: one per (node, block size) some `blocks` workload
/// writes to, sorted; the i-th listens on [`BLOCKS_PORT`] + i in its node.
pub fn blocks_responders(experiment: &Experiment) -> Vec<(usize, u32)> {
    let mut responders: Vec<(usize, u32)> = experiment
        .workloads
        .iter()
        .filter_map(|w| match w.kind {
            WorkloadKind::Blocks { size } => w.to.map(|to| (to, size)),
            _ => None,
        })
        .collect();
    responders.sort_unstable();
    responders.dedup();
    responders
}

/// The port `workload`'s client reaches its `to` node at (and that node listens on, on
/// every address): the server's, or its blocks responder's among `responders`
/// ([`blocks_responders`]); `None` for workloads nothing listens for (`ping`, `command`).
pub fn workload_port(workload: &Workload, responders: &[(usize, u32)]) -> Option<u16> {
    match workload.kind {
        WorkloadKind::Blocks { size } => responders
            .iter()
            .position(|&r| Some(r.0) == workload.to && r.1 == size)
            .map(|index| BLOCKS_PORT + index as u16),
        ref kind if needs_server(kind) => Some(SERVER_PORT),
        _ => None,
    }
}

/// How often a workload with `inspect = true` has its connections looked at.
const INSPECT_INTERVAL: Duration = Duration::from_millis(100);

/// Labs with more emulated links than this read every port from its socket, whatever
/// the link's rate: a ring takes 64 MB of the machine per direction from the start (a
/// lab of 100 links held 6.8 GB of rings and spent 19 s allocating them), reading the
/// socket only what waits in it. Up to this many, each direction gets what
/// [`ReceiveMode::for_link`] chooses for its rate (at most 1 GB of rings).
pub const RING_LINKS_MAX: usize = 8;

/// Threads that stop a lab's emulators at its end (each mostly waits for the kernel).
const STOPPING_THREADS: usize = 32;

/// How often an emulator samples its bottleneck queue for the recording.
const QUEUE_SAMPLE_INTERVAL: pathlab_core::Duration = pathlab_core::Duration::from_millis(10);

/// How the ports of a cable receive traffic entering a direction with `spec`, in a lab
/// of `emulated_links` emulated links.
fn receive_mode(spec: &pathlab_core::LinkSpec, emulated_links: usize) -> ReceiveMode {
    if emulated_links > RING_LINKS_MAX {
        ReceiveMode::socket_for_link(spec)
    } else {
        ReceiveMode::for_link(spec)
    }
}

/// Whether link `index` ever has a bottleneck queue: a rate or a packet rate in a
/// direction, now or after an event. A link without one has nothing to sample: its queue is always empty, the
/// report draws no queue for it, and sampling it every 10 ms woke its emulator 100 times
/// a second for nothing (a lab of 1,000 delay-only links spent a core on it).
fn has_bottleneck(experiment: &Experiment, index: usize) -> bool {
    let link = &experiment.links[index];
    link.forward.has_bottleneck()
        || link.reverse.has_bottleneck()
        || experiment
            .events
            .iter()
            .filter(|e| e.link == index)
            .any(|e| {
                [&e.forward, &e.reverse]
                    .into_iter()
                    .flatten()
                    .any(pathlab_core::LinkSpec::has_bottleneck)
            })
}

/// How a run is made.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where recordings and outputs go (created if missing).
    pub out: PathBuf,
    /// Seed of the emulators' random choices.
    pub seed: u64,
    /// Set (by a Ctrl-C handler) to end the run early.
    pub stop: Arc<AtomicBool>,
    /// Where to serve the links' HTTP API and metrics while the run lasts
    /// (`pathlab lab --control`).
    pub control: Option<Arc<pathlab_http::HttpServer>>,
    /// Where a spec sent to the control address may name trace files, by file name
    /// (`pathlab lab --trace-dir`); none: it names none.
    pub trace_dir: Option<Arc<pathlab_os::files::Dir>>,
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Building namespaces, links or files failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// An emulator did not start.
    #[error("the emulator of link {link}: {message}")]
    Emulator {
        /// Which link.
        link: String,
        /// Why.
        message: String,
    },
    /// The process may not open as many files as the lab holds at once.
    #[error(
        "this lab holds up to {needed} file descriptors at once (a namespace per node; \
         {per_link} per emulated link up to {from} of them, a few for all beyond, on the \
         switchboard), and this process may open {have}: {why}; raise its limit (`ulimit \
         -n`; pathlab raises the hard limit itself, up to fs.nr_open, where it has \
         CAP_SYS_RESOURCE)",
        per_link = crate::descriptors::PER_EMULATED_LINK,
        from = crate::topology::SWITCHBOARD_FROM
    )]
    Descriptors {
        /// What the lab needs, headroom included.
        needed: u64,
        /// What the process may open.
        have: u64,
        /// Why it could not have more.
        why: String,
    },
}

/// Raises the limit on open files to what `experiment` holds at once, or says before
/// anything is built that it cannot ([`crate::descriptors`]).
fn ensure_descriptors(experiment: &Experiment) -> Result<(), RunError> {
    use crate::descriptors::{self, Plan};
    use pathlab_os::sys;
    let needed = descriptors::needed(experiment, emulator::Pool::per_core_threads());
    let (soft, hard) =
        sys::open_files_limit().map_err(io_error("reading the limit on open files"))?;
    let nr_open = sys::max_open_files().unwrap_or(hard);
    match descriptors::plan(needed, soft, hard, nr_open) {
        Plan::Enough => Ok(()),
        Plan::Raise {
            soft: new_soft,
            hard: new_hard,
        } => sys::set_open_files_limit(new_soft, new_hard).map_err(|error| RunError::Descriptors {
            needed: new_soft,
            have: soft,
            why: format!("raising the limit to {new_soft} failed: {error}"),
        }),
        Plan::Short { needed, most } => Err(RunError::Descriptors {
            needed,
            have: soft,
            why: format!("the kernel lets a process open at most {most} (fs.nr_open)"),
        }),
    }
}

fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let context = context.into();
    move |source| RunError::Io { context, source }
}

fn kernel() -> String {
    let read = |key: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{key}"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    format!("{} {}", read("ostype"), read("osrelease"))
}

/// Sleeps until `deadline` or until `stop` is set; false if stopped.
fn sleep_until(deadline: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// Runs `experiment`, parsed from sweep point `point` (whose text and parameters are
/// kept in the result).
pub fn run(
    experiment: &Experiment,
    point: &SweepPoint,
    options: &RunOptions,
) -> Result<LabRun, RunError> {
    ensure_descriptors(experiment)?;
    std::fs::create_dir_all(&options.out)
        .map_err(io_error(format!("creating {}", options.out.display())))?;
    let mut topology = Topology::build(experiment).map_err(io_error("building the topology"))?;
    let emulated_links = topology.emulated.iter().filter(|&&e| e).count();
    let mut emulators: Vec<Option<Arc<EmulatorHandle>>> = Vec::new();
    // One forwarding thread per core for all the lab's links: a thread per direction
    // would be thousands of threads in a large lab.
    let pool = emulator::Pool::per_core().map_err(io_error("starting the forwarding threads"))?;
    let board_ports = topology.board_ports();
    let board = topology
        .board
        .take()
        .map(|board| Switchboard::open(board, pool.threads(), board_ports))
        .transpose()
        .map_err(io_error("opening the switchboard"))?;
    let mut links = Vec::new();
    for (i, link) in experiment.links.iter().enumerate() {
        let recording = if topology.emulated[i] {
            let file_name = format!("link-{}.jsonl", link.name);
            let ports = match (&board, topology.cables[i].take()) {
                (Some(board), _) => [0, 1].map(|end| {
                    board
                        .port([CABLE_A, CABLE_B][end], &board_port(i, end))
                        .map(|port| Box::new(port) as Box<dyn Port>)
                }),
                // The cable's namespace is held by its ports from here (each opened it):
                // its own descriptor would be one more open file per link.
                (None, Some(cable)) => cable
                    .run(|| {
                        [(CABLE_A, &link.forward), (CABLE_B, &link.reverse)].map(|(name, spec)| {
                            PacketPort::open_with(name, receive_mode(spec, emulated_links))
                                .map(|port| Box::new(port) as Box<dyn Port>)
                        })
                    })
                    .map_err(io_error("entering a cable namespace"))?,
                (None, None) => {
                    return Err(RunError::Emulator {
                        link: link.name.clone(),
                        message: "its cable was not built".to_owned(),
                    })
                }
            };
            let emulator_error = |e: &dyn std::fmt::Display| RunError::Emulator {
                link: link.name.clone(),
                message: e.to_string(),
            };
            let [a, b] = ports;
            let ports = [
                a.map_err(|e| emulator_error(&e))?,
                b.map_err(|e| emulator_error(&e))?,
            ];
            let handle = pool
                .spawn(
                    ports,
                    EmulatorConfig {
                        name: link.name.clone(),
                        forward: link.forward.clone(),
                        reverse: link.reverse.clone(),
                        seed: options.seed.wrapping_add(i as u64),
                        // Closed between writes: a file per link held open for the
                        // whole run would be 10,000 open files in a large lab.
                        record: Some(Record::Reopened(options.out.join(&file_name))),
                        pcap: None,
                        // Without a queue, one sample at the start says it was empty.
                        queue_sample_interval: if has_bottleneck(experiment, i) {
                            QUEUE_SAMPLE_INTERVAL
                        } else {
                            pathlab_core::Duration::from_nanos(
                                experiment.duration.as_nanos() as u64 + 1,
                            )
                        },
                        command: vec![format!("pathlab lab {}", experiment.name)],
                        on_interface_gone: pathlab_core_driver::emulator::OnInterfaceGone::Stop,
                    },
                )
                .map_err(|e| emulator_error(&e))?;
            handle.set_late_bound(experiment.late_bound);
            emulators.push(Some(Arc::new(handle)));
            Some(file_name)
        } else {
            emulators.push(None);
            None
        };
        links.push(LabLink {
            name: link.name.clone(),
            forward: link.forward.to_string(),
            reverse: link.reverse.to_string(),
            recording,
            lateness: Vec::new(),
            changes: Vec::new(),
        });
    }

    // The links' control address, served until the emulators stop (or the run fails).
    let control_stop = Arc::new(AtomicBool::new(false));
    let control = options.control.as_ref().map(|server| {
        let control = Arc::new(pathlab_core_driver::api::LabControl::new(
            experiment
                .links
                .iter()
                .zip(&emulators)
                .map(|(link, emulator)| (link.name.clone(), emulator.clone()))
                .collect(),
            options.trace_dir.clone(),
        ));
        let serving = Arc::clone(&control);
        let server = Arc::clone(server);
        let stop = Arc::clone(&control_stop);
        let thread =
            std::thread::spawn(move || server.serve(&stop, &|request| serving.answer(request)));
        (control, thread)
    });
    let (control, control_thread) = match control {
        Some((control, thread)) => (Some(control), Some(thread)),
        None => (None, None),
    };
    let control_thread = ServingGuard {
        stop: Arc::clone(&control_stop),
        thread: control_thread,
    };

    let servers_stop = Arc::new(AtomicBool::new(false));
    let mut servers = Vec::new();
    let mut targets: Vec<usize> = experiment
        .workloads
        .iter()
        .filter(|w| needs_server(&w.kind))
        .filter_map(|w| w.to)
        .collect();
    targets.sort_unstable();
    targets.dedup();
    for &node in &targets {
        let (ready, bound) = std::sync::mpsc::channel();
        let netns = topology.nodes[node]
            .try_clone()
            .map_err(io_error("sharing a namespace"))?;
        let stop = Arc::clone(&servers_stop);
        servers.push(std::thread::spawn(move || {
            let started = netns.enter().and_then(|()| {
                Server::bind(ServerConfig {
                    // A lab host may run many workloads against one server at once.
                    max_clients: 64,
                    ..ServerConfig::new(
                        SocketAddr::new(IpAddr::from([0u8; 4]), SERVER_PORT),
                        Limits {
                            max_rate_bps: 100_000_000_000,
                            max_duration_ns: u64::MAX / 2,
                            max_tests: 64,
                            max_test_memory: 1 << 32,
                        },
                        None,
                    )
                })
            });
            match started {
                Ok(server) => {
                    let _ = ready.send(Ok(()));
                    server.run(|| stop.load(Ordering::SeqCst));
                }
                Err(error) => {
                    let _ = ready.send(Err(error));
                }
            }
        }));
        bound
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("server thread ended")))
            .map_err(io_error(format!(
                "starting the server in {}",
                experiment.nodes[node].name
            )))?;
    }

    // A responder in every node a `blocks` workload writes to, one per block size.
    let responders = blocks_responders(experiment);
    for (port_offset, &(node, size)) in responders.iter().enumerate() {
        let listener = topology.nodes[node]
            .run(|| {
                std::net::TcpListener::bind(SocketAddr::new(
                    IpAddr::from([0u8; 4]),
                    BLOCKS_PORT + port_offset as u16,
                ))
            })
            .map_err(io_error("entering a namespace"))?
            .map_err(io_error(format!(
                "starting the blocks responder in {}",
                experiment.nodes[node].name
            )))?;
        let stop = Arc::clone(&servers_stop);
        servers.push(std::thread::spawn(move || {
            let _ = pathlab_probe_driver::blocks::respond(&listener, size as usize, &stop);
        }));
    }
    let blocks_port = |workload: &Workload| -> u16 {
        match workload.kind {
            WorkloadKind::Blocks { .. } => {
                workload_port(workload, &responders).expect("a responder for every blocks workload")
            }
            _ => 0,
        }
    };

    let started = Instant::now();
    let started_unix_ns = pathlab_os::unix_now_ns();
    let mut threads = Vec::new();
    for workload in &experiment.workloads {
        let netns = topology.nodes[workload.from]
            .try_clone()
            .map_err(io_error("sharing a namespace"))?;
        let target = workload_target(experiment, workload);
        let port = blocks_port(workload);
        let workload = workload.clone();
        let stop = Arc::clone(&options.stop);
        let out = options.out.clone();
        threads.push(std::thread::spawn(move || {
            if !sleep_until(started + workload.start, &stop) {
                return (LabOutcome::NotStarted, None);
            }
            if let Err(error) = netns.enter() {
                return (
                    LabOutcome::Failed(format!("entering the namespace: {error}")),
                    None,
                );
            }
            // The watcher is started from this thread, so it is in this namespace too.
            let watching = (workload.inspect)
                .then(|| target.map(|t| Watcher::start(t, started)))
                .flatten();
            let outcome = run_workload(&workload, target, port, &out);
            (outcome, watching.map(Watcher::finish))
        }));
    }

    let mut interrupted = false;
    for event in &experiment.events {
        if !sleep_until(started + event.at, &options.stop) {
            interrupted = true;
            break;
        }
        if let Some(handle) = &emulators[event.link] {
            if let Err(message) = handle.set(event.forward.clone(), event.reverse.clone()) {
                return Err(RunError::Emulator {
                    link: experiment.links[event.link].name.clone(),
                    message,
                });
            }
        }
    }
    if !interrupted && !sleep_until(started + experiment.duration, &options.stop) {
        interrupted = true;
    }
    let entry = |workload: &Workload, (outcome, inspect)| LabWorkload {
        name: workload.name.clone(),
        from: experiment.nodes[workload.from].name.clone(),
        to: workload.to.map(|to| experiment.nodes[to].name.clone()),
        start_ns: workload.start.as_nanos() as u64,
        duration_ns: workload.duration.as_nanos() as u64,
        path: path_theory(experiment, workload),
        outcome,
        inspect,
    };
    let workloads = if interrupted {
        // Workloads still running are cut off with the namespaces; keep what finished and
        // say which were cut off.
        threads
            .into_iter()
            .zip(&experiment.workloads)
            .map(|(thread, workload)| {
                let outcome = if thread.is_finished() {
                    thread.join().expect("workload threads do not panic")
                } else {
                    (
                        LabOutcome::Failed("cut off by the interruption".into()),
                        None,
                    )
                };
                entry(workload, outcome)
            })
            .collect()
    } else {
        threads
            .into_iter()
            .zip(&experiment.workloads)
            .map(|(thread, workload)| {
                entry(
                    workload,
                    thread.join().expect("workload threads do not panic"),
                )
            })
            .collect()
    };
    let duration_ns = started.elapsed().as_nanos() as u64;
    drop(control_thread);
    // Changes made by hand, on the run's clock; the control held the only other
    // references to the emulators.
    if let Some(control) = control {
        for change in control.changes() {
            links[change.link]
                .changes
                .push(pathlab_results::lab::LinkChange {
                    at_ns: change.at.saturating_duration_since(started).as_nanos() as u64,
                    forward: change.specs.forward,
                    reverse: change.specs.reverse,
                    by: change.by,
                });
        }
    }
    let emulators = emulators
        .into_iter()
        .map(|e| e.map(|e| Arc::into_inner(e).expect("the control thread has ended")))
        .collect();
    for (index, (link, stats)) in links.iter_mut().zip(stop_all(emulators)).enumerate() {
        if let Some(stats) = stats {
            link.lateness = send_lateness(experiment, index, &stats);
        }
    }
    servers_stop.store(true, Ordering::SeqCst);
    if !interrupted {
        for server in servers {
            let _ = server.join();
        }
    }
    drop(topology);
    Ok(LabRun {
        name: experiment.name.clone(),
        description: experiment.description.clone(),
        spec: point.text.clone(),
        kernel: kernel(),
        started_unix_ns,
        duration_ns,
        interrupted,
        parameters: point.parameters.clone(),
        links,
        workloads,
    })
}

/// A thread serving a lab's control address: stopped and joined when dropped, so a run
/// that fails midway does not leave it serving.
struct ServingGuard {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ServingGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Stops every emulator (which flushes its recording) and returns its final counters, in
/// order, [`STOPPING_THREADS`] at a time: closing a packet socket waits for an RCU grace
/// period (`synchronize_net` in the kernel's `packet_release`), four per emulator, so a
/// lab of 1,000 links stopped one emulator after another took 50 s.
fn stop_all(emulators: Vec<Option<EmulatorHandle>>) -> Vec<Option<EmulatorStats>> {
    let mut emulators = emulators;
    let chunk = emulators.len().div_ceil(STOPPING_THREADS).max(1);
    std::thread::scope(|scope| {
        let stopping: Vec<_> = emulators
            .chunks_mut(chunk)
            .map(|handles| {
                scope.spawn(move || {
                    handles
                        .iter_mut()
                        .map(|handle| handle.take().map(EmulatorHandle::stop))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        stopping
            .into_iter()
            .flat_map(|thread| thread.join().expect("stopping an emulator does not panic"))
            .collect()
    })
}

/// What the fidelity guard of link `index`'s emulator found, A to B then B to A, named by
/// the nodes each direction joins.
fn send_lateness(
    experiment: &Experiment,
    index: usize,
    stats: &EmulatorStats,
) -> Vec<SendLateness> {
    let link = &experiment.links[index];
    stats
        .directions
        .iter()
        .map(|direction| {
            // The cable's port A faces node A.
            let (from, to) = if direction.from == CABLE_A {
                (link.a, link.b)
            } else {
                (link.b, link.a)
            };
            let l = &direction.lateness;
            SendLateness {
                from: experiment.nodes[from].name.clone(),
                to: experiment.nodes[to].name.clone(),
                packets: l.packets,
                p50_ns: l.p50_ns,
                p99_ns: l.p99_ns,
                max_ns: l.max_ns,
                bound_ns: l.bound_ns,
                seconds: l.seconds,
                late_seconds: l.late_seconds,
                worst_second_p99_ns: l.worst_second_p99_ns,
            }
        })
        .collect()
}

/// `pathlab inspect` on a workload's connections: a thread in the workload's namespace
/// that looks at the TCP sockets to its peer every [`INSPECT_INTERVAL`] until finished.
struct Watcher {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<pathlab_probe::diagnosis::InspectReport>,
}

impl Watcher {
    /// Starts watching connections to `target` (times since `started`, the run's start).
    fn start(target: IpAddr, started: Instant) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let selector = pathlab_probe::diagnosis::Selector::parse(&format!("dst {target}"))
            .expect("an address is a filter");
        // The sockets open before the workload starts are not its own.
        let before: std::collections::HashSet<u64> = pathlab_probe_driver::sockdiag::tcp_sockets(0)
            .map(|samples| samples.iter().map(|s| s.cookie).collect())
            .unwrap_or_default();
        let thread = std::thread::spawn(move || {
            let mut watch = pathlab_probe::diagnosis::Watch::new();
            let mut next = Instant::now();
            loop {
                let at = started.elapsed().as_nanos() as u64;
                if let Ok(mut samples) = pathlab_probe_driver::sockdiag::tcp_sockets(at) {
                    samples.retain(|s| selector.matches(s));
                    watch.observe(samples);
                }
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                next += INSPECT_INTERVAL;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            let mut report = watch.report(INSPECT_INTERVAL.as_nanos() as u64);
            // Only the workload's own connections that moved data: not those open before
            // it started (an earlier workload's, still draining), nor a measurement's
            // control connection (a few hundred bytes beside megabytes).
            let moved = |c: &pathlab_probe::diagnosis::ConnectionReport| {
                let (Some(a), Some(b)) = (c.first.info, c.last.info) else {
                    return 0;
                };
                b.bytes_acked.saturating_sub(a.bytes_acked)
                    + b.bytes_received.saturating_sub(a.bytes_received)
            };
            let most = report.connections.iter().map(moved).max().unwrap_or(0);
            report.connections.retain(|c| {
                !before.contains(&c.first.cookie) && moved(c) > 0 && moved(c) * 20 >= most
            });
            report
        });
        Watcher { stop, thread }
    }

    /// One last look, and the watch's report.
    fn finish(self) -> pathlab_probe::diagnosis::InspectReport {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("the watcher does not panic")
    }
}

/// Runs one workload in the calling thread (already in its node's namespace); a `blocks`
/// workload writes to `port`.
fn run_workload(workload: &Workload, target: Option<IpAddr>, port: u16, out: &Path) -> LabOutcome {
    let connect = || {
        let target = target.expect("checked: measuring workloads have a peer");
        Client::connect(
            &SocketAddr::new(target, SERVER_PORT).to_string(),
            None,
            Duration::from_secs(5),
        )
    };
    let result = match &workload.kind {
        WorkloadKind::Tcp {
            streams,
            congestion,
            window,
        } => {
            let test = TcpTest {
                streams: *streams,
                direction: TcpDirection::Up,
                duration: workload.duration,
                interval: Duration::from_millis(100),
                sample_every: Duration::from_millis(10),
                options: TcpOptions {
                    window: *window,
                    mss: None,
                    congestion: congestion.clone(),
                },
            };
            return tcp_outcome(
                connect()
                    .map_err(Partial::from)
                    .and_then(|client| client.tcp_or_partial(&test)),
            );
        }
        WorkloadKind::Rtt { interval, size } => {
            let count = (workload.duration.as_nanos() / interval.as_nanos().max(1)).max(1) as u64;
            connect()
                .and_then(|client| client.round_trip(*interval, *size, count))
                .map(|report| LabOutcome::Rtt(Box::new(report)))
        }
        WorkloadKind::Owd { rate_bps, size } => {
            let count = ((workload.duration.as_secs_f64() * *rate_bps as f64
                / (f64::from(*size) * 8.0)) as u64)
                .max(1);
            connect()
                .and_then(|client| client.one_way(Direction::Up, *rate_bps, *size, count, 100))
                .map(|result| LabOutcome::Owd(Box::new(result)))
        }
        WorkloadKind::Ping { interval, size } => {
            let target = target.expect("checked: ping workloads have a peer");
            return ping(target, *interval, *size, workload.duration);
        }
        WorkloadKind::Blocks { size } => {
            let target = target.expect("checked: blocks workloads have a peer");
            return match pathlab_probe_driver::blocks::run(
                SocketAddr::new(target, port),
                *size as usize,
                workload.duration,
            ) {
                Ok(report) => LabOutcome::Blocks(Box::new(report)),
                Err(error) => LabOutcome::Failed(format!("blocks: {error}")),
            };
        }
        WorkloadKind::Command { argv } => return run_command(workload, argv, target, out),
    };
    result.unwrap_or_else(|e| LabOutcome::Failed(e.to_string()))
}

/// A `tcp` workload's outcome: its report, also when a stream was starved (a queue or the
/// path let none of its data through until the client gave up: a result of the path, kept
/// with what got through and the gap); any other failure fails it.
fn tcp_outcome(result: Result<TcpTestReport, Partial<TcpTestReport>>) -> LabOutcome {
    match result {
        Ok(report) => LabOutcome::Tcp(Box::new(report)),
        Err(Partial {
            error: MeasureError::Starved(_),
            measured: Some(report),
        }) => LabOutcome::Tcp(report),
        Err(partial) => LabOutcome::Failed(partial.error.to_string()),
    }
}

/// ICMP echo requests every `interval` for `duration`, from the calling thread's
/// namespace; replies later than a second after the last request count as lost.
fn ping(target: IpAddr, interval: Duration, size: u32, duration: Duration) -> LabOutcome {
    let count = (duration.as_nanos() / interval.as_nanos().max(1)).clamp(1, 65_536) as usize;
    let results = pathlab_probe_driver::ping::Pinger::new(target, size as usize)
        .and_then(|mut pinger| pinger.run(count, interval, Duration::from_secs(1)));
    let results = match results {
        Ok(results) => results,
        Err(error) => return LabOutcome::Failed(format!("ping: {error}")),
    };
    let first = results.first().map(|r| r.sent);
    let replies: Vec<_> = results
        .iter()
        .filter_map(|r| r.rtt.map(|rtt| (r, rtt.as_nanos() as i64)))
        .collect();
    LabOutcome::Ping(Box::new(PingReport {
        interval_ns: interval.as_nanos() as u64,
        size,
        sent: results.len() as u64,
        received: replies.len() as u64,
        rtt: pathlab_probe::rtt::percentiles(replies.iter().map(|&(_, rtt)| rtt)),
        series: replies
            .iter()
            .map(|&(r, rtt)| (u64::from(r.seq), rtt))
            .collect(),
        series_sent_ns: replies
            .iter()
            .map(|&(r, _)| first.map_or(0, |f| (r.sent - f).as_nanos() as u64))
            .collect(),
    }))
}

/// Runs a program for at most the workload's time, its output to `NAME.out`.
fn run_command(
    workload: &Workload,
    argv: &[String],
    target: Option<IpAddr>,
    out: &Path,
) -> LabOutcome {
    let file_name = format!("{}.out", workload.name);
    let file = match std::fs::File::create(out.join(&file_name)) {
        Ok(file) => file,
        Err(error) => return LabOutcome::Failed(format!("creating {file_name}: {error}")),
    };
    let target = target.map(|t| t.to_string()).unwrap_or_default();
    // `{pathlab}` is this very binary (a recipe runs `pathlab bond` or `pathlab tcp` without
    // relying on PATH); `{out}` the run's output directory.
    let pathlab =
        std::env::current_exe().map_or_else(|_| "pathlab".to_owned(), |p| p.display().to_string());
    let out_dir = std::path::absolute(out)
        .unwrap_or_else(|_| out.to_path_buf())
        .display()
        .to_string();
    // `{duration}`: how long a measuring command should run to end inside its slot, in
    // seconds: 80% of it, so it has time to start, collect its last replies (a round trip
    // or two, half a second through a bloated path) and report.
    let slot = workload.duration.as_secs_f64();
    let duration = format!("{:.1}", (0.8 * slot).min(slot - 1.0).max(1.0));
    let substitute = |a: &String| {
        a.replace("{to}", &target)
            .replace("{pathlab}", &pathlab)
            .replace("{out}", &out_dir)
            .replace("{duration}", &duration)
    };
    let args: Vec<String> = argv[1..].iter().map(substitute).collect();
    let mut command = std::process::Command::new(substitute(&argv[0]));
    command.args(&args).stdin(std::process::Stdio::null());
    pathlab_os::die_with_spawner(&mut command);
    match file.try_clone() {
        Ok(copy) => {
            command.stdout(copy).stderr(file);
        }
        Err(error) => return LabOutcome::Failed(error.to_string()),
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return LabOutcome::Failed(format!("starting {}: {error}", argv[0])),
    };
    let deadline = Instant::now() + workload.duration;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return LabOutcome::Command {
                    exit_code: status.code(),
                    output: file_name,
                }
            }
            Ok(None) if Instant::now() >= deadline => {
                // SIGTERM first, so a program that cleans up after itself (a tunnel's
                // routes, its stats) can; SIGKILL if it has not ended a second later.
                let _ = pathlab_os::terminate(child.id());
                let grace = Instant::now() + Duration::from_secs(1);
                while Instant::now() < grace && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
                return LabOutcome::Command {
                    exit_code: None,
                    output: file_name,
                };
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => return LabOutcome::Failed(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_probe::tcp::{Starved, StreamReport};
    use pathlab_probe_driver::{Interruption, Starvation};

    #[test]
    fn a_starved_tcp_workload_is_a_result_and_a_silent_server_a_failure() {
        let starved = Starved {
            longest_gap_ns: 17_300_000_000,
            gap_from_ns: 6_100_000_000,
        };
        let report = TcpTestReport {
            up: vec![StreamReport {
                bytes: 61_000,
                starved: Some(starved),
                ..StreamReport::default()
            }],
            ..TcpTestReport::default()
        };
        let outcome = tcp_outcome(Err(Partial {
            error: MeasureError::Starved(Starvation {
                streams: vec![(0, starved)],
            }),
            measured: Some(Box::new(report.clone())),
        }));
        assert_eq!(outcome, LabOutcome::Tcp(Box::new(report.clone())));
        let LabOutcome::Tcp(kept) = outcome else {
            unreachable!()
        };
        assert_eq!(
            kept.starved().map(|s| s.summary()).as_deref(),
            Some("starved: no data for 17.3 s")
        );
        // A server that stopped answering is not a result, whatever was measured.
        let frozen = MeasureError::Interrupted(Interruption {
            closed: false,
            at_s: 25.0,
            last_heard_s: Some(4.0),
            awaited: "results",
            bound: "within 10 s of its end".into(),
        });
        let failed = tcp_outcome(Err(Partial {
            error: frozen,
            measured: Some(Box::new(report)),
        }));
        assert!(
            matches!(&failed, LabOutcome::Failed(why) if why.starts_with("the server stopped answering")),
            "{failed:?}"
        );
    }
}
