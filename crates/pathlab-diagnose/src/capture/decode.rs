//! TCP segments out of captured frames: the link layer ([`super::format`]'s link types,
//! and the VLAN tags [`EthernetFrame`] skips), IPv4 or IPv6 (extension headers skipped),
//! then TCP with its options.
//!
//! Lengths come from the headers, not from what was captured: a frame cut by the snaplen
//! still says how much payload it carried (its IP total length less the headers). A capture
//! taken at a sender with TSO shows super-packets whose IP length field is 0; the frame's
//! original length stands in for it then.

use std::net::{IpAddr, SocketAddr};

use pathlab_core::wire::ethernet::{EthernetError, EthernetFrame, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use pathlab_core::wire::ipv4::Ipv4Packet;
use pathlab_core::wire::ipv6::{self, ExtensionError, Ipv6Packet};
use pathlab_core::wire::tcp::TcpSegment as TcpSegmentView;
use pathlab_core::wire::{self, HeaderError, PROTOCOL_TCP};

use super::format::{
    LINKTYPE_ETHERNET, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP, LINKTYPE_NULL, LINKTYPE_RAW,
};

/// Offsets of the link-layer headers' fields (the IP and TCP ones are
/// [`pathlab_core::wire`]'s).
mod field {
    pub const SLL_PROTOCOL: usize = 14;
    pub const SLL_HEADER: usize = 16;
    pub const SLL2_PROTOCOL: usize = 0;
    pub const SLL2_HEADER: usize = 20;
    pub const NULL_HEADER: usize = 4;
}

/// The TCP header's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// FIN.
    pub const FIN: u8 = wire::tcp::FIN;
    /// SYN.
    pub const SYN: u8 = wire::tcp::SYN;
    /// RST.
    pub const RST: u8 = wire::tcp::RST;
    /// PSH.
    pub const PSH: u8 = wire::tcp::PSH;
    /// ACK.
    pub const ACK: u8 = wire::tcp::ACK;

    /// Whether `flag` is set.
    pub fn has(self, flag: u8) -> bool {
        self.0 & flag != 0
    }
}

/// The TCP options the analysis uses (RFC 9293, RFC 7323, RFC 2018).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size (on a SYN).
    pub mss: Option<u16>,
    /// Window scale shift (on a SYN).
    pub window_scale: Option<u8>,
    /// SACK permitted (on a SYN).
    pub sack_permitted: bool,
    /// SACK blocks, `[left, right)` sequence numbers.
    pub sack: Vec<(u32, u32)>,
    /// Timestamps: (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
    /// The capture cut the options short: those after the cut are missing.
    pub truncated: bool,
}

/// One TCP segment as decoded from a captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSegment {
    /// Sender.
    pub source: SocketAddr,
    /// Receiver.
    pub destination: SocketAddr,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful with ACK).
    pub ack: u32,
    /// Flags.
    pub flags: TcpFlags,
    /// Advertised window as sent (unscaled).
    pub window: u16,
    /// Options.
    pub options: TcpOptions,
    /// Payload bytes the segment carried, from the IP and TCP headers' lengths.
    pub payload_len: u32,
    /// The IP packet's length, bytes.
    pub ip_len: u32,
    /// IP header bytes (with IPv6 extension headers).
    pub ip_header_len: u32,
    /// TCP header bytes (with options).
    pub tcp_header_len: u32,
    /// The frame carried at least one VLAN tag (802.1Q, 802.1ad or 0x9100).
    pub vlan: bool,
}

impl TcpSegment {
    /// The sequence space the segment occupies: payload, plus one for SYN and for FIN.
    pub fn seq_len(&self) -> u32 {
        self.payload_len
            + u32::from(self.flags.has(TcpFlags::SYN))
            + u32::from(self.flags.has(TcpFlags::FIN))
    }
}

/// Why a frame holds no readable TCP segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The capture kept too little of the frame to read a header.
    #[error("the capture kept {captured} bytes, too few for the {header} header")]
    Truncated {
        /// Which header.
        header: &'static str,
        /// Bytes captured.
        captured: usize,
    },
    /// A header's field is impossible.
    #[error("{0}")]
    Malformed(String),
    /// The link type is not one this reader decodes.
    #[error("link type {0} is not one pathlab reads (Ethernet 1, raw IP 101/228/229, Linux cooked SLL 113 and SLL2 276, loopback 0/108)")]
    UnknownLinkType(u16),
}

