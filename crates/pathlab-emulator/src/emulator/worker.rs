//! A forwarding thread and the link directions it serves.
//!
//! A [`Direction`] is one way through one emulator: the port frames come in by, its
//! [`Link`], and the sending half of the port they leave by. A worker thread serves one
//! direction (`pathlab emulate`: each direction on its own core, since each send makes the
//! kernel run the receiving host's stack in the sending thread) or many (a lab of hundreds
//! of slow links on the machine's few cores). Each pass it reads what the ready ports
//! have, gives it to their links at the current instant, sends every packet whose departure
//! has come, answers requests, and then sleeps until the earliest deadline: in `ppoll`
//! while it is far, spinning for the last [`super::SPIN_WINDOW`] where the machine has
//! cores to spare ([`super::spin_window`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};

use pathlab_core::time::{Duration, Instant};
use pathlab_core::wire::ethernet;
use pathlab_core::{Link, LinkSpec, Packet};
use pathlab_results::recording::RecordingLine;

use super::{DirectionCounters, OnInterfaceGone};
use crate::fidelity::Lateness;
use crate::port::{Framing, Port, PortError, ReceiveCounts, SharedReceiver, Transmit};
use pathlab_core::buffers::BufferPool;
use pathlab_core::wire::offload;
use pathlab_os::scheduling;
use pathlab_os::sys;
use pathlab_os::Clock;

/// Frames read from one port per pass before the next port gets its turn.
const RECEIVE_BUDGET: usize = 64;

/// Frames read from a shared receiving socket (a switchboard's, for all of this thread's
/// ports on it) per pass.
const SHARED_BUDGET: usize = 256;

/// The epoll token of shared receiving socket `i` of a worker: `SHARED_TOKEN | i` (a
/// direction's key is far below, the waker is `u64::MAX`).
const SHARED_TOKEN: u64 = 1 << 62;

/// Up to this many directions a worker looks at every port each pass (a memory load each);
/// beyond, it asks its epoll set which ports have frames.
const SCAN_ALL: usize = 4;

/// How often an interface that went down is checked for having disappeared (a packet
/// socket says ENETDOWN when its interface goes down, and nothing when it is then deleted),
/// and one that disappeared for being back (with [`OnInterfaceGone::Wait`]).
const DOWN_CHECK: Duration = Duration::from_millis(1000);

/// How often a capture is flushed to its file.
const CAPTURE_FLUSH: Duration = Duration::from_millis(10);

/// A sending half that two threads reach: the direction that leaves by it sends, the one
/// that receives on its port replaces it when the port is opened again.
pub(super) type SharedTransmit = Arc<Mutex<Box<dyn Transmit>>>;

/// Longest a pair of clock readings may be apart (see [`read_clocks`]).
const CLOCKS_APART: std::time::Duration = std::time::Duration::from_micros(20);

/// The emulator's clock and the wall clock (ns since the Unix epoch), read together to
/// turn a kernel receive stamp into an instant: the wall clock first, so a thread
/// preempted between the two readings dates a frame late, never early (read the other way
/// round, a 100 us preemption made a ping through `delay 10ms` / `delay 25ms` come back in
/// 34.90 ms); and again, up to three times, while they were more than [`CLOCKS_APART`]
/// apart.
fn read_clocks(clock: &Clock) -> (Instant, u64) {
    let mut tries = 0;
    loop {
        let before = std::time::Instant::now();
        let unix = pathlab_os::unix_now_ns();
        let after = std::time::Instant::now();
        tries += 1;
        if after - before <= CLOCKS_APART || tries == 3 {
            return (clock.at(after), unix);
        }
    }
}

/// The instant a frame read at `now` entered the link, having waited `waited_ns` in the
/// kernel: when it arrived, but not before what the link has already been told (time only
/// goes forward in it) nor after now (a clock stepped back).
fn arrival(now: Instant, waited_ns: u64, link_now: Instant) -> Instant {
    Instant::from_nanos(now.as_nanos().saturating_sub(waited_ns))
        .max(link_now)
        .min(now)
}

/// What one emulator's directions share, wherever they run.
pub(super) struct Shared {
    /// The emulator's name, for messages.
    pub name: String,
    /// Why the emulator ended by itself (an interface disappeared), once it did.
    pub failure: Mutex<Option<String>>,
    /// Whether `failure` is set: its directions stop forwarding.
    pub failed: AtomicBool,
    /// The capture both directions write to, if any.
    pub capture: Option<Mutex<super::Capture>>,
}

impl Shared {
    fn fail(&self, why: String) {
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        failure.get_or_insert(why);
        self.failed.store(true, Ordering::Release);
    }

    fn capture(&self) -> Option<std::sync::MutexGuard<'_, super::Capture>> {
        self.capture
            .as_ref()
            .map(|c| c.lock().unwrap_or_else(PoisonError::into_inner))
    }
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

/// What became of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The kernel took it.
    Ok,
    /// The outgoing interface had no room ([`pathlab_os::sys::is_queue_full`]).
    QueueFull,
    /// Any other failure.
    Failed,
}

