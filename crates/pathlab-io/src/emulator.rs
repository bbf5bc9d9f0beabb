//! The forwarding loop: two ports, a [`Link`] per direction, real time.
//!
//! One thread owns both ports and both links. Each pass it reads what the ports have
//! (wire frames, after [`crate::offload`]), gives them to the link of their direction at
//! the current instant, sends every packet whose departure instant has come, answers
//! control requests, and hands records to the recorder thread. Then it sleeps until the
//! earliest `poll_at`: in `ppoll` (with 1 ns timer slack) while the deadline is far, and
//! spinning for the last [`SPIN_WINDOW`], so packets leave within microseconds of their
//! model departure. How late each one actually left is measured and reported
//! ([`crate::fidelity`]).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use pathlab_core::link::LinkCounters;
use pathlab_core::time::{Duration, Instant};
use pathlab_core::{Link, LinkSpec, Packet};
use pathlab_results::recording::{self, DirectionInfo, RecordingHeader, RecordingLine};
use serde::{Deserialize, Serialize};

use crate::fidelity::Lateness;
pub use crate::fidelity::LatenessSummary;
use crate::offload;
use crate::port::{Framing, Port, ReceiveCounts};
use crate::sys;

/// Below this distance to the next deadline the loop spins instead of sleeping: the
/// kernel's wake-up latency from `ppoll` is tens of microseconds, the budget 50 us.
/// Measured here (100 Mbit/s through `delay 10ms`, send error p50/p99): 200 us spin
/// 11/33 us, 50 us spin 20/69 us, no spin 38/101 us.
pub const SPIN_WINDOW: Duration = Duration::from_micros(200);

/// Frames read from one port per pass before the other port gets its turn.
const RECEIVE_BUDGET: usize = 64;

/// The clock of an emulator: nanoseconds since it started, and the wall-clock time then.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: std::time::Instant,
    /// Wall-clock time of [`Instant::ZERO`], in ns since the Unix epoch.
    pub zero_unix_ns: u64,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        let zero_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Clock {
            start: std::time::Instant::now(),
            zero_unix_ns,
        }
    }

    /// The current instant.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    /// Wall-clock ns since the Unix epoch of an instant.
    pub fn unix_ns(&self, at: Instant) -> u64 {
        self.zero_unix_ns + at.as_nanos()
    }
}

/// Counters of one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionStats {
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
    /// Packets waiting in the bottleneck queue now.
    pub queue_packets: u64,
    /// Bytes waiting in the bottleneck queue now.
    pub queue_bytes: u64,
    /// Packets inside the link now (queued, in service, delayed).
    pub in_flight: u64,
    /// How late packets left compared with their model departure.
    pub lateness: LatenessSummary,
}

/// A snapshot of an emulator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmulatorStats {
    /// The emulator's name.
    pub name: String,
    /// Time since it started, in ns.
    pub uptime_ns: u64,
    /// Index 0: first port to second; 1: second to first.
    pub directions: Vec<DirectionStats>,
    /// Why the emulator ended by itself, if it did (an interface disappeared).
    #[serde(default)]
    pub failure: Option<String>,
}

/// What the emulator is asked while it runs.
#[derive(Debug)]
pub enum Request {
    /// Replace the spec of one or both directions; the reply says whether it took.
    Set {
        /// New spec of direction 0, if it changes.
        forward: Option<Box<LinkSpec>>,
        /// New spec of direction 1, if it changes.
        reverse: Option<Box<LinkSpec>>,
        /// Where to answer.
        reply: mpsc::Sender<Result<(), String>>,
    },
    /// A snapshot of the counters.
    Stats {
        /// Where to answer.
        reply: mpsc::Sender<EmulatorStats>,
    },
    /// Set the lateness bound of both directions' fidelity guard (`None`: off).
    LateBound(Option<Duration>),
    /// Stop forwarding and return the final counters.
    Stop,
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
    pub record: Option<File>,
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

/// Where a port's interface is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortState {
    /// Up, as far as the emulator knows.
    Up,
    /// Went down: its direction waits for frames, and the port is checked for having
    /// disappeared.
    Down,
    /// Disappeared; waiting for an interface of its name ([`OnInterfaceGone::Wait`]).
    Gone,
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

/// A running emulator: its thread and the way to talk to it.
#[derive(Debug)]
pub struct EmulatorHandle {
    thread: Option<JoinHandle<EmulatorStats>>,
    requests: mpsc::Sender<Request>,
    wake: Arc<OwnedFd>,
}

impl EmulatorHandle {
    fn ask(&self, request: Request) {
        // A full eventfd counter or a finished thread both mean the loop will see it.
        let _ = self.requests.send(request);
        let _ = sys::write(self.wake.as_fd(), &1u64.to_ne_bytes());
    }

