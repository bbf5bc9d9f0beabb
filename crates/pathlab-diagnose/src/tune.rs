//! Tuning advice for one TCP connection over a long fat path: the CESNET checklist.
//!
//! Seed 001 (Sven Ubik, CESNET, on bulk transfers over fast long-distance networks) lists
//! what a host must get right for one TCP connection to fill a path of rate R and
//! round-trip time T: a window of R x T (1 Gb/s at 170 ms needs 21 MB), buffer limits
//! that let the kernel grow its socket buffers that far (the buffer is larger than the
//! window it offers), window scaling, a transmit queue that holds what arrives in one
//! 10 ms timer tick (txqueuelen > R x 10 ms / 1500 B), and no cached small ssthresh.
//!
//! [`advise`] takes a host's settings as the raw strings `/proc/sys` and `/sys/class/net`
//! hold ([`HostSettings`]) and says, for each, what the path needs, why, and the command
//! that would change it ([`Row`]), then how large a window the settings allow and what
//! that caps one connection at ([`Summary`]). It reads no file and changes nothing; the
//! CLI reads the files and prints [`render_text`] or the [`TuneReport`] as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pathlab_core::format::{self, Digits};
use serde::{Deserialize, Serialize};

/// The largest window TCP can offer: 65535 bytes shifted by the largest window scale, 14
/// (RFC 7323 section 2.3).
pub const MAX_TCP_WINDOW_BYTES: u64 = 65_535 << 14;

/// The largest window without the window scale option (a 16-bit field).
pub const UNSCALED_WINDOW_BYTES: u64 = 65_535;

/// The seed's timer tick: a sender whose transmit queue is full sleeps until the next
/// tick of Linux's standard system timer (HZ = 100), so the queue must hold 10 ms of
/// traffic at the path's rate.
pub const TIMER_TICK_NS: u64 = 10_000_000;

/// The packet size the seed's txqueuelen rule counts in (a full Ethernet payload).
pub const TXQUEUE_PACKET_BYTES: u64 = 1500;

/// RFC 3649's Low_Window: above 38 segments standard TCP's one-segment-per-RTT growth is
/// too slow to use the path (HighSpeed TCP keeps Reno's response only below it).
pub const LOW_WINDOW_SEGMENTS: u64 = 38;

/// The largest value the kernel takes for an integer sysctl (`int`, proc_dointvec).
pub const SYSCTL_INT_MAX: u64 = i32::MAX as u64;

/// Slowest rate accepted: below 1 kbit/s no window question arises.
pub const MIN_RATE_BPS: u64 = 1_000;

/// Fastest rate accepted: 10 Tbit/s, beyond any interface.
pub const MAX_RATE_BPS: u64 = 10_000_000_000_000;

/// Shortest round trip accepted: 1 us.
pub const MIN_RTT_NS: u64 = 1_000;

/// Longest round trip accepted: one minute (a geostationary hop is 0.6 s).
pub const MAX_RTT_NS: u64 = 60_000_000_000;

/// CUBIC's constants (RFC 9438 section 4.1): C = 0.4, beta_cubic = 0.7.
const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;

/// Where the persistent sysctl lines go.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/90-pathlab.conf";

/// Where the persistent txqueuelen rules go.
pub const UDEV_FILE: &str = "/etc/udev/rules.d/90-pathlab-txqueuelen.rules";

/// Every sysctl [`advise`] reads, by name: what a reader should put in
/// [`HostSettings::sysctl`].
pub const SYSCTLS: [&str; 15] = [
    "kernel.osrelease",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_mem",
    "net.ipv4.tcp_adv_win_scale",
    "net.ipv4.tcp_moderate_rcvbuf",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.core.default_qdisc",
];

/// Congestion controls that regrow the window by about one segment per RTT after a loss,
/// as Reno does.
const LINEAR_GROWTH: [&str; 8] = [
    "reno", "westwood", "veno", "vegas", "lp", "dctcp", "nv", "cdg",
];

/// Queue disciplines that give each flow its own queue.
const PER_FLOW_QDISCS: [&str; 5] = ["fq", "fq_codel", "fq_pie", "cake", "sfq"];

/// Why a path cannot be tuned for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TuneInputError {
    /// The rate is zero or too low to matter.
    #[error("rate {0} bit/s is too low: give a rate of at least 1kbit")]
    RateTooLow(u64),
    /// The rate is beyond any interface.
    #[error("rate {0} bit/s is beyond any interface: give at most 10tbit")]
    RateTooHigh(u64),
    /// The round trip is shorter than any path's.
    #[error("RTT {0} ns is shorter than any path: give at least 1us")]
    RttTooShort(u64),
    /// The round trip is longer than a minute.
    #[error("RTT {} s is longer than any path: give at most 60s", *.0 as f64 / 1e9)]
    RttTooLong(u64),
    /// The segment size is zero.
    #[error("an MSS of 0 bytes carries nothing")]
    ZeroMss,
}

/// The path to tune for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunePath {
    /// Bottleneck rate, bit/s.
    pub rate_bps: u64,
    /// Base round-trip time, ns.
    pub rtt_ns: u64,
    /// TCP payload per segment, bytes (segment counts and Reno's growth per RTT).
    pub mss_bytes: u64,
}

impl TunePath {
    /// A validated path: rate 1 kbit/s to 10 Tbit/s, RTT 1 us to 60 s, MSS above zero.
    pub fn new(rate_bps: u64, rtt_ns: u64, mss_bytes: u64) -> Result<TunePath, TuneInputError> {
        if rate_bps < MIN_RATE_BPS {
            return Err(TuneInputError::RateTooLow(rate_bps));
        }
        if rate_bps > MAX_RATE_BPS {
            return Err(TuneInputError::RateTooHigh(rate_bps));
        }
        if rtt_ns < MIN_RTT_NS {
            return Err(TuneInputError::RttTooShort(rtt_ns));
        }
        if rtt_ns > MAX_RTT_NS {
            return Err(TuneInputError::RttTooLong(rtt_ns));
        }
        if mss_bytes == 0 {
            return Err(TuneInputError::ZeroMss);
        }
        Ok(TunePath {
            rate_bps,
            rtt_ns,
            mss_bytes,
        })
    }

    /// The bandwidth-delay product R x T in bits, rounded up.
    pub fn bdp_bits(&self) -> u64 {
        div_ceil(
            u128::from(self.rate_bps) * u128::from(self.rtt_ns),
            1_000_000_000,
        )
    }

    /// The window that keeps the path full: R x T / 8 bytes, rounded up.
    pub fn window_bytes(&self) -> u64 {
        window_bytes(self.rate_bps, self.rtt_ns)
    }
}

fn div_ceil(numerator: u128, denominator: u128) -> u64 {
    numerator.div_ceil(denominator).min(u128::from(u64::MAX)) as u64
}

/// The window a path of `rate_bps` and `rtt_ns` needs: R x T / 8 bytes, rounded up.
pub fn window_bytes(rate_bps: u64, rtt_ns: u64) -> u64 {
    div_ceil(u128::from(rate_bps) * u128::from(rtt_ns), 8 * 1_000_000_000)
}

/// The most one connection with a window of `window_bytes` carries per `rtt_ns`:
/// window / RTT, in bit/s.
pub fn throughput_cap_bps(window_bytes: u64, rtt_ns: u64) -> f64 {
    window_bytes as f64 * 8.0 * 1e9 / rtt_ns as f64
}

/// The seed's transmit queue length for `rate_bps`: R x 10 ms / 8 bits / 1500 bytes,
/// rounded up (the seed: txqueuelen > 833 at 1 Gb/s).
pub fn txqueuelen_needed(rate_bps: u64) -> u64 {
    div_ceil(
        u128::from(rate_bps) * u128::from(TIMER_TICK_NS),
        8 * u128::from(TXQUEUE_PACKET_BYTES) * 1_000_000_000,
    )
}