/// One way through one emulator.
pub(super) struct Direction {
    /// Which direction of its emulator (0: first port to second).
    pub index: usize,
    /// The port frames come in by.
    pub port: Box<dyn Port>,
    /// Its emulator's clock (the instants of its link).
    pub clock: Clock,
    /// The sending half of the port they leave by.
    pub out: SharedTransmit,
    /// The sending half of `port`, which the other direction leaves by: replaced when the
    /// port is opened again.
    pub own_out: SharedTransmit,
    pub link: Link,
    pub stats: DirectionCounters,
    pub lateness: Lateness,
    /// How long frames waited in the kernel before this thread read them.
    waited: Lateness,
    pub shared: Arc<Shared>,
    /// Where finished records go, if the emulator records.
    pub records: Option<super::RecordSender>,
    pub queue_sample_interval: Duration,
    pub on_interface_gone: OnInterfaceGone,
    /// The next queue sample of the recording: taken late, at the next pass, with the
    /// length the queue has had since the last (it changes only in passes), so an idle
    /// direction costs no wake-ups.
    next_sample: Instant,
    /// When finished records and the capture are shipped next.
    next_flush: Instant,
    /// Packets came or went since the last shipping: a flush is due at `next_flush`.
    unshipped: bool,
    state: PortState,
    /// When a port that is down or gone is checked next.
    next_check: Instant,
    /// Why a gone port's new interface could not be opened yet, as last said (said once).
    reopen_error: Option<String>,
    /// The last poll found the port ready (readable, or an error pending).
    polled: bool,
    /// The error the last receive returned: a socket read with `recvmmsg` (not a ring)
    /// returns its pending error (ENETDOWN, ENODEV) and clears it, so [`Port::take_error`]
    /// would not see it; [`Direction::check_port`] takes it from here.
    receive_error: Option<std::io::Error>,
    /// The last receive took a whole budget: more is waiting.
    backlog: bool,
    /// It is in its worker's list of directions to look at next pass.
    queued: bool,
    /// Its next deadline on the monotonic clock, as its worker's timers hold it (see
    /// [`Direction::deadline`]; none once its emulator failed).
    next_deadline: Option<std::time::Instant>,
    /// Buffers its frames are received into, given back once they are sent, as many as
    /// the link needs (see [`BufferPool::follow`]).
    pool: BufferPool,
}

