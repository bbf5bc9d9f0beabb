//! The RFC 6349 TCP throughput test, sans-IO: the overhead table, the ideal rate, the
//! bandwidth-delay product and the windows and connections it needs (section 5.1), the
//! choice of the steady state in a connection's `TCP_INFO` samples, and the three metrics
//! (section 4). The steps that measure (path MTU, baseline RTT, bottleneck, the TCP runs)
//! are run by `pathlab-probe-driver`; everything they measure comes in here as numbers.
//!
//! # The overhead table
//!
//! What a packet of `MTU` IP bytes costs the bottleneck beyond its TCP payload, in bytes:
//!
//! | layer | field | bytes |
//! |---|---|---|
//! | Ethernet (physical) | preamble and start-of-frame delimiter | 8 |
//! | Ethernet | header (two MAC addresses, EtherType) | 14 |
//! | Ethernet | frame check sequence | 4 |
//! | Ethernet (physical) | inter-frame gap | 12 |
//! | 802.1Q | VLAN tag, when the link has one | +4 |
//! | IP | IPv4 header / IPv6 header | 20 / 40 |
//! | TCP | header / with the timestamps option | 20 / 32 |
//!
//! [`Framing`] says which of the link-layer rows the bottleneck's rate counts: all 38
//! (`ethernet`, the RFC's physical Ethernet), the 14-byte header only (`frame`: what
//! Linux, tc, netem and pathlab's emulator count, a 1500-byte IP packet being a 1514-byte
//! frame to them), or none (`ip`). The ideal TCP rate is then
//!
//! ```text
//! ideal = bottleneck rate x (MTU - IP header - TCP header) / (MTU + link overhead)
//! ```
//!
//! which for 1 Gbit/s Ethernet, MTU 1500, no timestamps is 1000 x 1460 / 1538 = 949.28
//! Mbit/s (the RFC's section 3.3.1 figure), and for its T3 example (44.21 Mbit/s, PPP's 8
//! bytes of framing) 42.80 Mbit/s.
//!
//! # Windows and connections (section 5.1)
//!
//! The bandwidth-delay product, `BDP = bottleneck rate x baseline RTT / 8` bytes, is what
//! must be in flight to keep the bottleneck busy: the RFC asks for windows of at least the
//! BDP. The test gives the connections together the BDP and a quarter more
//! ([`WINDOW_HEADROOM`]): the receiving host holds part of a window back (delayed ACKs, the
//! application's reads, Linux's window updates), and with exactly the BDP a clean 100
//! Mbit/s, 40 ms line measured a Transfer Time Ratio of 1.01 to 1.06 where a quarter more
//! gave 1.000. When the largest window a connection may have (the `-w` given, else what
//! the host's buffer limits allow: [`KernelSettings::largest_window_bytes`]) is smaller,
//! `ceil(window needed / window)` connections fill the pipe together. A loss-based TCP
//! (Reno, CUBIC) keeps whatever it has in flight beyond the BDP queued at the bottleneck,
//! and the Buffer Delay Percentage shows it (about half the baseline RTT with the
//! headroom on that line; with BBR, which paces at the bottleneck's rate, far less).
//!
//! # The steady state
//!
//! The RFC measures TCP in congestion avoidance, not in slow start. A connection's slow
//! start ends one of two ways, both visible in its `TCP_INFO` samples:
//!
//! - a loss (or ECN mark) makes the kernel set a slow-start threshold. Slow start usually
//!   overshoots the path by as much as its buffer holds, and the window reduction after
//!   that burst of losses (fast recovery, sometimes a second reduction when a
//!   retransmission is lost too) takes several round trips while the queue drains, so slow
//!   start counts as over when the reduction is: at the first sample whose congestion
//!   window has grown past the threshold after having come down to it (congestion
//!   avoidance is growing the window);
//! - without a loss, its congestion window (segments x MSS) reaches the window it was
//!   given: from there the receiver's window, not slow start, limits it.
//!
//! [`SETTLE_RTTS`] baseline RTTs later its rate has settled. The steady state starts when
//! every connection has settled, never before [`FLOOR_RTTS`] baseline RTTs, and ends when
//! the senders stop. Each connection counts time from its own start, and N connections
//! are opened one after another, a handshake (an RTT) apart: the last stops up to N - 1
//! RTTs after the first, with the line to itself. So with N connections the steady state
//! ends N - 1 baseline RTTs before the test's end, when all are still sending.

use pathlab_core::wire::ethernet;
use serde::{Deserialize, Serialize};

use crate::capacity::{CapacityProgress, CapacityReport};
use crate::control::TcpDirection;
use crate::mtu::PathMtu;
use crate::rtt::RttReport;
use crate::tcp::{StreamReport, TcpSample, TcpTestReport};

/// Ethernet's preamble (7 bytes) and start-of-frame delimiter (1), on the wire before
/// every frame.
pub const ETHERNET_PREAMBLE_SFD_BYTES: u32 = 8;
/// Ethernet frame check sequence (CRC-32).
pub const ETHERNET_FCS_BYTES: u32 = 4;
/// Ethernet's minimum inter-frame gap: 96 bit times of silence.
pub const ETHERNET_INTERFRAME_GAP_BYTES: u32 = 12;
/// Everything physical Ethernet adds to an IP packet: 8 + 14 (the header) + 4 + 12 = 38
/// bytes.
pub const ETHERNET_OVERHEAD_BYTES: u32 = ETHERNET_PREAMBLE_SFD_BYTES
    + ethernet::HEADER_LEN as u32
    + ETHERNET_FCS_BYTES
    + ETHERNET_INTERFRAME_GAP_BYTES;
/// PPP in HDLC-like framing (RFC 1662): flag, address, control, 2-byte protocol, 2-byte
/// FCS, closing flag. The framing of the RFC's T3 example.
pub const PPP_OVERHEAD_BYTES: u32 = 8;
/// IPv4 header without options.
pub const IPV4_HEADER_BYTES: u32 = pathlab_core::wire::IPV4_HEADER_LEN as u32;
/// IPv6 header without extension headers.
pub const IPV6_HEADER_BYTES: u32 = pathlab_core::wire::IPV6_HEADER_LEN as u32;
/// TCP header without options.
pub const TCP_HEADER_BYTES: u32 = 20;
/// The TCP timestamps option (RFC 7323) as carried on every segment: 10 bytes and two
/// bytes of padding.
pub const TCP_TIMESTAMPS_BYTES: u32 = 12;

/// What Linux reports as the slow-start threshold before anything has set one.
pub const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// The window the connections get together, as a multiple of the BDP (when `-w` does not
/// set it).
pub const WINDOW_HEADROOM: f64 = 1.25;

/// The steady state never starts earlier than this many baseline RTTs into a run.
pub const FLOOR_RTTS: u64 = 10;
/// After a connection leaves slow start, this many baseline RTTs pass before its rate
/// counts as settled (the full pipe's data reaches the receiver half an RTT later, and the
/// ACK clock takes another RTT to run evenly).
pub const SETTLE_RTTS: u64 = 2;
/// A steady state must hold at least this many of the receivers' counting intervals.
pub const MIN_STEADY_INTERVALS: usize = 3;