/// RTTs Reno takes after one loss to regrow `window_bytes`: it halves the window and adds
/// one segment per RTT.
pub fn reno_recovery_rtts(window_bytes: u64, mss_bytes: u64) -> u64 {
    window_bytes.div_ceil(2 * mss_bytes)
}

/// Seconds CUBIC takes after one loss to regrow a window of `window_segments`:
/// K = cbrt(W_max (1 - beta) / C) (RFC 9438 section 4.2).
pub fn cubic_recovery_secs(window_segments: f64) -> f64 {
    (window_segments * (1.0 - CUBIC_BETA) / CUBIC_C).cbrt()
}

/// A host's settings as read: raw strings, nothing parsed yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSettings {
    /// Sysctl name (`net.ipv4.tcp_rmem`) to its file's contents; a setting that could not
    /// be read is absent.
    pub sysctl: BTreeMap<String, String>,
    /// Each interface (except `lo`) to the contents of its `tx_queue_len`, `None` when that
    /// file could not be read; `None` as a whole when the interface list could not be read.
    pub interfaces: Option<BTreeMap<String, Option<String>>>,
    /// The kernel's page size in bytes (`tcp_mem` counts pages), if known.
    pub page_size_bytes: Option<u64>,
}

impl HostSettings {
    fn get(&self, name: &str) -> Option<&str> {
        self.sysctl.get(name).map(String::as_str)
    }
}

/// The page size from the bytes of `/proc/self/auxv` (pairs of native-endian words; the
/// value of `AT_PAGESZ`, type 6), if it is there.
pub fn page_size_from_auxv(auxv: &[u8]) -> Option<u64> {
    const AT_PAGESZ: u64 = 6;
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |bytes: &[u8]| -> u64 {
        let mut buffer = [0u8; WORD];
        buffer.copy_from_slice(bytes);
        usize::from_ne_bytes(buffer) as u64
    };
    auxv.chunks_exact(2 * WORD).find_map(|pair| {
        (word(&pair[..WORD]) == AT_PAGESZ)
            .then(|| word(&pair[WORD..]))
            .filter(|&size| size > 0)
    })
}

/// What a row says about its setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The setting is what the path needs.
    Ok,
    /// The setting should change: `commands` say how.
    Change,
    /// The setting could not be read.
    Unknown,
    /// The setting was read but is not what the kernel writes there.
    Malformed,
}

/// A line that keeps a change across reboots, and the file it goes in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Persist {
    /// The file.
    pub file: String,
    /// The line to add to it.
    pub line: String,
}

/// One setting: its value, what the path needs, why, and how to change it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// The setting: a sysctl name (`net.ipv4.tcp_rmem`) or `txqueuelen IF`.
    pub setting: String,
    /// The interface, for txqueuelen rows.
    pub interface: Option<String>,
    /// The value as read (runs of whitespace made one space); `None` when unreadable.
    pub current: Option<String>,
    /// What the path needs.
    pub needed: String,
    /// Whether it does.
    pub status: Status,
    /// Why the path needs it, in one line.
    pub why: String,
    /// For unknown and malformed rows, what is wrong with the value.
    pub problem: Option<String>,
    /// Commands that change it now (as root); empty unless the status is `change`.
    pub commands: Vec<String>,
    /// The line that keeps the change across reboots.
    pub persist: Option<Persist>,
}

/// The window the host's settings allow, each way, and what it caps a connection at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Rows whose setting should change.
    pub to_change: usize,
    /// Rows whose setting could not be read.
    pub unknown: usize,
    /// Rows whose setting could not be understood.
    pub malformed: usize,
    /// The largest window this host offers as a receiver, bytes (`None`: not readable).
    pub receive_window_bytes: Option<u64>,
    /// The setting that sets it.
    pub receive_limited_by: Option<String>,
    /// The largest window this host keeps in flight as a sender, bytes.
    pub send_window_bytes: Option<u64>,
    /// The setting that sets it.
    pub send_limited_by: Option<String>,
    /// The smaller of the two.
    pub window_bytes: Option<u64>,
    /// What that window carries per RTT: window / RTT, bit/s.
    pub throughput_cap_bps: Option<f64>,
}

/// How the round-trip time was measured, when it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RttMeasurement {
    /// The server measured against.
    pub host: String,
    /// Round trips sent.
    pub probes: u64,
    /// Replies received.
    pub replies: u64,
    /// Time between probes, ns.
    pub interval_ns: u64,
    /// Smallest RTT, ns: the one used.
    pub min_ns: u64,
    /// Median RTT, ns.
    pub median_ns: u64,
}

/// The whole advice for one path and one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneReport {
    /// The path's rate, bit/s.
    pub rate_bps: u64,
    /// The path's round-trip time, ns.
    pub rtt_ns: u64,
    /// How the RTT was measured (`None`: given with `--rtt`).
    pub rtt_measurement: Option<RttMeasurement>,
    /// How the rate was measured, from HOST towards this host (`None`: given with
    /// `--rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_measurement: Option<pathlab_probe::capacity::Capacity>,
    /// TCP payload per segment assumed, bytes.
    pub mss_bytes: u64,
    /// R x T, bits.
    pub bdp_bits: u64,
    /// The window the path needs: R x T / 8, bytes.
    pub window_bytes: u64,
    /// The window in segments of `mss_bytes`.
    pub window_segments: u64,
    /// The largest window one TCP connection can have (65535 x 2^14 bytes).
    pub max_tcp_window_bytes: u64,
    /// Connections needed to carry the window (more than one only beyond
    /// `max_tcp_window_bytes`).
    pub connections: u64,
    /// The window each connection needs, bytes.
    pub window_per_connection_bytes: u64,
    /// The share of a receive buffer the kernel offers as window.
    pub receive_window_share: f64,
    /// Where that share comes from.
    pub receive_window_share_basis: String,
    /// Packets each interface's transmit queue needs: R x 10 ms / 1500 B.
    pub txqueuelen_needed: u64,
    /// One row per setting, interfaces last.
    pub rows: Vec<Row>,
    /// The totals and the window the current settings allow.
    pub summary: Summary,
}

/// The share of a receive buffer the kernel offers as window, as a fraction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Share {
    numerator: u64,
    denominator: u64,
}

impl Share {
    const HALF: Share = Share {
        numerator: 1,
        denominator: 2,
    };

    fn of(self, bytes: u64) -> u64 {
        (u128::from(bytes) * u128::from(self.numerator) / u128::from(self.denominator)) as u64
    }

    /// The buffer that offers `window` bytes.
    fn buffer_for(self, window: u64) -> u64 {
        div_ceil(
            u128::from(window) * u128::from(self.denominator),
            u128::from(self.numerator),
        )
    }

    fn as_f64(self) -> f64 {
        self.numerator as f64 / self.denominator as f64
    }
}

/// `6.18.44-fc` -> (6, 18).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The share of the receive buffer offered as window, and why. Before Linux 6.6 it is
/// `tcp_adv_win_scale` (buffer - buffer / 2^s, or buffer / 2^-s for s <= 0; default 1,
/// half); since 6.6 it is the payload / truesize ratio measured on received packets,
/// starting at half (TCP_DEFAULT_SCALING_RATIO), so half is what a host can count on.
fn receive_share(host: &HostSettings) -> (Share, String) {
    let version = host.get("kernel.osrelease").and_then(kernel_version);
    if let Some((major, minor)) = version {
        if (major, minor) >= (6, 6) {
            return (
                Share::HALF,
                format!(
                    "Linux {major}.{minor}: the payload share it measures on received packets, starting at 1/2"
                ),
            );
        }
    }
    match host
        .get("net.ipv4.tcp_adv_win_scale")
        .and_then(|raw| raw.trim().parse::<i32>().ok())
    {
        Some(scale @ 1..=31) => {
            let denominator = 1u64 << scale;
            (
                Share {
                    numerator: denominator - 1,
                    denominator,
                },
                format!("tcp_adv_win_scale = {scale}"),
            )
        }
        Some(scale @ -31..=0) => (
            Share {
                numerator: 1,
                denominator: 1u64 << (-scale),
            },
            format!("tcp_adv_win_scale = {scale}"),
        ),
        _ => (
            Share::HALF,
            "assumed 1/2, the kernel's default (tcp_adv_win_scale and the kernel version unreadable)"
                .to_owned(),
        ),
    }
}