impl Direction {
    /// A direction that starts at `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        port: Box<dyn Port>,
        clock: Clock,
        out: SharedTransmit,
        own_out: SharedTransmit,
        mut link: Link,
        stats: DirectionCounters,
        shared: Arc<Shared>,
        records: Option<super::RecordSender>,
        queue_sample_interval: Duration,
        on_interface_gone: OnInterfaceGone,
        now: Instant,
    ) -> Direction {
        if records.is_some() {
            reports_sends(&mut link);
        }
        Direction {
            index,
            port,
            clock,
            out,
            own_out,
            link,
            stats,
            lateness: Lateness::new(),
            waited: Lateness::new(),
            shared,
            records,
            queue_sample_interval,
            on_interface_gone,
            next_sample: now,
            next_flush: now,
            unshipped: false,
            state: PortState::Up,
            next_check: now,
            reopen_error: None,
            polled: false,
            receive_error: None,
            backlog: false,
            queued: false,
            next_deadline: None,
            pool: BufferPool::new(0),
        }
    }

    fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// The counters now.
    fn snapshot(&mut self, now: Instant) -> DirectionCounters {
        let mut stats = self.stats.clone();
        stats.link = self.link.counters();
        stats.queue_packets = self.link.queue_len_packets() as u64;
        stats.queue_bytes = self.link.queue_len_bytes();
        stats.in_flight = self.link.in_flight() as u64;
        if stats.queue_packets == 0 {
            stats.queue_delay_ns = 0;
        }
        stats.lateness = self.lateness.summary(now);
        stats.waited = self.waited.summary(now);
        stats
    }

    /// When this direction next needs its worker: a departure, records to ship, a port
    /// to check.
    fn deadline(&self) -> Option<Instant> {
        let mut deadline = self.link.poll_at();
        let mut earliest = |at: Instant| deadline = Some(deadline.map_or(at, |d| d.min(at)));
        if self.unshipped && (self.records.is_some() || self.shared.capture.is_some()) {
            earliest(self.next_flush);
        }
        if self.state != PortState::Up {
            earliest(self.next_check);
        }
        deadline
    }

    /// Reads what the port has; returns whether it had more than one pass takes.
    fn receive(&mut self, now: Instant) -> bool {
        let before = self.stats.frames_received;
        let more = self.receive_frames(now);
        self.capture_dropped();
        self.unshipped |= self.stats.frames_received > before;
        if self.stats.frames_received > before && self.state == PortState::Down {
            self.state = PortState::Up; // frames again: it came back
        }
        more
    }

    fn receive_frames(&mut self, now: Instant) -> bool {
        let framing = self.port.framing();
        let tag = self.index as u32;
        let link = &mut self.link;
        let waited = &mut self.waited;
        let clock = self.clock;
        // Frames enter the link when the kernel received them, not when this thread got
        // to them: a frame that waited in the ring is sent as late as it waited, and the
        // guard sees it. The kernel's stamps are CLOCK_REALTIME; both clocks are read
        // together when a frame is taken (the segments of one super-packet share its
        // stamp and the reading), so neither clock's drift nor the pass's length matters.
        let mut last: Option<(u64, Instant)> = None;
        let result =
            self.port
                .receive_timed(RECEIVE_BUDGET, &mut self.pool, &mut |frame, received| {
                    let at = match received {
                        Some(stamp) => match last {
                            Some((previous, at)) if previous == stamp => at,
                            _ => {
                                let (now, unix_now) = read_clocks(&clock);
                                let waited_ns = unix_now.saturating_sub(stamp);
                                waited.record(now, Duration::from_nanos(waited_ns));
                                let at = arrival(now, waited_ns, link.now());
                                last = Some((stamp, at));
                                at
                            }
                        },
                        None => now.max(link.now()),
                    };
                    let mut packet = match framing {
                        Framing::Ethernet => Packet::from_ethernet(at, frame),
                        Framing::Ip => {
                            let mut packet = Packet::from_ip(at, frame);
                            // Account a TUN packet as the Ethernet frame it would be on a wire, so
                            // `rate` means the same through `shell` as through `emulate`.
                            packet.len_bytes += ethernet::HEADER_LEN as u32;
                            packet
                        }
                    };
                    packet.tag = tag;
                    link.enqueue(at, packet);
                });
        match result {
            Ok(counts) => {
                let ReceiveCounts {
                    frames,
                    segments,
                    malformed,
                    ring_full,
                } = counts;
                self.stats.frames_received += frames;
                self.stats.packets_received += segments;
                self.stats.malformed += malformed;
                self.stats.ring_full += ring_full;
                frames >= RECEIVE_BUDGET as u64
            }
            Err(error) => {
                self.receive_error = Some(error);
                false
            }
        }
    }

    /// Checks the port if it is not up (every [`DOWN_CHECK`]), and after a poll that woke
    /// for it takes its pending error (or the one its last receive returned, which read
    /// it: a socket's `recvmmsg` does), so the next poll sleeps (a packet socket polls
    /// POLLERR until its error is read: an interface that went down made the loop spin at
    /// 100% CPU). ENETDOWN: the direction waits, counted, and resumes by itself when the
    /// interface comes back. An interface that is gone (ENODEV, or down and then deleted)
    /// ends the emulator, naming it; with [`OnInterfaceGone::Wait`] it is reopened once one
    /// of its name exists. Returns whether the port was opened again (its descriptor
    /// changed).
    fn check_port(&mut self, now: Instant) -> bool {
        let mut reopened = false;
        if self.state != PortState::Up && now >= self.next_check {
            self.next_check = now + DOWN_CHECK;
            match self.state {
                PortState::Down => {
                    if !self.port.exists() {
                        self.gone(now);
                    }
                }
                PortState::Gone => reopened = self.reopen(),
                PortState::Up => {}
            }
        }
        let polled = std::mem::take(&mut self.polled);
        let Some(error) = self
            .receive_error
            .take()
            .or_else(|| polled.then(|| self.port.take_error()).flatten())
        else {
            return reopened;
        };
        let name = self.port.name().to_owned();
        match error.raw_os_error() {
            Some(libc::ENETDOWN) => {
                if self.state != PortState::Gone {
                    self.state = PortState::Down;
                    // Deleted interfaces go down first: see at once whether it is gone.
                    self.next_check = now;
                    self.stats.went_down += 1;
                    eprintln!(
                        "pathlab emulate '{}': {name} went down; its direction waits for it",
                        self.shared.name
                    );
                }
            }
            Some(libc::ENODEV | libc::ENXIO) => self.gone(now),
            _ => eprintln!("pathlab emulate '{}': {name}: {error}", self.shared.name),
        }
        reopened
    }

    /// The port's interface disappeared: the emulator ends, or this direction waits for an
    /// interface of its name.
    fn gone(&mut self, now: Instant) {
        let name = self.port.name().to_owned();
        if self.on_interface_gone == OnInterfaceGone::Stop {
            self.shared.fail(format!("interface {name} disappeared"));
            return;
        }
        if self.state != PortState::Gone {
            self.state = PortState::Gone;
            self.next_check = now; // it may be back already
            self.stats.disappeared += 1;
            eprintln!(
                "pathlab emulate '{}': interface {name} disappeared; waiting for it to reappear \
                 (checked every {} s; what would go out by it is counted in send errors)",
                self.shared.name,
                DOWN_CHECK.as_secs_f64()
            );
        }
    }

    /// Opens the gone port again if an interface of its name exists; returns whether it did.
    fn reopen(&mut self) -> bool {
        let name = self.port.name().to_owned();
        let result = self.port.reopen().and_then(|reopened| {
            if reopened {
                let transmitter = self.port.transmitter().map_err(|source| PortError::Io {
                    what: "opening its send socket",
                    name: name.clone(),
                    source,
                })?;
                *self.own_out.lock().unwrap_or_else(PoisonError::into_inner) = transmitter;
            }
            Ok(reopened)
        });
        match result {
            Ok(false) => false,
            Ok(true) => {
                self.state = PortState::Up;
                self.reopen_error = None;
                self.stats.reopened += 1;
                eprintln!(
                    "pathlab emulate '{}': interface {name} is back; forwarding through it resumed",
                    self.shared.name
                );
                true
            }
            Err(error) => {
                let error = error.to_string();
                if self.reopen_error.as_ref() != Some(&error) {
                    eprintln!(
                        "pathlab emulate '{}': an interface named {name} is back but cannot be \
                         opened yet ({error}); still waiting",
                        self.shared.name
                    );
                    self.reopen_error = Some(error);
                }
                false
            }
        }
    }

    /// Sends every packet whose departure has come (see [`take_due`] and [`next_run`]).
    fn transmit(&mut self, due: &mut Vec<(Instant, Packet)>) {
        let clock = self.clock;
        let out = Arc::clone(&self.out);
        let mut out = out.lock().unwrap_or_else(PoisonError::into_inner);
        let gso = out.can_send_gso();
        let mut sent = 0;
        loop {
            take_due(&mut self.link, clock.now(), due);
            sent += due.len();
            if due.is_empty() {
                break;
            }
            let mut start = 0;
            while start < due.len() {
                let run = next_run(&due[start..], gso);
                // The capture's time of a packet is when it was handed to the kernel: the
                // send itself runs the receiving host's stack (its ACK may reach the other
                // port before the send returns), so a stamp taken after it is late by that.
                let handed = clock.now();
                let result = if run > 1 {
                    let mut frames: [&[u8]; offload::GSO_MAX_SEGMENTS] =
                        [&[]; offload::GSO_MAX_SEGMENTS];
                    for (frame, (_, packet)) in frames.iter_mut().zip(&due[start..start + run]) {
                        *frame = packet.data.as_slice();
                    }
                    out.send_run(&frames[..run])
                } else {
                    out.send(&due[start].1.data)
                };
                let sent = clock.now();
                let outcome = match &result {
                    Ok(()) => Sent::Ok,
                    Err(error) if pathlab_os::sys::is_queue_full(error) => Sent::QueueFull,
                    Err(_) => Sent::Failed,
                };
                for (at, packet) in &due[start..start + run] {
                    self.account_sent(*at, sent, handed, packet, outcome);
                }
                start += run;
            }
            for (_, packet) in due.drain(..) {
                self.pool.give(packet.data);
            }
        }
        let held = self.link.queue_len_packets() + self.link.in_flight() + sent;
        self.pool.follow(clock.now(), held);
        drop(out);
        // The queue drops as packets leave too (CoDel, PIE).
        self.capture_dropped();
        self.unshipped = true;
    }

    /// Writes the packets the link dropped since the last call into the capture, if there
    /// is one, each with its reason.
    fn capture_dropped(&mut self) {
        let Some(mut capture) = self.shared.capture() else {
            return;
        };
        for dropped in self.link.take_dropped() {
            let comment = format!(
                "dropped {} -> {}: {}",
                self.stats.from,
                self.stats.to,
                dropped.reason.name()
            );
            let _ = capture.writer.write_packet(
                self.index as u32,
                self.clock.unix_ns(dropped.at),
                &dropped.packet.data,
                dropped.packet.data.len() as u32,
                pathlab_results::pcapng::Direction::Inbound,
                Some(&comment),
            );
        }
    }

    /// Counts one packet that was due at `due`, handed to the kernel at `handed` (its time
    /// in the capture) and sent at `sent`.
    fn account_sent(
        &mut self,
        due: Instant,
        sent: Instant,
        handed: Instant,
        packet: &Packet,
        outcome: Sent,
    ) {
        self.lateness.record(sent, sent.saturating_since(due));
        if let Some(recorder) = self.link.recorder() {
            recorder.note_sent(packet.id, (outcome == Sent::Ok).then_some(handed));
        }
        match outcome {
            Sent::Ok => {}
            Sent::QueueFull => {
                self.stats.egress_full += 1;
                return;
            }
            Sent::Failed => {
                self.stats.send_errors += 1;
                return;
            }
        }
        self.stats.forwarded += 1;
        self.stats.forwarded_bytes += packet.data.len() as u64;
        self.stats.queue_delay_ns = packet.queue_delay.as_nanos();
        if let Some(mut capture) = self.shared.capture() {
            let _ = capture.writer.write_packet(
                (1 - self.index) as u32,
                self.clock.unix_ns(handed),
                &packet.data,
                packet.data.len() as u32,
                pathlab_results::pcapng::Direction::Outbound,
                None,
            );
        }
    }

    /// Starts recording into `records` from `now`, or stops (`None`) after shipping every
    /// record.
    fn set_records(&mut self, now: Instant, records: Option<super::RecordSender>) {
        match records {
            Some(records) => {
                self.link.record();
                reports_sends(&mut self.link);
                self.next_sample = now;
                self.records = Some(records);
            }
            None => {
                self.keep_records(now, true);
                self.records = None;
                self.link.stop_recording();
            }
        }
    }

    fn set(&mut self, now: Instant, spec: &LinkSpec) -> Result<(), String> {
        self.link.set_spec(now, spec).map_err(|e| e.to_string())?;
        self.stats.spec = spec.to_string();
        if let Some(records) = &self.records {
            let _ = records.send(vec![RecordingLine::Spec {
                dir: self.index as u8,
                at: now,
                spec: spec.to_string(),
            }]);
        }
        Ok(())
    }

    /// Samples the queue length up to `now` and ships finished records (`all`: every
    /// record, at the end). Called at the start of a pass, before the queue changes.
    fn keep_records(&mut self, now: Instant, all: bool) {
        let dir = self.index as u8;
        if all {
            self.capture_dropped();
        }
        if let Some(records) = &self.records {
            let mut batch = Vec::new();
            while now >= self.next_sample {
                batch.push(RecordingLine::Queue {
                    dir,
                    at: self.next_sample,
                    packets: self.link.queue_len_packets() as u32,
                    bytes: self.link.queue_len_bytes(),
                });
                self.next_sample += self.queue_sample_interval;
            }
            if now >= self.next_flush || all {
                if let Some(recorder) = self.link.recorder() {
                    let finished = if all {
                        recorder.drain_all()
                    } else {
                        recorder.drain_finished()
                    };
                    batch.extend(
                        finished
                            .into_iter()
                            .map(|record| RecordingLine::Packet { dir, record }),
                    );
                }
            }
            if !batch.is_empty() {
                let _ = records.send(batch);
            }
        }
        if now >= self.next_flush || all {
            self.next_flush = now + CAPTURE_FLUSH;
            if self.unshipped || all {
                if let Some(mut capture) = self.shared.capture() {
                    let _ = capture.writer.flush();
                }
            }
            self.unshipped = false;
        }
    }
}