/// Which link-layer bytes the bottleneck's rate counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Framing {
    /// Physical Ethernet, as the RFC counts it: preamble, SFD, header, FCS and the
    /// inter-frame gap (38 bytes per packet).
    #[default]
    Ethernet,
    /// The frame as Linux, tc, netem and pathlab's emulator count it: the 14-byte
    /// Ethernet header only.
    Frame,
    /// IP packets, nothing more.
    Ip,
}

impl Framing {
    /// The bytes this framing adds to every IP packet, with a VLAN tag if `vlan` (the tag
    /// is part of the frame, so `ip` has none).
    pub fn link_overhead_bytes(self, vlan: bool) -> u32 {
        let tag = if vlan {
            ethernet::VLAN_TAG_LEN as u32
        } else {
            0
        };
        match self {
            Framing::Ethernet => ETHERNET_OVERHEAD_BYTES + tag,
            Framing::Frame => ethernet::HEADER_LEN as u32 + tag,
            Framing::Ip => 0,
        }
    }

    /// The name the command line uses.
    pub fn name(self) -> &'static str {
        match self {
            Framing::Ethernet => "ethernet",
            Framing::Frame => "frame",
            Framing::Ip => "ip",
        }
    }
}

impl std::str::FromStr for Framing {
    type Err = String;

    fn from_str(text: &str) -> Result<Framing, String> {
        match text {
            "ethernet" => Ok(Framing::Ethernet),
            "frame" => Ok(Framing::Frame),
            "ip" => Ok(Framing::Ip),
            other => Err(format!(
                "unknown framing '{other}': expected ethernet, frame or ip"
            )),
        }
    }
}

/// The bytes one full-size TCP packet carries besides its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketOverhead {
    /// Link-layer bytes the bottleneck counts ([`Framing::link_overhead_bytes`]).
    pub link_bytes: u32,
    /// IP header.
    pub ip_header_bytes: u32,
    /// TCP header with the options every segment carries.
    pub tcp_header_bytes: u32,
}

impl PacketOverhead {
    /// The overhead of a TCP packet over `framing`, IPv6 or IPv4, with or without the
    /// timestamps option.
    pub fn new(framing: Framing, vlan: bool, ipv6: bool, timestamps: bool) -> PacketOverhead {
        PacketOverhead {
            link_bytes: framing.link_overhead_bytes(vlan),
            ip_header_bytes: if ipv6 {
                IPV6_HEADER_BYTES
            } else {
                IPV4_HEADER_BYTES
            },
            tcp_header_bytes: TCP_HEADER_BYTES + if timestamps { TCP_TIMESTAMPS_BYTES } else { 0 },
        }
    }

    /// TCP payload of a packet of `mtu` IP bytes.
    pub fn payload_bytes(&self, mtu: u32) -> u32 {
        mtu.saturating_sub(self.ip_header_bytes + self.tcp_header_bytes)
    }

    /// What a packet of `mtu` IP bytes costs the bottleneck.
    pub fn wire_bytes(&self, mtu: u32) -> u32 {
        mtu + self.link_bytes
    }
}

/// The largest TCP payload rate a bottleneck of `bottleneck_bps` (counting the bytes of
/// `overhead.link_bytes`) carries with packets of `mtu` IP bytes, bits/s (section 3.3.1):
/// every packet full, back to back.
pub fn ideal_tcp_rate_bps(bottleneck_bps: f64, mtu: u32, overhead: &PacketOverhead) -> f64 {
    bottleneck_bps * f64::from(overhead.payload_bytes(mtu)) / f64::from(overhead.wire_bytes(mtu))
}

/// The rate a bottleneck counting `framing`'s bytes has when it carries `ip_bps` of IP
/// packets of `packet_bytes` (a capacity measured at the IP layer, restated as the rate the
/// ideal is computed from).
pub fn link_rate_bps(ip_bps: f64, packet_bytes: u32, framing: Framing, vlan: bool) -> f64 {
    ip_bps * f64::from(packet_bytes + framing.link_overhead_bytes(vlan)) / f64::from(packet_bytes)
}

/// The bandwidth-delay product of `rate_bps` and `rtt_ns`, bytes, rounded up.
pub fn bdp_bytes(rate_bps: f64, rtt_ns: u64) -> u64 {
    (rate_bps * rtt_ns as f64 / 8e9).ceil() as u64
}

/// The rate one connection with `window_bytes` in flight reaches over `rtt_ns`, bits/s.
pub fn window_limited_rate_bps(window_bytes: u64, rtt_ns: u64) -> f64 {
    window_bytes as f64 * 8.0 / (rtt_ns as f64 * 1e-9)
}

/// Connections of `window_bytes` each needed to hold `bdp_bytes` in flight (section 5.1),
/// at least one.
pub fn connections_needed(bdp_bytes: u64, window_bytes: u64) -> u32 {
    bdp_bytes.div_ceil(window_bytes.max(1)).max(1) as u32
}

/// How long `bytes` of payload take at `rate_bps`, s.
pub fn transfer_time_s(bytes: u64, rate_bps: f64) -> f64 {
    bytes as f64 * 8.0 / rate_bps
}

/// TCP Transfer Time Ratio (section 4.1): the actual transfer time over the ideal one; 1
/// is ideal, 1.25 means 25% longer.
pub fn transfer_time_ratio(actual_s: f64, ideal_s: f64) -> f64 {
    actual_s / ideal_s
}

/// TCP Efficiency (section 4.2): the share of transmitted bytes that were not
/// retransmissions; `None` when nothing was sent.
pub fn tcp_efficiency(transmitted_bytes: u64, retransmitted_bytes: u64) -> Option<f64> {
    (transmitted_bytes > 0).then(|| {
        transmitted_bytes.saturating_sub(retransmitted_bytes) as f64 / transmitted_bytes as f64
    })
}

/// Buffer Delay Percentage (section 4.3): how much longer the RTT is under load than the
/// baseline, in percent of the baseline.
pub fn buffer_delay_percent(mean_rtt_under_load_ns: f64, baseline_rtt_ns: f64) -> f64 {
    (mean_rtt_under_load_ns - baseline_rtt_ns) / baseline_rtt_ns * 100.0
}

/// The TCP header bytes a connection's segments carry, from the MSS it was clamped to
/// (`TCP_MAXSEG`: the path MTU less the IP and the bare TCP header) and the MSS the kernel
/// used (`TCP_INFO`'s `snd_mss`, which leaves out the options every segment carries).
/// `None` when the difference is not an option length (another clamp was in force).
pub fn tcp_header_in_use(clamped_mss: u32, used_mss: u32) -> Option<u32> {
    let options = clamped_mss.checked_sub(used_mss)?;
    (options <= 40 && options % 4 == 0).then_some(TCP_HEADER_BYTES + options)
}

