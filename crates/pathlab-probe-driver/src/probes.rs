//! The data plane of one-way tests: sending probes on their schedule in batches, and
//! receiving them with kernel timestamps. What is sent and what is accepted is decided by
//! [`ProbeSender`] and [`ProbeReceiver`].

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::time::Duration;

use pathlab_probe::auth::Way;
use pathlab_probe::control::Message;
use pathlab_probe::session::{
    ProbeReceiver, ProbeSender, Received, Rejections, Running, SessionError,
};

use crate::{clock, random, until, Control, MeasureError};
use pathlab_os::sys;
use pathlab_os::unix_now_ns;

/// Probes sent in one `sendmmsg` at most: when the schedule is behind (rates above what one
/// system call per probe keeps up with), what is due goes out together.
const SEND_BATCH: usize = 64;

/// Datagrams taken from the socket per `recvmmsg`.
const RECEIVE_BATCH: usize = 64;

/// Sends a one-way test's probes going `way`; returns the `Sent` message to send. Each
/// probe is stamped when it is written, so probes sent in one batch (a late schedule, or a
/// back-to-back train) carry their real send time. The control connection is watched
/// between batches: a peer that gives up, or a server that stops, ends the test.
///
/// With `transmit`, on a socket with transmit stamps on ([`sys::enable_timestamping`]),
/// each probe's send is filed there under its sequence number and the kernel's stamps are
/// read into it while the schedule leaves time, and at the end: the time each probe left,
/// free of the sender's own delays between its reading and the kernel's (a busy machine
/// preempts a sender there for milliseconds).
pub(super) fn send_probes(
    udp: &UdpSocket,
    running: &Running,
    way: Way,
    control: &mut dyn Control,
    mut transmit: Option<&mut sys::TransmitLog>,
) -> Result<Message, MeasureError> {
    let (_, size, count, schedule) = running.test.one_way().ok_or_else(|| {
        MeasureError::Session(SessionError::Protocol(format!(
            "{} sends no probes one way",
            running.test
        )))
    })?;
    let back_to_back = schedule.length > 1 && schedule.spacing_ns == 0.0;
    let mut sender = ProbeSender::new(clock(), way, schedule, size, count, Box::new(random()?));
    let mut batch: Vec<Vec<u8>> = (0..SEND_BATCH)
        .map(|_| Vec::with_capacity(size as usize + 64))
        .collect();
    let mut seqs = [0u64; SEND_BATCH];
    let mut checked = clock();
    while let Some(due) = sender.poll_at() {
        if let Some(log) = transmit.as_deref_mut() {
            if until(due) > Duration::from_micros(50) {
                // A stamp the kernel could not queue is lost, not the probe: its send
                // time is then the sender's reading.
                let _ = log.take(udp.as_fd());
            }
        }
        pace_until(due);
        let now = clock();
        let mut n = 0;
        while n < SEND_BATCH {
            match sender.poll_probe(now, unix_now_ns(), running, &mut batch[n]) {
                Ok(Some(seq)) => {
                    seqs[n] = seq;
                    n += 1;
                }
                Ok(None) => break,
                Err(error) => return Err(io::Error::new(io::ErrorKind::InvalidInput, error).into()),
            }
        }
        let packets: Vec<&[u8]> = batch[..n].iter().map(Vec::as_slice).collect();
        // A full socket buffer loses probes as a congested path would: they count as sent
        // and, not arriving, as lost. A pair or a train goes back to back, at real-time
        // priority where the process may; a paced test's catch-up batch does not (two owd
        // runs of three at 10 Mbit/s took the switches' cost for a queue building).
        let taken = if n > 1 && back_to_back {
            pathlab_os::scheduling::burst(|| sys::send_batch(udp.as_fd(), &packets))
        } else {
            sys::send_batch(udp.as_fd(), &packets)
        };
        if let Some(log) = transmit.as_deref_mut() {
            let taken = taken.unwrap_or(0);
            for (i, &seq) in seqs[..n].iter().enumerate() {
                log.sent(seq, i < taken);
            }
        }
        if now.saturating_since(checked) > pathlab_core::Duration::from_millis(50) {
            checked = now;
            if let Some(message) = control.poll_message(Duration::ZERO)? {
                return Err(MeasureError::Session(SessionError::Protocol(format!(
                    "unexpected {message:?} during the test"
                ))));
            }
        }
    }
    if let Some(log) = transmit {
        let _ = log.take(udp.as_fd());
    }
    Ok(sender.sent().expect("every probe is out"))
}

/// Sleeps until 200 us before `due`, then spins (the kernel's sleep is tens of us late).
fn pace_until(due: pathlab_core::Instant) {
    let left = until(due);
    if left > Duration::from_micros(200) {
        std::thread::sleep(left.saturating_sub(Duration::from_micros(200)));
    }
    while clock() < due {
        std::hint::spin_loop();
    }
}

/// The receiving side of a one-way test (the server for up, the client for down): every
/// accepted probe, in arrival order, until the sender's `Sent` plus a moment for
/// stragglers. Rejected datagrams are counted in `rejections`.
pub(super) fn receive_one_way(
    udp: &UdpSocket,
    control: &mut dyn Control,
    running: &Running,
    rejections: &mut Rejections,
    way: Way,
    size: u32,
    count: u64,
) -> Result<Received, MeasureError> {
    let mut receiver = ProbeReceiver::new(way, size, count);
    receive_into(&mut receiver, udp, control, running, rejections)?;
    let (received, _) = receiver.finish(rejections.probes);
    Ok(received)
}

/// Runs `receiver` until its test is over; on an error, what it received until then is
/// still in it (a client keeps it as a partial result).
pub(super) fn receive_into(
    receiver: &mut ProbeReceiver,
    udp: &UdpSocket,
    control: &mut dyn Control,
    running: &Running,
    rejections: &mut Rejections,
) -> Result<(), MeasureError> {
    // A probe longer than the test's probes is not one of them: the slot holds one byte
    // more, so such a datagram shows as truncated.
    let mut batch = sys::RecvBatch::new(RECEIVE_BATCH, receiver.probe_len(running) + 1);
    loop {
        let mut ready = [false];
        let _ = sys::poll_readable(&[udp.as_fd()], Some(Duration::from_millis(5)), &mut ready);
        let before = receiver.received();
        while batch.recv(udp.as_fd())? > 0 {
            for datagram in batch.datagrams() {
                receiver.handle_probe(
                    datagram.kernel_ns.unwrap_or_else(unix_now_ns),
                    datagram.source.ip(),
                    datagram.data,
                    datagram.truncated,
                    running,
                    rejections,
                );
            }
        }
        if receiver.received() > before {
            control.heard_from_peer();
        }
        if receiver.poll_at().is_none() {
            match control.poll_message(Duration::ZERO)? {
                Some(Message::Sent {
                    count,
                    duration_ns,
                    late,
                }) => {
                    receiver.handle_sent(clock(), count, duration_ns, late);
                }
                Some(other) => {
                    return Err(MeasureError::Session(SessionError::Protocol(format!(
                        "unexpected {other:?} during the test"
                    ))))
                }
                None => {}
            }
        }
        if receiver.is_finished(clock()) {
            return Ok(());
        }
    }
}