/// Has `link`'s records wait for this driver's report of each send, so that each is
/// written with the instant its packet was handed to the kernel.
fn reports_sends(link: &mut Link) {
    if let Some(recorder) = link.recorder() {
        recorder.await_sends();
    }
}

/// Takes from `link` every packet whose model departure is at or before `now`, in order,
/// into `due` (cleared first). The emulator's batching rule: a pass sends what is due when
/// it runs, so no frame leaves before its model instant (the tolerance on the early side is
/// zero) and none waits for a later pass; a frame leaves late only by the time the pass
/// takes to reach it, which the fidelity guard measures.
pub(crate) fn take_due(link: &mut Link, now: Instant, due: &mut Vec<(Instant, Packet)>) {
    due.clear();
    while let Some(packet) = link.dequeue_timed(now) {
        due.push(packet);
    }
}

/// How many of the due frames at the start of `due` leave as one: a run of one flow's TCP
/// segments that one GSO super-packet carries exactly (see [`offload::coalescable_run`]),
/// at most [`offload::GSO_MAX_SEGMENTS`], when the port takes GSO; otherwise one. A
/// corrupted packet goes alone: it must reach the receiver with its checksum wrong, and a
/// super-packet's checksums are recomputed. Runs never reorder: they are consecutive.
pub(crate) fn next_run(due: &[(Instant, Packet)], gso: bool) -> usize {
    if !gso {
        return 1.min(due.len());
    }
    let mut frames: [&[u8]; offload::GSO_MAX_SEGMENTS] = [&[]; offload::GSO_MAX_SEGMENTS];
    let mut n = 0;
    for (_, packet) in due.iter().take(offload::GSO_MAX_SEGMENTS) {
        if packet.corrupted {
            break;
        }
        frames[n] = packet.data.as_slice();
        n += 1;
    }
    offload::coalescable_run(&frames[..n]).max(1).min(due.len())
}