    /// Replaces the specs of the directions given.
    pub fn set(&self, forward: Option<LinkSpec>, reverse: Option<LinkSpec>) -> Result<(), String> {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::Set {
            forward: forward.map(Box::new),
            reverse: reverse.map(Box::new),
            reply,
        });
        answer
            .recv()
            .unwrap_or_else(|_| Err("the emulator has stopped".into()))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Option<EmulatorStats> {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::Stats { reply });
        answer.recv().ok()
    }

    /// Sets the bound of the fidelity guard, both directions: a whole second whose p99
    /// lateness exceeds it is a late second (`None`: the guard is off). Until set it is
    /// [`crate::fidelity::DEFAULT_LATE_BOUND`]; seconds already judged keep their verdict.
    pub fn set_late_bound(&self, bound: Option<Duration>) {
        self.ask(Request::LateBound(bound));
    }

    /// Whether the forwarding thread has ended (it only ends on a failure or when stopped).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops forwarding, flushes the recording and capture, and returns the final counters.
    pub fn stop(mut self) -> EmulatorStats {
        self.ask(Request::Stop);
        self.thread
            .take()
            .map(|thread| thread.join().expect("the forwarding thread does not panic"))
            .unwrap_or_default()
    }
}

impl Drop for EmulatorHandle {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.ask(Request::Stop);
            let _ = thread.join();
        }
    }
}

struct Direction {
    link: Link,
    stats: DirectionStats,
    lateness: Lateness,
}

struct Capture {
    writer: pathlab_results::pcapng::PcapngWriter<BufWriter<File>>,
}

struct Forwarder<P: Port> {
    name: String,
    ports: [P; 2],
    directions: [Direction; 2],
    clock: Clock,
    requests: mpsc::Receiver<Request>,
    wake: Arc<OwnedFd>,
    records: Option<mpsc::Sender<Vec<RecordingLine>>>,
    recorder_thread: Option<JoinHandle<io::Result<()>>>,
    capture: Option<Capture>,
    queue_sample_interval: Duration,
    next_sample: Instant,
    next_flush: Instant,
    /// Packets due in this pass, reused between passes.
    due: Vec<(Instant, Packet)>,
    /// Which ports the last sleep's poll found ready (readable, or an error pending).
    polled: [bool; 2],
    /// Why the forwarder stopped by itself.
    failure: Option<String>,
    /// Where each port's interface is.
    state: [PortState; 2],
    /// When a port that is down or gone is checked next.
    next_check: [Instant; 2],
    /// Why a gone port's new interface could not be opened yet, as last said (said once).
    reopen_error: [Option<String>; 2],
    on_interface_gone: OnInterfaceGone,
}

/// How often an interface that went down is checked for having disappeared (a packet
/// socket says ENETDOWN when its interface goes down, and nothing when it is then deleted),
/// and one that disappeared for being back (with [`OnInterfaceGone::Wait`]).
const DOWN_CHECK: Duration = Duration::from_millis(1000);

