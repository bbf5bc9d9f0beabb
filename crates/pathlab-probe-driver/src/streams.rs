//! TCP tests: the data streams of both ends, each on a thread of its own, sampling
//! TCP_INFO as they send. Which streams the server takes is decided by the test's
//! [`Running::accept_greeting`].

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pathlab_probe::control::{Message, TcpDirection, TestRequest};
use pathlab_probe::session::{Rejections, Running, SessionError, GREETING_LEN};
use pathlab_probe::tcp::TCP_CHUNK;
use pathlab_probe::tcp::{
    self as tcp_report, IntervalCounter, StreamReport, TcpSample, TcpTestReport,
};

use crate::{Client, Control, Interruption, MeasureError, Partial, Starvation};
use pathlab_os::sys;
use pathlab_os::tcp_socket::{self, BufferLimit, TcpSocketOptions};

/// Socket options of a TCP test.
#[derive(Debug, Clone, Default)]
pub struct TcpOptions {
    /// SO_SNDBUF and SO_RCVBUF, bytes.
    pub window: Option<u32>,
    /// TCP_MAXSEG, bytes.
    pub mss: Option<u32>,
    /// TCP_CONGESTION (senders only).
    pub congestion: Option<String>,
}

impl TcpOptions {
    /// The socket options of a stream's end, or of the server's listener: the window as
    /// both buffers, capped by the host's maxima as any program's are; the congestion
    /// control only where the end `sends`.
    pub(super) fn socket_options(&self, sends: bool) -> TcpSocketOptions {
        let window = self.window.map(|bytes| bytes as usize);
        TcpSocketOptions {
            send_buffer_bytes: window,
            receive_buffer_bytes: window,
            buffer_limit: BufferLimit::Capped,
            mss_bytes: self.mss,
            congestion: if sends { self.congestion.clone() } else { None },
        }
    }
}

/// Connects a data stream with the options set before the handshake (window scaling and
/// MSS are negotiated in it) and sends its greeting; a handshake that takes longer than
/// `timeout` fails (a server host that left the network answers nothing).
fn connect_stream(
    server: SocketAddr,
    options: &TcpOptions,
    running: &Running,
    index: u32,
    down: bool,
    timeout: Duration,
) -> io::Result<TcpStream> {
    // The client sends on an upward stream, the server on a downward one.
    let mut stream = tcp_socket::connect_within(server, &options.socket_options(!down), timeout)?;
    // The greeting is 48 bytes: it fits any socket buffer, the timeout is a backstop.
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(&running.greeting(index, down))?;
    stream.set_write_timeout(None)?;
    Ok(stream)
}

fn sample(stream: &TcpStream, start: Instant) -> Option<TcpSample> {
    let info = sys::tcp_info(stream.as_fd()).ok()?;
    Some(TcpSample {
        at_ns: start.elapsed().as_nanos() as u64,
        cwnd: info.tcpi_snd_cwnd,
        ssthresh: info.tcpi_snd_ssthresh,
        srtt_us: info.tcpi_rtt,
        rttvar_us: info.tcpi_rttvar,
        retrans_segments: info.tcpi_total_retrans,
        retrans_bytes: info.tcpi_bytes_retrans,
        sent_bytes: info.tcpi_bytes_sent,
        delivery_rate: info.tcpi_delivery_rate,
        pacing_rate: info.tcpi_pacing_rate,
        mss: info.tcpi_snd_mss,
        acked_bytes: info.tcpi_bytes_acked,
        unanswered_timeouts: info.tcpi_retransmits,
    })
}

/// Unsent bytes a sender keeps in its socket (TCP_NOTSENT_LOWAT): 50 ms at the rate TCP
/// delivers, at least two writes. Without a bound a large window on a slow path holds
/// seconds of data that drain after the test's time is over (4 MB at 10 Mbit/s is 3.4 s),
/// and the test overruns by that much. Where 50 ms is more than a default send buffer
/// holds anyway (above 640 Mbit/s) the bound is lifted (0: the kernel's default, none):
/// any bound there measured a few percent slower on loopback. What is in flight (cwnd) is
/// not affected either way.
fn unsent_bytes(delivery_rate: u64) -> u64 {
    const TIME: f64 = 0.05;
    const MIN: u64 = 2 * TCP_CHUNK as u64;
    const NO_BOUND_FROM: u64 = 4 << 20;
    let bytes = ((delivery_rate as f64 * TIME) as u64).max(MIN);
    if bytes >= NO_BOUND_FROM {
        0
    } else {
        bytes
    }
}