/// The host's TCP settings the RFC asks to report, and the window limit they imply.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KernelSettings {
    /// `net.ipv4.tcp_rmem`: min, default, max receive buffer (autotuning's range), bytes.
    pub tcp_rmem: [u64; 3],
    /// `net.ipv4.tcp_wmem`: min, default, max send buffer, bytes.
    pub tcp_wmem: [u64; 3],
    /// `net.core.rmem_max`: the most `SO_RCVBUF` may ask for, bytes.
    pub rmem_max: u64,
    /// `net.core.wmem_max`: the most `SO_SNDBUF` may ask for, bytes.
    pub wmem_max: u64,
    /// `net.ipv4.tcp_window_scaling` (RFC 7323): without it no window exceeds 65535 bytes.
    pub window_scaling: bool,
    /// `net.ipv4.tcp_timestamps`.
    pub timestamps: bool,
    /// `net.ipv4.tcp_sack`.
    pub sack: bool,
    /// `net.ipv4.tcp_congestion_control`: what a connection uses unless told otherwise.
    pub congestion_control: String,
}

/// The largest window without window scaling.
pub const UNSCALED_WINDOW_MAX: u64 = 65_535;

impl KernelSettings {
    /// The largest window one connection of this host may use, bytes. Autotuning grows a
    /// connection's buffers up to `tcp_rmem`/`tcp_wmem` max, and Linux keeps about half of
    /// a buffer for its bookkeeping (`tcp_adv_win_scale` 1; 6.6 and later start from a 50%
    /// scaling ratio), so half the smaller maximum is window. A buffer set with
    /// `SO_RCVBUF`/`SO_SNDBUF`, as the test does, is capped at `rmem_max`/`wmem_max` and
    /// doubled by the kernel, so about that much is window. Without window scaling, 65535.
    pub fn largest_window_bytes(&self) -> u64 {
        let autotuned = self.tcp_rmem[2].min(self.tcp_wmem[2]) / 2;
        let set = self.rmem_max.min(self.wmem_max);
        let largest = autotuned.min(set);
        if self.window_scaling {
            largest
        } else {
            largest.min(UNSCALED_WINDOW_MAX)
        }
    }
}

/// Where the bottleneck rate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RateSource {
    /// `--rate`.
    Given,
    /// Measured by the capacity step.
    Measured,
}

/// What limits one connection's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowLimit {
    /// `-w`.
    Given,
    /// The host's buffer limits ([`KernelSettings::largest_window_bytes`]).
    Host,
}

/// What the plan is computed from: the first three steps' results and the options.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInputs {
    /// Which way the data goes (`Up` or `Down`).
    pub direction: TcpDirection,
    /// Path MTU from the client to the server, bytes.
    pub mtu_up_bytes: u32,
    /// Path MTU from the server to the client, bytes.
    pub mtu_down_bytes: u32,
    /// IPv6 (else IPv4).
    pub ipv6: bool,
    /// Baseline RTT, ns.
    pub baseline_rtt_ns: u64,
    /// Bottleneck rate, bits/s, counting what `framing` counts.
    pub bottleneck_bps: f64,
    /// Where the rate came from.
    pub rate_source: RateSource,
    /// Which link bytes the rate counts.
    pub framing: Framing,
    /// Whether the bottleneck's frames carry a VLAN tag.
    pub vlan: bool,
    /// `-w`: the window of every connection, bytes.
    pub window_bytes: Option<u64>,
    /// `--mss`, bytes.
    pub mss_bytes: Option<u32>,
    /// The most connections the test may open.
    pub max_connections: u32,
    /// The host's settings.
    pub kernel: KernelSettings,
}

/// Step 4: the ideal rate, the BDP, and the windows and connections that fill the pipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Which way the data goes.
    pub direction: TcpDirection,
    /// The path MTU in the data's direction, bytes.
    pub data_mtu_bytes: u32,
    /// Per-packet overhead (TCP header as this host's timestamps setting implies).
    pub overhead: PacketOverhead,
    /// Bottleneck rate, bits/s.
    pub bottleneck_bps: f64,
    /// Where it came from.
    pub rate_source: RateSource,
    /// What it counts.
    pub framing: Framing,
    /// VLAN tag on the bottleneck's frames.
    pub vlan: bool,
    /// Baseline RTT, ns.
    pub baseline_rtt_ns: u64,
    /// The ideal TCP payload rate at the path MTU, bits/s.
    pub ideal_rate_bps: f64,
    /// Bandwidth-delay product: bottleneck rate x baseline RTT, bytes.
    pub bdp_bytes: u64,
    /// The MSS the connections are clamped to (`TCP_MAXSEG`), bytes: `--mss`, else the
    /// path MTU less the IP and TCP headers, so that no segment is larger than the path
    /// carries even where it drops large packets silently.
    pub mss_bytes: u32,
    /// Whether `mss_bytes` came from `--mss`.
    pub mss_given: bool,
    /// The largest window one connection may use, bytes.
    pub largest_window_bytes: u64,
    /// What limits it.
    pub window_limit: WindowLimit,
    /// The window the connections need together: the BDP times [`WINDOW_HEADROOM`], bytes.
    pub window_needed_bytes: u64,
    /// Connections that fill the pipe: `ceil(window needed / largest window)`.
    pub connections: u32,
    /// The window each connection is given, bytes (`SO_SNDBUF`/`SO_RCVBUF` at both ends):
    /// `-w`, else the window needed shared out over the connections.
    pub window_per_connection_bytes: u64,
}

/// Why the inputs make no plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// The rate is zero, negative or not a number.
    #[error("the bottleneck rate must be above zero (got {0} bit/s)")]
    BadRate(f64),
    /// The data direction is neither up nor down.
    #[error("the RFC 6349 test runs one direction at a time (up, or down with -R)")]
    BothDirections,
    /// The path MTU leaves no TCP payload.
    #[error(
        "a path MTU of {mtu} bytes leaves no room for TCP payload after {headers} bytes of headers"
    )]
    MtuTooSmall {
        /// The MTU.
        mtu: u32,
        /// IP and TCP headers.
        headers: u32,
    },
    /// The RTT is zero.
    #[error("the baseline RTT is zero")]
    NoRtt,
    /// `-w` is too small for TCP to work.
    #[error("a window of {window} bytes is less than two segments of {mss} bytes")]
    WindowTooSmall {
        /// The window.
        window: u64,
        /// The MSS.
        mss: u32,
    },
    /// `--mss` too small or larger than the path carries.
    #[error("--mss {mss} is outside 88..={largest} (the path MTU of {mtu} bytes less the IP and TCP headers)")]
    BadMss {
        /// What was given.
        mss: u32,
        /// The largest the path carries.
        largest: u32,
        /// The path MTU.
        mtu: u32,
    },
    /// More connections are needed than the test may open.
    #[error(
        "the path needs a {needed_window}-byte window (its BDP and a quarter more): in windows \
         of {window} bytes that takes {needed} connections, and the server allows {max}; give \
         a larger -w"
    )]
    TooManyConnections {
        /// The window the path needs.
        needed_window: u64,
        /// The window per connection.
        window: u64,
        /// Connections needed.
        needed: u32,
        /// The most allowed.
        max: u32,
    },
}

