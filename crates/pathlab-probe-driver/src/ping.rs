//! ICMP echo, as `ping` does it, so tests and labs need no `ping` binary.
//!
//! A [`Pinger`] owns a raw ICMP socket, which is bound to the network namespace of the
//! thread that created it (create it inside [`pathlab_os::netns::Netns::run`]); it can be used
//! from any thread afterwards. Echo requests go out on a fixed schedule; replies are
//! matched by identifier and sequence number, and round trips are measured with the
//! monotonic clock.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use pathlab_os::offload::{checksum_add, checksum_finish};
use pathlab_os::sys;

/// One echo request and what became of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingResult {
    /// Sequence number.
    pub seq: u16,
    /// When it was sent.
    pub sent: Instant,
    /// Round-trip time, or `None` if no reply came before the deadline.
    pub rtt: Option<Duration>,
}

/// Sends ICMP echo requests to one address and collects the replies.
#[derive(Debug)]
pub struct Pinger {
    socket: OwnedFd,
    target: IpAddr,
    ident: u16,
    payload_len: usize,
}

impl Pinger {
    /// Opens a raw ICMP (or ICMPv6) socket towards `target`, in the calling thread's
    /// namespace; requests carry `payload_len` bytes of payload (56 as `ping`).
    pub fn new(target: IpAddr, payload_len: usize) -> io::Result<Pinger> {
        let (domain, protocol) = match target {
            IpAddr::V4(_) => (libc::AF_INET, libc::IPPROTO_ICMP),
            IpAddr::V6(_) => (libc::AF_INET6, libc::IPPROTO_ICMPV6),
        };
        let socket = sys::socket(domain, libc::SOCK_RAW, protocol)?;
        sys::connect(socket.as_fd(), SocketAddr::new(target, 0))?;
        sys::set_nonblocking(socket.as_fd())?;
        // Distinct per pinger, so two in one namespace don't take each other's replies.
        let ident = (std::process::id() as u16)
            ^ (Instant::now().elapsed().subsec_nanos() as u16)
            ^ next_serial();
        Ok(Pinger {
            socket,
            target,
            ident,
            payload_len,
        })
    }

    fn request(&self, seq: u16) -> Vec<u8> {
        let mut packet = vec![0u8; 8 + self.payload_len];
        packet[0] = if self.target.is_ipv4() { 8 } else { 128 };
        packet[4..6].copy_from_slice(&self.ident.to_be_bytes());
        packet[6..8].copy_from_slice(&seq.to_be_bytes());
        for (i, byte) in packet[8..].iter_mut().enumerate() {
            *byte = i as u8;
        }
        if self.target.is_ipv4() {
            // ICMPv6 checksums are filled in by the kernel (RFC 3542 section 3.1).
            let checksum = checksum_finish(checksum_add(0, &packet));
            packet[2..4].copy_from_slice(&checksum.to_be_bytes());
        }
        packet
    }

    /// The (identifier, sequence) of an echo reply in `bytes`, if it is one of ours.
    fn parse_reply(&self, bytes: &[u8]) -> Option<u16> {
        let icmp = if self.target.is_ipv4() {
            let header_len = usize::from(bytes.first()? & 0x0f) * 4;
            bytes.get(header_len..)?
        } else {
            bytes
        };
        let reply_type = if self.target.is_ipv4() { 0 } else { 129 };
        if icmp.len() < 8 || icmp[0] != reply_type {
            return None;
        }
        let ident = u16::from_be_bytes([icmp[4], icmp[5]]);
        (ident == self.ident).then(|| u16::from_be_bytes([icmp[6], icmp[7]]))
    }

    /// Sends `count` requests, one every `interval`, and waits up to `wait` after the last
    /// for the replies. Results are in sequence order.
    pub fn run(
        &mut self,
        count: usize,
        interval: Duration,
        wait: Duration,
    ) -> io::Result<Vec<PingResult>> {
        let start = Instant::now();
        let mut results: Vec<PingResult> = Vec::with_capacity(count);
        let mut buffer = vec![0u8; 65_536];
        let mut outstanding = 0usize;
        let end = start + interval * count.saturating_sub(1) as u32 + wait;
        loop {
            let now = Instant::now();
            if results.len() < count && now >= start + interval * results.len() as u32 {
                let seq = results.len() as u16;
                let packet = self.request(seq);
                let sent = Instant::now();
                // A full socket buffer loses the request like the network would.
                let _ = sys::send(self.socket.as_fd(), &packet, 0);
                results.push(PingResult {
                    seq,
                    sent,
                    rtt: None,
                });
                outstanding += 1;
                continue;
            }
            if results.len() == count && (outstanding == 0 || now >= end) {
                break;
            }
            let next_send =
                (results.len() < count).then(|| start + interval * results.len() as u32);
            let deadline = next_send.unwrap_or(end);
            let mut ready = [false];
            sys::poll_readable(
                &[self.socket.as_fd()],
                Some(deadline.saturating_duration_since(now)),
                &mut ready,
            )?;
            while let Ok(n) = sys::recv(self.socket.as_fd(), &mut buffer, 0) {
                let received = Instant::now();
                let Some(seq) = self.parse_reply(&buffer[..n]) else {
                    continue;
                };
                // Sequence numbers wrap at 65536; match the latest request with this one.
                let Some(result) = results.iter_mut().rev().find(|r| r.seq == seq) else {
                    continue;
                };
                if result.rtt.is_none() {
                    result.rtt = Some(received - result.sent);
                    outstanding -= 1;
                }
            }
        }
        Ok(results)
    }
}

fn next_serial() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static SERIAL: AtomicU16 = AtomicU16::new(0x5a5a);
    SERIAL.fetch_add(0x3b1, Ordering::Relaxed)
}
