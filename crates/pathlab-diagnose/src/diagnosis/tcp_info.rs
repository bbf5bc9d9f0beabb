//! The kernel's `tcp_info` and socket memory, read from the bytes it gives.

use serde::{Deserialize, Serialize};

/// Byte offsets of the fields of the kernel's `struct tcp_info` (include/uapi/linux/tcp.h),
/// with the kernel each appeared in where it matters: a shorter struct (an older kernel)
/// leaves the later fields unknown.
pub(crate) mod field {
    pub const STATE: usize = 0;
    pub const CA_STATE: usize = 1;
    pub const RETRANSMITS: usize = 2;
    pub const OPTIONS: usize = 5;
    pub const WSCALE: usize = 6;
    pub const APP_LIMITED: usize = 7;
    pub const RTO: usize = 8;
    pub const SND_MSS: usize = 16;
    pub const RCV_MSS: usize = 20;
    pub const UNACKED: usize = 24;
    pub const SACKED: usize = 28;
    pub const LOST: usize = 32;
    pub const RETRANS: usize = 36;
    pub const LAST_DATA_SENT: usize = 44;
    pub const LAST_DATA_RECV: usize = 52;
    pub const PMTU: usize = 60;
    pub const RCV_SSTHRESH: usize = 64;
    pub const RTT: usize = 68;
    pub const RTTVAR: usize = 72;
    pub const SND_SSTHRESH: usize = 76;
    pub const SND_CWND: usize = 80;
    pub const ADVMSS: usize = 84;
    pub const REORDERING: usize = 88;
    pub const RCV_RTT: usize = 92;
    pub const RCV_SPACE: usize = 96;
    pub const TOTAL_RETRANS: usize = 100;
    /// 3.15
    pub const PACING_RATE: usize = 104;
    /// 4.1
    pub const BYTES_ACKED: usize = 120;
    pub const BYTES_RECEIVED: usize = 128;
    /// 4.2
    pub const SEGS_OUT: usize = 136;
    pub const SEGS_IN: usize = 140;
    /// 4.6
    pub const NOTSENT_BYTES: usize = 144;
    pub const MIN_RTT: usize = 148;
    pub const DATA_SEGS_IN: usize = 152;
    pub const DATA_SEGS_OUT: usize = 156;
    /// 4.9
    pub const DELIVERY_RATE: usize = 160;
    /// 4.10
    pub const BUSY_TIME: usize = 168;
    pub const RWND_LIMITED: usize = 176;
    pub const SNDBUF_LIMITED: usize = 184;
    /// 4.18
    pub const DELIVERED: usize = 192;
    pub const DELIVERED_CE: usize = 196;
    /// 4.19
    pub const BYTES_SENT: usize = 200;
    pub const BYTES_RETRANS: usize = 208;
    pub const DSACK_DUPS: usize = 216;
    pub const REORD_SEEN: usize = 220;
    /// 5.4
    pub const RCV_OOOPACK: usize = 224;
    pub const SND_WND: usize = 228;
    /// 6.2
    pub const RCV_WND: usize = 232;
    /// 6.7
    pub const TOTAL_RTO: usize = 240;
    pub const TOTAL_RTO_RECOVERIES: usize = 242;
    pub const TOTAL_RTO_TIME: usize = 244;
    /// The struct's length on 6.7 and later.
    pub const LEN: usize = 248;
}

/// The kernel's "no slow-start threshold yet" (`TCP_INFINITE_SSTHRESH`).
pub const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// TCP states as the kernel numbers them (`TCP_ESTABLISHED` = 1, ...), by name.
pub const TCP_STATES: [&str; 13] = [
    "unknown",
    "established",
    "syn-sent",
    "syn-recv",
    "fin-wait-1",
    "fin-wait-2",
    "time-wait",
    "close",
    "close-wait",
    "last-ack",
    "listen",
    "closing",
    "new-syn-recv",
];