/// What a worker is asked.
pub(super) enum WorkerRequest {
    /// Serve this direction from now on, under `key`.
    Add(u64, Box<Direction>),
    /// Stop serving direction `key`: its final counters, its records all shipped, and the
    /// direction itself, for the asker to drop (closing its port's packet socket waits for
    /// an RCU grace period, which must not hold up the other directions this thread
    /// serves).
    Remove {
        key: u64,
        reply: mpsc::Sender<(DirectionCounters, Box<Direction>)>,
    },
    /// Replace direction `key`'s spec (checked by the asker already).
    Set {
        key: u64,
        spec: Box<LinkSpec>,
        reply: mpsc::Sender<Result<(), String>>,
    },
    /// A snapshot of direction `key`'s counters.
    Stats {
        key: u64,
        reply: mpsc::Sender<DirectionCounters>,
    },
    /// The fidelity guard's bound of direction `key` (`None`: off).
    LateBound { key: u64, bound: Option<Duration> },
    /// Start recording direction `key` into `records`, or stop (`None`: every record
    /// shipped first); `reply` when done.
    Record {
        key: u64,
        records: Option<super::RecordSender>,
        reply: mpsc::Sender<()>,
    },
    /// End the thread (after its directions were removed).
    Exit,
}

/// The way to a worker thread.
pub(super) struct WorkerHandle {
    pub requests: mpsc::Sender<WorkerRequest>,
    pub wake: Arc<OwnedFd>,
    pub thread: Option<std::thread::JoinHandle<()>>,
}

impl WorkerHandle {
    /// Starts a worker thread scheduled as `request` asks; returns it with what the thread
    /// got. A thread that got real-time scheduling never spins: it would take its core from
    /// everything else for the whole window.
    pub fn start(
        name: &str,
        spin: Duration,
        share: f64,
        request: &scheduling::Request,
    ) -> io::Result<(WorkerHandle, scheduling::Granted)> {
        let (requests, receiver) = mpsc::channel();
        let wake = Arc::new(sys::eventfd()?);
        let mut worker = Worker {
            directions: Vec::new(),
            shared: Vec::new(),
            shared_pool: BufferPool::new(0),
            keys: Vec::new(),
            slots: HashMap::new(),
            timers: BinaryHeap::new(),
            active: Vec::new(),
            work: Vec::new(),
            requests: receiver,
            wake: Arc::clone(&wake),
            epoll: sys::Epoll::new()?,
            spin: std::time::Duration::from_nanos(spin.as_nanos()),
            spin_budget: SpinBudget::new(share),
            realtime: false,
            gave_way_at: std::time::Instant::now(),
            due: Vec::new(),
            ready: Vec::new(),
        };
        worker.epoll.add(wake.as_fd(), u64::MAX)?;
        let (granted_tx, granted_rx) = mpsc::sync_channel(1);
        let request = request.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let granted = scheduling::apply_to_this_thread(&request);
                if matches!(granted.policy, sys::Policy::Fifo(_)) {
                    worker.spin = std::time::Duration::ZERO;
                    worker.realtime = true;
                }
                let _ = granted_tx.send(granted);
                worker.run();
            })?;
        let granted = granted_rx
            .recv()
            .map_err(|_| io::Error::other("a forwarding thread ended as it started"))?;
        Ok((
            WorkerHandle {
                requests,
                wake,
                thread: Some(thread),
            },
            granted,
        ))
    }

    /// Sends a request and wakes the thread.
    pub fn ask(&self, request: WorkerRequest) {
        // A full eventfd counter or a finished thread both mean the loop will see it.
        let _ = self.requests.send(request);
        let _ = sys::write(self.wake.as_fd(), &1u64.to_ne_bytes());
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.ask(WorkerRequest::Exit);
            let _ = thread.join();
        }
    }
}