/// Runs of whitespace as one space (the kernel separates vector values with tabs).
fn normalize(raw: &str) -> String {
    raw.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn parse_integer(raw: &str) -> Result<u64, String> {
    let value = raw.trim();
    value
        .parse::<u64>()
        .map_err(|_| format!("expected a non-negative integer, got '{}'", normalize(raw)))
}

fn parse_triple(raw: &str) -> Result<[u64; 3], String> {
    let fields: Vec<&str> = raw.split_whitespace().collect();
    let expected = || {
        format!(
            "expected three non-negative integers (min default max), got '{}'",
            normalize(raw)
        )
    };
    if fields.len() != 3 {
        return Err(expected());
    }
    let mut values = [0u64; 3];
    for (value, field) in values.iter_mut().zip(&fields) {
        *value = field.parse().map_err(|_| expected())?;
    }
    Ok(values)
}

fn parse_switch(raw: &str, allowed: &[u64]) -> Result<u64, String> {
    let value = raw
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|v| allowed.contains(v));
    value.ok_or_else(|| {
        let choices: Vec<String> = allowed.iter().map(u64::to_string).collect();
        format!(
            "expected {}, got '{}'",
            choices.join(" or "),
            normalize(raw)
        )
    })
}

fn parse_name(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!("expected one name, got '{}'", normalize(raw)));
    }
    Ok(name.to_owned())
}

/// How to change a setting: commands to run now, and the line that keeps it.
#[derive(Debug, Default)]
struct Fix {
    commands: Vec<String>,
    persist: Option<Persist>,
}

fn sysctl_fix(name: &str, value: &str) -> Fix {
    let command = if value.contains(' ') {
        format!("sysctl -w {name}='{value}'")
    } else {
        format!("sysctl -w {name}={value}")
    };
    Fix {
        commands: vec![command],
        persist: Some(Persist {
            file: SYSCTL_FILE.to_owned(),
            line: format!("{name} = {value}"),
        }),
    }
}

/// Builds a row: `judge` gets the raw value and answers `None` (fine), `Some(fix)` (change)
/// or a message (malformed).
fn row(
    setting: &str,
    raw: Option<&str>,
    needed: String,
    why: String,
    judge: impl FnOnce(&str) -> Result<Option<Fix>, String>,
) -> Row {
    let mut row = Row {
        setting: setting.to_owned(),
        interface: None,
        current: raw.map(normalize),
        needed,
        status: Status::Unknown,
        why,
        problem: None,
        commands: Vec::new(),
        persist: None,
    };
    match raw {
        None => row.problem = Some("not readable".to_owned()),
        Some(raw) => match judge(raw) {
            Ok(None) => row.status = Status::Ok,
            Ok(Some(fix)) => {
                row.status = Status::Change;
                row.commands = fix.commands;
                row.persist = fix.persist;
            }
            Err(problem) => {
                row.status = Status::Malformed;
                row.problem = Some(problem);
            }
        },
    }
    row
}

/// What the path needs of each buffer limit.
#[derive(Debug, Clone, Copy)]
struct Needs {
    /// Window per connection.
    window: u64,
    /// Autotuned receive buffer cap (tcp_rmem max).
    receive_buffer: u64,
    /// Autotuned send buffer cap (tcp_wmem max): twice the window.
    send_buffer: u64,
    /// SO_RCVBUF cap (rmem_max): the kernel doubles the request.
    rmem_max: u64,
    /// SO_SNDBUF cap (wmem_max).
    wmem_max: u64,
}

fn over_int_max(needed: u64) -> String {
    format!(
        "; {needed} is beyond the largest value the kernel takes ({SYSCTL_INT_MAX}): split the transfer over more connections"
    )
}

/// What a row needs of a byte limit: `{prefix}>= needed (in SI units)`, with the kernel's
/// ceiling when `needed` is beyond it.
fn at_least(prefix: &str, needed: u64) -> String {
    let limit = if needed > SYSCTL_INT_MAX {
        over_int_max(needed)
    } else {
        String::new()
    };
    format!(
        "{prefix}>= {needed} ({}){limit}",
        format::bytes_si(needed, Digits::up_to(2))
    )
}

fn triple_row(name: &str, host: &HostSettings, needed: u64, why: String) -> Row {
    row(name, host.get(name), at_least("max ", needed), why, |raw| {
        let [min, default, max] = parse_triple(raw)?;
        if max >= needed {
            return Ok(None);
        }
        let new_max = needed.min(SYSCTL_INT_MAX);
        Ok(Some(sysctl_fix(
            name,
            &format!("{min} {} {new_max}", default.min(new_max)),
        )))
    })
}

fn integer_row(name: &str, host: &HostSettings, needed: u64, why: String) -> Row {
    row(name, host.get(name), at_least("", needed), why, |raw| {
        let value = parse_integer(raw)?;
        if value >= needed {
            return Ok(None);
        }
        Ok(Some(sysctl_fix(
            name,
            &needed.min(SYSCTL_INT_MAX).to_string(),
        )))
    })
}

fn switch_row(name: &str, host: &HostSettings, allowed: &[u64], on: &[u64], why: String) -> Row {
    let wanted = on[0];
    let needed = if on.len() > 1 {
        let choices: Vec<String> = on.iter().map(u64::to_string).collect();
        choices.join(" or ")
    } else {
        wanted.to_string()
    };
    row(name, host.get(name), needed, why, |raw| {
        let value = parse_switch(raw, allowed)?;
        if on.contains(&value) {
            Ok(None)
        } else {
            Ok(Some(sysctl_fix(name, &wanted.to_string())))
        }
    })
}

fn buffer_rows(
    path: &TunePath,
    host: &HostSettings,
    needs: Needs,
    share: Share,
    basis: &str,
) -> Vec<Row> {
    let share_text = if share == Share::HALF {
        "half".to_owned()
    } else {
        format!("{}/{}", share.numerator, share.denominator)
    };
    let mut rows = vec![
        triple_row(
            "net.ipv4.tcp_rmem",
            host,
            needs.receive_buffer,
            format!(
                "receive buffer autotuning stops at max; the kernel offers {share_text} of the buffer as window ({basis}), so a {} window takes {}",
                format::bytes_si(needs.window, Digits::up_to(2)),
                format::bytes_si(needs.receive_buffer, Digits::up_to(2))
            ),
        ),
        triple_row(
            "net.ipv4.tcp_wmem",
            host,
            needs.send_buffer,
            "the send buffer holds every unacknowledged byte, and in fast recovery the next window too: the kernel sizes it at 2 x cwnd (tcp_sndbuf_expand), capped at max".to_owned(),
        ),
        integer_row(
            "net.core.rmem_max",
            host,
            needs.rmem_max,
            format!(
                "caps SO_RCVBUF for programs that set their own buffer (iperf3 -w); the kernel doubles the request and offers {share_text} of that as window"
            ),
        ),
        integer_row(
            "net.core.wmem_max",
            host,
            needs.wmem_max,
            "caps SO_SNDBUF for programs that set their own buffer; the kernel doubles the request, which holds the window in flight and the next one".to_owned(),
        ),
    ];
    rows.push(tcp_mem_row(path, host, needs));
    rows
}

