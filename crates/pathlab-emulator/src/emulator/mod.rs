//! The emulator: two ports, a [`Link`] per direction, real time.
//!
//! Each direction runs on a forwarding thread ([`worker`]): it reads what its port has
//! (wire frames, after [`pathlab_core::wire::offload`]), gives them to its link at the current instant,
//! sends every packet whose departure instant has come out of the other port, and hands
//! records to the recorder thread. Then the thread sleeps until the earliest `poll_at`: in
//! `ppoll` (with 1 ns timer slack) while the deadline is far, and spinning for the last
//! [`SPIN_WINDOW`], so packets leave within microseconds of their model departure. How
//! late each one actually left is measured and reported ([`crate::fidelity`]). An
//! emulator of its own ([`spawn`]) has a thread per direction; many emulators can share a
//! [`Pool`] of threads.
//!
//! Forwarding threads ask for real-time scheduling (`SCHED_FIFO`) by default and then
//! sleep to each deadline instead of spinning ([`pathlab_os::scheduling`]): at normal
//! priority a busy machine hands their core to whoever asks, and their packets leave
//! milliseconds late.

mod recorder;
mod worker;

use std::fs::File;
use std::io::{self, BufWriter};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};

use pathlab_core::link::LinkCounters;
use pathlab_core::time::Duration;
use pathlab_core::{Link, LinkSpec};
use pathlab_os::{scheduling, sys, Clock};
pub use pathlab_results::lab::Scheduling;
use pathlab_results::recording::{self, DirectionInfo, RecordingHeader};
use serde::{Deserialize, Serialize};

pub use crate::fidelity::LatenessSummary;
use crate::port::{Framing, Port};

/// Below this distance to the next deadline a forwarding thread spins instead of sleeping,
/// when the machine has cores to spare ([`spin_window`]): the kernel's wake-up latency
/// from `ppoll` is tens of microseconds. Measured here with one forwarding thread
/// (100 Mbit/s through `delay 10ms`, send error p50/p99): 200 us spin 11/33 us, 50 us spin
/// 20/69 us, no spin 38/101 us.
pub const SPIN_WINDOW: Duration = Duration::from_micros(200);

/// The share of its time a forwarding thread may spend spinning on a machine without cores
/// to spare ([`spin_window`]): enough to send a ping or a probe train on time, too little
/// to take a core from the traffic's own programs under load (a thread whose departures
/// come closer together than the window would otherwise never sleep).
pub const SPIN_SHARE: f64 = 0.05;

/// How long `threads` forwarding threads spin before a deadline on this machine, and the
/// share of their time they may spend spinning: [`SPIN_WINDOW`] always, and without a limit
/// when the machine has two cores per thread and two more for the traffic's own programs;
/// otherwise [`SPIN_SHARE`]. Measured on this 2-core machine: two forwarding threads that
/// spun without a limit left TCP's own stacks so little that 1 Gbit/s through
/// `rate 1gbit delay 40ms` was sent late by 5.8 ms at p99 (126 us without spinning), and
/// without spinning a ping through `delay 20ms` each way came back 0.23 ms late (the
/// kernel's wake-up latency, twice).
pub fn spin_window(threads: usize) -> (Duration, f64) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cores >= 2 * threads + 2 {
        (SPIN_WINDOW, 1.0)
    } else {
        (SPIN_WINDOW, SPIN_SHARE)
    }
}