/// The last time a stream moved data (a receiver read some, a sender's socket took some),
/// in ns after the test's `epoch`, shared by a test's stream threads: a client names when
/// a server that stopped answering was last heard from.
#[derive(Debug, Clone)]
struct Progress {
    epoch: Instant,
    last_ns: Arc<AtomicU64>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            epoch: Instant::now(),
            last_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    fn moved(&self) {
        let ns = self.epoch.elapsed().as_nanos() as u64;
        self.last_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// When data last moved, if it did.
    fn last(&self) -> Option<Instant> {
        match self.last_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(self.epoch + Duration::from_nanos(ns)),
        }
    }
}

/// How one stream's end finished: its report (what it did until then, even when it
/// failed), and the error if it failed.
type StreamEnd = (StreamReport, Option<io::Error>);

/// Sends for `duration`, sampling TCP_INFO every `sample_every`. One thread does both: the
/// socket is non-blocking and the thread sleeps in poll until it can write or the next
/// sample is due. (A second thread sampling while this one writes contends for the socket
/// lock, which cost a tenth of the throughput on loopback.) A peer that stops reading
/// closes the window, and the writes stop with it: the loop still ends at `duration`.
fn send_stream(
    stream: &mut TcpStream,
    index: u32,
    duration: Duration,
    sample_every: Duration,
    stop: &AtomicBool,
    progress: &Progress,
) -> StreamEnd {
    let start = Instant::now();
    let mut samples = Vec::new();
    let error = send_for(
        stream,
        start,
        duration,
        sample_every,
        stop,
        progress,
        &mut samples,
    )
    .err();
    samples.extend(sample(stream, start));
    (
        StreamReport {
            index,
            samples,
            ..StreamReport::default()
        },
        error,
    )
}