/// A forwarding thread's allowance of spinning: it earns `share` of the time that passes
/// (up to [`SpinBudget::MAX_NS`] saved) and spends the time it spins.
struct SpinBudget {
    share: f64,
    /// Nanoseconds of spinning left.
    left_ns: f64,
    /// When it was last earned.
    earned_at: Option<std::time::Instant>,
    /// Since when it spins, if it does.
    spinning_since: Option<std::time::Instant>,
}

impl SpinBudget {
    /// The most spinning saved up: a few deadlines' worth.
    const MAX_NS: f64 = 2_000_000.0;

    fn new(share: f64) -> SpinBudget {
        SpinBudget {
            share,
            left_ns: Self::MAX_NS,
            earned_at: None,
            spinning_since: None,
        }
    }

    /// Earns and spends up to `now`; whether the thread may spin (on).
    fn spin(&mut self, now: std::time::Instant) -> bool {
        if self.share >= 1.0 {
            return true;
        }
        if let Some(earned_at) = self.earned_at {
            let elapsed = now.saturating_duration_since(earned_at).as_nanos() as f64;
            self.left_ns = (self.left_ns + elapsed * self.share).min(Self::MAX_NS);
        }
        self.earned_at = Some(now);
        if let Some(since) = self.spinning_since {
            self.left_ns -= now.saturating_duration_since(since).as_nanos() as f64;
            self.spinning_since = Some(now);
        }
        self.left_ns > 0.0
    }

    /// The thread spins on from `now`.
    fn spinning(&mut self, now: std::time::Instant) {
        self.spinning_since.get_or_insert(now);
    }

    /// The thread sleeps: its spinning, if any, ended.
    fn sleeping(&mut self) {
        self.spinning_since = None;
    }
}

/// A receiving socket several of a worker's ports share, and which of them each frame is
/// for.
struct SharedSource {
    receiver: Arc<SharedReceiver>,
    /// Interface index to the key of the direction whose port it is.
    ports: HashMap<u32, u64>,
    /// The last poll found frames, or the last read left some.
    ready: bool,
}

/// How long a real-time forwarding thread works without waiting before it gives way to
/// its peers ([`Worker::give_way`]): a few frames' time at 10 Gbit/s, a small part of the
/// lateness the fidelity guard allows.
const YIELD_EVERY: std::time::Duration = std::time::Duration::from_micros(200);

struct Worker {
    directions: Vec<Direction>,
    /// Shared receiving sockets, in the order they were first seen (token: their index
    /// with [`SHARED_TOKEN`]); one whose ports are all gone stays, out of the epoll set.
    shared: Vec<SharedSource>,
    /// Buffers the shared sockets' frames are read into (they end in their directions'
    /// pools).
    shared_pool: BufferPool,
    /// Each direction's key, by position.
    keys: Vec<u64>,
    /// Each key's position.
    slots: HashMap<u64, usize>,
    /// The directions' deadlines, earliest first, by key: an entry whose direction has
    /// since moved its deadline is skipped when it comes up (a pass looks at what is due,
    /// not at every direction: a worker of 10,000 directions spent a pass reading each).
    timers: BinaryHeap<Reverse<(std::time::Instant, u64)>>,
    /// Keys of the directions to look at next pass: their port has frames or more is
    /// waiting, or their interface is down.
    active: Vec<u64>,
    /// What a pass works through (reused).
    work: Vec<u64>,
    requests: mpsc::Receiver<WorkerRequest>,
    wake: Arc<OwnedFd>,
    /// The ports' receive descriptors (token: the direction's key) and the wake-up eventfd.
    epoll: sys::Epoll,
    /// How long before a deadline it stops sleeping and spins.
    spin: std::time::Duration,
    /// How much spinning it has left.
    spin_budget: SpinBudget,
    /// Whether the thread got real-time scheduling: then it gives way to its peers
    /// ([`YIELD_EVERY`]).
    realtime: bool,
    /// When it last waited in `poll` or gave way.
    gave_way_at: std::time::Instant,
    /// Packets due in this pass, reused between passes.
    due: Vec<(Instant, Packet)>,
    /// Tokens the epoll set reported ready, reused.
    ready: Vec<u64>,
}

