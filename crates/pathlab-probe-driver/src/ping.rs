//! ICMP echo, as `ping` does it, so tests and labs need no `ping` binary.
//!
//! A [`Pinger`] owns a raw ICMP socket, which is bound to the network namespace of the
//! thread that created it (create it inside [`pathlab_os::netns::Netns::run`]); it can be used
//! from any thread afterwards. Echo requests go out on a fixed schedule; replies are
//! matched by identifier and sequence number.
//!
//! Round trips are timed by the kernel: from the moment the device took the request
//! (its software transmit stamp, read back from the socket's error queue) to the moment
//! the reply arrived (its receive stamp), both from `SO_TIMESTAMPING`. Neither the
//! pinger's wake-up after `poll` nor a preemption between its clock reading and its
//! system call is in them, so on a busy machine they stay the path's. Where the kernel
//! gave no stamp (a device that takes no transmit stamps, a reply in the first moment
//! after the machine's first timestamping socket, a clock stepped in between), the round
//! trip is the pinger's own reading, from just before its send to just after its receive,
//! and the result says so ([`TimedBy::UserSpace`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use pathlab_core::wire::checksum::{checksum_add, checksum_finish};
use pathlab_core::wire::ipv4::Ipv4Packet;
use pathlab_os::sys::{self, ErrorQueued};
use pathlab_os::unix_now_ns;
pub use pathlab_probe::rtt::TimedBy;

/// ICMP header bytes before the payload.
const ICMP_HEADER_LEN: usize = 8;

/// One echo request and what became of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingResult {
    /// Sequence number.
    pub seq: u16,
    /// When it was sent (the pinger's clock, just before the send).
    pub sent: Instant,
    /// Round-trip time, or `None` if no reply came before the deadline.
    pub rtt: Option<Duration>,
    /// Which clock timed `rtt`; `None` without a reply.
    pub timed_by: Option<TimedBy>,
    /// The round trip as the pinger saw it, from just before its send to just after its
    /// receive: `rtt` plus the pinger's own delays when `rtt` is the kernel's; `None`
    /// without a reply.
    pub user_space_rtt: Option<Duration>,
}

/// Sends ICMP echo requests to one address and collects the replies.
#[derive(Debug)]
pub struct Pinger {
    socket: OwnedFd,
    target: IpAddr,
    ident: u16,
    /// Whether the kernel stamps the socket's datagrams.
    stamped: bool,
    /// The number the kernel gives the next datagram the socket sends
    /// (`SOF_TIMESTAMPING_OPT_ID`), which names its transmit stamp.
    next_datagram: u32,
    /// The echo request, rewritten for each sequence number.
    request: Vec<u8>,
    /// Room for one received datagram.
    buffer: Vec<u8>,
    /// Replies timed in user space so far.
    user_space_fallbacks: u64,
}

/// What the kernel and the pinger's clock said of one request, until the round trip is
/// worked out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(clippy::struct_field_names)] // every one a time in ns, as the workspace names them
struct Stamps {
    /// `CLOCK_REALTIME` just before the send, ns: no transmit stamp of it can be earlier.
    before_send_ns: u64,
    /// When the device took the request, ns since the epoch.
    transmit_ns: Option<u64>,
    /// When the reply arrived, ns since the epoch.
    receive_ns: Option<u64>,
}

impl Stamps {
    /// The kernel's round trip, if both stamps came and belong to this exchange: the
    /// transmit stamp no earlier than the send began (a stamp matched to the wrong request
    /// is earlier), the reply after it, and the whole no longer than the pinger's own
    /// reading `user_space` (which encloses it, unless the wall clock was stepped).
    fn kernel_rtt(&self, user_space: Duration) -> Option<Duration> {
        let (transmit, receive) = (self.transmit_ns?, self.receive_ns?);
        if transmit < self.before_send_ns || receive < transmit {
            return None;
        }
        let rtt = Duration::from_nanos(receive - transmit);
        (rtt <= user_space).then_some(rtt)
    }
}