fn truncated(header: &'static str, captured: usize) -> DecodeError {
    DecodeError::Truncated { header, captured }
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The TCP segment in `data`, a frame of `link_type` whose original length was
/// `original_len`; `Ok(None)` when it holds something else (ARP, UDP, a later IP fragment).
pub fn decode(
    link_type: u16,
    data: &[u8],
    original_len: u32,
) -> Result<Option<TcpSegment>, DecodeError> {
    let (ethertype, at, vlan) = match link_type {
        LINKTYPE_ETHERNET => {
            let frame = EthernetFrame::new_checked(data).map_err(|error| match error {
                EthernetError::Truncated { len } => truncated("Ethernet", len),
                EthernetError::TruncatedTag { len, .. } => truncated("802.1Q tag", len),
                EthernetError::TooManyTags => DecodeError::Malformed(error.to_string()),
            })?;
            (
                Some(frame.ethertype()),
                frame.payload_offset(),
                frame.vlan_tag_count() > 0,
            )
        }
        LINKTYPE_LINUX_SLL => (
            Some(u16_at(data, field::SLL_PROTOCOL).ok_or(truncated("Linux cooked", data.len()))?),
            field::SLL_HEADER,
            false,
        ),
        LINKTYPE_LINUX_SLL2 => (
            Some(
                u16_at(data, field::SLL2_PROTOCOL)
                    .ok_or(truncated("Linux cooked v2", data.len()))?,
            ),
            field::SLL2_HEADER,
            false,
        ),
        LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => (None, 0, false),
        LINKTYPE_NULL | LINKTYPE_LOOP => (None, field::NULL_HEADER, false),
        other => return Err(DecodeError::UnknownLinkType(other)),
    };
    let link_header = at;
    if data.len() < link_header {
        return Err(truncated("link-layer", data.len()));
    }
    let ip = &data[link_header..];
    let ip_original = (original_len as usize).saturating_sub(link_header);
    let version = match ethertype {
        Some(ETHERTYPE_IPV4) => 4,
        Some(ETHERTYPE_IPV6) => 6,
        Some(_) => return Ok(None),
        // Raw IP and loopback: the version nibble says.
        None => match ip.first().map(|b| b >> 4) {
            Some(4) => 4,
            Some(6) => 6,
            Some(_) => return Ok(None),
            None => return Err(truncated("IP", 0)),
        },
    };
    let (source, destination, ip_header_len, ip_len, tcp_at) = if version == 4 {
        match ipv4(ip, ip_original)? {
            Some(parsed) => parsed,
            None => return Ok(None),
        }
    } else {
        match ipv6(ip, ip_original)? {
            Some(parsed) => parsed,
            None => return Ok(None),
        }
    };
    let tcp = TcpSegmentView::new_checked(&ip[tcp_at..]).map_err(|error| match error {
        HeaderError::Truncated { len, .. } => truncated("TCP", len),
        HeaderError::HeaderLen { len, .. } => DecodeError::Malformed(format!(
            "TCP data offset of {len} bytes is below the 20-byte header"
        )),
        HeaderError::Version { .. } => DecodeError::Malformed(error.to_string()),
    })?;
    let data_offset = tcp.header_len();
    let ip_payload = ip_len.saturating_sub(ip_header_len);
    let Some(payload_len) = ip_payload.checked_sub(data_offset as u32) else {
        return Err(DecodeError::Malformed(format!(
            "TCP header of {data_offset} bytes is longer than the IP payload of {ip_payload}"
        )));
    };
    let mut options = tcp_options(tcp.options());
    options.truncated |= tcp.is_cut();
    Ok(Some(TcpSegment {
        source: SocketAddr::new(source, tcp.source_port()),
        destination: SocketAddr::new(destination, tcp.destination_port()),
        seq: tcp.seq(),
        ack: tcp.ack(),
        flags: TcpFlags(tcp.flags()),
        window: tcp.window(),
        options,
        payload_len,
        ip_len,
        ip_header_len,
        tcp_header_len: data_offset as u32,
        vlan,
    }))
}

/// An IPv4 header: (source, destination, header length, packet length, where TCP starts),
/// `None` when it does not carry the start of a TCP segment.
type IpParts = (IpAddr, IpAddr, u32, u32, usize);

fn ipv4(bytes: &[u8], original_len: usize) -> Result<Option<IpParts>, DecodeError> {
    let ip = Ipv4Packet::new_checked(bytes).map_err(|error| match error {
        HeaderError::Truncated { len, .. } => truncated("IPv4", len),
        HeaderError::HeaderLen { len, .. } => {
            DecodeError::Malformed(format!("IPv4 header length {len} is below 20"))
        }
        HeaderError::Version { .. } => DecodeError::Malformed(error.to_string()),
    })?;
    if ip.protocol() != PROTOCOL_TCP || ip.fragment_offset() != 0 {
        return Ok(None);
    }
    let header_len = ip.header_len();
    let mut total_len = usize::from(ip.total_len());
    if total_len == 0 {
        // A TSO super-packet captured before segmentation.
        total_len = original_len.max(bytes.len());
    }
    if total_len < header_len {
        return Err(DecodeError::Malformed(format!(
            "IPv4 total length {total_len} is below its header length {header_len}"
        )));
    }
    let addresses = (ip.source().into(), ip.destination().into());
    Ok(Some(ip_parts(addresses, header_len, total_len)))
}

fn ipv6(bytes: &[u8], original_len: usize) -> Result<Option<IpParts>, DecodeError> {
    let ip = Ipv6Packet::new_checked(bytes).map_err(|error| match error {
        HeaderError::Truncated { len, .. } => truncated("IPv6", len),
        other => DecodeError::Malformed(other.to_string()),
    })?;
    let payload_len = usize::from(ip.payload_len());
    let total_len = if payload_len == 0 {
        // A jumbogram or a GSO super-packet: the frame's length says.
        original_len.max(bytes.len())
    } else {
        ipv6::HEADER_LEN + payload_len
    };
    let (protocol, at) = match ip.upper_layer() {
        Ok(found) => found,
        Err(ExtensionError::Truncated) => return Err(truncated("IPv6 extension", bytes.len())),
        Err(ExtensionError::LaterFragment) => return Ok(None),
        Err(error @ ExtensionError::TooMany) => {
            return Err(DecodeError::Malformed(error.to_string()))
        }
    };
    if at > total_len {
        return Err(DecodeError::Malformed(format!(
            "IPv6 extension headers run to byte {at}, past the packet's {total_len}"
        )));
    }
    if protocol != PROTOCOL_TCP {
        return Ok(None);
    }
    let addresses = (ip.source().into(), ip.destination().into());
    Ok(Some(ip_parts(addresses, at, total_len)))
}

/// The [`IpParts`] of a packet between `(source, destination)` whose TCP segment starts
/// at `header_len` (the IP header's with any extension headers), `total_len` long.
fn ip_parts(
    (source, destination): (IpAddr, IpAddr),
    header_len: usize,
    total_len: usize,
) -> IpParts {
    (
        source,
        destination,
        header_len as u32,
        total_len as u32,
        header_len,
    )
}

/// The options in `bytes` (the TCP header after its 20 fixed bytes, as far as captured).
fn tcp_options(bytes: &[u8]) -> TcpOptions {
    const END: u8 = 0;
    const NOP: u8 = 1;
    const MSS: u8 = 2;
    const WINDOW_SCALE: u8 = 3;
    const SACK_PERMITTED: u8 = 4;
    const SACK: u8 = 5;
    const TIMESTAMPS: u8 = 8;
    let mut options = TcpOptions::default();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            END => break,
            NOP => at += 1,
            kind => {
                let Some(&len) = bytes.get(at + 1) else {
                    options.truncated = true;
                    break;
                };
                let len = usize::from(len);
                if len < 2 {
                    // A length that cannot be: the rest is unreadable.
                    break;
                }
                let Some(value) = bytes.get(at + 2..at + len) else {
                    options.truncated = true;
                    break;
                };
                match (kind, value.len()) {
                    (MSS, 2) => options.mss = u16_at(value, 0),
                    (WINDOW_SCALE, 1) => options.window_scale = Some(value[0].min(14)),
                    (SACK_PERMITTED, 0) => options.sack_permitted = true,
                    (SACK, n) if n % 8 == 0 => {
                        options.sack = value
                            .chunks_exact(8)
                            .filter_map(|b| Some((u32_at(b, 0)?, u32_at(b, 4)?)))
                            .collect();
                    }
                    (TIMESTAMPS, 8) => {
                        options.timestamps =
                            Some((u32_at(value, 0).unwrap_or(0), u32_at(value, 4).unwrap_or(0)));
                    }
                    _ => {}
                }
                at += len;
            }
        }
    }
    options
}