/// Pages of `tcp_mem` the transfer's buffers need below the pressure threshold.
fn tcp_mem_row(path: &TunePath, host: &HostSettings, needs: Needs) -> Row {
    let name = "net.ipv4.tcp_mem";
    let connections = connections_for(path.window_bytes());
    let buffer = connections * needs.receive_buffer.max(needs.send_buffer);
    let why = "in pages, for all TCP sockets together: above the second value (pressure) the kernel stops growing buffers, so the transfer's buffer must fit below it".to_owned();
    let Some(page) = host.page_size_bytes else {
        let mut unknown = row(
            name,
            host.get(name),
            format!(
                "pressure >= {} in pages (page size unknown)",
                format::bytes_si(buffer, Digits::up_to(2))
            ),
            why,
            |_| Ok(None),
        );
        unknown.status = Status::Unknown;
        unknown.problem = Some("the page size is not readable".to_owned());
        return unknown;
    };
    let pages = buffer.div_ceil(page);
    row(
        name,
        host.get(name),
        format!(
            "pressure >= {pages} pages ({} at {page} B a page)",
            format::bytes_si(buffer, Digits::up_to(2))
        ),
        why,
        |raw| {
            let [low, pressure, high] = parse_triple(raw)?;
            if pressure >= pages {
                return Ok(None);
            }
            Ok(Some(sysctl_fix(
                name,
                &format!("{low} {pages} {}", high.max(pages)),
            )))
        },
    )
}

fn connections_for(window: u64) -> u64 {
    window.div_ceil(MAX_TCP_WINDOW_BYTES).max(1)
}

fn switch_rows(path: &TunePath, host: &HostSettings, needs: Needs) -> Vec<Row> {
    let unscaled_cap = throughput_cap_bps(UNSCALED_WINDOW_BYTES, path.rtt_ns);
    let default_buffer = host
        .get("net.ipv4.tcp_rmem")
        .and_then(|raw| parse_triple(raw).ok())
        .map_or_else(
            || "its default".to_owned(),
            |[_, default, _]| format::bytes_si(default, Digits::up_to(2)),
        );
    let mut rows = vec![switch_row(
        "net.ipv4.tcp_moderate_rcvbuf",
        host,
        &[0, 1],
        &[1],
        format!(
            "receive buffer autotuning (the seed's Dynamic Right Sizing): without it a connection keeps tcp_rmem's default buffer, {default_buffer}"
        ),
    )];
    let scaling_name = "net.ipv4.tcp_window_scaling";
    if needs.window > UNSCALED_WINDOW_BYTES {
        rows.push(switch_row(
            scaling_name,
            host,
            &[0, 1],
            &[1],
            format!(
                "without window scaling (RFC 7323) the window stops at 65535 bytes: {} at this RTT",
                format::rate(unscaled_cap, Digits::up_to(2))
            ),
        ));
    } else {
        rows.push(switch_row(
            scaling_name,
            host,
            &[0, 1],
            &[0, 1],
            format!(
                "this path's window, {} bytes, fits in 65535 without scaling",
                needs.window
            ),
        ));
    }
    let wrap_ns = (1u128 << 32) as f64 * 8.0 * 1e9 / path.rate_bps as f64;
    rows.push(switch_row(
        "net.ipv4.tcp_timestamps",
        host,
        &[0, 1, 2],
        &[1, 2],
        format!(
            "timestamps give an RTT sample per ACK (RFC 7323), which receive autotuning uses, and PAWS: at {} the 32-bit sequence numbers wrap every {}",
            format::rate(path.rate_bps as f64, Digits::up_to(2)),
            format::time(wrap_ns * 1e-9, Digits::up_to(2))
        ),
    ));
    let segments = needs.window.div_ceil(path.mss_bytes);
    rows.push(switch_row(
        "net.ipv4.tcp_sack",
        host,
        &[0, 1],
        &[1],
        format!(
            "a window of {segments} segments loses several at once; SACK (RFC 2018) repairs them in one round trip, without it each costs one"
        ),
    ));
    let mut metrics = switch_row(
        "net.ipv4.tcp_no_metrics_save",
        host,
        &[0, 1],
        &[1],
        "otherwise Linux caches each destination's ssthresh after a loss and starts the next connection's congestion avoidance there, capping the window early (the seed saw it stuck at ~1.45 MB)".to_owned(),
    );
    if metrics.status == Status::Change {
        metrics.commands.push("ip tcp_metrics flush all".to_owned());
    }
    rows.push(metrics);
    rows
}

fn congestion_row(path: &TunePath, host: &HostSettings, needs: Needs) -> Row {
    let name = "net.ipv4.tcp_congestion_control";
    let available: Option<Vec<String>> = host
        .get("net.ipv4.tcp_available_congestion_control")
        .map(|raw| raw.split_whitespace().map(str::to_owned).collect());
    let segments = needs.window.div_ceil(path.mss_bytes);
    let reno_rtts = reno_recovery_rtts(needs.window, path.mss_bytes);
    let reno_ns = reno_rtts as f64 * path.rtt_ns as f64;
    let cubic_ns = cubic_recovery_secs(segments as f64) * 1e9;
    let available_text = available
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), |list| list.join(" "));
    let linear_too_slow = segments > LOW_WINDOW_SEGMENTS;
    let needed = if linear_too_slow {
        format!("faster than one segment per RTT, e.g. cubic or bbr (available: {available_text})")
    } else {
        format!("any (a {segments}-segment window regrows quickly; available: {available_text})")
    };
    let recommended = ["cubic", "bbr"]
        .into_iter()
        .find(|cc| {
            available
                .as_ref()
                .is_none_or(|list| list.iter().any(|a| a == cc))
        })
        .unwrap_or("cubic");
    let current = host.get(name).and_then(|raw| parse_name(raw).ok());
    let why = match current.as_deref() {
        Some(cc) if LINEAR_GROWTH.contains(&cc) => format!(
            "{cc} adds one segment per RTT: after a loss it takes {reno_rtts} RTTs ({}) to regrow the {} window; cubic takes {} (RFC 9438)",
            format::time(reno_ns * 1e-9, Digits::up_to(2)),
            format::bytes_si(needs.window, Digits::up_to(2)),
            format::time(cubic_ns * 1e-9, Digits::up_to(2))
        ),
        Some("cubic") => format!(
            "cubic regrows the window {} after a loss (RFC 9438); reno would take {reno_rtts} RTTs ({})",
            format::time(cubic_ns * 1e-9, Digits::up_to(2)),
            format::time(reno_ns * 1e-9, Digits::up_to(2))
        ),
        Some(cc) if cc.starts_with("bbr") => format!(
            "{cc} paces at the bottleneck rate it measures and does not halve its window on a loss; reno would take {} to regrow it",
            format::time(reno_ns * 1e-9, Digits::up_to(2))
        ),
        _ => format!(
            "one segment per RTT (reno) would take {reno_rtts} RTTs ({}) to regrow the window after a loss",
            format::time(reno_ns * 1e-9, Digits::up_to(2))
        ),
    };
    let mut congestion = row(name, host.get(name), needed, why, |raw| {
        let cc = parse_name(raw)?;
        if linear_too_slow && LINEAR_GROWTH.contains(&cc.as_str()) {
            Ok(Some(sysctl_fix(name, recommended)))
        } else {
            Ok(None)
        }
    });
    if congestion.status == Status::Change
        && available
            .as_ref()
            .is_some_and(|list| !list.iter().any(|a| a == recommended))
    {
        congestion
            .commands
            .insert(0, format!("modprobe tcp_{recommended}"));
    }
    congestion
}