/// Starts an emulator between two ports on its own thread.
pub fn spawn<P: Port + 'static>(
    ports: [P; 2],
    config: EmulatorConfig,
) -> Result<EmulatorHandle, EmulatorError> {
    let names = [ports[0].name().to_owned(), ports[1].name().to_owned()];
    let make_direction = |index: usize, spec: &LinkSpec| -> Result<Direction, EmulatorError> {
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
        Ok(Direction {
            link,
            stats: DirectionStats {
                from: names[index].clone(),
                to: names[1 - index].clone(),
                spec: spec.to_string(),
                ..DirectionStats::default()
            },
            lateness: Lateness::new(),
        })
    };
    let directions = [
        make_direction(0, &config.forward)?,
        make_direction(1, &config.reverse)?,
    ];
    let clock = Clock::start();
    let (records, recorder_thread) = match config.record {
        Some(file) => {
            let header = RecordingHeader {
                magic: recording::RECORDING_MAGIC.into(),
                version: recording::RECORDING_VERSION,
                pathlab_version: env!("CARGO_PKG_VERSION").into(),
                command: config.command.clone(),
                clock_zero_unix_ns: clock.zero_unix_ns,
                directions: directions
                    .iter()
                    .map(|d| DirectionInfo {
                        from: d.stats.from.clone(),
                        to: d.stats.to.clone(),
                        spec: d.stats.spec.clone(),
                    })
                    .collect(),
                queue_sample_interval_ns: config.queue_sample_interval.as_nanos(),
            };
            let (sender, receiver) = mpsc::channel::<Vec<RecordingLine>>();
            let mut writer = BufWriter::with_capacity(1 << 20, file);
            recording::write_header(&mut writer, &header)?;
            writer.flush()?;
            let thread = std::thread::Builder::new()
                .name("pathlab-recorder".into())
                .spawn(move || {
                    for batch in receiver {
                        for line in &batch {
                            recording::write_line(&mut writer, line)?;
                        }
                        writer.flush()?;
                    }
                    writer.flush()
                })?;
            (Some(sender), Some(thread))
        }
        None => (None, None),
    };
    let capture = match config.pcap {
        Some(file) => {
            use pathlab_results::pcapng::{LinkType, PcapngWriter};
            let link_type = match ports[0].framing() {
                Framing::Ethernet => LinkType::Ethernet,
                Framing::Ip => LinkType::RawIp,
            };
            let mut writer =
                PcapngWriter::new(BufWriter::with_capacity(1 << 20, file), "pathlab emulate")?;
            writer.add_interface(&names[0], link_type, 65_535)?;
            writer.add_interface(&names[1], link_type, 65_535)?;
            Some(Capture { writer })
        }
        None => None,
    };
    let (sender, receiver) = mpsc::channel();
    let wake = Arc::new(sys::eventfd()?);
    let mut forwarder = Forwarder {
        name: config.name,
        ports,
        directions,
        clock,
        requests: receiver,
        wake: Arc::clone(&wake),
        records,
        recorder_thread,
        capture,
        queue_sample_interval: config.queue_sample_interval,
        next_sample: Instant::ZERO,
        next_flush: Instant::ZERO,
        due: Vec::new(),
        polled: [false; 2],
        failure: None,
        state: [PortState::Up; 2],
        next_check: [Instant::ZERO; 2],
        reopen_error: [None, None],
        on_interface_gone: config.on_interface_gone,
    };
    let thread = std::thread::Builder::new()
        .name("pathlab-forward".into())
        .spawn(move || forwarder.run())?;
    Ok(EmulatorHandle {
        thread: Some(thread),
        requests: sender,
        wake,
    })
}

impl<P: Port> Forwarder<P> {
    fn run(&mut self) -> EmulatorStats {
        sys::set_timer_slack_min();
        loop {
            let now = self.clock.now();
            let mut backlog = false;
            for index in 0..2 {
                backlog |= self.receive(index, now);
            }
            if self.check_ports() {
                break;
            }
            for index in 0..2 {
                self.transmit(index);
            }
            if self.handle_requests() {
                break;
            }
            self.keep_records(self.clock.now(), false);
            if !backlog {
                self.sleep();
            }
        }
        let now = self.clock.now();
        self.keep_records(now, true);
        if let Some(capture) = &mut self.capture {
            let _ = capture.writer.flush();
        }
        self.records = None;
        if let Some(thread) = self.recorder_thread.take() {
            if let Ok(Err(error)) = thread.join() {
                eprintln!("pathlab: writing the recording failed: {error}");
            }
        }
        self.stats()
    }