/// The smallest MSS Linux accepts for `TCP_MAXSEG`.
pub const MIN_MSS_BYTES: u32 = 88;

impl Plan {
    /// Step 4 from the first three steps' results.
    pub fn new(inputs: &PlanInputs) -> Result<Plan, PlanError> {
        if !(inputs.bottleneck_bps.is_finite() && inputs.bottleneck_bps > 0.0) {
            return Err(PlanError::BadRate(inputs.bottleneck_bps));
        }
        if inputs.baseline_rtt_ns == 0 {
            return Err(PlanError::NoRtt);
        }
        let data_mtu_bytes = match inputs.direction {
            TcpDirection::Up => inputs.mtu_up_bytes,
            TcpDirection::Down => inputs.mtu_down_bytes,
            TcpDirection::Both => return Err(PlanError::BothDirections),
        };
        let overhead = PacketOverhead::new(
            inputs.framing,
            inputs.vlan,
            inputs.ipv6,
            inputs.kernel.timestamps,
        );
        let bare_headers = overhead.ip_header_bytes + TCP_HEADER_BYTES;
        if overhead.payload_bytes(data_mtu_bytes) == 0 {
            return Err(PlanError::MtuTooSmall {
                mtu: data_mtu_bytes,
                headers: overhead.ip_header_bytes + overhead.tcp_header_bytes,
            });
        }
        let path_mss = data_mtu_bytes - bare_headers;
        let mss_bytes = match inputs.mss_bytes {
            Some(mss) if !(MIN_MSS_BYTES..=path_mss).contains(&mss) => {
                return Err(PlanError::BadMss {
                    mss,
                    largest: path_mss,
                    mtu: data_mtu_bytes,
                })
            }
            Some(mss) => mss,
            None => path_mss,
        };
        let bdp = bdp_bytes(inputs.bottleneck_bps, inputs.baseline_rtt_ns);
        let (largest_window_bytes, window_limit) = match inputs.window_bytes {
            Some(window) => (window, WindowLimit::Given),
            None => (inputs.kernel.largest_window_bytes(), WindowLimit::Host),
        };
        if largest_window_bytes < 2 * u64::from(mss_bytes) {
            return Err(PlanError::WindowTooSmall {
                window: largest_window_bytes,
                mss: mss_bytes,
            });
        }
        let window_needed_bytes = (bdp as f64 * WINDOW_HEADROOM).ceil() as u64;
        let connections = connections_needed(window_needed_bytes, largest_window_bytes);
        if connections > inputs.max_connections {
            return Err(PlanError::TooManyConnections {
                needed_window: window_needed_bytes,
                window: largest_window_bytes,
                needed: connections,
                max: inputs.max_connections,
            });
        }
        let window_per_connection_bytes = match window_limit {
            WindowLimit::Given => largest_window_bytes,
            // At least two segments, so a tiny BDP still gets a working window.
            WindowLimit::Host => window_needed_bytes
                .div_ceil(u64::from(connections))
                .max(2 * u64::from(mss_bytes)),
        };
        Ok(Plan {
            direction: inputs.direction,
            data_mtu_bytes,
            overhead,
            bottleneck_bps: inputs.bottleneck_bps,
            rate_source: inputs.rate_source,
            framing: inputs.framing,
            vlan: inputs.vlan,
            baseline_rtt_ns: inputs.baseline_rtt_ns,
            ideal_rate_bps: ideal_tcp_rate_bps(inputs.bottleneck_bps, data_mtu_bytes, &overhead),
            bdp_bytes: bdp,
            window_needed_bytes,
            mss_bytes,
            mss_given: inputs.mss_bytes.is_some(),
            largest_window_bytes,
            window_limit,
            connections,
            window_per_connection_bytes,
        })
    }

    /// The rate one connection with the largest window reaches at the baseline RTT, bits/s.
    pub fn one_connection_bps(&self) -> f64 {
        window_limited_rate_bps(self.largest_window_bytes, self.baseline_rtt_ns)
    }

    /// The ideal rate with the TCP header `tcp_header_bytes` long (as a connection used it).
    pub fn ideal_rate_with_tcp_header(&self, tcp_header_bytes: u32) -> f64 {
        let overhead = PacketOverhead {
            tcp_header_bytes,
            ..self.overhead
        };
        ideal_tcp_rate_bps(self.bottleneck_bps, self.data_mtu_bytes, &overhead)
    }
}

/// What ended a connection's slow start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlowStartEnd {
    /// A loss (or CE mark) set the slow-start threshold; the time is when congestion
    /// avoidance first grew the window after the reduction.
    Ssthresh,
    /// The congestion window reached the connection's window.
    WindowFull,
    /// Neither happened; the floor decides.
    Floor,
}

/// The part of a run counted as steady state, on the senders' clock (since the streams
/// started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteadyState {
    /// Start, ns.
    pub from_ns: u64,
    /// End, ns.
    pub to_ns: u64,
    /// When the last connection to leave slow start left it, ns.
    pub slow_start_end_ns: u64,
    /// What ended that connection's slow start.
    pub slow_start_end: SlowStartEnd,
}

/// Why a run could not be analysed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnalysisError {
    /// No stream carried data in the test's direction.
    #[error("the TCP run reported no stream")]
    NoStreams,
    /// A sender reported no `TCP_INFO` sample.
    #[error("stream {0} has no TCP_INFO samples")]
    NoSamples(u32),
    /// Slow start took (nearly) the whole run.
    #[error(
        "no steady state: slow start ended {slow_start_s:.2} s into the {duration_s:.2} s run, \
         leaving less than {MIN_STEADY_INTERVALS} counting intervals; run longer (-t)"
    )]
    NoSteadyState {
        /// When the steady state would have started, s.
        slow_start_s: f64,
        /// The run's length, s.
        duration_s: f64,
    },
}

/// When one connection left slow start, and why: when congestion avoidance first grew the
/// window after the reduction that the loss ending slow start caused, or when its window
/// filled before any loss.
fn slow_start_end(samples: &[TcpSample], window_bytes: u64) -> Option<(u64, SlowStartEnd)> {
    let event = samples.iter().position(|s| {
        s.ssthresh < TCP_INFINITE_SSTHRESH || u64::from(s.cwnd) * u64::from(s.mss) >= window_bytes
    })?;
    if samples[event].ssthresh == TCP_INFINITE_SSTHRESH {
        return Some((samples[event].at_ns, SlowStartEnd::WindowFull));
    }
    // A reduction (fast recovery, PRR, a timeout's slow start back up) ends with the window
    // at the threshold; congestion avoidance then grows it past. A second loss during the
    // reduction sets a new threshold and starts over.
    let mut reduced_to = None;
    samples[event..].iter().find_map(|s| {
        if s.ssthresh == TCP_INFINITE_SSTHRESH {
            // An undone reduction (the loss was spurious): nothing to wait for.
            return Some((s.at_ns, SlowStartEnd::Ssthresh));
        }
        if s.cwnd <= s.ssthresh {
            reduced_to = Some(s.ssthresh);
            None
        } else if reduced_to == Some(s.ssthresh) {
            Some((s.at_ns, SlowStartEnd::Ssthresh))
        } else {
            None
        }
    })
}