fn qdisc_row(host: &HostSettings) -> Row {
    let name = "net.core.default_qdisc";
    row(
        name,
        host.get(name),
        "a per-flow queue: fq or fq_codel".to_owned(),
        "a FIFO (pfifo_fast) makes every flow wait behind a bulk flow's burst in the longer transmit queue the path needs; fq gives each flow its own queue and paces TCP (applies to qdiscs created after the change)".to_owned(),
        |raw| {
            let qdisc = parse_name(raw)?;
            if PER_FLOW_QDISCS.contains(&qdisc.as_str()) {
                Ok(None)
            } else {
                Ok(Some(sysctl_fix(name, "fq")))
            }
        },
    )
}

fn txqueuelen_rows(path: &TunePath, host: &HostSettings, needed: u64) -> Vec<Row> {
    let needed_text = format!(
        ">= {needed} packets ({} x 10 ms / 1500 B)",
        format::rate(path.rate_bps as f64, Digits::up_to(2))
    );
    let why = "a large window hands the interface bursts; when its transmit queue is full the sender stalls until the next 10 ms timer tick, so the queue must hold one tick at the path's rate (the seed)";
    let Some(interfaces) = &host.interfaces else {
        let mut unknown = row("txqueuelen", None, needed_text, why.to_owned(), |_| {
            Ok(None)
        });
        unknown.problem = Some("the interface list is not readable".to_owned());
        return vec![unknown];
    };
    interfaces
        .iter()
        .map(|(interface, raw)| {
            let mut txqueue = row(
                &format!("txqueuelen {interface}"),
                raw.as_deref(),
                needed_text.clone(),
                why.to_owned(),
                |raw| {
                    let length = parse_integer(raw)?;
                    // Zero: a virtual device with no queue of its own (noqueue).
                    if length == 0 || length >= needed {
                        return Ok(None);
                    }
                    Ok(Some(Fix {
                        commands: vec![format!("ip link set dev {interface} txqueuelen {needed}")],
                        persist: Some(Persist {
                            file: UDEV_FILE.to_owned(),
                            line: format!(
                                "ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"{interface}\", ATTR{{tx_queue_len}}=\"{needed}\""
                            ),
                        }),
                    }))
                },
            );
            txqueue.interface = Some(interface.clone());
            txqueue
        })
        .collect()
}

/// A window the settings allow (bytes), and the setting that sets it.
type WindowLimit = (u64, String);

/// The window each side of this host allows with its current settings.
fn allowed_windows(
    host: &HostSettings,
    share: Share,
) -> (Option<WindowLimit>, Option<WindowLimit>) {
    let triple = |name: &str| host.get(name).and_then(|raw| parse_triple(raw).ok());
    let switch = |name: &str| {
        host.get(name)
            .and_then(|raw| raw.trim().parse::<u64>().ok())
    };
    let memory_cap = match (triple("net.ipv4.tcp_mem"), host.page_size_bytes) {
        (Some([_, pressure, _]), Some(page)) => Some(pressure.saturating_mul(page)),
        _ => None,
    };
    let scale_cap = if switch("net.ipv4.tcp_window_scaling") == Some(0) {
        (UNSCALED_WINDOW_BYTES, "net.ipv4.tcp_window_scaling = 0")
    } else {
        (MAX_TCP_WINDOW_BYTES, "TCP's largest window (scale 14)")
    };
    let cap = |window: u64, by: String| -> (u64, String) {
        if scale_cap.0 < window {
            (scale_cap.0, scale_cap.1.to_owned())
        } else {
            (window, by)
        }
    };
    let receive = triple("net.ipv4.tcp_rmem").map(|[_, default, max]| {
        let (buffer, by) = if switch("net.ipv4.tcp_moderate_rcvbuf") == Some(0) {
            (default, "tcp_rmem default (autotuning off)")
        } else {
            (max, "net.ipv4.tcp_rmem max")
        };
        let (buffer, by) = match memory_cap {
            Some(memory) if memory < buffer => (memory, "net.ipv4.tcp_mem pressure"),
            _ => (buffer, by),
        };
        cap(share.of(buffer), by.to_owned())
    });
    let send = triple("net.ipv4.tcp_wmem").map(|[_, _, max]| {
        let (buffer, by) = match memory_cap {
            Some(memory) if memory < max => (memory, "net.ipv4.tcp_mem pressure"),
            _ => (max, "net.ipv4.tcp_wmem max"),
        };
        cap(buffer / 2, by.to_owned())
    });
    (receive, send)
}

/// The advice for `path` on a host with `host`'s settings.
pub fn advise(path: &TunePath, host: &HostSettings) -> TuneReport {
    let window = path.window_bytes();
    let connections = connections_for(window);
    let per_connection = window.div_ceil(connections);
    let (share, basis) = receive_share(host);
    let needs = Needs {
        window: per_connection,
        receive_buffer: share.buffer_for(per_connection),
        send_buffer: 2 * per_connection,
        rmem_max: share.buffer_for(per_connection).div_ceil(2),
        wmem_max: per_connection,
    };
    let txqueue_needed = txqueuelen_needed(path.rate_bps);
    let mut rows = buffer_rows(path, host, needs, share, &basis);
    rows.extend(switch_rows(path, host, needs));
    rows.push(congestion_row(path, host, needs));
    rows.push(qdisc_row(host));
    rows.extend(txqueuelen_rows(path, host, txqueue_needed));
    let count = |status: Status| rows.iter().filter(|row| row.status == status).count();
    let (receive, send) = allowed_windows(host, share);
    let window_allowed = match (&receive, &send) {
        (Some((r, _)), Some((s, _))) => Some((*r).min(*s)),
        (Some((only, _)), None) | (None, Some((only, _))) => Some(*only),
        (None, None) => None,
    };
    let summary = Summary {
        to_change: count(Status::Change),
        unknown: count(Status::Unknown),
        malformed: count(Status::Malformed),
        receive_window_bytes: receive.as_ref().map(|(bytes, _)| *bytes),
        receive_limited_by: receive.map(|(_, by)| by),
        send_window_bytes: send.as_ref().map(|(bytes, _)| *bytes),
        send_limited_by: send.map(|(_, by)| by),
        window_bytes: window_allowed,
        throughput_cap_bps: window_allowed.map(|bytes| throughput_cap_bps(bytes, path.rtt_ns)),
    };
    TuneReport {
        rate_bps: path.rate_bps,
        rtt_ns: path.rtt_ns,
        rtt_measurement: None,
        rate_measurement: None,
        mss_bytes: path.mss_bytes,
        bdp_bits: path.bdp_bits(),
        window_bytes: window,
        window_segments: window.div_ceil(path.mss_bytes),
        max_tcp_window_bytes: MAX_TCP_WINDOW_BYTES,
        connections,
        window_per_connection_bytes: per_connection,
        receive_window_share: share.as_f64(),
        receive_window_share_basis: basis,
        txqueuelen_needed: txqueue_needed,
        rows,
        summary,
    }
}

/// The report as the terminal shows it.
pub fn render_text(report: &TuneReport) -> String {
    let mut out = String::new();
    let rtt = format::time(report.rtt_ns as f64 * 1e-9, Digits::up_to(2));
    let rate = format::rate(report.rate_bps as f64, Digits::up_to(2));
    write_path_text(&mut out, report, &rate, &rtt);
    let _ = writeln!(out);
    write_rows_text(&mut out, &report.rows);
    write_summary_text(&mut out, report, &rate, &rtt);
    out
}