    /// Checks the ports that are not up, each every [`DOWN_CHECK`], and after a poll that
    /// woke for a port and found no frame takes the port's pending error, so the next poll
    /// sleeps (a packet socket polls POLLERR until its error is read: an interface that
    /// went down made the loop spin at 100% CPU). ENETDOWN: the direction waits, counted,
    /// and resumes by itself when the interface comes back. An interface that is gone
    /// (ENODEV, or down and then deleted) ends the emulator, naming it, and this returns
    /// true; with [`OnInterfaceGone::Wait`] it is reopened once one of its name exists.
    fn check_ports(&mut self) -> bool {
        let now = self.clock.now();
        for index in 0..2 {
            if self.state[index] != PortState::Up && now >= self.next_check[index] {
                self.next_check[index] = now + DOWN_CHECK;
                let stop = match self.state[index] {
                    PortState::Down => !self.ports[index].exists() && self.gone(index, now),
                    PortState::Gone => {
                        self.reopen(index);
                        false
                    }
                    PortState::Up => false,
                };
                if stop {
                    return true;
                }
            }
            if !std::mem::take(&mut self.polled[index]) {
                continue;
            }
            let Some(error) = self.ports[index].take_error() else {
                continue;
            };
            let name = self.ports[index].name().to_owned();
            match error.raw_os_error() {
                Some(libc::ENETDOWN) => {
                    if self.state[index] == PortState::Gone {
                        continue;
                    }
                    self.state[index] = PortState::Down;
                    // Deleted interfaces go down first: see at once whether it is gone.
                    self.next_check[index] = now;
                    self.directions[index].stats.went_down += 1;
                    eprintln!(
                        "pathlab emulate '{}': {name} went down; its direction waits for it",
                        self.name
                    );
                }
                Some(libc::ENODEV | libc::ENXIO) => {
                    if self.gone(index, now) {
                        return true;
                    }
                }
                _ => eprintln!("pathlab emulate '{}': {name}: {error}", self.name),
            }
        }
        false
    }

    /// Port `index`'s interface disappeared: returns whether the emulator ends, or starts
    /// waiting for an interface of its name.
    fn gone(&mut self, index: usize, now: Instant) -> bool {
        let name = self.ports[index].name().to_owned();
        if self.on_interface_gone == OnInterfaceGone::Stop {
            self.failure = Some(format!("interface {name} disappeared"));
            return true;
        }
        if self.state[index] != PortState::Gone {
            self.state[index] = PortState::Gone;
            self.next_check[index] = now; // it may be back already
            self.directions[index].stats.disappeared += 1;
            eprintln!(
                "pathlab emulate '{}': interface {name} disappeared; waiting for it to reappear \
                 (checked every {} s; what would go out by it is counted in send errors)",
                self.name,
                DOWN_CHECK.as_secs_f64()
            );
        }
        false
    }

    /// Opens gone port `index` again if an interface of its name exists.
    fn reopen(&mut self, index: usize) {
        let name = self.ports[index].name().to_owned();
        match self.ports[index].reopen() {
            Ok(false) => {}
            Ok(true) => {
                self.state[index] = PortState::Up;
                self.reopen_error[index] = None;
                self.directions[index].stats.reopened += 1;
                eprintln!(
                    "pathlab emulate '{}': interface {name} is back; forwarding through it resumed",
                    self.name
                );
            }
            Err(error) => {
                let error = error.to_string();
                if self.reopen_error[index].as_ref() != Some(&error) {
                    eprintln!(
                        "pathlab emulate '{}': an interface named {name} is back but cannot be \
                         opened yet ({error}); still waiting",
                        self.name
                    );
                    self.reopen_error[index] = Some(error);
                }
            }
        }
    }

    /// Reads what port `index` has; returns whether it had more than one pass takes.
    fn receive(&mut self, index: usize, now: Instant) -> bool {
        let before = self.directions[index].stats.frames_received;
        let more = self.receive_frames(index, now);
        if self.directions[index].stats.frames_received > before
            && self.state[index] == PortState::Down
        {
            self.state[index] = PortState::Up; // frames again: it came back
        }
        more
    }

    fn receive_frames(&mut self, index: usize, now: Instant) -> bool {
        let framing = self.ports[index].framing();
        let direction = &mut self.directions[index];
        let result = self.ports[index].receive(RECEIVE_BUDGET, &mut |frame| {
            let mut packet = match framing {
                Framing::Ethernet => Packet::from_ethernet(now, frame),
                Framing::Ip => {
                    let mut packet = Packet::from_ip(now, frame);
                    // Account a TUN packet as the Ethernet frame it would be on a wire, so
                    // `rate` means the same through `shell` as through `emulate`.
                    packet.len_bytes += 14;
                    packet
                }
            };
            packet.tag = index as u32;
            direction.link.enqueue(now, packet);
        });
        match result {
            Ok(counts) => {
                let ReceiveCounts {
                    frames,
                    segments,
                    malformed,
                    ring_full,
                } = counts;
                direction.stats.frames_received += frames;
                direction.stats.packets_received += segments;
                direction.stats.malformed += malformed;
                direction.stats.ring_full += ring_full;
                frames >= RECEIVE_BUDGET as u64
            }
            Err(_) => false,
        }
    }