/// A running emulator's counters of one direction, live: what it read, forwarded and
/// dropped so far and what its queue holds now (a recording's summary of a direction is
/// `pathlab_results::series::RecordedDirectionSummary`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionCounters {
    /// Interface packets come from.
    pub from: String,
    /// Interface they go to.
    pub to: String,
    /// The spec in force, canonical.
    pub spec: String,
    /// Frames read (a GSO super-packet counts once).
    pub frames_received: u64,
    /// Wire packets that entered the link (super-packets counted as their segments).
    pub packets_received: u64,
    /// Frames that could not be read (cut short, bad offload metadata).
    pub malformed: u64,
    /// Times the kernel said the receive ring overflowed.
    pub ring_full: u64,
    /// Times the receiving interface went down (the direction waits, sleeping, until it
    /// comes back).
    #[serde(default)]
    pub went_down: u64,
    /// Times the receiving interface disappeared and the emulator waited for one of its
    /// name ([`OnInterfaceGone::Wait`]).
    #[serde(default)] // added with `--wait`
    pub disappeared: u64,
    /// Times an interface of its name appeared again and was opened in its place: both
    /// directions through it forward again.
    #[serde(default)] // added with `--wait`
    pub reopened: u64,
    /// The link's own counters: in, out, drops by reason, marks.
    pub link: LinkCounters,
    /// Packets sent out of the other port.
    pub forwarded: u64,
    /// Bytes sent out of the other port.
    pub forwarded_bytes: u64,
    /// Packets the link let through but the send failed (counted, not retried).
    pub send_errors: u64,
    /// Packets the link let through that the outgoing interface had no room for (a qdisc
    /// behind the emulator, a token bucket's, held the socket's send buffer full):
    /// dropped there at once, as a router's full output queue drops, and not in
    /// `send_errors`. The recording does not know them: they left the model.
    #[serde(default)] // added when sends stopped waiting
    pub egress_full: u64,
    /// Packets waiting in the bottleneck queue now.
    pub queue_packets: u64,
    /// Bytes waiting in the bottleneck queue now.
    pub queue_bytes: u64,
    /// Packets inside the link now (queued, in service, delayed).
    pub in_flight: u64,
    /// How long the packet that left last had waited in the bottleneck queue, ns; 0 when
    /// the queue is empty now.
    #[serde(default)] // added with the control page
    pub queue_delay_ns: u64,
    /// How late packets left compared with their model departure. A frame enters the
    /// link at the instant the kernel received it, so this includes how long it waited to
    /// be read (`waited`), unless it waited past what the link had already been told.
    pub lateness: LatenessSummary,
    /// How long frames waited in the kernel (ring or socket) before the emulator read
    /// them: what a busy emulator's backlog adds.
    #[serde(default)] // added with receive timestamps
    pub waited: LatenessSummary,
}

/// A snapshot of an emulator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmulatorStats {
    /// The emulator's name.
    pub name: String,
    /// Time since it started, in ns.
    pub uptime_ns: u64,
    /// Index 0: first port to second; 1: second to first.
    pub directions: Vec<DirectionCounters>,
    /// Why the emulator ended by itself, if it did (an interface disappeared).
    #[serde(default)]
    pub failure: Option<String>,
    /// How its forwarding threads are scheduled (`None` from an emulator before
    /// `--priority`).
    #[serde(default)] // added with --priority
    pub scheduling: Option<Scheduling>,
}

/// Everything an emulator needs besides its ports.
#[derive(Debug)]
pub struct EmulatorConfig {
    /// Its name (control socket, messages).
    pub name: String,
    /// Spec of direction 0 (first port to second).
    pub forward: LinkSpec,
    /// Spec of direction 1.
    pub reverse: LinkSpec,
    /// Seed of the links' random choices (each direction derives its own).
    pub seed: u64,
    /// Where to stream the recording, if anywhere.
    pub record: Option<Record>,
    /// Where to write the capture, if anywhere.
    pub pcap: Option<File>,
    /// How often the recording samples queue lengths.
    pub queue_sample_interval: Duration,
    /// The command line, for the recording's header.
    pub command: Vec<String>,
    /// What to do when one of the two interfaces disappears.
    pub on_interface_gone: OnInterfaceGone,
}

/// What an emulator does when one of its interfaces disappears (a USB NIC unplugged, a
/// veth deleted with its namespace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnInterfaceGone {
    /// End, with a failure naming the interface.
    #[default]
    Stop,
    /// Wait, sleeping, for an interface of the same name to appear, then open it as the
    /// first one was opened and forward again (`pathlab emulate --wait`).
    Wait,
}