impl Worker {
    fn run(&mut self) {
        sys::set_timer_slack_min();
        loop {
            let wall = std::time::Instant::now();
            let mut backlog = false;
            let scan_all = self.directions.len() <= SCAN_ALL;
            if !scan_all {
                self.poll_ready();
            }
            backlog |= self.read_shared(scan_all);
            // Each direction is touched only when something is due in it, so a pass costs
            // what is active, not every direction the worker serves; records are caught up
            // just before its queue changes, and its next deadline is kept in `timers`.
            let mut work = std::mem::take(&mut self.work);
            work.clear();
            if scan_all {
                work.extend_from_slice(&self.keys);
                self.active.clear();
            } else {
                work.append(&mut self.active);
            }
            for key in &work {
                let Some(&slot) = self.slots.get(key) else {
                    continue;
                };
                let direction = &mut self.directions[slot];
                direction.queued = false;
                if direction.failed() {
                    continue;
                }
                let now = direction.clock.at(wall);
                if scan_all || direction.polled || direction.backlog {
                    direction.keep_records(now, false);
                    direction.backlog = direction.receive(now);
                    backlog |= direction.backlog;
                }
                if direction.polled
                    || direction.state != PortState::Up
                    || direction.receive_error.is_some()
                {
                    if direction.check_port(now) {
                        let _ = self.epoll.add(direction.port.pollable(), *key);
                    }
                    self.refresh(slot);
                } else if scan_all || direction.backlog {
                    self.refresh(slot);
                }
                let direction = &self.directions[slot];
                if direction.backlog || direction.state != PortState::Up {
                    self.activate(slot);
                }
            }
            // What is due now, each direction once: what it schedules for now or earlier
            // goes to the next pass.
            let wall = std::time::Instant::now();
            work.clear();
            while let Some(&Reverse((at, key))) = self.timers.peek() {
                if at > wall {
                    break;
                }
                self.timers.pop();
                let Some(&slot) = self.slots.get(&key) else {
                    continue;
                };
                if self.directions[slot].next_deadline == Some(at) {
                    self.directions[slot].next_deadline = None;
                    work.push(key);
                }
            }
            for key in &work {
                let Some(&slot) = self.slots.get(key) else {
                    continue;
                };
                let direction = &mut self.directions[slot];
                if !direction.failed() {
                    let now = direction.clock.at(wall);
                    direction.keep_records(now, false);
                    if direction.link.poll_at().is_some_and(|at| at <= now) {
                        direction.transmit(&mut self.due);
                    }
                }
                self.refresh(slot);
            }
            self.work = work;
            if self.handle_requests() {
                break;
            }
            if !backlog {
                self.sleep();
            }
            self.give_way();
        }
    }

    /// A real-time thread that has worked [`YIELD_EVERY`] without waiting lets the
    /// threads of its priority waiting for its CPU go first (`sched_yield`): `SCHED_FIFO`
    /// never takes the CPU from a thread of the same priority, so another emulator's
    /// thread (a second `pathlab emulate` on the machine) would otherwise wait until this
    /// one ran out of work, 100 ms and more under a bulk flow. With nothing waiting, the
    /// call returns at once.
    fn give_way(&mut self) {
        if !self.realtime {
            return;
        }
        let now = std::time::Instant::now();
        if now.saturating_duration_since(self.gave_way_at) >= YIELD_EVERY {
            std::thread::yield_now();
            self.gave_way_at = std::time::Instant::now();
        }
    }

    /// Recomputes direction `slot`'s next deadline (none once its emulator failed) and
    /// sets a timer for it if it moved.
    fn refresh(&mut self, slot: usize) {
        let direction = &mut self.directions[slot];
        let at = if direction.failed() {
            None
        } else {
            direction.deadline().map(|at| direction.clock.monotonic(at))
        };
        if at != direction.next_deadline {
            direction.next_deadline = at;
            if let Some(at) = at {
                self.timers.push(Reverse((at, self.keys[slot])));
            }
        }
        // Timers of deadlines that moved pile up until their time; past a bound, keep only
        // the current ones.
        if self.timers.len() > 4 * self.directions.len() + 1024 {
            self.timers = self
                .directions
                .iter()
                .zip(&self.keys)
                .filter_map(|(d, &key)| d.next_deadline.map(|at| Reverse((at, key))))
                .collect();
        }
    }

    /// Puts direction `slot` in the list of those the next pass looks at.
    fn activate(&mut self, slot: usize) {
        let direction = &mut self.directions[slot];
        if !direction.queued {
            direction.queued = true;
            self.active.push(self.keys[slot]);
        }
    }

    /// Marks the directions whose ports the epoll set says are ready, and the shared
    /// sockets.
    fn poll_ready(&mut self) {
        self.ready.clear();
        if self.epoll.ready(&mut self.ready).is_err() {
            return;
        }
        for token in &self.ready {
            if let Some(&slot) = self.slots.get(token) {
                let direction = &mut self.directions[slot];
                direction.polled = true;
                if !direction.queued {
                    direction.queued = true;
                    self.active.push(*token);
                }
            } else if *token != u64::MAX && token & SHARED_TOKEN != 0 {
                if let Some(source) = self.shared.get_mut((token & !SHARED_TOKEN) as usize) {
                    source.ready = true;
                }
            }
        }
    }

    /// Reads the shared sockets that have frames (all of them with `all`), handing each
    /// frame to its port and marking its direction; returns whether one had more than a
    /// pass takes.
    fn read_shared(&mut self, all: bool) -> bool {
        let mut more = false;
        for source in &mut self.shared {
            if source.ports.is_empty() || !(source.ready || all) {
                continue;
            }
            let (directions, slots, ports) = (&mut self.directions, &self.slots, &source.ports);
            let (pool, active) = (&mut self.shared_pool, &mut self.active);
            let mut deliver = |ifindex: u32, frame: Vec<u8>, at: Option<u64>, first: bool| {
                // A frame of a port not (or no longer) served here is dropped.
                let Some(&key) = ports.get(&ifindex) else {
                    return;
                };
                if let Some(&slot) = slots.get(&key) {
                    let direction = &mut directions[slot];
                    direction.port.push(frame, at, first);
                    direction.polled = true;
                    if !direction.queued {
                        direction.queued = true;
                        active.push(key);
                    }
                }
            };
            let counts = source
                .receiver
                .receive(SHARED_BUDGET, pool, &mut deliver)
                .unwrap_or_default();
            source.ready = counts.frames >= SHARED_BUDGET as u64;
            more |= source.ready;
        }
        more
    }