    /// Sends every packet of direction `index` whose departure has come. Runs of TCP
    /// segments that are all due (each at its own instant, all passed) and that one GSO
    /// super-packet would carry exactly go out as one (see [`offload::coalescable_run`]):
    /// they would have left one after the other in this pass anyway, and the kernel moves
    /// one packet instead of up to 64. No packet leaves before its model instant.
    fn transmit(&mut self, index: usize) {
        let out = 1 - index;
        let mut due = std::mem::take(&mut self.due);
        loop {
            due.clear();
            let now = self.clock.now();
            while let Some(packet) = self.directions[index].link.dequeue_timed(now) {
                due.push(packet);
            }
            if due.is_empty() {
                break;
            }
            let gso = self.ports[out].can_send_gso();
            let mut frames: Vec<&[u8]> = Vec::with_capacity(offload::GSO_MAX_SEGMENTS);
            let mut start = 0;
            while start < due.len() {
                frames.clear();
                if gso {
                    // At most one super-packet's worth: a long batch of other flows' frames
                    // is looked at once, not once per frame.
                    frames.extend(
                        due[start..]
                            .iter()
                            .take(offload::GSO_MAX_SEGMENTS)
                            // A corrupted packet must reach the receiver with its checksum
                            // wrong; a super-packet's checksum is recomputed, so it goes
                            // alone.
                            .take_while(|(_, p)| !p.corrupted)
                            .map(|(_, p)| p.data.as_slice()),
                    );
                }
                let run = offload::coalescable_run(&frames).max(1);
                let result = if run > 1 {
                    let (packet, vnet) = offload::build_gso(&frames[..run]);
                    self.ports[out].send_gso(&packet, &vnet)
                } else {
                    self.ports[out].send(&due[start].1.data)
                };
                let sent = self.clock.now();
                for (at, packet) in &due[start..start + run] {
                    self.account_sent(index, *at, sent, packet, result.is_ok());
                }
                start += run;
            }
        }
        self.due = due;
        let direction = &mut self.directions[index];
        if let Some(capture) = &mut self.capture {
            for dropped in direction.link.take_dropped() {
                let comment = format!(
                    "dropped {} -> {}: {}",
                    direction.stats.from,
                    direction.stats.to,
                    dropped.reason.name()
                );
                let _ = capture.writer.write_packet(
                    index as u32,
                    self.clock.unix_ns(dropped.at),
                    &dropped.packet.data,
                    dropped.packet.data.len() as u32,
                    pathlab_results::pcapng::Direction::Inbound,
                    Some(&comment),
                );
            }
        }
    }

    /// Counts one packet of direction `index` that was due at `due` and sent at `sent`.
    fn account_sent(
        &mut self,
        index: usize,
        due: Instant,
        sent: Instant,
        packet: &Packet,
        ok: bool,
    ) {
        let direction = &mut self.directions[index];
        direction.lateness.record(sent, sent.saturating_since(due));
        if !ok {
            direction.stats.send_errors += 1;
            return;
        }
        direction.stats.forwarded += 1;
        direction.stats.forwarded_bytes += packet.data.len() as u64;
        if let Some(capture) = &mut self.capture {
            let _ = capture.writer.write_packet(
                (1 - index) as u32,
                self.clock.unix_ns(sent),
                &packet.data,
                packet.data.len() as u32,
                pathlab_results::pcapng::Direction::Outbound,
                None,
            );
        }
    }

    /// Answers control requests; returns whether to stop.
    fn handle_requests(&mut self) -> bool {
        let mut stop = false;
        while let Ok(request) = self.requests.try_recv() {
            match request {
                Request::Set {
                    forward,
                    reverse,
                    reply,
                } => {
                    let _ = reply.send(self.set(forward.map(|b| *b), reverse.map(|b| *b)));
                }
                Request::Stats { reply } => {
                    let _ = reply.send(self.stats());
                }
                Request::LateBound(bound) => {
                    for direction in &mut self.directions {
                        direction.lateness.set_bound(bound);
                    }
                }
                Request::Stop => stop = true,
            }
        }
        stop
    }