/// Why an emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// A spec could not be turned into a link.
    #[error("spec of direction {direction}: {source}")]
    Link {
        /// Which direction.
        direction: String,
        /// Why.
        source: pathlab_core::link::LinkError,
    },
    /// A system call failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// What an emulator writes its capture with.
struct Capture {
    writer: pathlab_results::pcapng::PcapngWriter<BufWriter<File>>,
}

/// Forwarding threads that emulators' directions run on.
///
/// [`spawn`] gives each emulator a pool of its own with a thread per direction: with a
/// bottleneck of several Gbit/s each direction needs a core (each send makes the kernel run
/// the receiving host's TCP stack in the sending thread). A lab of hundreds of slow links
/// shares one pool with a thread per core instead ([`Pool::spawn`]): a thread per direction
/// would be thousands of threads.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    workers: Vec<worker::WorkerHandle>,
    /// Directions each worker serves, for placing new ones.
    load: Mutex<Vec<usize>>,
    next_key: AtomicU64,
    scheduling: Scheduling,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.inner.workers.len())
            .finish()
    }
}

impl Pool {
    /// A pool of `threads` forwarding threads (at least one) at real-time priority where
    /// the process may ([`Pool::with_scheduling`] with the default request).
    pub fn new(threads: usize) -> io::Result<Pool> {
        Pool::with_scheduling(threads, &scheduling::Request::default())
    }

    /// A pool of `threads` forwarding threads scheduled as `request` asks: with real-time
    /// scheduling they sleep until each deadline (a real-time thread that spins takes its
    /// core from everything else, the traffic's own programs included); without it they
    /// spin as [`spin_window`] says. The process's memory is locked with real-time
    /// scheduling; what each thread got is in [`Pool::scheduling`].
    pub fn with_scheduling(threads: usize, request: &scheduling::Request) -> io::Result<Pool> {
        let (window, share) = spin_window(threads.max(1));
        Pool::start(threads, window, share, request)
    }

    /// A pool of `threads` forwarding threads at normal priority that spin for `window`
    /// before each deadline, at most `share` of their time (1: no limit, 0: never).
    pub fn with_spin(threads: usize, window: Duration, share: f64) -> io::Result<Pool> {
        let normal = scheduling::Request {
            priority: scheduling::Priority::Normal,
            cpus: None,
        };
        Pool::start(threads, window, share, &normal)
    }

    fn start(
        threads: usize,
        window: Duration,
        share: f64,
        request: &scheduling::Request,
    ) -> io::Result<Pool> {
        let memory =
            (request.priority == scheduling::Priority::Realtime).then(scheduling::lock_memory_once);
        let (workers, granted): (Vec<_>, Vec<_>) = (0..threads.max(1))
            .map(|_| worker::WorkerHandle::start("pathlab-forward", window, share, request))
            .collect::<io::Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let scheduling = scheduling_report(request, &granted, memory.as_ref());
        Ok(Pool {
            inner: Arc::new(PoolInner {
                load: Mutex::new(vec![0; workers.len()]),
                workers,
                next_key: AtomicU64::new(0),
                scheduling,
            }),
        })
    }

    /// How its forwarding threads are scheduled: what was asked, what they got, and why
    /// not.
    pub fn scheduling(&self) -> &Scheduling {
        &self.inner.scheduling
    }

    /// A pool with a thread per core of the machine, at real-time priority where the
    /// process may.
    pub fn per_core() -> io::Result<Pool> {
        Pool::new(Pool::per_core_threads())
    }

    /// A pool with a thread per CPU `request` allows (per core of the machine if it names
    /// none), scheduled as it asks.
    pub fn per_core_with(request: &scheduling::Request) -> io::Result<Pool> {
        let threads = request
            .cpus
            .as_ref()
            .map_or_else(Pool::per_core_threads, Vec::len);
        Pool::with_scheduling(threads, request)
    }