/// The steady state of a run of `duration_ns` whose connections were each given a window of
/// `window_bytes`, with counting intervals of `interval_ns`.
pub fn steady_state(
    streams: &[StreamReport],
    window_bytes: u64,
    baseline_rtt_ns: u64,
    duration_ns: u64,
    interval_ns: u64,
) -> Result<SteadyState, AnalysisError> {
    if streams.is_empty() {
        return Err(AnalysisError::NoStreams);
    }
    let floor = FLOOR_RTTS * baseline_rtt_ns;
    // The last connection to leave slow start; one that never visibly left it leaves the
    // decision to the floor.
    let mut last = Some((0, SlowStartEnd::Floor));
    for stream in streams {
        if stream.samples.is_empty() {
            return Err(AnalysisError::NoSamples(stream.index));
        }
        last = match (last, slow_start_end(&stream.samples, window_bytes)) {
            (Some(so_far), Some(end)) => Some(if end.0 >= so_far.0 { end } else { so_far }),
            _ => None,
        };
    }
    let (from_ns, slow_start_end_ns, slow_start_end) = match last {
        Some((at, why)) => ((at + SETTLE_RTTS * baseline_rtt_ns).max(floor), at, why),
        None => (floor, floor, SlowStartEnd::Floor),
    };
    let stagger = (streams.len() as u64 - 1) * baseline_rtt_ns;
    let steady = SteadyState {
        from_ns,
        to_ns: duration_ns.saturating_sub(stagger),
        slow_start_end_ns,
        slow_start_end,
    };
    if counting_intervals(&steady, interval_ns).len() < MIN_STEADY_INTERVALS {
        return Err(AnalysisError::NoSteadyState {
            slow_start_s: from_ns as f64 * 1e-9,
            duration_s: duration_ns as f64 * 1e-9,
        });
    }
    Ok(steady)
}

/// The receivers' counting intervals (by index) that lie wholly inside `steady`.
fn counting_intervals(steady: &SteadyState, interval_ns: u64) -> std::ops::Range<usize> {
    let interval_ns = interval_ns.max(1);
    let first = steady.from_ns.div_ceil(interval_ns) as usize;
    let end = (steady.to_ns / interval_ns) as usize;
    first..end.max(first)
}

/// One TCP run (one connection, or N) through the three metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    /// Connections.
    pub connections: u32,
    /// Window each was given, bytes.
    pub window_per_connection_bytes: u64,
    /// The steady state.
    pub steady: SteadyState,
    /// Payload bytes the receivers got in the steady state's whole counting intervals.
    pub steady_bytes: u64,
    /// Those intervals' length together, s.
    pub steady_s: f64,
    /// Steady-state TCP throughput (payload), bits/s.
    pub throughput_bps: f64,
    /// The MSS the senders used (`TCP_INFO` `snd_mss`, options excluded), bytes.
    pub mss_used_bytes: u32,
    /// The TCP header every segment carried (options included), bytes.
    pub tcp_header_bytes: u32,
    /// The ideal rate with that header, bits/s.
    pub ideal_rate_bps: f64,
    /// How long `steady_bytes` take at the ideal rate, s.
    pub ideal_transfer_s: f64,
    /// How long they took, s.
    pub actual_transfer_s: f64,
    /// TCP Transfer Time Ratio.
    pub transfer_time_ratio: f64,
    /// Bytes the senders transmitted, retransmissions included (whole run).
    pub transmitted_bytes: u64,
    /// Bytes they retransmitted.
    pub retransmitted_bytes: u64,
    /// Segments they retransmitted.
    pub retransmitted_segments: u64,
    /// TCP Efficiency, 0 to 1.
    pub tcp_efficiency: f64,
    /// Mean smoothed RTT of the senders' `TCP_INFO` samples in the steady state, ns.
    pub mean_rtt_ns: f64,
    /// Samples it is the mean of.
    pub rtt_samples: usize,
    /// Buffer Delay Percentage.
    pub buffer_delay_percent: f64,
}

/// The streams of `report` that carry data in `direction`.
pub fn data_streams(report: &TcpTestReport, direction: TcpDirection) -> &[StreamReport] {
    match direction {
        TcpDirection::Down => &report.down,
        _ => &report.up,
    }
}

/// Steps 5 and 6 for one run: steady-state throughput and the three metrics.
pub fn analyse_phase(
    plan: &Plan,
    report: &TcpTestReport,
    connections: u32,
    window_per_connection_bytes: u64,
    duration_ns: u64,
) -> Result<PhaseResult, AnalysisError> {
    let streams = data_streams(report, plan.direction);
    let steady = steady_state(
        streams,
        window_per_connection_bytes,
        plan.baseline_rtt_ns,
        duration_ns,
        report.interval_ns,
    )?;
    let intervals = counting_intervals(&steady, report.interval_ns);
    let steady_bytes: u64 = streams
        .iter()
        .map(|s| {
            s.interval_bytes
                .get(intervals.clone())
                .map_or(0, |counts| counts.iter().sum::<u64>())
        })
        .sum();
    let steady_s = intervals.len() as f64 * report.interval_ns as f64 * 1e-9;
    let throughput_bps = steady_bytes as f64 * 8.0 / steady_s;
    let mss_used_bytes = streams
        .iter()
        .filter_map(|s| s.samples.last())
        .map(|s| s.mss)
        .max()
        .unwrap_or(0);
    let tcp_header_bytes =
        tcp_header_in_use(plan.mss_bytes, mss_used_bytes).unwrap_or(plan.overhead.tcp_header_bytes);
    let ideal_rate_bps = plan.ideal_rate_with_tcp_header(tcp_header_bytes);
    let ideal_transfer_s = transfer_time_s(steady_bytes, ideal_rate_bps);
    let (transmitted_bytes, retransmitted_bytes, retransmitted_segments) = streams
        .iter()
        .filter_map(|s| s.samples.last())
        .fold((0, 0, 0), |(sent, retrans, segments), last| {
            (
                sent + last.sent_bytes,
                retrans + last.retrans_bytes,
                segments + u64::from(last.retrans_segments),
            )
        });
    let rtts: Vec<f64> = streams
        .iter()
        .flat_map(|s| &s.samples)
        .filter(|s| s.at_ns >= steady.from_ns && s.at_ns <= steady.to_ns && s.srtt_us > 0)
        .map(|s| f64::from(s.srtt_us) * 1e3)
        .collect();
    let mean_rtt_ns = if rtts.is_empty() {
        f64::NAN
    } else {
        rtts.iter().sum::<f64>() / rtts.len() as f64
    };
    Ok(PhaseResult {
        connections,
        window_per_connection_bytes,
        steady,
        steady_bytes,
        steady_s,
        throughput_bps,
        mss_used_bytes,
        tcp_header_bytes,
        ideal_rate_bps,
        ideal_transfer_s,
        actual_transfer_s: steady_s,
        transfer_time_ratio: transfer_time_ratio(steady_s, ideal_transfer_s),
        transmitted_bytes,
        retransmitted_bytes,
        retransmitted_segments,
        tcp_efficiency: tcp_efficiency(transmitted_bytes, retransmitted_bytes).unwrap_or(f64::NAN),
        mean_rtt_ns,
        rtt_samples: rtts.len(),
        buffer_delay_percent: buffer_delay_percent(mean_rtt_ns, plan.baseline_rtt_ns as f64),
    })
}