impl Pinger {
    /// Opens a raw ICMP (or ICMPv6) socket towards `target`, in the calling thread's
    /// namespace, with the kernel's timestamps on; requests carry `payload_len` bytes of
    /// payload (56 as `ping`).
    pub fn new(target: IpAddr, payload_len: usize) -> io::Result<Pinger> {
        let (domain, protocol) = match target {
            IpAddr::V4(_) => (libc::AF_INET, libc::IPPROTO_ICMP),
            IpAddr::V6(_) => (libc::AF_INET6, libc::IPPROTO_ICMPV6),
        };
        let socket = sys::socket(domain, libc::SOCK_RAW, protocol)?;
        sys::connect(socket.as_fd(), SocketAddr::new(target, 0))?;
        sys::set_nonblocking(socket.as_fd())?;
        // Before the first send, so the first request is datagram 0. A kernel that refuses
        // leaves every round trip to the fallback.
        let stamped = sys::enable_timestamping(socket.as_fd(), sys::TransmitPoint::Device).is_ok();
        // Distinct per pinger, so two in one namespace don't take each other's replies.
        let ident = (std::process::id() as u16)
            ^ (Instant::now().elapsed().subsec_nanos() as u16)
            ^ next_serial();
        let mut request = vec![0u8; ICMP_HEADER_LEN + payload_len];
        request[0] = if target.is_ipv4() { 8 } else { 128 };
        request[4..6].copy_from_slice(&ident.to_be_bytes());
        for (i, byte) in request[ICMP_HEADER_LEN..].iter_mut().enumerate() {
            *byte = i as u8;
        }
        Ok(Pinger {
            socket,
            target,
            ident,
            stamped,
            next_datagram: 0,
            request,
            buffer: vec![0u8; 65_536],
            user_space_fallbacks: 0,
        })
    }

    /// Replies timed in user space since the pinger was made, for want of a kernel stamp.
    pub fn user_space_fallbacks(&self) -> u64 {
        self.user_space_fallbacks
    }

    /// Writes sequence number `seq` (and, for ICMP, the checksum) into the request.
    fn set_sequence(&mut self, seq: u16) {
        self.request[6..8].copy_from_slice(&seq.to_be_bytes());
        if self.target.is_ipv4() {
            // ICMPv6 checksums are filled in by the kernel (RFC 3542 section 3.1).
            self.request[2..4].fill(0);
            let checksum = checksum_finish(checksum_add(0, &self.request));
            self.request[2..4].copy_from_slice(&checksum.to_be_bytes());
        }
    }

    /// The sequence number of an echo reply in `bytes`, if it is one of ours.
    fn parse_reply(&self, bytes: &[u8]) -> Option<u16> {
        let icmp = if self.target.is_ipv4() {
            // A raw ICMP socket over IPv4 hands over the IP header too.
            &bytes[Ipv4Packet::new_checked(bytes).ok()?.header_len()..]
        } else {
            bytes
        };
        let reply_type = if self.target.is_ipv4() { 0 } else { 129 };
        if icmp.len() < ICMP_HEADER_LEN || icmp[0] != reply_type {
            return None;
        }
        let ident = u16::from_be_bytes([icmp[4], icmp[5]]);
        (ident == self.ident).then(|| u16::from_be_bytes([icmp[6], icmp[7]]))
    }

    /// Takes every transmit stamp off the socket's error queue (which keeps the socket
    /// polling readable until it is empty) and gives it to its request: `by_datagram[k]`
    /// is the request of the run's `k`th datagram, the first numbered `first_datagram`.
    fn take_transmit_stamps(
        &self,
        first_datagram: u32,
        by_datagram: &[u32],
        stamps: &mut [Stamps],
    ) -> io::Result<()> {
        if !self.stamped {
            return Ok(());
        }
        while let Some(queued) = sys::recv_error_queue(self.socket.as_fd())? {
            // Stamps of an earlier run's datagrams fall outside this one's.
            if let ErrorQueued::Transmitted(stamp) = queued {
                let k = stamp.id.wrapping_sub(first_datagram) as usize;
                if let Some(&request) = by_datagram.get(k) {
                    stamps[request as usize].transmit_ns = Some(stamp.kernel_ns);
                }
            }
        }
        Ok(())
    }