/// The kernel's `tcp_info` of one socket. Fields a shorter struct (an older kernel) did not
/// carry are zero; [`TcpInfo::len`] says how much there was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpInfo {
    /// How many bytes of the struct the kernel gave.
    pub len: u32,
    /// TCP state (see [`TCP_STATES`]).
    pub state: u8,
    /// Congestion-avoidance state: 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss.
    pub ca_state: u8,
    /// Retransmissions of the current unacknowledged segment (RTO backoff count).
    pub retransmits: u8,
    /// TCPI_OPT_* bits: 1 timestamps, 2 SACK, 4 window scaling, 8 ECN.
    pub options: u8,
    /// The shift this end applies to the peer's advertised window.
    pub snd_wscale: u8,
    /// The shift the peer applies to the window this end advertises.
    pub rcv_wscale: u8,
    /// The delivery-rate sample was taken while the application sent too little.
    pub app_limited: bool,
    /// Retransmission timeout, us.
    pub rto_us: u32,
    /// MSS this end sends with, bytes.
    pub snd_mss: u32,
    /// MSS estimated for what it receives, bytes.
    pub rcv_mss: u32,
    /// Segments sent and not acknowledged.
    pub unacked: u32,
    /// Segments selectively acknowledged.
    pub sacked: u32,
    /// Segments deemed lost.
    pub lost: u32,
    /// Segments retransmitted and not yet acknowledged.
    pub retrans: u32,
    /// Since data was last sent, ms.
    pub last_data_sent_ms: u32,
    /// Since data was last received, ms.
    pub last_data_recv_ms: u32,
    /// Path MTU, bytes.
    pub pmtu: u32,
    /// The bound on this end's advertised window while it grows, bytes.
    pub rcv_ssthresh: u32,
    /// Smoothed RTT and its variation, us.
    pub rtt_us: u32,
    /// Its variation, us.
    pub rttvar_us: u32,
    /// Slow-start threshold, segments ([`INFINITE_SSTHRESH`] before any).
    pub snd_ssthresh: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// MSS this end advertised, bytes.
    pub advmss: u32,
    /// Reordering the sender tolerates, segments.
    pub reordering: u32,
    /// The receiver's RTT estimate, us.
    pub rcv_rtt_us: u32,
    /// What the receiver expects to receive per RTT (its window's basis), bytes.
    pub rcv_space: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Bytes/s.
    pub pacing_rate: u64,
    /// Bytes the peer acknowledged.
    pub bytes_acked: u64,
    /// Bytes received in order.
    pub bytes_received: u64,
    /// Segments sent.
    pub segs_out: u32,
    /// Segments received.
    pub segs_in: u32,
    /// Bytes the application wrote that were not sent yet.
    pub notsent_bytes: u32,
    /// Smallest RTT seen, us.
    pub min_rtt_us: u32,
    /// Segments received with data.
    pub data_segs_in: u32,
    /// Segments sent with data.
    pub data_segs_out: u32,
    /// Bytes/s.
    pub delivery_rate: u64,
    /// Time with data to send or in flight, and the parts of it limited by the peer's window
    /// and by the send buffer, us.
    pub busy_time_us: u64,
    /// Of the busy time, how long the peer's window blocked it, us.
    pub rwnd_limited_us: u64,
    /// Of the busy time, how long the send buffer blocked it, us.
    pub sndbuf_limited_us: u64,
    /// Segments delivered (acknowledged), retransmissions included.
    pub delivered: u32,
    /// Of them, marked CE.
    pub delivered_ce: u32,
    /// Bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
    /// Duplicate segments the peer reported (D-SACK): spurious retransmissions.
    pub dsack_dups: u32,
    /// Reorderings seen.
    pub reord_seen: u32,
    /// Segments received out of order.
    pub rcv_ooopack: u32,
    /// The peer's advertised window, scaled, bytes.
    pub snd_wnd: u32,
    /// The window this end advertises, bytes.
    pub rcv_wnd: u32,
    /// Retransmission timeouts.
    pub total_rto: u16,
    /// Recoveries that started with a timeout.
    pub total_rto_recoveries: u16,
    /// Time spent in timeout recovery, ms.
    pub total_rto_time_ms: u32,
}