/// When a step ran, on the wall clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepTime {
    /// The step.
    pub step: String,
    /// Its start, ns since the Unix epoch.
    pub started_unix_ns: u64,
    /// How long it took, ns.
    pub took_ns: u64,
}

/// Step 2's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// The idle period probed, ns.
    pub idle_ns: u64,
    /// Time between probes, ns.
    pub interval_ns: u64,
    /// UDP payload of each probe, bytes.
    pub probe_bytes: u32,
    /// The baseline RTT: the smallest round trip, ns.
    pub rtt_ns: u64,
    /// The round trips in full.
    pub report: RttReport,
}

/// One TCP run: its analysis and what the run reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Steps 5 and 6.
    pub result: PhaseResult,
    /// The run (every `TCP_INFO` sample when saved).
    pub run: TcpTestReport,
}

/// The whole RFC 6349 test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rfc6349Report {
    /// When each step ran.
    pub steps: Vec<StepTime>,
    /// Step 1: the path MTU from the client to the server.
    pub mtu_up: PathMtu,
    /// Step 1: the path MTU from the server to the client.
    pub mtu_down: PathMtu,
    /// Step 2.
    pub baseline: Baseline,
    /// Step 3, when the rate was measured rather than given.
    pub capacity: Option<CapacityReport>,
    /// The host's TCP settings.
    pub kernel: KernelSettings,
    /// Step 4 (with step 3's rate in it).
    pub plan: Plan,
    /// Congestion control of the senders.
    pub congestion_control: String,
    /// Length of each TCP run, ns.
    pub duration_ns: u64,
    /// Step 5 with one connection.
    pub single: Phase,
    /// Step 5 with the plan's connections, when more than one.
    pub multiple: Option<Phase>,
}

impl Rfc6349Report {
    /// The run whose figures answer the test: with the plan's connections.
    pub fn answer(&self) -> &Phase {
        self.multiple.as_ref().unwrap_or(&self.single)
    }
}