    /// How many threads [`Pool::per_core`] starts: the machine's cores.
    pub fn per_core_threads() -> usize {
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
    }

    /// Starts an emulator between two ports on this pool's threads: each direction on the
    /// least-loaded thread, the two on different threads where there are two.
    pub fn spawn<P: Port + 'static>(
        &self,
        ports: [P; 2],
        config: EmulatorConfig,
    ) -> Result<EmulatorHandle, EmulatorError> {
        spawn_on(self.clone(), ports, config)
    }

    /// How many forwarding threads it has (a switchboard for it has a receiving socket
    /// per thread: [`crate::switchboard::Switchboard::open`]).
    pub fn threads(&self) -> usize {
        self.inner.workers.len()
    }

    /// The two threads to put a new emulator's directions on: the one a direction's port
    /// must be read by if it says (a switchboard's port), else the least loaded.
    fn place(&self, wanted: [Option<usize>; 2]) -> [usize; 2] {
        let mut load = self
            .inner
            .load
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut order: Vec<usize> = (0..load.len()).collect();
        order.sort_by_key(|&w| (load[w], w));
        let mut chosen = [order[0], order[order.len().min(2) - 1]];
        for (chosen, wanted) in chosen.iter_mut().zip(wanted) {
            if let Some(worker) = wanted {
                *chosen = worker % load.len();
            }
        }
        for w in chosen {
            load[w] += 1;
        }
        chosen
    }

    fn unplace(&self, worker: usize) {
        let mut load = self
            .inner
            .load
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        load[worker] = load[worker].saturating_sub(1);
    }
}

/// What the threads of a pool asked for and got, in one report: the class they all got
/// (`mixed` if not all the same), the notes once each, and the memory lock's outcome
/// (`None`: not asked).
fn scheduling_report(
    request: &scheduling::Request,
    granted: &[scheduling::Granted],
    memory: Option<&Result<(), String>>,
) -> Scheduling {
    let (policy, priority) = match granted.first().map(|g| g.policy) {
        Some(first) if granted.iter().any(|g| g.policy != first) => ("mixed", 0),
        Some(sys::Policy::Fifo(priority)) => ("fifo", priority),
        Some(sys::Policy::Normal) | None => ("normal", 0),
        Some(sys::Policy::Other(_)) => ("other", 0),
    };
    let mut notes: Vec<String> = Vec::new();
    for note in granted.iter().flat_map(|g| &g.notes) {
        if !notes.contains(note) {
            notes.push(note.clone());
        }
    }
    if let Some(Err(why)) = memory {
        notes.push(why.clone());
    }
    if policy == "fifo" {
        notes.extend(scheduling::rt_throttling_note());
    }
    let mut cpus: Vec<usize> = granted
        .iter()
        .flat_map(|g| g.cpus.iter().copied())
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    Scheduling {
        asked: request.priority.name().to_owned(),
        policy: policy.to_owned(),
        priority,
        memory_locked: matches!(memory, Some(Ok(()))),
        cpus: scheduling::cpu_list_text(&cpus),
        threads: granted.len() as u32,
        notes,
    }
}

/// Starts an emulator between two ports, each direction on its own thread, at real-time
/// priority where the process may (`Pool::with_scheduling(2, ..).spawn(..)` chooses).
pub fn spawn<P: Port + 'static>(
    ports: [P; 2],
    config: EmulatorConfig,
) -> Result<EmulatorHandle, EmulatorError> {
    spawn_on(Pool::new(2)?, ports, config)
}