/// Writes the path part of the report: where the rate and the RTT come from, the BDP and
/// the window it needs, and how many connections share it; `rate` and `rtt` formatted.
fn write_path_text(out: &mut String, report: &TuneReport, rate: &str, rtt: &str) {
    if let Some(c) = &report.rate_measurement {
        match c.shaper.as_ref().filter(|shaper| shaper.shaped()) {
            Some(shaper) => {
                let _ = writeln!(
                    out,
                    "rate {rate}: measured from the server to this host, {}; {}",
                    c.bottleneck_source(),
                    shaper.describe()
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "rate {rate}: the capacity measured from the server to this host with packet trains (95% CI {} to {}){}",
                    format::rate(c.low_bps, Digits::up_to(2)),
                    format::rate(c.high_bps, Digits::up_to(2)),
                    c.shaper.as_ref().map_or_else(String::new, |s| format!("; {}", s.describe()))
                );
            }
        }
    }
    match &report.rtt_measurement {
        Some(m) => {
            let _ = writeln!(
                out,
                "RTT to {}: {rtt}, the minimum of {} replies to {} probes {} apart (median {}); the minimum is the path without queueing, which is what the window must fill",
                m.host,
                m.replies,
                m.probes,
                format::time(m.interval_ns as f64 * 1e-9, Digits::up_to(2)),
                format::time(m.median_ns as f64 * 1e-9, Digits::up_to(2))
            );
        }
        None => {
            let _ = writeln!(out, "RTT {rtt} (given)");
        }
    }
    let _ = writeln!(
        out,
        "BDP = {rate} x {rtt} = {}; the window it needs: {} ({} bytes, {} segment{} of {} B)",
        format::bits(report.bdp_bits as f64, Digits::up_to(2)),
        format::bytes_si(report.window_bytes, Digits::up_to(2)),
        report.window_bytes,
        report.window_segments,
        if report.window_segments == 1 { "" } else { "s" },
        report.mss_bytes
    );
    if report.connections > 1 {
        let _ = writeln!(
            out,
            "one TCP connection offers at most {} (65535 x 2^14): use {} connections of {} each",
            format::bytes_si(report.max_tcp_window_bytes, Digits::up_to(2)),
            report.connections,
            format::bytes_si(report.window_per_connection_bytes, Digits::up_to(2))
        );
    }
}

/// Writes one block per setting: its status and current value, a problem if any, what it
/// needs and why, the commands that fix it and the line that keeps it.
fn write_rows_text(out: &mut String, rows: &[Row]) {
    for row in rows {
        let status = match row.status {
            Status::Ok => "ok",
            Status::Change => "change",
            Status::Unknown => "unknown",
            Status::Malformed => "malformed",
        };
        let current = row
            .current
            .clone()
            .unwrap_or_else(|| "unknown (not readable)".to_owned());
        let _ = writeln!(out, "[{status:^9}] {} = {current}", row.setting);
        if let (Status::Malformed | Status::Unknown, Some(problem)) = (row.status, &row.problem) {
            let _ = writeln!(out, "            problem: {problem}");
        }
        let _ = writeln!(out, "            needs:   {}", row.needed);
        let _ = writeln!(out, "            why:     {}", row.why);
        for (i, command) in row.commands.iter().enumerate() {
            let label = if i == 0 { "fix:    " } else { "        " };
            let _ = writeln!(out, "            {label} {command}");
        }
        if let Some(persist) = &row.persist {
            let _ = writeln!(
                out,
                "            keep:    {}: {}",
                persist.file, persist.line
            );
        }
    }
}