impl TcpInfo {
    /// Reads the struct from the bytes the kernel gave (`INET_DIAG_INFO`, or `getsockopt`),
    /// native byte order, as long as they are: fields beyond the end stay zero.
    pub fn parse(bytes: &[u8]) -> TcpInfo {
        let u8_at = |at: usize| bytes.get(at).copied().unwrap_or(0);
        let u16_at = |at: usize| {
            bytes
                .get(at..at + 2)
                .map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]))
        };
        let u32_at = |at: usize| {
            bytes
                .get(at..at + 4)
                .map_or(0, |b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
        };
        let u64_at = |at: usize| {
            bytes
                .get(at..at + 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        };
        let wscale = u8_at(field::WSCALE);
        TcpInfo {
            len: bytes.len().min(field::LEN) as u32,
            state: u8_at(field::STATE),
            ca_state: u8_at(field::CA_STATE),
            retransmits: u8_at(field::RETRANSMITS),
            options: u8_at(field::OPTIONS),
            snd_wscale: wscale & 0x0f,
            rcv_wscale: wscale >> 4,
            app_limited: u8_at(field::APP_LIMITED) & 1 != 0,
            rto_us: u32_at(field::RTO),
            snd_mss: u32_at(field::SND_MSS),
            rcv_mss: u32_at(field::RCV_MSS),
            unacked: u32_at(field::UNACKED),
            sacked: u32_at(field::SACKED),
            lost: u32_at(field::LOST),
            retrans: u32_at(field::RETRANS),
            last_data_sent_ms: u32_at(field::LAST_DATA_SENT),
            last_data_recv_ms: u32_at(field::LAST_DATA_RECV),
            pmtu: u32_at(field::PMTU),
            rcv_ssthresh: u32_at(field::RCV_SSTHRESH),
            rtt_us: u32_at(field::RTT),
            rttvar_us: u32_at(field::RTTVAR),
            snd_ssthresh: u32_at(field::SND_SSTHRESH),
            snd_cwnd: u32_at(field::SND_CWND),
            advmss: u32_at(field::ADVMSS),
            reordering: u32_at(field::REORDERING),
            rcv_rtt_us: u32_at(field::RCV_RTT),
            rcv_space: u32_at(field::RCV_SPACE),
            total_retrans: u32_at(field::TOTAL_RETRANS),
            pacing_rate: u64_at(field::PACING_RATE),
            bytes_acked: u64_at(field::BYTES_ACKED),
            bytes_received: u64_at(field::BYTES_RECEIVED),
            segs_out: u32_at(field::SEGS_OUT),
            segs_in: u32_at(field::SEGS_IN),
            notsent_bytes: u32_at(field::NOTSENT_BYTES),
            min_rtt_us: u32_at(field::MIN_RTT),
            data_segs_in: u32_at(field::DATA_SEGS_IN),
            data_segs_out: u32_at(field::DATA_SEGS_OUT),
            delivery_rate: u64_at(field::DELIVERY_RATE),
            busy_time_us: u64_at(field::BUSY_TIME),
            rwnd_limited_us: u64_at(field::RWND_LIMITED),
            sndbuf_limited_us: u64_at(field::SNDBUF_LIMITED),
            delivered: u32_at(field::DELIVERED),
            delivered_ce: u32_at(field::DELIVERED_CE),
            bytes_sent: u64_at(field::BYTES_SENT),
            bytes_retrans: u64_at(field::BYTES_RETRANS),
            dsack_dups: u32_at(field::DSACK_DUPS),
            reord_seen: u32_at(field::REORD_SEEN),
            rcv_ooopack: u32_at(field::RCV_OOOPACK),
            snd_wnd: u32_at(field::SND_WND),
            rcv_wnd: u32_at(field::RCV_WND),
            total_rto: u16_at(field::TOTAL_RTO),
            total_rto_recoveries: u16_at(field::TOTAL_RTO_RECOVERIES),
            total_rto_time_ms: u32_at(field::TOTAL_RTO_TIME),
        }
    }

    /// Whether the kernel keeps where the busy time went (4.10 and later).
    pub fn has_limits(&self) -> bool {
        self.len as usize >= field::SNDBUF_LIMITED + 8
    }

    /// Whether it reports the peer's advertised window (5.4 and later).
    pub fn has_peer_window(&self) -> bool {
        self.len as usize >= field::SND_WND + 4
    }

    /// The TCP state's name.
    pub fn state_name(&self) -> &'static str {
        TCP_STATES
            .get(usize::from(self.state))
            .copied()
            .unwrap_or("unknown")
    }
}

/// A socket's memory as the kernel accounts it (`INET_DIAG_SKMEMINFO`), bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketMemory {
    /// Received data waiting for the application, with its overhead.
    pub rmem_alloc: u32,
    /// The receive buffer's bound (SO_RCVBUF, doubled by the kernel, or autotuned).
    pub rcvbuf: u32,
    /// Sent data the peer has not acknowledged, with its overhead, in the stack.
    pub wmem_alloc: u32,
    /// The send buffer's bound.
    pub sndbuf: u32,
    /// Everything queued to send, sent or not.
    pub wmem_queued: u32,
    /// Packets dropped at this socket (a full receive buffer, a filter).
    pub drops: u32,
}

impl SocketMemory {
    /// Reads `INET_DIAG_SKMEMINFO`'s array of u32 (`SK_MEMINFO_*`), native byte order.
    pub fn parse(bytes: &[u8]) -> SocketMemory {
        let at = |index: usize| {
            bytes
                .get(index * 4..index * 4 + 4)
                .map_or(0, |b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
        };
        SocketMemory {
            rmem_alloc: at(0),
            rcvbuf: at(1),
            wmem_alloc: at(2),
            sndbuf: at(3),
            wmem_queued: at(5),
            drops: at(8),
        }
    }
}