/// What an RFC 6349 test had found when it was cut short (a server that stopped
/// answering, a path that went down): each step that finished, and what the step that
/// failed had measured, where it had something.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rfc6349Progress {
    /// When each step ran; the last is the one that failed.
    pub steps: Vec<StepTime>,
    /// The step that failed.
    pub failed_step: String,
    /// Step 1 up, if it finished.
    pub mtu_up: Option<PathMtu>,
    /// Step 1 down, if it finished.
    pub mtu_down: Option<PathMtu>,
    /// Step 2, if it finished.
    pub baseline: Option<Baseline>,
    /// Step 3, when measured and finished.
    pub capacity: Option<CapacityReport>,
    /// Step 3's capacity run, when it was the step that failed: its steps that finished.
    pub capacity_progress: Option<CapacityProgress>,
    /// The host's TCP settings.
    pub kernel: KernelSettings,
    /// Step 4, if it was reached.
    pub plan: Option<Plan>,
    /// Congestion control of the senders.
    pub congestion_control: String,
    /// Length of each TCP run, ns.
    pub duration_ns: u64,
    /// Step 5 with one connection, if it finished.
    pub single: Option<Phase>,
    /// Step 5 with the plan's connections, if it finished.
    pub multiple: Option<Phase>,
    /// The TCP run of the step that failed, as this end saw it: the senders' `TCP_INFO`
    /// samples upwards, the bytes received per interval downwards (the server's side never
    /// came).
    pub interrupted_run: Option<TcpTestReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual - expected).abs() <= tolerance
    }

    #[test]
    fn the_overhead_table_adds_up() {
        assert_eq!(ETHERNET_OVERHEAD_BYTES, 38);
        assert_eq!(Framing::Ethernet.link_overhead_bytes(false), 38);
        assert_eq!(Framing::Ethernet.link_overhead_bytes(true), 42);
        // The emulator and netem count a 1500-byte IP packet as a 1514-byte frame.
        assert_eq!(
            PacketOverhead::new(Framing::Frame, false, false, true).wire_bytes(1500),
            1514
        );
        assert_eq!(Framing::Ip.link_overhead_bytes(true), 0);
        let v6 = PacketOverhead::new(Framing::Ip, false, true, true);
        assert_eq!(v6.payload_bytes(1500), 1500 - 40 - 32);
        for name in ["ethernet", "frame", "ip"] {
            assert_eq!(name.parse::<Framing>().unwrap().name(), name);
        }
        assert!("wifi".parse::<Framing>().is_err());
    }

    #[test]
    fn ideal_rates_are_the_rfcs() {
        // Section 3.3.1: 1 GbE, MTU 1500, 20-byte TCP header: 1460 / 1538 of 1 Gbit/s,
        // 81,274 frames/s of 1460 payload bytes = 949.28 Mbit/s.
        let gbe = PacketOverhead::new(Framing::Ethernet, false, false, false);
        let rate = ideal_tcp_rate_bps(1e9, 1500, &gbe);
        assert!(close(rate, 949.28e6, 0.01e6), "{rate}");
        // The T3 example: 44.21 Mbit/s with PPP framing (8 bytes): 3664 frames/s of 1460
        // payload bytes = 42.8 Mbit/s.
        let t3 = PacketOverhead {
            link_bytes: PPP_OVERHEAD_BYTES,
            ..gbe
        };
        let rate = ideal_tcp_rate_bps(44.21e6, 1500, &t3);
        assert!(close(rate, 42.80e6, 0.005e6), "{rate}");
        assert_eq!((44.21e6 / (1508.0 * 8.0)) as u32, 3664);
        // With timestamps, as Linux sends by default: 1448 payload bytes.
        let ts = PacketOverhead::new(Framing::Ethernet, false, false, true);
        assert!(close(ideal_tcp_rate_bps(1e9, 1500, &ts), 941.48e6, 0.01e6));
        // A capacity measured with 1500-byte packets at the IP layer is 1514/1500 of it as
        // frames, 1538/1500 on physical Ethernet.
        let ip = 100e6 * 1500.0 / 1514.0;
        assert!(close(
            link_rate_bps(ip, 1500, Framing::Frame, false),
            100e6,
            1e-6
        ));
        assert!(close(link_rate_bps(ip, 1500, Framing::Ip, true), ip, 1e-6));
        assert!(close(
            link_rate_bps(1e9, 1500, Framing::Ethernet, false),
            1e9 * 1538.0 / 1500.0,
            1e-3
        ));
        // The emulator's 100 Mbit/s: 1448 payload bytes per 1514-byte frame.
        let frame = PacketOverhead::new(Framing::Frame, false, false, true);
        assert!(close(
            ideal_tcp_rate_bps(100e6, 1500, &frame),
            100e6 * 1448.0 / 1514.0,
            1e-6
        ));
    }

    #[test]
    fn the_metrics_give_the_rfcs_examples() {
        // Section 4.1 (and the seed's reading of it): 42.8 Mbit/s ideal on the T3, 40
        // measured: the transfer takes 1.07 times as long.
        let bytes = 100_000_000;
        let ratio =
            transfer_time_ratio(transfer_time_s(bytes, 40e6), transfer_time_s(bytes, 42.8e6));
        assert!(close(ratio, 1.07, 0.001), "{ratio}");
        // Section 4.2: 100,000 bytes and 2,000 retransmitted: 102,000 transmitted, 98.03%
        // (98.039, truncated).
        let efficiency = tcp_efficiency(102_000, 2_000).unwrap();
        assert!(close(efficiency * 100.0, 98.03, 0.01), "{efficiency}");
        assert_eq!(tcp_efficiency(0, 0), None);
        assert_eq!(tcp_efficiency(1000, 0), Some(1.0));
        // Section 4.3: 25 ms baseline, 32 ms under load: 28%.
        assert!(close(buffer_delay_percent(32e6, 25e6), 28.0, 1e-9));
    }

    #[test]
    fn bdps_are_the_rfcs_table() {
        // Section 3.3.1's table: link rate x RTT / 8.
        for (rate, rtt_ms, kbytes) in [
            (1.536e6, 20, 3.84),
            (44.21e6, 25, 138.16),
            (1000e6, 2, 250.0),
            (10_000e6, 1, 1250.0),
        ] {
            let bdp = bdp_bytes(rate, rtt_ms * 1_000_000);
            assert!(close(bdp as f64 / 1e3, kbytes, 0.005), "{rate}: {bdp}");
        }
        // "A T3 link with 25 ms RTT: the BDP is ~1,105,000 bits".
        assert!(close(
            bdp_bytes(44.21e6, 25_000_000) as f64 * 8.0,
            1_105_250.0,
            8.0
        ));
    }

    #[test]
    fn connections_follow_section_5_1() {
        // Section 5.1's table: 500 Mbit/s and 5 ms, a 312.5 KB BDP.
        let bdp = bdp_bytes(500e6, 5_000_000);
        assert_eq!(bdp, 312_500);
        for (window_kb, connections) in [(16, 20), (32, 10), (64, 5), (128, 3)] {
            assert_eq!(connections_needed(bdp, window_kb * 1024), connections);
        }
        // Its LFN: a 2 MB BDP with the 64 KB windows of typical hosts takes 32 connections.
        assert_eq!(connections_needed(2 << 20, 64 << 10), 32);
        assert_eq!(connections_needed(100, 1 << 20), 1);
        assert_eq!(connections_needed(0, 1 << 20), 1);
        // A 64 KB window over 25 ms: at most 20.97 Mbit/s.
        assert!(close(
            window_limited_rate_bps(65_536, 25_000_000),
            20.97e6,
            0.01e6
        ));
    }

    #[test]
    fn the_tcp_header_in_use_is_read_from_the_mss() {
        assert_eq!(tcp_header_in_use(1460, 1448), Some(32));
        assert_eq!(tcp_header_in_use(1460, 1460), Some(20));
        assert_eq!(tcp_header_in_use(1360, 1348), Some(32));
        assert_eq!(tcp_header_in_use(1460, 1470), None);
        assert_eq!(tcp_header_in_use(1460, 1000), None);
    }

    fn kernel() -> KernelSettings {
        // A fresh network namespace's defaults on Linux 6.x.
        KernelSettings {
            tcp_rmem: [4096, 131_072, 6_291_456],
            tcp_wmem: [4096, 16_384, 4_194_304],
            rmem_max: 4_194_304,
            wmem_max: 4_194_304,
            window_scaling: true,
            timestamps: true,
            sack: true,
            congestion_control: "cubic".into(),
        }
    }

    fn inputs() -> PlanInputs {
        PlanInputs {
            direction: TcpDirection::Up,
            mtu_up_bytes: 1500,
            mtu_down_bytes: 1500,
            ipv6: false,
            baseline_rtt_ns: 40_000_000,
            bottleneck_bps: 100e6,
            rate_source: RateSource::Given,
            framing: Framing::Frame,
            vlan: false,
            window_bytes: None,
            mss_bytes: None,
            max_connections: 128,
            kernel: kernel(),
        }
    }

    #[test]
    fn the_host_limits_the_window_to_half_its_smallest_buffer() {
        let mut settings = kernel();
        assert_eq!(settings.largest_window_bytes(), 2_097_152);
        settings.wmem_max = 212_992;
        assert_eq!(settings.largest_window_bytes(), 212_992);
        settings.window_scaling = false;
        assert_eq!(settings.largest_window_bytes(), 65_535);
    }

    #[test]
    fn one_connection_fills_a_pipe_its_window_holds() {
        let plan = Plan::new(&inputs()).unwrap();
        assert_eq!(plan.bdp_bytes, 500_000);
        assert_eq!(plan.connections, 1);
        assert_eq!(plan.window_limit, WindowLimit::Host);
        assert_eq!(plan.window_needed_bytes, 625_000);
        assert_eq!(plan.window_per_connection_bytes, 625_000);
        assert_eq!(plan.mss_bytes, 1460);
        assert!(close(plan.ideal_rate_bps, 100e6 * 1448.0 / 1514.0, 1e-6));
        assert!(plan.one_connection_bps() > plan.bottleneck_bps);
        // The path's MTU decides the MSS, in the data's direction.
        let plan = Plan::new(&PlanInputs {
            direction: TcpDirection::Down,
            mtu_down_bytes: 1400,
            ..inputs()
        })
        .unwrap();
        assert_eq!((plan.data_mtu_bytes, plan.mss_bytes), (1400, 1360));
        assert!(close(plan.ideal_rate_bps, 100e6 * 1348.0 / 1414.0, 1e-6));
    }

    #[test]
    fn a_small_window_takes_several_connections() {
        let plan = Plan::new(&PlanInputs {
            window_bytes: Some(128 << 10),
            ..inputs()
        })
        .unwrap();
        // 625,000 bytes needed in windows of 131,072: 5.
        assert_eq!(plan.connections, 5);
        assert_eq!(plan.window_per_connection_bytes, 128 << 10);
        // Host limits: the BDP is shared out.
        let mut small = kernel();
        small.window_scaling = false;
        let plan = Plan::new(&PlanInputs {
            kernel: small,
            ..inputs()
        })
        .unwrap();
        assert_eq!(plan.connections, 10);
        assert_eq!(plan.window_per_connection_bytes, 62_500);
    }

    #[test]
    fn bad_inputs_make_no_plan() {
        for (bad, expected) in [
            (
                PlanInputs {
                    bottleneck_bps: 0.0,
                    ..inputs()
                },
                "above zero",
            ),
            (
                PlanInputs {
                    direction: TcpDirection::Both,
                    ..inputs()
                },
                "one direction",
            ),
            (
                PlanInputs {
                    window_bytes: Some(2000),
                    ..inputs()
                },
                "two segments",
            ),
            (
                PlanInputs {
                    mss_bytes: Some(1461),
                    ..inputs()
                },
                "--mss 1461",
            ),
            (
                PlanInputs {
                    window_bytes: Some(3000),
                    bottleneck_bps: 10e9,
                    ..inputs()
                },
                "connections",
            ),
            (
                PlanInputs {
                    baseline_rtt_ns: 0,
                    ..inputs()
                },
                "RTT",
            ),
        ] {
            let error = Plan::new(&bad).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }

    fn sample(at_ms: u64, cwnd: u32, ssthresh: u32, srtt_ms: u32) -> TcpSample {
        TcpSample {
            at_ns: at_ms * 1_000_000,
            cwnd,
            ssthresh,
            srtt_us: srtt_ms * 1000,
            mss: 1448,
            sent_bytes: u64::from(cwnd) * 1448,
            ..TcpSample::default()
        }
    }

    /// A run of 5 s: slow start doubling every 40 ms RTT from 10 segments, then a window
    /// of `cap` segments; srtt 40 ms in slow start, 50 ms after. With `loss` = (at,
    /// reduced), a loss at `at` sets ssthresh to half the window, which shrinks to it by
    /// `reduced` and grows by a segment every 40 ms after.
    fn stream(index: u32, cap: u32, loss: Option<(u64, u64)>) -> StreamReport {
        let samples = (0..500u64)
            .map(|i| {
                let at = i * 10;
                let mut cwnd = (10u32 << (at / 40).min(20)).min(cap);
                let mut ssthresh = TCP_INFINITE_SSTHRESH;
                if let Some((loss_at, reduced)) = loss {
                    if at >= loss_at {
                        ssthresh = cap / 2;
                        cwnd = if at < reduced {
                            cap - (cap / 2) * (at - loss_at) as u32 / (reduced - loss_at) as u32
                        } else {
                            cap / 2 + ((at - reduced) / 40) as u32
                        };
                    }
                }
                sample(at, cwnd, ssthresh, if at < 400 { 40 } else { 50 })
            })
            .collect();
        StreamReport {
            index,
            interval_bytes: vec![1_000_000; 51],
            bytes: 51_000_000,
            receive_ns: 5_100_000_000,
            samples,
            starved: None,
        }
    }

    #[test]
    fn the_steady_state_starts_when_the_window_holds_the_bdp_or_ssthresh_is_set() {
        // 500 kB BDP = 346 segments of 1448: 10 << 6 = 640 reaches it at 240 ms; settled
        // two RTTs later, but the floor is 10 RTTs = 400 ms.
        let streams = [stream(0, 1000, None)];
        let steady =
            steady_state(&streams, 500_000, 40_000_000, 5_000_000_000, 100_000_000).unwrap();
        assert_eq!(steady.slow_start_end, SlowStartEnd::WindowFull);
        assert_eq!(steady.slow_start_end_ns, 240_000_000);
        assert_eq!(steady.from_ns, 400_000_000);
        // A loss at 600 ms on the second connection; its window is down to the threshold
        // at 800 ms and grows past it at 840: settled two RTTs later.
        let streams = [stream(0, 1000, None), stream(1, 500, Some((600, 800)))];
        let steady =
            steady_state(&streams, 1_000_000, 40_000_000, 5_000_000_000, 100_000_000).unwrap();
        assert_eq!(steady.slow_start_end, SlowStartEnd::Ssthresh);
        assert_eq!(steady.slow_start_end_ns, 840_000_000);
        assert_eq!(steady.from_ns, 920_000_000);
        // Two connections opened an RTT apart: the steady state ends an RTT early.
        assert_eq!(steady.to_ns, 4_960_000_000);
        // A second loss during the reduction sets a new threshold: it is that reduction's
        // end that counts.
        let mut twice = stream(0, 500, Some((600, 800)));
        for sample in &mut twice.samples {
            if (700..900).contains(&(sample.at_ns / 1_000_000)) {
                sample.ssthresh = 125;
                sample.cwnd = sample.cwnd.min(300);
            } else if sample.at_ns >= 900_000_000 {
                sample.ssthresh = 125;
                sample.cwnd = 125 + ((sample.at_ns / 1_000_000 - 900) / 40) as u32;
            }
        }
        let steady =
            steady_state(&[twice], 1_000_000, 40_000_000, 5_000_000_000, 100_000_000).unwrap();
        assert_eq!(steady.slow_start_end_ns, 940_000_000);
        // Never full, never a loss: the floor.
        let streams = [stream(0, 100, None)];
        let steady =
            steady_state(&streams, 500_000, 40_000_000, 5_000_000_000, 100_000_000).unwrap();
        assert_eq!(steady.slow_start_end, SlowStartEnd::Floor);
        assert_eq!(steady.from_ns, 400_000_000);
        // Too short a run.
        let error =
            steady_state(&streams, 500_000, 40_000_000, 600_000_000, 100_000_000).unwrap_err();
        assert!(error.to_string().contains("run longer"), "{error}");
    }

    #[test]
    fn a_phase_counts_whole_steady_intervals_and_steady_samples() {
        let plan = Plan::new(&inputs()).unwrap();
        let mut run = TcpTestReport {
            interval_ns: 100_000_000,
            up: vec![stream(0, 1000, None)],
            ..TcpTestReport::default()
        };
        let last = run.up[0].samples.last_mut().unwrap();
        last.sent_bytes = 51_000_000;
        last.retrans_bytes = 510_000;
        last.retrans_segments = 352;
        let phase = analyse_phase(&plan, &run, 1, 500_000, 5_000_000_000).unwrap();
        // Intervals 4..50: 46 intervals of 1 MB in 4.6 s.
        assert_eq!(phase.steady_bytes, 46_000_000);
        assert!(close(phase.steady_s, 4.6, 1e-9));
        assert!(close(phase.throughput_bps, 80e6, 1e-3));
        assert_eq!(phase.tcp_header_bytes, 32);
        assert!(close(
            phase.transfer_time_ratio,
            plan.ideal_rate_bps / 80e6,
            1e-9
        ));
        assert!(close(phase.tcp_efficiency, 0.99, 1e-12));
        // srtt 50 ms from 400 ms on, against 40: 25%.
        assert!(close(phase.mean_rtt_ns, 50e6, 1e-6));
        assert!(close(phase.buffer_delay_percent, 25.0, 1e-9));
    }
}