/// Writes the summary: how many settings to change, the window the current settings
/// allow each way, and what one connection carries with it; `rate` and `rtt` formatted.
fn write_summary_text(out: &mut String, report: &TuneReport, rate: &str, rtt: &str) {
    let s = &report.summary;
    let _ = writeln!(out);
    let mut counts = format!("{} to change", s.to_change);
    if s.unknown > 0 {
        let _ = write!(counts, ", {} not readable", s.unknown);
    }
    if s.malformed > 0 {
        let _ = write!(counts, ", {} malformed", s.malformed);
    }
    let _ = writeln!(
        out,
        "summary: {} settings checked, {counts}",
        report.rows.len()
    );
    let side = |name: &str, bytes: Option<u64>, by: &Option<String>| match (bytes, by) {
        (Some(bytes), Some(by)) => format!(
            "{name} {} (set by {by})",
            format::bytes_si(bytes, Digits::up_to(2))
        ),
        _ => format!("{name} unknown (not readable)"),
    };
    let _ = writeln!(
        out,
        "  the current settings allow a window of: {}; {}",
        side(
            "as a receiver",
            s.receive_window_bytes,
            &s.receive_limited_by
        ),
        side("as a sender", s.send_window_bytes, &s.send_limited_by)
    );
    if let (Some(window), Some(cap)) = (s.window_bytes, s.throughput_cap_bps) {
        let verdict = if window >= report.window_per_connection_bytes {
            format!("enough for {rate}")
        } else {
            format!(
                "{} of the path's {rate}",
                format_args!("{:.1}%", 100.0 * cap / report.rate_bps as f64)
            )
        };
        let _ = writeln!(
            out,
            "  one connection with a {} window carries at most {} at {rtt} (window / RTT): {verdict}",
            format::bytes_si(window, Digits::up_to(2)),
            format::rate(cap, Digits::up_to(2))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const MSS: u64 = 1448;

    fn debian() -> HostSettings {
        let sysctl = [
            ("kernel.osrelease", "6.1.0-25-amd64"),
            ("net.ipv4.tcp_rmem", "4096\t131072\t6291456"),
            ("net.ipv4.tcp_wmem", "4096\t16384\t4194304"),
            ("net.core.rmem_max", "212992"),
            ("net.core.wmem_max", "212992"),
            ("net.ipv4.tcp_mem", "188319\t251092\t376638"),
            ("net.ipv4.tcp_adv_win_scale", "1"),
            ("net.ipv4.tcp_moderate_rcvbuf", "1"),
            ("net.ipv4.tcp_window_scaling", "1"),
            ("net.ipv4.tcp_timestamps", "1"),
            ("net.ipv4.tcp_sack", "1"),
            ("net.ipv4.tcp_no_metrics_save", "0"),
            ("net.ipv4.tcp_congestion_control", "cubic"),
            ("net.ipv4.tcp_available_congestion_control", "reno cubic"),
            ("net.core.default_qdisc", "pfifo_fast"),
        ];
        HostSettings {
            sysctl: sysctl
                .iter()
                .map(|(k, v)| ((*k).to_owned(), format!("{v}\n")))
                .collect(),
            interfaces: Some(
                [("eth0".to_owned(), Some("1000\n".to_owned()))]
                    .into_iter()
                    .collect(),
            ),
            page_size_bytes: Some(4096),
        }
    }

    /// [`debian`] with sysctl `name` set to `value`.
    fn debian_with(name: &str, value: &str) -> HostSettings {
        let mut host = debian();
        host.sysctl.insert(name.into(), value.into());
        host
    }

    fn row<'a>(report: &'a TuneReport, setting: &str) -> &'a Row {
        report
            .rows
            .iter()
            .find(|row| row.setting == setting)
            .unwrap_or_else(|| panic!("no row {setting}"))
    }

    fn gigabit_170ms() -> TunePath {
        TunePath::new(1_000_000_000, 170 * MS, MSS).unwrap()
    }

    #[test]
    fn the_seeds_windows_come_from_rate_times_rtt() {
        // Slide 4: "1 Gb/s + 50 ms RTT => TCP okénko 6 MB", "1 Gb/s + 170 ms => 21 MB".
        assert_eq!(window_bytes(1_000_000_000, 50 * MS), 6_250_000);
        assert_eq!(window_bytes(1_000_000_000, 170 * MS), 21_250_000);
        assert_eq!(format::bytes_si(21_250_000, Digits::up_to(2)), "21.25 MB");
        // "64 kB + 50 ms RTT => 10.5 Mb/s", "64 kB + 170 ms RTT (USA) => 3 Mb/s".
        assert!((throughput_cap_bps(65_536, 50 * MS) / 1e6 - 10.49).abs() < 0.01);
        assert!((throughput_cap_bps(65_536, 170 * MS) / 1e6 - 3.08).abs() < 0.01);
        assert_eq!(gigabit_170ms().bdp_bits(), 170_000_000);
        // Rounded up, never down: 1 bit/s over 1 s is one byte.
        assert_eq!(window_bytes(1, 1_000_000_000), 1);
    }

    #[test]
    fn the_seeds_txqueuelen_rule() {
        // Slide 8: "txqueuelen > 1 Gb/s * 10 ms / 8 bits / 1500 bytes = 833 packets".
        assert_eq!(txqueuelen_needed(1_000_000_000), 834);
        assert_eq!(txqueuelen_needed(10_000_000_000), 8334);
        assert_eq!(txqueuelen_needed(100_000_000), 84);
        // 1.2 Gbit/s fills exactly 1000 packets per tick.
        assert_eq!(txqueuelen_needed(1_200_000_000), 1000);
    }

    #[test]
    fn recovery_times_follow_reno_and_rfc_9438() {
        // Reno halves 14676 segments and adds one per RTT: 7338 RTTs.
        assert_eq!(reno_recovery_rtts(21_250_000, MSS), 7338);
        // K = cbrt(W_max * 0.3 / 0.4); W_max = 1000 segments gives cbrt(750) = 9.09 s.
        assert!((cubic_recovery_secs(1000.0) - 750f64.cbrt()).abs() < 1e-12);
    }

    #[test]
    fn debian_defaults_need_bigger_buffers_for_a_gigabit_over_170ms() {
        let report = advise(&gigabit_170ms(), &debian());
        assert_eq!(report.window_bytes, 21_250_000);
        assert_eq!(report.connections, 1);
        assert_eq!(report.receive_window_share, 0.5);
        let rmem = row(&report, "net.ipv4.tcp_rmem");
        assert_eq!(rmem.status, Status::Change);
        assert_eq!(rmem.current.as_deref(), Some("4096 131072 6291456"));
        assert_eq!(
            rmem.commands,
            ["sysctl -w net.ipv4.tcp_rmem='4096 131072 42500000'"]
        );
        assert_eq!(
            rmem.persist.as_ref().unwrap().line,
            "net.ipv4.tcp_rmem = 4096 131072 42500000"
        );
        let wmem = row(&report, "net.ipv4.tcp_wmem");
        assert_eq!(
            wmem.commands,
            ["sysctl -w net.ipv4.tcp_wmem='4096 16384 42500000'"]
        );
        assert_eq!(
            row(&report, "net.core.rmem_max").commands,
            ["sysctl -w net.core.rmem_max=21250000"]
        );
        assert_eq!(
            row(&report, "net.core.wmem_max").commands,
            ["sysctl -w net.core.wmem_max=21250000"]
        );
        // 42.5 MB is 10376 pages, far below the pressure threshold of 251092.
        assert_eq!(row(&report, "net.ipv4.tcp_mem").status, Status::Ok);
        assert_eq!(row(&report, "net.ipv4.tcp_sack").status, Status::Ok);
        let metrics = row(&report, "net.ipv4.tcp_no_metrics_save");
        assert_eq!(metrics.status, Status::Change);
        assert_eq!(
            metrics.commands,
            [
                "sysctl -w net.ipv4.tcp_no_metrics_save=1",
                "ip tcp_metrics flush all"
            ]
        );
        assert_eq!(
            row(&report, "net.ipv4.tcp_congestion_control").status,
            Status::Ok
        );
        assert_eq!(
            row(&report, "net.core.default_qdisc").status,
            Status::Change
        );
        // 1000 >= 834.
        assert_eq!(row(&report, "txqueuelen eth0").status, Status::Ok);
        // Receiver: half of 6291456; sender: half of 4194304 (the smaller).
        let summary = &report.summary;
        assert_eq!(summary.receive_window_bytes, Some(3_145_728));
        assert_eq!(summary.send_window_bytes, Some(2_097_152));
        assert_eq!(summary.window_bytes, Some(2_097_152));
        let cap = summary.throughput_cap_bps.unwrap();
        assert!((cap - 2_097_152.0 * 8.0 / 0.170).abs() < 1e-3, "{cap}");
        assert_eq!(summary.to_change, 6);
        assert_eq!((summary.unknown, summary.malformed), (0, 0));
    }

    #[test]
    fn a_tuned_host_needs_no_buffer_change_and_allows_the_window() {
        let mut host = debian();
        for (name, value) in [
            ("net.ipv4.tcp_rmem", "4096 131072 67108864"),
            ("net.ipv4.tcp_wmem", "4096 16384 67108864"),
            ("net.core.rmem_max", "67108864"),
            ("net.core.wmem_max", "67108864"),
            ("net.ipv4.tcp_no_metrics_save", "1"),
            ("net.core.default_qdisc", "fq"),
        ] {
            host.sysctl.insert(name.to_owned(), value.to_owned());
        }
        let report = advise(&gigabit_170ms(), &host);
        assert!(
            report.rows.iter().all(|row| row.status == Status::Ok),
            "{:#?}",
            report.rows
        );
        assert_eq!(report.summary.to_change, 0);
        assert_eq!(report.summary.window_bytes, Some(33_554_432));
        assert!(render_text(&report).contains("enough for 1 Gbit/s"));
    }

    #[test]
    fn the_share_follows_the_kernel() {
        let mut host = debian_with("net.ipv4.tcp_adv_win_scale", "2");
        let report = advise(&gigabit_170ms(), &host);
        // Linux 6.1 with tcp_adv_win_scale = 2 offers 3/4 of the buffer.
        assert_eq!(report.receive_window_share, 0.75);
        assert_eq!(
            row(&report, "net.ipv4.tcp_rmem").commands,
            ["sysctl -w net.ipv4.tcp_rmem='4096 131072 28333334'"]
        );
        host.sysctl
            .insert("kernel.osrelease".into(), "6.18.44-fc-v782".into());
        // Since 6.6 the scale is obsolete: the measured ratio starts at half.
        assert_eq!(advise(&gigabit_170ms(), &host).receive_window_share, 0.5);
        host.sysctl
            .insert("kernel.osrelease".into(), "5.15.0".into());
        host.sysctl
            .insert("net.ipv4.tcp_adv_win_scale".into(), "-2".into());
        assert_eq!(advise(&gigabit_170ms(), &host).receive_window_share, 0.25);
    }

    #[test]
    fn missing_and_malformed_values_are_reported_per_row() {
        let mut host = debian();
        host.sysctl.remove("net.core.rmem_max");
        host.sysctl
            .insert("net.ipv4.tcp_wmem".into(), "4096 lots".into());
        host.sysctl.insert("net.ipv4.tcp_sack".into(), "7".into());
        host.interfaces = Some([("eth1".to_owned(), None)].into_iter().collect());
        let report = advise(&gigabit_170ms(), &host);
        let rmem_max = row(&report, "net.core.rmem_max");
        assert_eq!(rmem_max.status, Status::Unknown);
        assert_eq!(rmem_max.problem.as_deref(), Some("not readable"));
        let wmem = row(&report, "net.ipv4.tcp_wmem");
        assert_eq!(wmem.status, Status::Malformed);
        assert_eq!(
            wmem.problem.as_deref(),
            Some("expected three non-negative integers (min default max), got '4096 lots'")
        );
        assert_eq!(
            row(&report, "net.ipv4.tcp_sack").problem.as_deref(),
            Some("expected 0 or 1, got '7'")
        );
        assert_eq!(row(&report, "txqueuelen eth1").status, Status::Unknown);
        // The send side is unknown, so the window is the receiver's alone.
        assert_eq!(report.summary.send_window_bytes, None);
        assert_eq!(report.summary.window_bytes, Some(3_145_728));
        assert_eq!((report.summary.unknown, report.summary.malformed), (2, 2));
        let text = render_text(&report);
        assert!(
            text.contains("net.core.rmem_max = unknown (not readable)"),
            "{text}"
        );
        assert!(
            text.contains("as a sender unknown (not readable)"),
            "{text}"
        );
        let nothing = advise(&gigabit_170ms(), &HostSettings::default());
        assert!(nothing.rows.iter().all(|row| row.status == Status::Unknown));
        assert_eq!(nothing.summary.window_bytes, None);
        assert_eq!(nothing.summary.throughput_cap_bps, None);
    }

    #[test]
    fn ten_gigabit_needs_a_longer_transmit_queue() {
        let path = TunePath::new(10_000_000_000, 20 * MS, MSS).unwrap();
        let report = advise(&path, &debian());
        assert_eq!(report.txqueuelen_needed, 8334);
        let eth0 = row(&report, "txqueuelen eth0");
        assert_eq!(eth0.status, Status::Change);
        assert_eq!(eth0.interface.as_deref(), Some("eth0"));
        assert_eq!(eth0.commands, ["ip link set dev eth0 txqueuelen 8334"]);
        assert_eq!(
            eth0.persist.as_ref().unwrap().line,
            "ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"eth0\", ATTR{tx_queue_len}=\"8334\""
        );
    }

    #[test]
    fn reno_is_flagged_only_above_rfc_3649s_low_window() {
        let mut host = debian_with("net.ipv4.tcp_congestion_control", "reno");
        let report = advise(&gigabit_170ms(), &host);
        let cc = row(&report, "net.ipv4.tcp_congestion_control");
        assert_eq!(cc.status, Status::Change);
        assert_eq!(
            cc.commands,
            ["sysctl -w net.ipv4.tcp_congestion_control=cubic"]
        );
        assert!(cc.why.contains("7338 RTTs (20.79 min)"), "{}", cc.why);
        // 38 segments of 1448 B at 10 ms is 44 Mbit/s; 4 Mbit/s x 10 ms is 4 segments.
        let small = TunePath::new(4_000_000, 10 * MS, MSS).unwrap();
        let report = advise(&small, &host);
        assert_eq!(
            row(&report, "net.ipv4.tcp_congestion_control").status,
            Status::Ok
        );
        // Where cubic is not loaded the fix loads it first... unless bbr is there.
        host.sysctl.insert(
            "net.ipv4.tcp_available_congestion_control".into(),
            "reno bbr".into(),
        );
        let report = advise(&gigabit_170ms(), &host);
        assert_eq!(
            row(&report, "net.ipv4.tcp_congestion_control").commands,
            ["sysctl -w net.ipv4.tcp_congestion_control=bbr"]
        );
        host.sysctl.insert(
            "net.ipv4.tcp_available_congestion_control".into(),
            "reno".into(),
        );
        let report = advise(&gigabit_170ms(), &host);
        assert_eq!(
            row(&report, "net.ipv4.tcp_congestion_control").commands,
            [
                "modprobe tcp_cubic",
                "sysctl -w net.ipv4.tcp_congestion_control=cubic"
            ]
        );
    }

    #[test]
    fn window_scaling_matters_only_above_64k() {
        let host = debian_with("net.ipv4.tcp_window_scaling", "0");
        let report = advise(&gigabit_170ms(), &host);
        assert_eq!(
            row(&report, "net.ipv4.tcp_window_scaling").status,
            Status::Change
        );
        assert_eq!(report.summary.window_bytes, Some(UNSCALED_WINDOW_BYTES));
        assert_eq!(
            report.summary.send_limited_by.as_deref(),
            Some("net.ipv4.tcp_window_scaling = 0")
        );
        // 1 Mbit/s x 100 ms = 12500 bytes fits without scaling.
        let slow = TunePath::new(1_000_000, 100 * MS, MSS).unwrap();
        assert_eq!(
            row(&advise(&slow, &host), "net.ipv4.tcp_window_scaling").status,
            Status::Ok
        );
    }

    #[test]
    fn autotuning_off_leaves_the_default_buffer() {
        let host = debian_with("net.ipv4.tcp_moderate_rcvbuf", "0");
        let report = advise(&gigabit_170ms(), &host);
        assert_eq!(
            row(&report, "net.ipv4.tcp_moderate_rcvbuf").status,
            Status::Change
        );
        assert_eq!(report.summary.receive_window_bytes, Some(131_072 / 2));
    }

    #[test]
    fn a_window_beyond_tcps_largest_needs_several_connections() {
        // 100 Gbit/s over 200 ms: 2.5 GB, three connections of 833.33 MB.
        let path = TunePath::new(100_000_000_000, 200 * MS, MSS).unwrap();
        let report = advise(&path, &debian());
        assert_eq!(report.window_bytes, 2_500_000_000);
        assert_eq!(report.connections, 3);
        assert_eq!(report.window_per_connection_bytes, 833_333_334);
        let rmem = row(&report, "net.ipv4.tcp_rmem");
        assert_eq!(
            rmem.commands,
            ["sysctl -w net.ipv4.tcp_rmem='4096 131072 1666666668'"]
        );
        // Three buffers of 1.67 GB under the pressure threshold: 1220704 pages.
        let memory = row(&report, "net.ipv4.tcp_mem");
        assert_eq!(memory.status, Status::Change);
        assert_eq!(
            memory.commands,
            ["sysctl -w net.ipv4.tcp_mem='188319 1220704 1220704'"]
        );
        assert!(render_text(&report).contains("use 3 connections"));
    }

    #[test]
    fn inputs_out_of_range_are_refused() {
        assert_eq!(
            TunePath::new(0, MS, MSS),
            Err(TuneInputError::RateTooLow(0))
        );
        assert!(TunePath::new(20_000_000_000_000, MS, MSS).is_err());
        assert!(TunePath::new(1_000_000, 0, MSS).is_err());
        assert!(TunePath::new(1_000_000, 61_000_000_000, MSS).is_err());
        assert!(TunePath::new(1_000_000, MS, 0).is_err());
        assert_eq!(
            TuneInputError::RttTooLong(61_000_000_000).to_string(),
            "RTT 61 s is longer than any path: give at most 60s"
        );
    }

    #[test]
    fn the_page_size_is_read_from_the_auxiliary_vector() {
        let words: Vec<u8> = [33usize, 0xffff, 6, 16384, 0, 0]
            .iter()
            .flat_map(|word| word.to_ne_bytes())
            .collect();
        assert_eq!(page_size_from_auxv(&words), Some(16384));
        assert_eq!(page_size_from_auxv(&words[..16]), None);
        assert_eq!(page_size_from_auxv(&[]), None);
    }

    #[test]
    fn an_unknown_page_size_leaves_tcp_mem_unknown() {
        let mut host = debian();
        host.page_size_bytes = None;
        let report = advise(&gigabit_170ms(), &host);
        let memory = row(&report, "net.ipv4.tcp_mem");
        assert_eq!(memory.status, Status::Unknown);
        assert_eq!(
            memory.problem.as_deref(),
            Some("the page size is not readable")
        );
    }

    #[test]
    fn the_text_names_every_setting_and_the_cap() {
        let text = render_text(&advise(&gigabit_170ms(), &debian()));
        for setting in SYSCTLS.iter().filter(|name| {
            ![
                "kernel.osrelease",
                "net.ipv4.tcp_adv_win_scale",
                "net.ipv4.tcp_available_congestion_control",
            ]
            .contains(name)
        }) {
            assert!(text.contains(setting), "{setting} missing from\n{text}");
        }
        assert!(
            text.contains("the window it needs: 21.25 MB (21250000 bytes"),
            "{text}"
        );
        assert!(
            text.contains("summary: 13 settings checked, 6 to change"),
            "{text}"
        );
        assert!(
            text.contains("carries at most 98.69 Mbit/s at 170 ms"),
            "{text}"
        );
    }
}