    fn set(&mut self, forward: Option<LinkSpec>, reverse: Option<LinkSpec>) -> Result<(), String> {
        let now = self.clock.now();
        // Check both before changing either, so a bad pair changes nothing.
        for spec in [&forward, &reverse].into_iter().flatten() {
            Link::new(spec, 0).map_err(|e| e.to_string())?;
        }
        for (index, spec) in [forward, reverse].into_iter().enumerate() {
            let Some(spec) = spec else { continue };
            let direction = &mut self.directions[index];
            direction
                .link
                .set_spec(now, &spec)
                .map_err(|e| e.to_string())?;
            direction.stats.spec = spec.to_string();
            if let Some(records) = &self.records {
                let _ = records.send(vec![RecordingLine::Spec {
                    dir: index as u8,
                    at: now,
                    spec: spec.to_string(),
                }]);
            }
        }
        Ok(())
    }

    fn stats(&mut self) -> EmulatorStats {
        let now = self.clock.now();
        EmulatorStats {
            name: self.name.clone(),
            uptime_ns: now.as_nanos(),
            directions: self
                .directions
                .iter_mut()
                .map(|d| {
                    let mut stats = d.stats.clone();
                    stats.link = d.link.counters();
                    stats.queue_packets = d.link.queue_len_packets() as u64;
                    stats.queue_bytes = d.link.queue_len_bytes();
                    stats.in_flight = d.link.in_flight() as u64;
                    stats.lateness = d.lateness.summary(now);
                    stats
                })
                .collect(),
            failure: self.failure.clone(),
        }
    }

    /// Samples queue lengths and ships finished records to the recorder thread.
    fn keep_records(&mut self, now: Instant, all: bool) {
        let Some(records) = &self.records else { return };
        let mut batch = Vec::new();
        while now >= self.next_sample {
            for (index, direction) in self.directions.iter().enumerate() {
                batch.push(RecordingLine::Queue {
                    dir: index as u8,
                    at: self.next_sample,
                    packets: direction.link.queue_len_packets() as u32,
                    bytes: direction.link.queue_len_bytes(),
                });
            }
            self.next_sample += self.queue_sample_interval;
        }
        if now >= self.next_flush || all {
            for (index, direction) in self.directions.iter_mut().enumerate() {
                if let Some(recorder) = direction.link.recorder() {
                    let finished = if all {
                        recorder.drain_all()
                    } else {
                        recorder.drain_finished()
                    };
                    batch.extend(finished.into_iter().map(|record| RecordingLine::Packet {
                        dir: index as u8,
                        record,
                    }));
                }
            }
            self.next_flush = now + Duration::from_millis(10);
            if let Some(capture) = &mut self.capture {
                let _ = capture.writer.flush();
            }
        }
        if !batch.is_empty() {
            let _ = records.send(batch);
        }
    }

    /// Waits for the next deadline, a frame, or a request.
    fn sleep(&mut self) {
        let now = self.clock.now();
        let mut deadline = self
            .directions
            .iter()
            .filter_map(|d| d.link.poll_at())
            .min();
        if self.records.is_some() {
            deadline = Some(deadline.map_or(self.next_sample, |d| d.min(self.next_sample)));
        } else if self.capture.is_some() {
            deadline = Some(deadline.map_or(self.next_flush, |d| d.min(self.next_flush)));
        }
        let mut timeout = match deadline {
            Some(at) if at <= now + SPIN_WINDOW => return,
            Some(at) => Some(std::time::Duration::from_nanos(
                (at - now - SPIN_WINDOW).as_nanos(),
            )),
            None => None,
        };
        for index in 0..2 {
            if self.state[index] != PortState::Up {
                let check = std::time::Duration::from_nanos(
                    self.next_check[index].saturating_since(now).as_nanos(),
                );
                timeout = Some(timeout.map_or(check, |t| t.min(check)));
            }
        }
        let fds = [
            self.ports[0].pollable(),
            self.ports[1].pollable(),
            self.wake.as_fd(),
        ];
        let mut ready = [false; 3];
        if sys::poll_readable(&fds, timeout, &mut ready).is_ok() {
            self.polled = [ready[0], ready[1]];
            if ready[2] {
                let mut counter = [0u8; 8];
                let _ = sys::read(self.wake.as_fd(), &mut counter);
            }
        }
    }
}