fn spawn_on<P: Port + 'static>(
    pool: Pool,
    ports: [P; 2],
    config: EmulatorConfig,
) -> Result<EmulatorHandle, EmulatorError> {
    let names = [ports[0].name().to_owned(), ports[1].name().to_owned()];
    let links = [
        direction_link(&config, &names, 0, &config.forward)?,
        direction_link(&config, &names, 1, &config.reverse)?,
    ];
    let stats: [DirectionCounters; 2] = std::array::from_fn(|index| DirectionCounters {
        from: names[index].clone(),
        to: names[1 - index].clone(),
        spec: [&config.forward, &config.reverse][index].to_string(),
        ..DirectionCounters::default()
    });
    let clock = Clock::start();
    let (records, recorder_thread) = match config.record {
        Some(file) => {
            let header = recording_header(
                config.command.clone(),
                &clock,
                stats
                    .iter()
                    .map(|d| (d.from.clone(), d.to.clone(), d.spec.clone())),
                config.queue_sample_interval,
            );
            let (sender, finished) = recorder::start(file, &header)?;
            (Some(sender), Some(finished))
        }
        None => (None, None),
    };
    let capture = match config.pcap {
        Some(file) => Some(start_capture(file, ports[0].framing(), &names)?),
        None => None,
    };
    let transmitters = [
        Arc::new(Mutex::new(ports[0].transmitter()?)),
        Arc::new(Mutex::new(ports[1].transmitter()?)),
    ];
    let shared = Arc::new(worker::Shared {
        name: config.name.clone(),
        failure: Mutex::new(None),
        failed: AtomicBool::new(false),
        capture: capture.map(Mutex::new),
    });
    let placed = pool.place([0, 1].map(|i| ports[i].shared_receiver().map(|(r, _)| r.share())));
    let mut slots = [(0, 0); 2];
    let now = clock.now();
    for (index, ((port, link), stats)) in ports.into_iter().zip(links).zip(stats).enumerate() {
        let key = pool.inner.next_key.fetch_add(1, Ordering::Relaxed);
        let direction = worker::Direction::new(
            index,
            Box::new(port),
            clock,
            Arc::clone(&transmitters[1 - index]),
            Arc::clone(&transmitters[index]),
            link,
            stats,
            Arc::clone(&shared),
            records.clone(),
            config.queue_sample_interval,
            config.on_interface_gone,
            now,
        );
        pool.inner.workers[placed[index]].ask(worker::WorkerRequest::Add(key, Box::new(direction)));
        slots[index] = (placed[index], key);
    }
    drop(records);
    Ok(EmulatorHandle {
        name: config.name,
        pool,
        slots,
        shared,
        clock,
        recording: Mutex::new(recorder_thread.map(|finished| Recording {
            finished,
            path: None,
        })),
        queue_sample_interval: config.queue_sample_interval,
        stopped: false,
    })
}

/// The link of direction `index` (0: from `names[0]` to `names[1]`) with its `spec`,
/// seeded by the spec or else by the emulator's seed and the direction; it records and
/// keeps its drops when the emulator records or captures.
fn direction_link(
    config: &EmulatorConfig,
    names: &[String; 2],
    index: usize,
    spec: &LinkSpec,
) -> Result<Link, EmulatorError> {
    let seed = spec.seed.unwrap_or(
        config
            .seed
            .wrapping_add(index as u64 * 0x9E37_79B9_7F4A_7C15),
    );
    let mut link = Link::new(spec, seed).map_err(|source| EmulatorError::Link {
        direction: format!("{} -> {}", names[index], names[1 - index]),
        source,
    })?;
    if config.record.is_some() {
        link.record();
    }
    if config.pcap.is_some() {
        link.keep_dropped();
    }
    Ok(link)
}

/// A capture into `file`, one pcapng interface per port (`names`), of the ports' framing.
fn start_capture(
    file: File,
    framing: Framing,
    names: &[String; 2],
) -> Result<Capture, EmulatorError> {
    use pathlab_results::pcapng::{LinkType, PcapngWriter};
    let link_type = match framing {
        Framing::Ethernet => LinkType::Ethernet,
        Framing::Ip => LinkType::RawIp,
    };
    let mut writer = PcapngWriter::new(BufWriter::with_capacity(1 << 20, file), "pathlab emulate")?;
    writer.add_interface(&names[0], link_type, 65_535)?;
    writer.add_interface(&names[1], link_type, 65_535)?;
    Ok(Capture { writer })
}