    /// Starts reading direction `key`'s port (interface `ifindex`) from `receiver`, shared.
    fn attach_shared(&mut self, receiver: Arc<SharedReceiver>, ifindex: u32, key: u64) {
        let index = match self
            .shared
            .iter()
            .position(|s| Arc::ptr_eq(&s.receiver, &receiver))
        {
            Some(index) => index,
            None => {
                self.shared.push(SharedSource {
                    receiver,
                    ports: HashMap::new(),
                    ready: false,
                });
                self.shared.len() - 1
            }
        };
        let source = &mut self.shared[index];
        if source.ports.is_empty() {
            let _ = self
                .epoll
                .add(source.receiver.pollable(), SHARED_TOKEN | index as u64);
        }
        source.ports.insert(ifindex, key);
    }

    /// Stops reading interface `ifindex` from `receiver`.
    fn detach_shared(&mut self, receiver: &Arc<SharedReceiver>, ifindex: u32) {
        if let Some(source) = self
            .shared
            .iter_mut()
            .find(|s| Arc::ptr_eq(&s.receiver, receiver))
        {
            source.ports.remove(&ifindex);
            if source.ports.is_empty() {
                self.epoll.delete(source.receiver.pollable());
                source.ready = false;
            }
        }
    }

    /// Answers requests; returns whether to end the thread.
    fn handle_requests(&mut self) -> bool {
        while let Ok(request) = self.requests.try_recv() {
            match request {
                WorkerRequest::Add(key, direction) => {
                    match direction.port.shared_receiver() {
                        Some((receiver, ifindex)) => self.attach_shared(receiver, ifindex, key),
                        None => {
                            let _ = self.epoll.add(direction.port.pollable(), key);
                        }
                    }
                    self.slots.insert(key, self.directions.len());
                    self.keys.push(key);
                    self.directions.push(*direction);
                    let slot = self.directions.len() - 1;
                    self.refresh(slot);
                    // A first look: frames may have come before it was added.
                    self.activate(slot);
                }
                WorkerRequest::Remove { key, reply } => {
                    let Some(slot) = self.slots.remove(&key) else {
                        continue;
                    };
                    let mut direction = self.directions.swap_remove(slot);
                    self.keys.swap_remove(slot);
                    if let Some(&moved) = self.keys.get(slot) {
                        self.slots.insert(moved, slot);
                    }
                    match direction.port.shared_receiver() {
                        Some((receiver, ifindex)) => self.detach_shared(&receiver, ifindex),
                        None => self.epoll.delete(direction.port.pollable()),
                    }
                    let now = direction.clock.now();
                    direction.keep_records(now, true);
                    let counters = direction.snapshot(now);
                    let _ = reply.send((counters, Box::new(direction)));
                }
                WorkerRequest::Set { key, spec, reply } => {
                    let answer = match self.slots.get(&key) {
                        Some(&slot) => {
                            let direction = &mut self.directions[slot];
                            let answer = direction.set(direction.clock.now(), &spec);
                            self.refresh(slot);
                            answer
                        }
                        None => Err("the emulator has stopped".into()),
                    };
                    let _ = reply.send(answer);
                }
                WorkerRequest::Stats { key, reply } => {
                    if let Some(&slot) = self.slots.get(&key) {
                        let direction = &mut self.directions[slot];
                        let _ = reply.send(direction.snapshot(direction.clock.now()));
                    }
                }
                WorkerRequest::LateBound { key, bound } => {
                    if let Some(&slot) = self.slots.get(&key) {
                        self.directions[slot].lateness.set_bound(bound);
                    }
                }
                WorkerRequest::Record {
                    key,
                    records,
                    reply,
                } => {
                    if let Some(&slot) = self.slots.get(&key) {
                        let direction = &mut self.directions[slot];
                        direction.set_records(direction.clock.now(), records);
                        self.refresh(slot);
                    }
                    let _ = reply.send(());
                }
                WorkerRequest::Exit => return true,
            }
        }
        false
    }

    /// Waits for the next deadline, a frame, or a request.
    fn sleep(&mut self) {
        let deadline = self.timers.peek().map(|&Reverse((at, _))| at);
        let now = std::time::Instant::now();
        let spin = if self.spin_budget.spin(now) {
            self.spin
        } else {
            std::time::Duration::ZERO
        };
        let timeout = match deadline {
            Some(at) if at <= now + spin => {
                self.spin_budget.spinning(now);
                return;
            }
            Some(at) => Some(at.saturating_duration_since(now + spin)),
            None => None,
        };
        self.spin_budget.sleeping();
        let mut ready = [false; 1];
        let polled = sys::poll_readable(&[self.epoll.as_fd()], timeout, &mut ready);
        self.gave_way_at = std::time::Instant::now();
        if polled.is_ok() && ready[0] {
            self.poll_ready();
            if self.ready.contains(&u64::MAX) {
                let mut counter = [0u8; 8];
                let _ = sys::read(self.wake.as_fd(), &mut counter);
            }
        }
    }
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
