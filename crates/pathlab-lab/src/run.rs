//! Running an experiment: build the topology, start an emulator on every emulated link
//! (recording to `link-NAME.jsonl` in the output directory), a pathlab server in every
//! node a workload measures against, each workload at its time in its node's namespace,
//! each event at its time; then collect everything into a [`LabRun`].
//!
//! Teardown needs no cleanup code: namespaces are held by file descriptors and vanish
//! with the [`Topology`] or the process. Ctrl-C (the `stop` flag) ends the run early; the
//! recordings on disk and the results of finished workloads are kept.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pathlab_emulator::emulator::Record;
use pathlab_emulator::emulator::{self, EmulatorConfig, EmulatorHandle, EmulatorStats};
use pathlab_emulator::port::{PacketPort, Port, ReceiveMode};
use pathlab_emulator::switchboard::Switchboard;
use pathlab_os::files::Dir;
use pathlab_results::lab::{LabLink, LabRun, LabWorkload, SendLateness};

use crate::spec::{Experiment, SweepPoint, Workload, WorkloadKind};
use crate::summary::path_theory;
use crate::topology::{board_port, Topology, CABLE_A, CABLE_B};
use crate::workload::{join_timed, sleep_until, spawn_timed, start_responder, start_server, Timed};

pub use crate::workload::{BLOCKS_PORT, SERVER_PORT};

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
            WorkloadKind::Blocks { size, .. } => w.to.map(|to| (to, size)),
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
        WorkloadKind::Blocks { size, .. } => responders
            .iter()
            .position(|&r| Some(r.0) == workload.to && r.1 == size)
            .map(|index| BLOCKS_PORT + index as u16),
        ref kind if needs_server(kind) => Some(SERVER_PORT),
        _ => None,
    }
}

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

/// How often an emulator samples its bottleneck queue in a run of `duration_ns`: every
/// [`QUEUE_SAMPLE_INTERVAL`] if it has one, else once at the start (without a queue, one
/// sample says it was empty).
pub fn queue_sample_interval(has_bottleneck: bool, duration_ns: u64) -> pathlab_core::Duration {
    if has_bottleneck {
        QUEUE_SAMPLE_INTERVAL
    } else {
        pathlab_core::Duration::from_nanos(duration_ns + 1)
    }
}