pub use recorder::Record;
use recorder::RecordSender;

/// What `slot` holds, taken: the one owner left to use it, even after a thread that held
/// the lock panicked.
pub(crate) fn take_locked<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// A recording's header: what the file holds and on which clock.
fn recording_header(
    command: Vec<String>,
    clock: &Clock,
    directions: impl Iterator<Item = (String, String, String)>,
    queue_sample_interval: Duration,
) -> RecordingHeader {
    RecordingHeader {
        magic: recording::RECORDING_MAGIC.into(),
        version: recording::RECORDING_VERSION,
        pathlab_version: env!("CARGO_PKG_VERSION").into(),
        command,
        clock_zero_unix_ns: clock.zero_unix_ns,
        directions: directions
            .map(|(from, to, spec)| DirectionInfo { from, to, spec })
            .collect(),
        queue_sample_interval_ns: queue_sample_interval.as_nanos(),
    }
}

/// A recording under way: how its writing ends, and its file if it was started while
/// running.
struct Recording {
    finished: recorder::Finished,
    path: Option<std::path::PathBuf>,
}

/// A running emulator: the way to talk to its directions.
pub struct EmulatorHandle {
    name: String,
    pool: Pool,
    /// Each direction's thread and key in it.
    slots: [(usize, u64); 2],
    shared: Arc<worker::Shared>,
    clock: Clock,
    recording: Mutex<Option<Recording>>,
    queue_sample_interval: Duration,
    stopped: bool,
}