fn send_for(
    stream: &mut TcpStream,
    start: Instant,
    duration: Duration,
    sample_every: Duration,
    stop: &AtomicBool,
    progress: &Progress,
    samples: &mut Vec<TcpSample>,
) -> io::Result<()> {
    let end = start + duration;
    let limit_unsent = |stream: &TcpStream, bytes: u64| {
        let _ = sys::setsockopt(
            stream.as_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            &(bytes as libc::c_int),
        );
    };
    limit_unsent(stream, unsent_bytes(0));
    stream.set_nonblocking(true)?;
    let mut chunk_storage = vec![0x5au8; TCP_CHUNK + PAGE];
    let chunk = page_aligned(&mut chunk_storage);
    let mut offset = 0;
    let mut next_sample = start;
    loop {
        let now = Instant::now();
        if now >= next_sample {
            if let Some(taken) = sample(stream, start) {
                limit_unsent(stream, unsent_bytes(taken.delivery_rate));
                samples.push(taken);
            }
            next_sample = (next_sample + sample_every).max(now);
        }
        if now >= end || stop.load(Ordering::Relaxed) {
            break;
        }
        match stream.write(&chunk[offset..]) {
            Ok(n) => {
                offset = (offset + n) % TCP_CHUNK;
                progress.moved();
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                sys::poll_writable(stream.as_fd(), next_sample.min(end) - now)?;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    stream.set_nonblocking(false)?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Wait for the receiver to close: its last ACKs belong in the samples.
    let mut sink = [0u8; 64];
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let waited = Instant::now();
    while waited.elapsed() < crate::TEST_GRACE_STD && !stop.load(Ordering::Relaxed) {
        match stream.read(&mut sink) {
            Err(error)
                if crate::timed_out(&error) || error.kind() == io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    Ok(())
}

const PAGE: usize = 4096;

/// `TCP_CHUNK` bytes of `storage` (`TCP_CHUNK + PAGE` long) starting on a page boundary:
/// the kernel copies to and from page-aligned buffers fastest (the allocator's large
/// blocks start 16 bytes into a page).
fn page_aligned(storage: &mut [u8]) -> &mut [u8] {
    let skip = storage.as_ptr().align_offset(PAGE);
    &mut storage[skip..skip + TCP_CHUNK]
}

/// Receives until the sender closes, counting bytes per interval; a stream that fails
/// keeps what it counted until then.
fn receive_stream(
    stream: &mut TcpStream,
    index: u32,
    interval: Duration,
    last_byte_by: Instant,
    stop: &AtomicBool,
    progress: &Progress,
) -> StreamEnd {
    let start = Instant::now();
    let mut counter = IntervalCounter::new(interval.as_nanos() as u64);
    let mut last_byte_ns = 0;
    let error = receive_until_closed(
        stream,
        start,
        &mut counter,
        &mut last_byte_ns,
        last_byte_by,
        stop,
        progress,
    )
    .err();
    // A stream that failed received until its last byte (its goodput is over that time,
    // not over the silence before the failure was seen).
    let receive_ns = if error.is_some() || stop.load(Ordering::Relaxed) {
        last_byte_ns
    } else {
        start.elapsed().as_nanos() as u64
    };
    let _ = stream.shutdown(std::net::Shutdown::Both);
    (
        StreamReport {
            index,
            interval_bytes: counter.intervals,
            bytes: counter.total,
            receive_ns,
            samples: Vec::new(),
            starved: None,
        },
        error,
    )
}

fn receive_until_closed(
    stream: &mut TcpStream,
    start: Instant,
    counter: &mut IntervalCounter,
    last_byte_ns: &mut u64,
    last_byte_by: Instant,
    stop: &AtomicBool,
    progress: &Progress,
) -> io::Result<()> {
    let mut storage = vec![0u8; TCP_CHUNK + PAGE];
    let buffer = page_aligned(&mut storage);
    // A sender that freezes or vanishes ends the stream at the test's time plus the grace.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    loop {
        match stream.read(buffer) {
            Ok(0) => break,
            Ok(n) => {
                *last_byte_ns = start.elapsed().as_nanos() as u64;
                counter.add(*last_byte_ns, n as u64);
                progress.moved();
                // A sender that keeps sending past the test's time would otherwise keep
                // the stream, its slot and its interval counts growing for ever.
                if Instant::now() > last_byte_by {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the sender kept sending past the test's time plus the grace",
                    ));
                }
            }
            Err(error)
                if crate::timed_out(&error) || error.kind() == io::ErrorKind::Interrupted =>
            {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if Instant::now() > last_byte_by {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the sender went silent: no end of the stream by the test's time plus the grace",
                    ));
                }
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Runs one stream's end in a thread: sends if `send`, else receives. With the CPU time
/// the thread used: a test's CPU is the sum over its threads, not the process's, which
/// may run other tests (a server, a lab) at the same time.
#[allow(clippy::too_many_arguments)]
fn stream_thread(
    mut stream: TcpStream,
    index: u32,
    send: bool,
    duration: Duration,
    interval: Duration,
    sample_every: Duration,
    stop: Arc<AtomicBool>,
    progress: Progress,
) -> std::thread::JoinHandle<(StreamEnd, Duration)> {
    let last_byte_by = Instant::now() + duration + crate::TEST_GRACE_STD;
    std::thread::spawn(move || {
        let end = if send {
            send_stream(&mut stream, index, duration, sample_every, &stop, &progress)
        } else {
            receive_stream(&mut stream, index, interval, last_byte_by, &stop, &progress)
        };
        (end, sys::thread_cpu_time())
    })
}

/// A stream's thread, and whether the stream runs downwards.
type StreamThread = (bool, std::thread::JoinHandle<(StreamEnd, Duration)>);

/// Every stream of one end of a test, joined: the upward and downward reports (each in
/// index order, each with what it did until it ended, failed or not), the CPU time of the
/// test on this end (the streams' threads plus what the calling thread used since
/// `control_cpu_start`), and the first stream's error, if one failed.
struct Joined {
    up: Vec<StreamReport>,
    down: Vec<StreamReport>,
    cpu: Duration,
    error: Option<io::Error>,
}

/// Waits for every stream of one end of a test.
fn join_streams(threads: Vec<StreamThread>, control_cpu_start: Duration) -> Joined {
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let mut cpu = sys::thread_cpu_time().saturating_sub(control_cpu_start);
    let mut first_error = None;
    for (is_down, thread) in threads {
        let ((report, error), stream_cpu) = thread.join().expect("stream threads do not panic");
        cpu += stream_cpu;
        if first_error.is_none() {
            first_error = error;
        }
        if is_down {
            down.push(report);
        } else {
            up.push(report);
        }
    }
    up.sort_by_key(|s| s.index);
    down.sort_by_key(|s| s.index);
    Joined {
        up,
        down,
        cpu,
        error: first_error,
    }
}

/// The server's end of a TCP test: takes the streams the test's greetings open, runs
/// them, and sends its report.
pub(super) fn serve_tcp(
    test: &mut dyn Control,
    listener: &TcpListener,
    running: &mut Running,
    rejections: &mut Rejections,
    moved: &mut crate::counters::Moved,
) -> Result<String, MeasureError> {
    let TestRequest::Tcp {
        duration_ns,
        interval_ns,
        sample_ns,
        ..
    } = running.test
    else {
        unreachable!("a TCP test")
    };
    // The listener gave the streams their buffers, MSS and congestion control.
    let expected = running.streams_expected();
    let control_cpu_start = sys::thread_cpu_time();
    let duration = Duration::from_nanos(duration_ns);
    let interval = Duration::from_nanos(interval_ns.max(1));
    let sample_every = Duration::from_nanos(sample_ns.max(1_000_000));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Progress::new();
    let mut threads = Vec::new();
    let accept_deadline = Instant::now() + Duration::from_secs(10);
    listener.set_nonblocking(true)?;
    let outcome = (|| {
        while threads.len() < expected {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(false)?;
                    let mut greeting = [0u8; GREETING_LEN];
                    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
                    if stream.read_exact(&mut greeting).is_err() {
                        rejections.greetings += 1;
                        continue;
                    }
                    let Some((index, down)) = running.accept_greeting(&greeting, rejections) else {
                        continue;
                    };
                    threads.push((
                        down,
                        stream_thread(
                            stream,
                            index,
                            down,
                            duration,
                            interval,
                            sample_every,
                            Arc::clone(&stop),
                            progress.clone(),
                        ),
                    ));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > accept_deadline {
                        return Err(MeasureError::Session(SessionError::Timeout(
                            "the test's TCP streams",
                        )));
                    }
                    test.poll_message(Duration::from_millis(2))?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        // Watch the control connection while the streams run: a server that stops ends
        // them now.
        while threads.iter().any(|(_, t)| !t.is_finished()) {
            if let Some(message) = test.poll_message(Duration::from_millis(50))? {
                return Err(MeasureError::Session(SessionError::Protocol(format!(
                    "unexpected {message:?} during the test"
                ))));
            }
        }
        Ok(())
    })();
    if outcome.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    let joined = join_streams(threads, control_cpu_start);
    // What the streams moved until they ended, failed or not: data received upwards, and
    // downwards what the kernel sent less its retransmissions.
    moved.received_bytes = joined.up.iter().map(|s| s.bytes).sum();
    moved.sent_bytes = joined
        .down
        .iter()
        .filter_map(|s| s.samples.last())
        .map(|last| last.sent_bytes.saturating_sub(last.retrans_bytes))
        .sum();
    outcome?;
    if let Some(error) = joined.error {
        return Err(error.into());
    }
    let Joined { up, down, cpu, .. } = joined;
    let cpu_ns = cpu.as_nanos() as u64;
    let received: u64 = up.iter().map(|s| s.bytes).sum();
    test.send(&Message::TcpReport { up, down, cpu_ns })?;
    Ok(format!(
        "received {received} bytes, cpu {:.2} s",
        cpu_ns as f64 * 1e-9
    ))
}

/// What a test whose streams ended gave: this end's side of each stream, for a report
/// of a test that failed part way; `None` when no stream measured anything.
fn partial_report(test: &TcpTest, joined: Joined) -> Option<Box<TcpTestReport>> {
    let report = TcpTestReport {
        interval_ns: test.interval.as_nanos() as u64,
        up_bps: 0.0,
        down_bps: tcp_report::goodput_bps(&joined.down),
        up: joined.up,
        down: joined.down,
        client_cpu_s: joined.cpu.as_secs_f64(),
        server_cpu_s: 0.0,
    };
    (!report.up.is_empty() || !report.down.is_empty()).then(|| Box::new(report))
}

/// The test's report: the server's side of each stream (its `report`, a
/// [`Message::TcpReport`]) merged with this end's (`joined`).
fn final_report(
    report: Message,
    joined: Joined,
    test: &TcpTest,
) -> Result<TcpTestReport, MeasureError> {
    let Joined {
        up: sent_up,
        down: received_down,
        cpu: client_cpu,
        ..
    } = joined;
    match report {
        Message::TcpReport { up, down, cpu_ns } => {
            let up = tcp_report::merge_streams(&up, &sent_up);
            let down = tcp_report::merge_streams(&received_down, &down);
            Ok(TcpTestReport {
                interval_ns: test.interval.as_nanos() as u64,
                up_bps: tcp_report::goodput_bps(&up),
                down_bps: tcp_report::goodput_bps(&down),
                up,
                down,
                client_cpu_s: client_cpu.as_secs_f64(),
                server_cpu_s: cpu_ns as f64 * 1e-9,
            })
        }
        other => Err(MeasureError::Session(SessionError::Protocol(format!(
            "unexpected {other:?}"
        )))),
    }
}

/// A TCP test as the client asks for it.
#[derive(Debug, Clone)]
pub struct TcpTest {
    /// Parallel streams per direction.
    pub streams: u32,
    /// Which way.
    pub direction: TcpDirection,
    /// How long.
    pub duration: Duration,
    /// Reporting interval.
    pub interval: Duration,
    /// TCP_INFO sampling period.
    pub sample_every: Duration,
    /// Socket options.
    pub options: TcpOptions,
}

impl Client {
    /// Runs a bulk TCP test.
    pub fn tcp(self, test: &TcpTest) -> Result<TcpTestReport, MeasureError> {
        self.tcp_or_partial(test).map_err(|partial| partial.error)
    }

    /// [`Client::tcp`], keeping what a test that fails part way measured: this end's side
    /// of each stream. Upwards that is the sender's `TCP_INFO` samples (the server's counts
    /// of what it received never came: no bytes, and `up_bps` 0); downwards, the bytes
    /// received per interval (the server's samples never came).
    pub fn tcp_or_partial(
        mut self,
        test: &TcpTest,
    ) -> Result<TcpTestReport, Partial<TcpTestReport>> {
        let request = TestRequest::Tcp {
            streams: test.streams,
            direction: test.direction,
            duration_ns: test.duration.as_nanos() as u64,
            interval_ns: test.interval.as_nanos() as u64,
            sample_ns: test.sample_every.as_nanos() as u64,
            window: test.options.window,
            mss: test.options.mss,
            congestion: test.options.congestion.clone(),
        };
        let running = self.request(request, 0)?;
        let server = self.server_address(&running);
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Progress::new();
        let control_cpu_start = sys::thread_cpu_time();
        let mut threads = Vec::new();
        let directions: &[bool] = match test.direction {
            TcpDirection::Up => &[false],
            TcpDirection::Down => &[true],
            TcpDirection::Both => &[false, true],
        };
        for &down in directions {
            for index in 0..test.streams {
                let stream = match connect_stream(
                    server,
                    &test.options,
                    &running,
                    index,
                    down,
                    self.connect_timeout,
                ) {
                    Ok(stream) => stream,
                    Err(why) => {
                        stop.store(true, Ordering::Relaxed);
                        let joined = join_streams(threads, control_cpu_start);
                        return Err(Partial {
                            error: MeasureError::Unreachable {
                                address: server.to_string(),
                                why,
                            },
                            measured: partial_report(test, joined),
                        });
                    }
                };
                // The client sends the upward streams and receives the downward ones.
                threads.push((
                    down,
                    stream_thread(
                        stream,
                        index,
                        !down,
                        test.duration,
                        test.interval,
                        test.sample_every,
                        Arc::clone(&stop),
                        progress.clone(),
                    ),
                ));
            }
        }
        // A server that gives up or stops says so: the streams end now, not at their time.
        // One that freezes or vanishes says nothing: the session's deadline (the test's
        // time and the grace) ends the wait, and the streams with it.
        let mut early = None;
        while threads.iter().any(|(_, t)| !t.is_finished()) {
            match self.poll_message(Duration::from_millis(50)) {
                Ok(None) => {}
                Ok(Some(message)) => {
                    early = Some(message);
                    break;
                }
                Err(error) => {
                    stop.store(true, Ordering::Relaxed);
                    let joined = join_streams(threads, control_cpu_start);
                    return Err(self.tcp_failed(
                        error,
                        &progress,
                        partial_report(test, joined),
                        test,
                    ));
                }
            }
        }
        let mut joined = join_streams(threads, control_cpu_start);
        if let Some(error) = joined.error.take() {
            let error = self.stream_error(error);
            return Err(self.tcp_failed(error, &progress, partial_report(test, joined), test));
        }
        let report = match early {
            Some(message) => message,
            None => match self.next_message() {
                Ok(message) => message,
                Err(error) => {
                    return Err(self.tcp_failed(
                        error,
                        &progress,
                        partial_report(test, joined),
                        test,
                    ))
                }
            },
        };
        self.finish();
        final_report(report, joined, test).map_err(Into::into)
    }

    /// What a stream's failure means for the test: a connection the server closed or
    /// reset is a test it interrupted, one that timed out a server that stopped sending.
    fn stream_error(&mut self, error: io::Error) -> MeasureError {
        match error.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                self.interrupted(true, "results", String::new())
            }
            io::ErrorKind::TimedOut => self.interrupted(
                false,
                "end of its data",
                format!(
                    "within {:.0} s of the test's end",
                    crate::TEST_GRACE_STD.as_secs_f64()
                ),
            ),
            _ => error.into(),
        }
    }

    /// A TCP test's failure, its message naming when data last moved; a server that went
    /// silent because a stream was starved is told apart ([`starved_or`]).
    fn tcp_failed(
        &mut self,
        error: MeasureError,
        progress: &Progress,
        measured: Option<Box<TcpTestReport>>,
        test: &TcpTest,
    ) -> Partial<TcpTestReport> {
        let error = match error {
            MeasureError::Interrupted(interruption) => {
                if let Some(moved) = progress.last() {
                    self.heard(moved);
                }
                self.interrupted(
                    interruption.closed,
                    interruption.awaited,
                    interruption.bound,
                )
            }
            other => other,
        };
        starved_or(error, measured, test.duration)
    }
}

/// What a TCP test that failed measured, and why it failed. A server that went silent
/// (no results within the grace) may only be waiting for a stream that a queue or the
/// path starved: the server waits for each stream's end, which is held up behind data in
/// retransmission backoff. When an upward stream's sender shows that, the test ended
/// [`MeasureError::Starved`], and its upward streams are counted from what their senders
/// saw acknowledged ([`StreamReport::count_acknowledged`]), the server's counts having
/// never come. Any other failure, a silent server whose streams show no starved one
/// (frozen: it acknowledged what it took and closed its window) included, is kept as
/// it is.
fn starved_or(
    error: MeasureError,
    measured: Option<Box<TcpTestReport>>,
    duration: Duration,
) -> Partial<TcpTestReport> {
    let silent = matches!(
        error,
        MeasureError::Interrupted(Interruption { closed: false, .. })
    );
    let starved = |report: &TcpTestReport| {
        report
            .up
            .iter()
            .any(|s| tcp_report::starvation(&s.samples, duration.as_nanos() as u64).is_some())
    };
    match measured {
        Some(mut report) if silent && starved(&report) => {
            let duration_ns = duration.as_nanos() as u64;
            for stream in &mut report.up {
                stream.count_acknowledged(report.interval_ns, duration_ns);
            }
            report.up_bps = tcp_report::goodput_bps(&report.up);
            let streams = report
                .up
                .iter()
                .filter_map(|s| s.starved.map(|starved| (s.index, starved)))
                .collect();
            Partial {
                error: MeasureError::Starved(Starvation { streams }),
                measured: Some(report),
            }
        }
        measured => Partial { error, measured },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partial report of a 15 s upward test whose client gave up the grace after the
    /// test's time: its stream's data got through at 10 kB per 10 ms sample until
    /// `stalled_ms`, none after; from then on its sender was in retransmission backoff
    /// when `backoff`, else it faced a closed window (a server that stopped reading).
    fn given_up(stalled_ms: u64, backoff: bool) -> (Duration, Box<TcpTestReport>) {
        let duration = Duration::from_secs(15);
        let given_up_ms = (duration + crate::TEST_GRACE_STD).as_millis() as u64;
        let samples = (0..=given_up_ms / 10)
            .map(|i| TcpSample {
                at_ns: i * 10_000_000,
                acked_bytes: i.min(stalled_ms / 10) * 10_000,
                unanswered_timeouts: u8::from(backoff && i * 10 > stalled_ms),
                ..TcpSample::default()
            })
            .collect();
        let report = TcpTestReport {
            interval_ns: 100_000_000,
            up: vec![StreamReport {
                samples,
                ..StreamReport::default()
            }],
            ..TcpTestReport::default()
        };
        (duration, Box::new(report))
    }

    fn silent_server() -> MeasureError {
        MeasureError::Interrupted(Interruption {
            closed: false,
            at_s: 25.0,
            last_heard_s: Some(4.0),
            awaited: "results",
            bound: "within 10 s of its end".into(),
        })
    }

    #[test]
    fn a_stream_silent_past_the_give_up_time_is_reported_starved_with_its_gap() {
        // Nothing got through from 4 s to the give-up at 25 s: longer than the grace the
        // client waited for the results after the test's 15 s.
        let (duration, report) = given_up(4_000, true);
        let partial = starved_or(silent_server(), Some(report), duration);
        let MeasureError::Starved(starvation) = &partial.error else {
            panic!("not reported starved: {}", partial.error)
        };
        let gap_ns = 21_000_000_000;
        assert!(gap_ns > crate::TEST_GRACE_STD.as_nanos() as u64);
        assert_eq!(starvation.streams.len(), 1);
        let (index, starved) = starvation.streams[0];
        assert_eq!(index, 0);
        assert_eq!(
            (starved.gap_from_ns, starved.longest_gap_ns),
            (4_000_000_000, gap_ns)
        );
        // What got through until then is the result: 4 s at 8 Mbit/s, over the 15 s.
        let report = partial.measured.expect("what got through");
        assert_eq!(report.up[0].starved, Some(starved));
        assert_eq!(report.up[0].bytes, 4_000_000);
        // The last acknowledgement was seen by the sample at 4.00 s: interval 40.
        assert_eq!(report.up[0].interval_bytes.len(), 41);
        assert_eq!(report.up[0].interval_bytes[40], 10_000);
        assert!((report.up_bps - 4_000_000.0 * 8.0 / 15.0).abs() < 1e-6);
    }

    #[test]
    fn a_frozen_server_or_one_that_closed_is_still_an_error() {
        // As silent, but the closed window says the server stopped reading.
        let (duration, report) = given_up(4_000, false);
        let partial = starved_or(silent_server(), Some(report.clone()), duration);
        assert!(matches!(partial.error, MeasureError::Interrupted(_)));
        assert_eq!(partial.measured, Some(report.clone()));
        // A server that closed the connection ended the test, whatever its streams did.
        let (duration, starved) = given_up(4_000, true);
        let closed = MeasureError::Interrupted(Interruption {
            closed: true,
            ..match silent_server() {
                MeasureError::Interrupted(interruption) => interruption,
                _ => unreachable!(),
            }
        });
        let partial = starved_or(closed, Some(starved.clone()), duration);
        assert!(matches!(
            partial.error,
            MeasureError::Interrupted(Interruption { closed: true, .. })
        ));
        assert_eq!(partial.measured, Some(starved));
    }
}