/// How the ports of a cable receive traffic entering a direction with `spec`, in a lab
/// of `emulated_links` emulated links.
pub fn receive_mode(spec: &pathlab_core::LinkSpec, emulated_links: usize) -> ReceiveMode {
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
    /// Where recordings and outputs go: made if missing, else it must be this user's and
    /// writable by no one else ([`Dir::output`]).
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
    /// How the emulators' forwarding threads are scheduled (`--priority`, `--cpus`).
    pub scheduling: pathlab_os::scheduling::Request,
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

/// The kernel this runs on, as a result names it (`Linux 6.1.0`).
pub fn kernel() -> String {
    let read = |key: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{key}"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    format!("{} {}", read("ostype"), read("osrelease"))
}

/// Runs `experiment`, parsed from sweep point `point` (whose text and parameters are
/// kept in the result).
pub fn run(
    experiment: &Experiment,
    point: &SweepPoint,
    options: &RunOptions,
) -> Result<LabRun, RunError> {
    ensure_descriptors(experiment)?;
    let out = Arc::new(Dir::output(&options.out).map_err(|e| RunError::Io {
        context: "the output directory".to_owned(),
        source: std::io::Error::other(e),
    })?);
    let mut topology = Topology::build(experiment).map_err(io_error("building the topology"))?;
    // One forwarding thread per core for all the lab's links: a thread per direction
    // would be thousands of threads in a large lab.
    let pool = emulator::Pool::per_core_with(&options.scheduling)
        .map_err(io_error("starting the forwarding threads"))?;
    announce_scheduling(&experiment.name, pool.scheduling());
    // Held until the run ends: the links' ports are its.
    let board = topology
        .board
        .take()
        .map(|board| Switchboard::open(board, pool.threads()))
        .transpose()
        .map_err(io_error("opening the switchboard"))?;
    let (emulators, mut links) = start_emulators(
        experiment,
        &mut topology,
        board.as_ref(),
        &pool,
        options,
        &out,
    )?;
    let (control, control_thread) = serve_control(experiment, &emulators, options);
    let servers_stop = Arc::new(AtomicBool::new(false));
    let responders = blocks_responders(experiment);
    let servers = start_servers(experiment, &topology, &responders, &servers_stop)?;

    let started = Instant::now();
    let started_unix_ns = pathlab_os::unix_now_ns();
    let threads = start_workloads(experiment, &topology, &responders, started, options, &out)?;
    let events = experiment.events.iter().map(|event| (event.at, event));
    let interrupted = play_events(
        events,
        experiment.duration,
        started,
        &options.stop,
        |event| match &emulators[event.link] {
            Some(handle) => handle
                .set(event.forward.clone(), event.reverse.clone())
                .map_err(|message| RunError::Emulator {
                    link: experiment.links[event.link].name.clone(),
                    message,
                }),
            None => Ok(()),
        },
    )?;
    let workloads = join_timed(threads, interrupted)
        .into_iter()
        .zip(&experiment.workloads)
        .map(|(came, workload)| lab_workload(experiment, workload, came))
        .collect();
    let duration_ns = started.elapsed().as_nanos() as u64;
    drop(control_thread);
    // Changes made by hand, on the run's clock; the control held the only other
    // references to the emulators.
    if let Some(control) = control {
        for (link, change) in link_changes(&control, started) {
            links[link].changes.push(change);
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
    drop(board);
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
        scheduling: Some(pool.scheduling().clone()),
    })
}

/// A link's emulator (`None` for a plain link), shared with the control address.
type Emulated = Option<Arc<EmulatorHandle>>;

/// The emulator of every emulated link of `experiment` (`None` for a plain one), each
/// recording to `link-NAME.jsonl` in the run's directory, and each link's entry in the
/// run's result.
fn start_emulators(
    experiment: &Experiment,
    topology: &mut Topology,
    board: Option<&Switchboard>,
    pool: &emulator::Pool,
    options: &RunOptions,
    out: &Arc<Dir>,
) -> Result<(Vec<Emulated>, Vec<LabLink>), RunError> {
    let emulated_links = topology.emulated.iter().filter(|&&e| e).count();
    let mut emulators = Vec::new();
    let mut links = Vec::new();
    for (i, link) in experiment.links.iter().enumerate() {
        let recording = if topology.emulated[i] {
            let file_name = format!("link-{}.jsonl", link.name);
            let ports = link_ports(experiment, i, topology, board, emulated_links)?;
            let emulator_error = |e: &dyn std::fmt::Display| RunError::Emulator {
                link: link.name.clone(),
                message: e.to_string(),
            };
            // A trace a spec names (a twin's `trace NAME-up.trace`) is read now: the
            // experiment's parse reads no file.
            let (mut forward, mut reverse) = (link.forward.clone(), link.reverse.clone());
            pathlab_emulator::load_trace(&mut forward).map_err(|e| emulator_error(&e))?;
            pathlab_emulator::load_trace(&mut reverse).map_err(|e| emulator_error(&e))?;
            let handle = pool
                .spawn(
                    ports,
                    EmulatorConfig {
                        name: link.name.clone(),
                        forward,
                        reverse,
                        seed: options.seed.wrapping_add(i as u64),
                        // Closed between writes: a file per link held open for the
                        // whole run would be 10,000 open files in a large lab.
                        record: Some(Record::Reopened {
                            dir: Arc::clone(out),
                            name: file_name.clone(),
                        }),
                        pcap: None,
                        queue_sample_interval: queue_sample_interval(
                            has_bottleneck(experiment, i),
                            experiment.duration.as_nanos() as u64,
                        ),
                        command: vec![format!("pathlab lab {}", experiment.name)],
                        on_interface_gone: pathlab_emulator::emulator::OnInterfaceGone::Stop,
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
            underlay: Vec::new(),
        });
    }
    Ok((emulators, links))
}

/// The two ports of emulated link `i`'s emulator: the switchboard's, or the packet sockets
/// of its cable namespace's two ends.
fn link_ports(
    experiment: &Experiment,
    i: usize,
    topology: &mut Topology,
    board: Option<&Switchboard>,
    emulated_links: usize,
) -> Result<[Box<dyn Port>; 2], RunError> {
    let link = &experiment.links[i];
    let ports = match (board, topology.cables[i].take()) {
        (Some(board), _) => [0, 1].map(|end| {
            board
                .port([CABLE_A, CABLE_B][end], &board_port(i, end))
                .map(|port| Box::new(port) as Box<dyn Port>)
        }),
        // The cable's namespace is held by its ports from here (each opened it): its own
        // descriptor would be one more open file per link.
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
    let emulator_error = |e: pathlab_emulator::port::PortError| RunError::Emulator {
        link: link.name.clone(),
        message: e.to_string(),
    };
    let [a, b] = ports;
    Ok([a.map_err(emulator_error)?, b.map_err(emulator_error)?])
}

/// The links' control address, served until the emulators stop (or the run fails): the
/// control, and the guard that stops its thread.
fn serve_control(
    experiment: &Experiment,
    emulators: &[Emulated],
    options: &RunOptions,
) -> (Option<Arc<pathlab_emulator::api::LabControl>>, ServingGuard) {
    let stop = Arc::new(AtomicBool::new(false));
    let control = options.control.as_ref().map(|server| {
        let control = Arc::new(pathlab_emulator::api::LabControl::new(
            experiment
                .links
                .iter()
                .zip(emulators)
                .map(|(link, emulator)| (link.name.clone(), emulator.clone()))
                .collect(),
            options.trace_dir.clone(),
        ));
        let serving = Arc::clone(&control);
        let server = Arc::clone(server);
        let stop = Arc::clone(&stop);
        let thread =
            std::thread::spawn(move || server.serve(&stop, &|request| serving.answer(request)));
        (control, thread)
    });
    let (control, thread) = control.unzip();
    (control, ServingGuard { stop, thread })
}

/// A pathlab server in every node a workload measures against, and each of `responders`
/// (a node a `blocks` workload writes to and a block size, as [`blocks_responders`] gives
/// them), all until `stop`.
fn start_servers(
    experiment: &Experiment,
    topology: &Topology,
    responders: &[(usize, u32)],
    stop: &Arc<AtomicBool>,
) -> Result<Vec<std::thread::JoinHandle<()>>, RunError> {
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
        let netns = topology.nodes[node]
            .try_clone()
            .map_err(io_error("sharing a namespace"))?;
        servers.push(
            start_server(move || netns.enter(), Arc::clone(stop)).map_err(io_error(format!(
                "starting the server in {}",
                experiment.nodes[node].name
            )))?,
        );
    }
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
        servers.push(start_responder(listener, size, Arc::clone(stop)));
    }
    Ok(servers)
}

/// Every workload of `experiment` on a thread of its own, each starting at its time after
/// `started` in its node's namespace.
fn start_workloads(
    experiment: &Experiment,
    topology: &Topology,
    responders: &[(usize, u32)],
    started: Instant,
    options: &RunOptions,
    out: &Arc<Dir>,
) -> Result<Vec<std::thread::JoinHandle<crate::workload::Came>>, RunError> {
    let mut threads = Vec::new();
    for workload in &experiment.workloads {
        let netns = topology.nodes[workload.from]
            .try_clone()
            .map_err(io_error("sharing a namespace"))?;
        let port = match workload.kind {
            WorkloadKind::Blocks { .. } => {
                workload_port(workload, responders).expect("a responder for every blocks workload")
            }
            _ => 0,
        };
        let timed = Timed {
            name: workload.name.clone(),
            kind: workload.kind.clone(),
            start: workload.start,
            duration: workload.duration,
            inspect: workload.inspect,
            target: workload_target(experiment, workload),
            port,
        };
        threads.push(spawn_timed(
            timed,
            started,
            Some(netns),
            Arc::clone(&options.stop),
            Arc::clone(out),
        ));
    }
    Ok(threads)
}

/// The timeline a lab and each node of an exported lab play alike: each of `events` (its
/// time after `started`, and what to `apply` then) in the order of their times, then the
/// rest of the run up to `end`; whether `stop` cut it short. The first error of `apply`
/// ends it.
pub fn play_events<T, E>(
    events: impl IntoIterator<Item = (std::time::Duration, T)>,
    end: std::time::Duration,
    started: Instant,
    stop: &AtomicBool,
    mut apply: impl FnMut(T) -> Result<(), E>,
) -> Result<bool, E> {
    let mut events: Vec<(std::time::Duration, T)> = events.into_iter().collect();
    events.sort_by_key(|&(at, _)| at);
    for (at, event) in events {
        if !sleep_until(started + at, stop) {
            return Ok(true);
        }
        apply(event)?;
    }
    Ok(!sleep_until(started + end, stop))
}

/// The changes made through a control address (`control`), each with the index of its
/// link, at its time after `started`: what a lab's links and a node's halves record.
pub fn link_changes(
    control: &pathlab_emulator::api::LabControl,
    started: Instant,
) -> impl Iterator<Item = (usize, pathlab_results::lab::LinkChange)> {
    control.changes().into_iter().map(move |change| {
        (
            change.link,
            pathlab_results::lab::LinkChange {
                at_ns: change.at.saturating_duration_since(started).as_nanos() as u64,
                forward: change.specs.forward,
                reverse: change.specs.reverse,
                by: change.by,
            },
        )
    })
}

/// Says on stderr, once at start, how `who`'s forwarding threads are scheduled and why
/// anything asked was not given.
pub fn announce_scheduling(who: &str, scheduling: &emulator::Scheduling) {
    eprintln!("{who}: forwarding threads: {}", scheduling.text());
    for note in &scheduling.notes {
        eprintln!("{who}: note: {note}");
    }
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
            lateness(
                &direction.lateness,
                &experiment.nodes[from].name,
                &experiment.nodes[to].name,
            )
        })
        .collect()
}

/// A workload's entry in the run's result: what came of it beside its theory.
pub fn lab_workload(
    experiment: &Experiment,
    workload: &Workload,
    (outcome, inspect): crate::workload::Came,
) -> LabWorkload {
    LabWorkload {
        name: workload.name.clone(),
        from: experiment.nodes[workload.from].name.clone(),
        to: workload.to.map(|to| experiment.nodes[to].name.clone()),
        start_ns: workload.start.as_nanos() as u64,
        duration_ns: workload.duration.as_nanos() as u64,
        path: path_theory(experiment, workload),
        outcome,
        inspect,
    }
}

/// What the fidelity guard found of a direction from node `from` to node `to`.
pub fn lateness(
    l: &pathlab_emulator::fidelity::LatenessSummary,
    from: &str,
    to: &str,
) -> SendLateness {
    SendLateness {
        from: from.to_owned(),
        to: to.to_owned(),
        packets: l.packets,
        p50_ns: l.p50_ns,
        p99_ns: l.p99_ns,
        max_ns: l.max_ns,
        bound_ns: l.bound_ns,
        seconds: l.seconds,
        late_seconds: l.late_seconds,
        worst_second_p99_ns: l.worst_second_p99_ns,
    }
}