impl std::fmt::Debug for EmulatorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatorHandle")
            .field("name", &self.name)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl EmulatorHandle {
    fn ask(&self, direction: usize, request: worker::WorkerRequest) {
        self.pool.inner.workers[self.slots[direction].0].ask(request);
    }

    /// The emulator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Replaces the specs of the directions given (both checked before either changes).
    pub fn set(&self, forward: Option<LinkSpec>, reverse: Option<LinkSpec>) -> Result<(), String> {
        for spec in [&forward, &reverse].into_iter().flatten() {
            Link::new(spec, 0).map_err(|e| e.to_string())?;
        }
        for (index, spec) in [forward, reverse].into_iter().enumerate() {
            let Some(spec) = spec else { continue };
            let (reply, answer) = mpsc::channel();
            self.ask(
                index,
                worker::WorkerRequest::Set {
                    key: self.slots[index].1,
                    spec: Box::new(spec),
                    reply,
                },
            );
            answer
                .recv()
                .unwrap_or_else(|_| Err("the emulator has stopped".into()))?;
        }
        Ok(())
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Option<EmulatorStats> {
        let mut directions = Vec::new();
        for index in 0..2 {
            let (reply, answer) = mpsc::channel();
            self.ask(
                index,
                worker::WorkerRequest::Stats {
                    key: self.slots[index].1,
                    reply,
                },
            );
            directions.push(answer.recv().ok()?);
        }
        Some(self.summary(directions))
    }

    fn summary(&self, directions: Vec<DirectionCounters>) -> EmulatorStats {
        EmulatorStats {
            name: self.name.clone(),
            uptime_ns: self.clock.now().as_nanos(),
            directions,
            failure: self
                .shared
                .failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            scheduling: Some(self.pool.scheduling().clone()),
        }
    }

    /// Sets the bound of the fidelity guard, both directions: a whole second whose p99
    /// lateness exceeds it is a late second (`None`: the guard is off). Until set it is
    /// [`crate::fidelity::DEFAULT_LATE_BOUND`]; seconds already judged keep their verdict.
    pub fn set_late_bound(&self, bound: Option<Duration>) {
        for index in 0..2 {
            self.ask(
                index,
                worker::WorkerRequest::LateBound {
                    key: self.slots[index].1,
                    bound,
                },
            );
        }
    }

    /// Starts recording both directions into `file` (at `path`, which
    /// [`EmulatorHandle::recording_path`] reports), as `--record` does from the start; the
    /// header names `command` and the specs in force. Fails when a recording is under way.
    pub fn start_recording(
        &self,
        file: File,
        path: std::path::PathBuf,
        command: Vec<String>,
    ) -> Result<(), String> {
        let mut recording = self
            .recording
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if recording.is_some() {
            return Err("a recording is already under way; stop it first".into());
        }
        let stats = self.stats().ok_or("the emulator has stopped")?;
        let header = recording_header(
            command,
            &self.clock,
            stats
                .directions
                .iter()
                .map(|d| (d.from.clone(), d.to.clone(), d.spec.clone())),
            self.queue_sample_interval,
        );
        let (sender, finished) = recorder::start(Record::File(file), &header)
            .map_err(|e| format!("writing the recording: {e}"))?;
        self.each_direction_records(Some(&sender));
        drop(sender);
        *recording = Some(Recording {
            finished,
            path: Some(path),
        });
        Ok(())
    }

    /// Stops the recording under way, after every record was written; returns its path
    /// (`None` for `--record`'s).
    pub fn stop_recording(&self) -> Result<Option<std::path::PathBuf>, String> {
        let mut recording = self
            .recording
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(active) = recording.take() else {
            return Err("no recording is under way".into());
        };
        self.each_direction_records(None);
        match active.finished.wait() {
            Ok(()) => Ok(active.path),
            Err(error) => Err(format!("writing the recording failed: {error}")),
        }
    }

    /// The file of the recording under way: `Some(None)` for `--record`'s, `None` when
    /// nothing records.
    pub fn recording_path(&self) -> Option<Option<std::path::PathBuf>> {
        self.recording
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|r| r.path.clone())
    }

    fn each_direction_records(&self, records: Option<&RecordSender>) {
        for index in 0..2 {
            let (reply, answer) = mpsc::channel();
            self.ask(
                index,
                worker::WorkerRequest::Record {
                    key: self.slots[index].1,
                    records: records.cloned(),
                    reply,
                },
            );
            let _ = answer.recv();
        }
    }

    /// Whether the emulator has ended by itself (an interface disappeared); its
    /// [`EmulatorStats::failure`] says why.
    pub fn is_finished(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Stops forwarding, flushes the recording and capture, and returns the final counters.
    pub fn stop(mut self) -> EmulatorStats {
        self.finish()
    }

    fn finish(&mut self) -> EmulatorStats {
        self.stopped = true;
        let mut directions = Vec::new();
        let mut removed = Vec::new();
        for index in 0..2 {
            let (reply, answer) = mpsc::channel();
            self.ask(
                index,
                worker::WorkerRequest::Remove {
                    key: self.slots[index].1,
                    reply,
                },
            );
            match answer.recv() {
                Ok((counters, direction)) => {
                    directions.push(counters);
                    removed.push(direction);
                }
                Err(_) => directions.push(DirectionCounters::default()),
            }
            self.pool.unplace(self.slots[index].0);
        }
        // Closing a packet socket waits for an RCU grace period: here, on the thread that
        // stops this emulator (a lab stops 32 at once), not on the forwarding thread that
        // served it (two for a whole lab: a star of 1,000 links took 30 s to stop). This
        // also drops the directions' recording senders, which closes the recording.
        drop(removed);
        // The directions held the only senders: the recorder ends once it wrote all.
        if let Some(recording) = take_locked(&self.recording) {
            if let Err(error) = recording.finished.wait() {
                eprintln!("pathlab: writing the recording failed: {error}");
            }
        }
        if let Some(capture) = &self.shared.capture {
            let _ = capture
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .writer
                .flush();
        }
        self.summary(directions)
    }
}

impl Drop for EmulatorHandle {
    fn drop(&mut self) {
        if !self.stopped {
            self.finish();
        }
    }
}