    /// Sends `count` requests, one every `interval`, and waits up to `wait` after the last
    /// for the replies. Results are in sequence order. Allocates only its results (and
    /// their stamps) before the first send.
    pub fn run(
        &mut self,
        count: usize,
        interval: Duration,
        wait: Duration,
    ) -> io::Result<Vec<PingResult>> {
        let start = Instant::now();
        let mut results: Vec<PingResult> = Vec::with_capacity(count);
        let mut stamps: Vec<Stamps> = Vec::with_capacity(count);
        let first_datagram = self.next_datagram;
        let mut by_datagram: Vec<u32> = Vec::with_capacity(count);
        let mut outstanding = 0usize;
        let end = start + interval * count.saturating_sub(1) as u32 + wait;
        loop {
            let now = Instant::now();
            if results.len() < count && now >= start + interval * results.len() as u32 {
                let seq = results.len() as u16;
                self.set_sequence(seq);
                let before_send_ns = unix_now_ns();
                let sent = Instant::now();
                // A full socket buffer loses the request like the network would; the
                // kernel numbers only the datagrams it took.
                if sys::send(self.socket.as_fd(), &self.request, 0).is_ok() {
                    by_datagram.push(results.len() as u32);
                    self.next_datagram = self.next_datagram.wrapping_add(1);
                }
                results.push(PingResult {
                    seq,
                    sent,
                    rtt: None,
                    timed_by: None,
                    user_space_rtt: None,
                });
                stamps.push(Stamps {
                    before_send_ns,
                    ..Stamps::default()
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
            self.take_transmit_stamps(first_datagram, &by_datagram, &mut stamps)?;
            while let Ok((n, _, kernel_ns)) =
                sys::recv_timestamped(self.socket.as_fd(), &mut self.buffer)
            {
                let received = Instant::now();
                let Some(seq) = self.parse_reply(&self.buffer[..n]) else {
                    continue;
                };
                // Sequence numbers wrap at 65536; match the latest request with this one.
                let Some(index) = results.iter().rposition(|r| r.seq == seq) else {
                    continue;
                };
                let result = &mut results[index];
                if result.user_space_rtt.is_none() {
                    result.user_space_rtt = Some(received - result.sent);
                    stamps[index].receive_ns = kernel_ns;
                    outstanding -= 1;
                }
            }
        }
        // A reply read before its request's stamp (both queued between two reads).
        self.take_transmit_stamps(first_datagram, &by_datagram, &mut stamps)?;
        for (result, stamps) in results.iter_mut().zip(&stamps) {
            let Some(user_space) = result.user_space_rtt else {
                continue;
            };
            let (rtt, timed_by) = match stamps.kernel_rtt(user_space) {
                Some(rtt) => (rtt, TimedBy::Kernel),
                None => {
                    self.user_space_fallbacks += 1;
                    (user_space, TimedBy::UserSpace)
                }
            };
            result.rtt = Some(rtt);
            result.timed_by = Some(timed_by);
        }
        Ok(results)
    }
}

fn next_serial() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static SERIAL: AtomicU16 = AtomicU16::new(0x5a5a);
    SERIAL.fetch_add(0x3b1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    #[test]
    fn a_round_trip_is_the_kernels_only_when_both_stamps_fit_the_exchange() {
        let user_space = Duration::from_micros(500);
        let stamps = Stamps {
            before_send_ns: 1_000_000,
            transmit_ns: Some(1_000_010),
            receive_ns: Some(1_400_010),
        };
        assert_eq!(
            stamps.kernel_rtt(user_space),
            Some(Duration::from_micros(400))
        );
        // No stamp on one side: the device took none, or receive stamping was not on yet.
        for missing in [
            Stamps {
                transmit_ns: None,
                ..stamps
            },
            Stamps {
                receive_ns: None,
                ..stamps
            },
        ] {
            assert_eq!(missing.kernel_rtt(user_space), None);
        }
        // The stamp of an earlier datagram, matched to this request by a miscount.
        let earlier = Stamps {
            transmit_ns: Some(999_000),
            ..stamps
        };
        assert_eq!(earlier.kernel_rtt(user_space), None);
        // A reply stamped before its request left: the wall clock was stepped back.
        let stepped_back = Stamps {
            receive_ns: Some(1_000_000),
            ..stamps
        };
        assert_eq!(stepped_back.kernel_rtt(user_space), None);
        // Longer than the pinger's own reading, which encloses it: stepped forward.
        assert_eq!(stamps.kernel_rtt(Duration::from_micros(399)), None);
    }

    #[test]
    fn a_request_carries_its_sequence_and_a_valid_checksum() {
        let Some(_serial) = pathlab_os::testing::privileged("a_request_carries_its_sequence")
        else {
            return;
        };
        let mut pinger = Pinger::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 56).expect("raw socket");
        for seq in [0, 1, 0x1234, u16::MAX] {
            pinger.set_sequence(seq);
            assert_eq!(pinger.request.len(), 64);
            assert_eq!(
                u16::from_be_bytes([pinger.request[6], pinger.request[7]]),
                seq
            );
            // A packet with its checksum in sums to zero (RFC 1071).
            assert_eq!(checksum_finish(checksum_add(0, &pinger.request)), 0);
        }
    }

    /// Pings loopback in a namespace of its own and checks that every reply was timed by
    /// the kernel, and that the kernel's round trip is never longer than the pinger's own
    /// reading of the same exchange.
    fn pings_loopback(target: IpAddr) {
        let netns = pathlab_os::netns::Netns::new().expect("namespace");
        let mut pinger = netns
            .run(|| Pinger::new(target, 56))
            .unwrap()
            .expect("raw ICMP socket");
        // The first exchange may come before the kernel turned receive stamps on for the
        // machine (when no other socket had them): a warm-up, then two runs, the second
        // going on with the socket's datagram numbers.
        pinger
            .run(5, Duration::from_millis(2), Duration::from_millis(500))
            .expect("ping runs");
        let warm_up_fallbacks = pinger.user_space_fallbacks();
        let (mut kernel, mut user) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            let results = pinger
                .run(50, Duration::from_millis(1), Duration::from_millis(500))
                .expect("ping runs");
            assert_eq!(results.len(), 50);
            for result in &results {
                let (rtt, user_space) = (result.rtt.unwrap(), result.user_space_rtt.unwrap());
                assert_eq!(result.timed_by, Some(TimedBy::Kernel), "{result:?}");
                assert!(rtt <= user_space, "{result:?}");
                kernel.push(rtt);
                user.push(user_space);
            }
        }
        assert_eq!(pinger.user_space_fallbacks(), warm_up_fallbacks);
        kernel.sort();
        user.sort();
        eprintln!(
            "loopback {target}: kernel RTT p50 {:?} max {:?}, user-space RTT p50 {:?} max {:?}",
            kernel[kernel.len() / 2],
            kernel[kernel.len() - 1],
            user[user.len() / 2],
            user[user.len() - 1]
        );
    }

    #[test]
    fn loopback_pings_are_timed_by_the_kernel_ipv4_and_ipv6() {
        let Some(_serial) =
            pathlab_os::testing::privileged("loopback_pings_are_timed_by_the_kernel")
        else {
            return;
        };
        pings_loopback(IpAddr::V4(Ipv4Addr::LOCALHOST));
        pings_loopback(IpAddr::V6(Ipv6Addr::LOCALHOST));
    }
}
