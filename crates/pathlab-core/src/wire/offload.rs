//! Undoing offloads in user space: checksums the sender left to hardware, and super-packets
//! (GSO/TSO/GRO) cut back into the segments that would have crossed the wire.
//!
//! The emulator reads frames with `PACKET_VNET_HDR`, so each comes with the kernel's
//! `virtio_net_hdr`: whether its checksum is still to be filled in, and, for a
//! super-packet, its segment size. pathlab segments here instead of turning offloads off
//! on the interfaces: a 64 KB TSO packet becomes the 45 frames of 1514 bytes it stands for,
//! each queued, delayed, dropped and recorded on its own, and nothing on the machine is
//! reconfigured, so nothing needs restoring after a crash. Checksums are always completed,
//! because a frame sent through a packet socket reaches the peer as "checksum unknown" and
//! a receiver drops a TCP segment whose checksum field still holds the partial sum.

use crate::buffers::BufferPool;
use crate::wire::checksum::{checksum_add, checksum_finish};
use crate::wire::ethernet::{self, EthernetFrame, VlanTag};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::tcp::{self, TcpSegment};
use crate::wire::udp::{self, UdpDatagram};
use crate::wire::{PROTOCOL_TCP, PROTOCOL_UDP};

/// `virtio_net_hdr` flags: the checksum from `csum_start` on is still to be computed.
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
const GSO_ECN: u8 = 0x80;

/// The `virtio_net_hdr` the kernel puts before each frame (little-endian fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHeader {
    /// `VIRTIO_NET_HDR_F_*` flags.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*` type, with the ECN bit.
    pub gso_type: u8,
    /// Length of the headers to copy into each segment (advisory; recomputed here).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Offset of the first byte the checksum covers (the L4 header).
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHeader {
    /// Reads the header from its 10 bytes.
    pub fn parse(bytes: &[u8; 10]) -> VnetHeader {
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        VnetHeader {
            flags: bytes[0],
            gso_type: bytes[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }
}

/// Why a received frame could not be turned into wire frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// The headers the offload metadata points at are not in the frame.
    #[error("frame too short for its offload metadata")]
    Truncated,
    /// A GSO type pathlab does not segment (UFO, SCTP).
    #[error("unsupported GSO type {0}")]
    UnsupportedGso(u8),
    /// The super-packet is not TCP or UDP over IPv4 or IPv6 as its GSO type says.
    #[error("GSO packet does not match its GSO type")]
    Malformed,
}

/// What a frame starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// An Ethernet header (a packet socket's frames).
    Ethernet,
    /// The IP header (a TUN device's packets).
    Ip,
}

/// Where the IP header starts in a frame (after any VLAN tags), and its version, with
/// the number of VLAN tags before it.
fn ip_header(frame: &[u8], framing: Framing) -> Option<(usize, u8, usize)> {
    match framing {
        Framing::Ethernet => {
            let ethernet = EthernetFrame::new_checked(frame).ok()?;
            let version = match ethernet.ethertype() {
                ethernet::ETHERTYPE_IPV4 => 4,
                ethernet::ETHERTYPE_IPV6 => 6,
                _ => return None,
            };
            Some((
                ethernet.payload_offset(),
                version,
                ethernet.vlan_tag_count(),
            ))
        }
        Framing::Ip => match frame.first()? >> 4 {
            version @ (4 | 6) => Some((0, version, 0)),
            _ => None,
        },
    }
}

/// The pseudo-header sum of RFC 9293 / RFC 8200 section 8.1 for an L4 segment of `l4_len`
/// behind the IP header at `ip` (of `version`, which the caller has checked).
fn pseudo_header_sum(frame: &[u8], ip: usize, version: u8, protocol: u8, l4_len: usize) -> u64 {
    let addresses = if version == 4 {
        ip + ipv4::field::SOURCE.start..ip + ipv4::field::DESTINATION.end
    } else {
        ip + ipv6::field::SOURCE.start..ip + ipv6::field::DESTINATION.end
    };
    checksum_add(0, &frame[addresses]) + u64::from(protocol) + l4_len as u64
}

/// The L4 checksum of the segment at `l4` (its checksum field zero), its IP header at `ip`:
/// 0 becomes 0xffff for UDP, whose 0 says "no checksum" (RFC 768).
fn l4_checksum(segment: &[u8], ip: usize, version: u8, protocol: u8, l4: usize) -> u16 {
    let l4_len = segment.len() - l4;
    let sum =
        pseudo_header_sum(segment, ip, version, protocol, l4_len) + checksum_add(0, &segment[l4..]);
    match checksum_finish(sum) {
        0 if protocol == PROTOCOL_UDP => 0xffff,
        checksum => checksum,
    }
}

/// Fills in an L4 checksum the sender left to hardware (`NEEDS_CSUM`): the field already
/// holds the pseudo-header sum, so the checksum is the complement of the sum from
/// `csum_start` to the end.
pub fn complete_checksum(
    frame: &mut [u8],
    csum_start: usize,
    csum_offset: usize,
) -> Result<(), OffloadError> {
    let field = csum_start + csum_offset;
    if field + 2 > frame.len() {
        return Err(OffloadError::Truncated);
    }
    let sum = checksum_add(0, &frame[csum_start..]);
    let mut checksum = checksum_finish(sum);
    // UDP sends "no checksum" as 0; a computed 0 is sent as 0xffff (RFC 768). TCP does not
    // care, and 0xffff and 0 are the same one's-complement value.
    if checksum == 0 {
        checksum = 0xffff;
    }
    frame[field..field + 2].copy_from_slice(&checksum.to_be_bytes());
    Ok(())
}

/// Passes a frame that needs no cutting, its checksum completed if the sender left it.
fn pass_whole(
    mut frame: Vec<u8>,
    vnet: &VnetHeader,
    emit: &mut dyn FnMut(Vec<u8>),
) -> Result<usize, OffloadError> {
    if vnet.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
        complete_checksum(
            &mut frame,
            vnet.csum_start as usize,
            vnet.csum_offset as usize,
        )?;
    }
    emit(frame);
    Ok(1)
}

/// Turns one received frame (without its vnet header) into the frames that would have
/// crossed the wire, passing each to `emit`. Returns how many there were.
pub fn to_wire_frames(
    frame: Vec<u8>,
    vnet: &VnetHeader,
    emit: &mut dyn FnMut(Vec<u8>),
) -> Result<usize, OffloadError> {
    if is_super_packet(vnet) {
        to_wire_packets(
            &frame,
            Framing::Ethernet,
            vnet,
            &mut BufferPool::new(0),
            emit,
        )
    } else {
        pass_whole(frame, vnet, emit)
    }
}

/// [`to_wire_frames`] of what is still in a receive buffer: a frame (`Framing::Ethernet`)
/// or a packet read from a TUN device with offloads on (`Framing::Ip`, `IFF_VNET_HDR`),
/// without its vnet header. A super-packet is cut from where it is, into segments of at
/// most the segment size, and a checksum left to "hardware" is completed; anything else
/// is copied whole. Each result is written into a buffer taken from `pool` and passed to
/// `emit`. Returns how many there were.
pub fn to_wire_packets(
    frame: &[u8],
    framing: Framing,
    vnet: &VnetHeader,
    pool: &mut BufferPool,
    emit: &mut dyn FnMut(Vec<u8>),
) -> Result<usize, OffloadError> {
    if !is_super_packet(vnet) {
        return pass_whole(pool.copy_of(frame), vnet, emit);
    }
    let gso_type = vnet.gso_type & !GSO_ECN;
    let (outer_ip, outer_version, _) = ip_header(frame, framing).ok_or(OffloadError::Malformed)?;
    let l4 = vnet.csum_start as usize;
    // A tunnel's super-packet (VXLAN, Geneve: what a tunnel device hands on with its
    // offloads) has the checksum start at the inner L4 header: its inner IP header is the
    // one cut by the rules below, and the outer IP and UDP headers are sized per segment.
    let tunnel = match l4_start(frame, outer_ip, outer_version) {
        Some(start) if start == l4 => None,
        Some(udp)
            if ip_protocol(frame, outer_ip, outer_version) == Some(PROTOCOL_UDP)
                && udp + udp::HEADER_LEN < l4 =>
        {
            Some((outer_ip, outer_version, udp))
        }
        _ => None,
    };
    let (ip, version) = match tunnel {
        Some(_) => inner_ip(frame, l4).ok_or(OffloadError::Malformed)?,
        None => (outer_ip, outer_version),
    };
    let (protocol, l4_header_len) = match gso_type {
        GSO_TCPV4 | GSO_TCPV6 => {
            let data_offset = *frame
                .get(l4 + tcp::field::DATA_OFFSET)
                .ok_or(OffloadError::Truncated)?;
            (PROTOCOL_TCP, usize::from(data_offset >> 4) * 4)
        }
        GSO_UDP_L4 => (PROTOCOL_UDP, udp::HEADER_LEN),
        other => return Err(OffloadError::UnsupportedGso(other)),
    };
    let expected_version = match gso_type {
        GSO_TCPV4 => Some(4),
        GSO_TCPV6 => Some(6),
        _ => None,
    };
    let min_l4_header = if protocol == PROTOCOL_TCP {
        tcp::HEADER_LEN
    } else {
        udp::HEADER_LEN
    };
    let ip_header_fits = l4_start(frame, ip, version).is_some_and(|end| end <= l4);
    if expected_version.is_some_and(|v| v != version)
        || !ip_header_fits
        || l4_header_len < min_l4_header
    {
        return Err(OffloadError::Malformed);
    }
    let headers_len = l4 + l4_header_len;
    if headers_len > frame.len() {
        return Err(OffloadError::Truncated);
    }
    let payload = &frame[headers_len..];
    if payload.is_empty() {
        // Headers only: nothing to cut, but the checksum may still be partial.
        return pass_whole(pool.copy_of(frame), vnet, emit);
    }
    let segment_size = vnet.gso_size as usize;
    let count = payload.len().div_ceil(segment_size);
    let ip_id = ip_ident(frame, ip);
    let outer_id = ip_ident(frame, outer_ip);
    let cut = Cut {
        ip,
        version,
        protocol,
        l4,
        segment_size,
        count,
        first_seq: TcpSegment::new_checked(&frame[l4..]).map_or(0, |tcp| tcp.seq()),
    };
    for (index, chunk) in payload.chunks(segment_size).enumerate() {
        let mut segment = pool.take(headers_len + chunk.len());
        segment.extend_from_slice(&frame[..headers_len]);
        segment.extend_from_slice(chunk);
        size_ip(&mut segment, ip, version, ip_id.wrapping_add(index as u16));
        cut.fix_l4_header(&mut segment, index);
        if let Some((outer, outer_version, udp)) = tunnel {
            size_tunnel(
                &mut segment,
                outer,
                outer_version,
                udp,
                outer_id.wrapping_add(index as u16),
            );
        }
        emit(segment);
    }
    Ok(count)
}

/// Whether a vnet header announces a super-packet to cut.
fn is_super_packet(vnet: &VnetHeader) -> bool {
    vnet.gso_type & !GSO_ECN != GSO_NONE && vnet.gso_size != 0
}

/// How a super-packet is cut, as each of its segments needs it to rewrite its own TCP or
/// UDP header: where the (inner) IP and L4 headers start, the segment size and count, and
/// the super-packet's first sequence number.
struct Cut {
    ip: usize,
    version: u8,
    protocol: u8,
    l4: usize,
    segment_size: usize,
    count: usize,
    first_seq: u32,
}

impl Cut {
    /// Rewrites the L4 header of segment `index` (headers and payload in place, IP header
    /// already sized): for TCP its sequence number and the flags that belong to the first
    /// or the last segment only, for UDP its length; then its checksum.
    fn fix_l4_header(&self, segment: &mut [u8], index: usize) {
        let (ip, version, protocol, l4) = (self.ip, self.version, self.protocol, self.l4);
        let l4_len = segment.len() - l4;
        let checksum_field = if protocol == PROTOCOL_TCP {
            let mut tcp = TcpSegment::new_checked(&mut segment[l4..]).expect("checked above");
            tcp.set_seq(
                self.first_seq
                    .wrapping_add((index * self.segment_size) as u32),
            );
            let mut flags = tcp.flags();
            if index + 1 != self.count {
                flags &= !(tcp::FIN | tcp::PSH); // they belong to the last segment
            }
            if index > 0 {
                flags &= !tcp::CWR; // only on the first
            }
            tcp.set_flags(flags);
            tcp.set_checksum(0);
            tcp::field::CHECKSUM
        } else {
            let mut udp = UdpDatagram::new_checked(&mut segment[l4..]).expect("checked above");
            udp.set_len(l4_len as u16);
            udp.set_checksum(0);
            udp::field::CHECKSUM
        };
        let checksum = l4_checksum(segment, ip, version, protocol, l4);
        segment[l4 + checksum_field.start..l4 + checksum_field.end]
            .copy_from_slice(&checksum.to_be_bytes());
    }
}

/// The identification of the IP header at `ip` (0 for IPv6, which has none).
fn ip_ident(frame: &[u8], ip: usize) -> u16 {
    Ipv4Packet::new_checked(&frame[ip..]).map_or(0, |header| header.ident())
}

/// Sizes the IP header at `ip` to the segment's end: IPv4's total length, id `id` and
/// checksum, IPv6's payload length.
fn size_ip(segment: &mut [u8], ip: usize, version: u8, id: u16) {
    let len = segment.len() - ip;
    if version == 4 {
        if let Ok(mut header) = Ipv4Packet::new_checked(&mut segment[ip..]) {
            header.set_total_len(len as u16);
            header.set_ident(id);
            header.fill_checksum();
        }
    } else if let Ok(mut header) = Ipv6Packet::new_checked(&mut segment[ip..]) {
        header.set_payload_len((len - ipv6::HEADER_LEN) as u16);
    }
}

/// Where the L4 header after the IP header at `ip` starts (no IPv6 extension headers).
fn l4_start(frame: &[u8], ip: usize, version: u8) -> Option<usize> {
    let header = frame.get(ip..)?;
    match version {
        4 => Some(ip + Ipv4Packet::new_checked(header).ok()?.header_len()),
        _ => Ipv6Packet::new_checked(header)
            .ok()
            .map(|_| ip + ipv6::HEADER_LEN),
    }
}

/// The protocol of the IP header at `ip`.
fn ip_protocol(frame: &[u8], ip: usize, version: u8) -> Option<u8> {
    let header = frame.get(ip..)?;
    match version {
        4 => Some(Ipv4Packet::new_checked(header).ok()?.protocol()),
        _ => Some(Ipv6Packet::new_checked(header).ok()?.next_header()),
    }
}

/// A tunnel's inner IP header, the one right before the inner L4 header at `l4`: an IPv4
/// header whose length (20 first, then with options up to 60) reaches `l4` exactly, or an
/// IPv6 one 40 bytes before it.
fn inner_ip(frame: &[u8], l4: usize) -> Option<(usize, u8)> {
    let ipv4_ending_at_l4 = |len: usize| {
        let start = l4.checked_sub(len)?;
        let header = Ipv4Packet::new_checked(frame.get(start..)?).ok()?;
        (header.header_len() == len).then_some((start, 4))
    };
    let ipv6_before_l4 = || {
        let start = l4.checked_sub(ipv6::HEADER_LEN)?;
        Ipv6Packet::new_checked(frame.get(start..)?)
            .ok()
            .map(|_| (start, 6))
    };
    ipv4_ending_at_l4(ipv4::HEADER_LEN)
        .or_else(ipv6_before_l4)
        .or_else(|| {
            (ipv4::HEADER_LEN + 4..=60)
                .step_by(4)
                .find_map(ipv4_ending_at_l4)
        })
}

/// Sizes a tunnel segment's outer headers: the outer IP header ([`size_ip`]) and the outer
/// UDP length; the UDP checksum is left out over
/// IPv4 (0, as VXLAN sends it) and computed over IPv6, where it is required.
fn size_tunnel(segment: &mut [u8], ip: usize, version: u8, udp: usize, id: u16) {
    size_ip(segment, ip, version, id);
    let udp_len = segment.len() - udp;
    let Ok(mut header) = UdpDatagram::new_checked(&mut segment[udp..]) else {
        return;
    };
    header.set_len(udp_len as u16);
    header.set_checksum(0);
    if version == 6 {
        let checksum = l4_checksum(segment, ip, 6, PROTOCOL_UDP, udp);
        if let Ok(mut header) = UdpDatagram::new_checked(&mut segment[udp..]) {
            header.set_checksum(checksum);
        }
    }
}

/// Where the TCP header of an untagged frame carrying TCP over IPv4 (without options or
/// fragmentation) or IPv6 (without extension headers) starts, with the IP version, the IP
/// header's offset, the TCP header length and the payload length; `None` for anything
/// else.
fn plain_tcp(frame: &[u8], framing: Framing) -> Option<(u8, usize, usize, usize, usize)> {
    let (ip, version, vlan_tags) = ip_header(frame, framing)?;
    if vlan_tags != 0 {
        return None;
    }
    let packet = &frame[ip..];
    let l4 = match version {
        4 => {
            let header = Ipv4Packet::new_checked(packet).ok()?;
            let plain = header.header_len() == ipv4::HEADER_LEN
                && header.protocol() == PROTOCOL_TCP
                && !header.is_fragment()
                && usize::from(header.total_len()) == packet.len();
            plain.then_some(ip + ipv4::HEADER_LEN)?
        }
        _ => {
            let header = Ipv6Packet::new_checked(packet).ok()?;
            let plain = header.next_header() == PROTOCOL_TCP
                && usize::from(header.payload_len()) == packet.len() - ipv6::HEADER_LEN;
            plain.then_some(ip + ipv6::HEADER_LEN)?
        }
    };
    let tcp = TcpSegment::new_checked(&frame[l4..]).ok()?;
    if tcp.is_cut() {
        return None;
    }
    Some((version, ip, l4, tcp.header_len(), tcp.payload().len()))
}

/// Most segments in one GSO super-packet this module builds.
pub const GSO_MAX_SEGMENTS: usize = 64;

/// How many of `frames`, from the first, can be sent as one GSO super-packet: segments of
/// one TCP flow with identical headers except what segmentation changes (IP length, id and
/// checksum; TCP sequence number and checksum; PSH/FIN on the last), consecutive IPv4 ids,
/// contiguous sequence numbers and equal payloads but for a shorter last one. The kernel
/// (or the NIC) cuts such a super-packet back into exactly these frames.
pub fn coalescable_run(frames: &[&[u8]]) -> usize {
    coalescable_run_framed(frames, Framing::Ethernet)
}

/// [`coalescable_run`] for frames that start as `framing` says (a TUN device's IP
/// packets: [`Framing::Ip`]).
pub fn coalescable_run_framed(frames: &[&[u8]], framing: Framing) -> usize {
    const MAX_BYTES: usize = 65_000;
    let Some(&first) = frames.first() else {
        return 0;
    };
    let Some((version, ip, l4, header_len, mss)) = plain_tcp(first, framing) else {
        return 1;
    };
    if mss == 0 {
        return 1;
    }
    let headers = l4 + header_len;
    let tcp_of =
        |frame: &[u8]| TcpSegment::new_checked(&frame[l4..]).map(|tcp| (tcp.seq(), tcp.flags()));
    let Ok((first_seq, first_flags)) = tcp_of(first) else {
        return 1;
    };
    let first_id = ip_ident(first, ip);
    let mut total = first.len();
    let mut run = 1;
    // The segment before may not carry PSH or FIN: those end a super-packet.
    let mut previous_flags = first_flags;
    for (index, &frame) in frames.iter().enumerate().skip(1) {
        if run >= GSO_MAX_SEGMENTS || previous_flags & (tcp::FIN | tcp::PSH) != 0 {
            break;
        }
        let Some((v, _, l, h, payload)) = plain_tcp(frame, framing) else {
            break;
        };
        if (v, l, h) != (version, l4, header_len)
            || payload == 0
            || payload > mss
            || total + payload > MAX_BYTES
        {
            break;
        }
        let Ok((seq, flags)) = tcp_of(frame) else {
            break;
        };
        let same = |range: std::ops::Range<usize>| frame[range.clone()] == first[range];
        // Everything up to the TCP header but the IP length, id and checksum (the IPv6
        // payload length).
        let ip_fields_same = if version == 4 {
            same(0..ip + ipv4::field::TOTAL_LEN.start)
                && same(ip + ipv4::field::FLAGS_FRAGMENT.start..ip + ipv4::field::CHECKSUM.start)
                && same(ip + ipv4::field::SOURCE.start..l4)
        } else {
            same(0..ip + ipv6::field::PAYLOAD_LEN.start) && same(ip + ipv6::field::NEXT_HEADER..l4)
        };
        let field = |range: std::ops::Range<usize>| l4 + range.start..l4 + range.end;
        let tcp_same = same(field(tcp::field::SOURCE_PORT.start..tcp::field::SEQ.start))
            && same(field(tcp::field::ACK.start..tcp::field::FLAGS))
            && same(field(tcp::field::WINDOW))
            && same(l4 + tcp::field::URGENT.start..headers);
        // CWR may only be on the first segment; other flags must match the first's.
        let ends = tcp::FIN | tcp::PSH;
        let flags_ok = flags & !ends == first_flags & !(ends | tcp::CWR);
        let seq_ok = seq == first_seq.wrapping_add((index * mss) as u32);
        let id_ok = version == 6 || ip_ident(frame, ip) == first_id.wrapping_add(index as u16);
        // Only the last segment may be short.
        let previous_full = frames[index - 1].len() - headers == mss;
        if !(ip_fields_same && tcp_same && flags_ok && seq_ok && id_ok && previous_full) {
            break;
        }
        total += payload;
        previous_flags = flags;
        run += 1;
    }
    run
}

/// Builds the GSO super-packet of `frames` (a run [`coalescable_run`] accepted, at least
/// two) and the vnet header that tells the kernel how to cut it back.
pub fn build_gso(frames: &[&[u8]]) -> (Vec<u8>, VnetHeader) {
    build_gso_framed(frames, Framing::Ethernet)
}

/// [`build_gso`] for frames that start as `framing` says.
pub fn build_gso_framed(frames: &[&[u8]], framing: Framing) -> (Vec<u8>, VnetHeader) {
    let (mut packet, vnet) = gso_headers(frames, framing);
    let headers = packet.len();
    packet.reserve(frames.iter().map(|f| f.len() - headers).sum::<usize>());
    for frame in frames {
        packet.extend_from_slice(&frame[headers..]);
    }
    (packet, vnet)
}

/// The headers of the GSO super-packet of `frames` (a run [`coalescable_run_framed`]
/// accepted, at least two) and its vnet header: the super-packet is these headers followed
/// by every frame's payload (its bytes after as many bytes as the headers have), which a
/// sender can gather without copying them.
pub fn gso_headers(frames: &[&[u8]], framing: Framing) -> (Vec<u8>, VnetHeader) {
    let first = frames[0];
    let (version, ip, l4, header_len, mss) = plain_tcp(first, framing).expect("a coalescable run");
    let headers = l4 + header_len;
    let mut packet = first[..headers].to_vec();
    let total = headers + frames.iter().map(|f| f.len() - headers).sum::<usize>();
    let last_flags =
        TcpSegment::new_checked(&frames[frames.len() - 1][l4..]).map_or(0, |t| t.flags());
    let mut tcp = TcpSegment::new_checked(&mut packet[l4..]).expect("a coalescable run");
    let first_flags = tcp.flags();
    tcp.set_flags(first_flags | last_flags & (tcp::FIN | tcp::PSH));
    let l4_len = total - l4;
    if version == 4 {
        let mut header = Ipv4Packet::new_checked(&mut packet[ip..]).expect("a coalescable run");
        header.set_total_len((total - ip) as u16);
        header.fill_checksum();
    } else {
        let mut header = Ipv6Packet::new_checked(&mut packet[ip..]).expect("a coalescable run");
        header.set_payload_len(l4_len as u16);
    }
    // CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum, not complemented.
    let pseudo = pseudo_header_sum(&packet, ip, version, PROTOCOL_TCP, l4_len);
    TcpSegment::new_checked(&mut packet[l4..])
        .expect("a coalescable run")
        .set_checksum(!checksum_finish(pseudo));
    let cwr = if first_flags & tcp::CWR != 0 {
        GSO_ECN
    } else {
        0
    };
    let vnet = VnetHeader {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        gso_type: if version == 4 { GSO_TCPV4 } else { GSO_TCPV6 } | cwr,
        hdr_len: headers as u16,
        gso_size: mss as u16,
        csum_start: l4 as u16,
        csum_offset: tcp::field::CHECKSUM.start as u16,
    };
    (packet, vnet)
}

impl VnetHeader {
    /// The header's 10 bytes, little-endian as the kernel reads them.
    pub fn to_bytes(&self) -> [u8; 10] {
        let mut bytes = [0u8; 10];
        bytes[0] = self.flags;
        bytes[1] = self.gso_type;
        bytes[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        bytes[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        bytes[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        bytes[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        bytes
    }
}

/// Puts back a VLAN tag the driver carried outside the frame (`tci`, `tpid`), after the
/// two MAC addresses.
pub fn insert_vlan_tag(frame: &mut Vec<u8>, tci: u16, tpid: u16) {
    if frame.len() < ethernet::VLAN_TAG_OFFSET {
        return;
    }
    let at = ethernet::VLAN_TAG_OFFSET;
    frame.splice(at..at, VlanTag { tpid, tci }.to_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + TCP frame with `payload` and a correct checksum.
    fn tcp_v4_frame(payload: &[u8], flags: u8) -> Vec<u8> {
        let mut frame = vec![0u8; 14 + 20 + 32];
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = 14;
        frame[ip] = 0x45;
        frame[ip + 4..ip + 6].copy_from_slice(&100u16.to_be_bytes());
        frame[ip + 8] = 64;
        frame[ip + 9] = 6;
        frame[ip + 12..ip + 16].copy_from_slice(&[198, 18, 0, 1]);
        frame[ip + 16..ip + 20].copy_from_slice(&[198, 18, 0, 2]);
        let l4 = 34;
        frame[l4..l4 + 2].copy_from_slice(&5001u16.to_be_bytes());
        frame[l4 + 2..l4 + 4].copy_from_slice(&80u16.to_be_bytes());
        frame[l4 + 4..l4 + 8].copy_from_slice(&1000u32.to_be_bytes());
        frame[l4 + 12] = 8 << 4; // 32-byte header (timestamps)
        frame[l4 + 13] = flags;
        frame.extend_from_slice(payload);
        frame
    }

    fn verify_ipv4_tcp(segment: &[u8]) {
        let ip = 14;
        let header_len = usize::from(segment[ip] & 0x0f) * 4;
        assert_eq!(
            checksum_finish(checksum_add(0, &segment[ip..ip + header_len])),
            0,
            "IP checksum"
        );
        let total = u16::from_be_bytes([segment[ip + 2], segment[ip + 3]]) as usize;
        assert_eq!(total, segment.len() - ip);
        let l4 = ip + header_len;
        let sum = pseudo_header_sum(segment, ip, 4, 6, segment.len() - l4)
            + checksum_add(0, &segment[l4..]);
        assert_eq!(checksum_finish(sum), 0, "TCP checksum");
    }

    /// The offload header of a TCP/IPv4 super-packet: its headers `hdr_len` bytes long,
    /// cut into `gso_size` bytes of payload, the TCP header (whose checksum is to be
    /// filled) at `csum_start`.
    fn tcp_v4_gso(hdr_len: u16, gso_size: u16, csum_start: u16) -> VnetHeader {
        VnetHeader {
            flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len,
            gso_size,
            csum_start,
            csum_offset: tcp::field::CHECKSUM.start as u16,
        }
    }

    /// `len` bytes that differ from their neighbours: byte `i` is `i * step`.
    fn pattern(len: u32, step: u32) -> Vec<u8> {
        (0..len).map(|i| (i * step) as u8).collect()
    }

    /// The wire frames `to_wire_frames` cuts `frame` into.
    fn wire_frames(frame: Vec<u8>, vnet: &VnetHeader) -> Vec<Vec<u8>> {
        let mut segments = Vec::new();
        let count = to_wire_frames(frame, vnet, &mut |s| segments.push(s)).unwrap();
        assert_eq!(count, segments.len());
        segments
    }

    #[test]
    fn rfc1071_example_sums_to_the_published_value() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (before complement).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum_finish(checksum_add(0, &data)), !0xddf2);
        // Odd length: the last byte is the high half of a word.
        assert_eq!(checksum_finish(checksum_add(0, &[0x12])), !0x1200);
    }

    #[test]
    fn wide_checksum_sums_agree_with_16_bit_words() {
        let data: Vec<u8> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in (0..64).chain([1499, 1500, 2999, 3000]) {
            let slice = &data[..len];
            let mut naive = 0u64;
            for pair in slice.chunks(2) {
                naive += u64::from(pair[0]) << 8 | u64::from(*pair.get(1).unwrap_or(&0));
            }
            assert_eq!(
                checksum_finish(checksum_add(0, slice)),
                checksum_finish(naive),
                "{len} bytes"
            );
        }
        let all_ones = [0xff; 4096];
        assert_eq!(checksum_finish(checksum_add(0, &all_ones)), 0);
    }

    #[test]
    fn tso_packet_is_cut_into_mss_segments_with_sequence_numbers_flags_and_checksums() {
        let payload = pattern(4000, 7);
        let frame = tcp_v4_frame(&payload, 0x18 | 0x01 | 0x80); // PSH ACK FIN CWR
        let vnet = tcp_v4_gso(66, 1448, 34);
        let segments = wire_frames(frame, &vnet);
        assert_eq!(segments.len(), 3);
        let lens: Vec<usize> = segments.iter().map(Vec::len).collect();
        assert_eq!(lens, vec![66 + 1448, 66 + 1448, 66 + 4000 - 2 * 1448]);
        let mut rebuilt = Vec::new();
        for (index, segment) in segments.iter().enumerate() {
            verify_ipv4_tcp(segment);
            let seq = u32::from_be_bytes(segment[38..42].try_into().unwrap());
            assert_eq!(seq, 1000 + (index * 1448) as u32);
            let id = u16::from_be_bytes([segment[18], segment[19]]);
            assert_eq!(id, 100 + index as u16);
            let flags = segment[47];
            assert_eq!(flags & 0x80 != 0, index == 0, "CWR only first");
            assert_eq!(flags & 0x09 != 0, index == 2, "FIN/PSH only last");
            assert!(flags & 0x10 != 0, "ACK on all");
            rebuilt.extend_from_slice(&segment[66..]);
        }
        assert_eq!(rebuilt, payload);
    }

    /// A VXLAN tunnel's super-packet (as a VXLAN device hands a TCP super-packet on to
    /// its underlay: outer Ethernet, IPv4, UDP 4789, VXLAN, then the inner frame, the
    /// checksum start at the inner TCP header) is cut with every header of every segment
    /// sized: the outer IPv4 length, id and checksum, the outer UDP length, the inner IPv4
    /// length and checksum, the inner TCP sequence and checksum. Before, the outer UDP
    /// length kept the super-packet's, and the receiver dropped each segment as too short.
    #[test]
    fn a_vxlan_tunnels_super_packet_is_cut_with_outer_and_inner_headers_sized() {
        let payload = pattern(3000, 11);
        let inner = tcp_v4_frame(&payload, 0x10);
        let mut frame = vec![0u8; 14 + 20 + 8 + 8];
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        frame[14] = 0x45;
        frame[18..20].copy_from_slice(&7u16.to_be_bytes());
        frame[22] = 64;
        frame[23] = 17;
        frame[26..30].copy_from_slice(&[198, 19, 0, 1]);
        frame[30..34].copy_from_slice(&[198, 19, 0, 2]);
        frame[34..36].copy_from_slice(&40000u16.to_be_bytes());
        frame[36..38].copy_from_slice(&4789u16.to_be_bytes());
        frame[38..40].copy_from_slice(&((8 + 8 + inner.len()) as u16).to_be_bytes());
        frame[42] = 0x08; // VXLAN: a network identifier follows
        frame[46..49].copy_from_slice(&[0, 0x13, 0x88]);
        frame.extend_from_slice(&inner);
        let inner_ip = 50 + 14;
        let l4 = inner_ip + 20;
        let vnet = tcp_v4_gso((l4 + 32) as u16, 1400, l4 as u16);
        let segments = wire_frames(frame, &vnet);
        assert_eq!(segments.len(), 3);
        let mut rebuilt = Vec::new();
        for (index, segment) in segments.iter().enumerate() {
            // The outer headers.
            assert_eq!(
                checksum_finish(checksum_add(0, &segment[14..34])),
                0,
                "outer IP checksum"
            );
            assert_eq!(
                usize::from(u16::from_be_bytes([segment[16], segment[17]])),
                segment.len() - 14
            );
            assert_eq!(
                u16::from_be_bytes([segment[18], segment[19]]),
                7 + index as u16
            );
            assert_eq!(
                usize::from(u16::from_be_bytes([segment[38], segment[39]])),
                segment.len() - 34,
                "outer UDP length"
            );
            // The inner frame is a frame of its own, as the far end decapsulates it.
            verify_ipv4_tcp(&segment[50..]);
            let seq = u32::from_be_bytes(segment[l4 + 4..l4 + 8].try_into().unwrap());
            assert_eq!(seq, 1000 + (index * 1400) as u32);
            rebuilt.extend_from_slice(&segment[l4 + 32..]);
        }
        assert_eq!(rebuilt, payload);
    }

    /// Guards the one tag walker: a super-packet behind QinQ tags with any of the three
    /// TPIDs is cut, its tags copied into every segment.
    #[test]
    fn tso_packet_behind_qinq_tags_is_cut() {
        let payload = pattern(3000, 7);
        for outer in [ethernet::TPID_8021AD, ethernet::TPID_QINQ_9100] {
            let mut frame = tcp_v4_frame(&payload, 0x18);
            let tags = [
                VlanTag {
                    tpid: outer,
                    tci: 100,
                }
                .to_bytes(),
                VlanTag::dot1q(5).to_bytes(),
            ]
            .concat();
            frame.splice(12..12, tags.iter().copied());
            let vnet = tcp_v4_gso(74, 1448, 42);
            let segments = wire_frames(frame, &vnet);
            assert_eq!(segments.len(), 3, "outer TPID {outer:#06x}");
            for segment in &segments {
                assert_eq!(&segment[12..20], &tags[..]);
                let mut untagged = segment.clone();
                untagged.drain(12..20);
                verify_ipv4_tcp(&untagged);
            }
        }
    }

    #[test]
    fn udp_gso_over_ipv6_becomes_datagrams_with_their_own_lengths_and_checksums() {
        let payload = pattern(2500, 13);
        let mut frame = vec![0u8; 14 + 40 + 8];
        frame[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
        frame[14] = 0x60;
        frame[14 + 6] = 17;
        frame[14 + 7] = 64;
        frame[14 + 8..14 + 24]
            .copy_from_slice(&"2001:2::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        frame[14 + 24..14 + 40]
            .copy_from_slice(&"2001:2::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        frame[54..56].copy_from_slice(&4000u16.to_be_bytes());
        frame[56..58].copy_from_slice(&5000u16.to_be_bytes());
        frame.extend_from_slice(&payload);
        let vnet = VnetHeader {
            flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            hdr_len: 62,
            gso_size: 1200,
            csum_start: 54,
            csum_offset: 6,
        };
        let datagrams = wire_frames(frame, &vnet);
        assert_eq!(datagrams.len(), 3);
        let mut rebuilt = Vec::new();
        for datagram in &datagrams {
            let udp_len = u16::from_be_bytes([datagram[58], datagram[59]]) as usize;
            assert_eq!(udp_len, datagram.len() - 54);
            let payload_len = u16::from_be_bytes([datagram[18], datagram[19]]) as usize;
            assert_eq!(payload_len, datagram.len() - 54, "IPv6 payload length");
            let sum =
                pseudo_header_sum(datagram, 14, 6, 17, udp_len) + checksum_add(0, &datagram[54..]);
            assert_eq!(checksum_finish(sum), 0, "UDP checksum");
            rebuilt.extend_from_slice(&datagram[62..]);
        }
        assert_eq!(rebuilt, payload);
    }

    #[test]
    fn segments_coalesce_back_into_the_super_packet_they_came_from() {
        let payload = pattern(4000, 7);
        let mut frame = tcp_v4_frame(&payload, 0x18 | 0x80);
        let total = (frame.len() - 14) as u16;
        frame[16..18].copy_from_slice(&total.to_be_bytes());
        let vnet = tcp_v4_gso(66, 1448, 34);
        let segments = wire_frames(frame.clone(), &vnet);
        let views: Vec<&[u8]> = segments.iter().map(Vec::as_slice).collect();
        assert_eq!(coalescable_run(&views), 3);
        let (packet, header) = build_gso(&views);
        assert_eq!(header.gso_size, 1448);
        assert_eq!(
            header.gso_type,
            GSO_TCPV4 | GSO_ECN,
            "CWR on the first segment"
        );
        assert_eq!(header.hdr_len, 66);
        assert_eq!(packet.len(), frame.len());
        assert_eq!(&packet[66..], &payload[..]);
        assert_eq!(
            packet[47],
            0x18 | 0x80,
            "PSH from the last, CWR from the first"
        );
        // Cutting the rebuilt packet again gives the same wire frames.
        let again = wire_frames(packet, &header);
        assert_eq!(again, segments);
        // A gap in the sequence, a different flow or a PSH in the middle ends the run.
        assert_eq!(coalescable_run(&[views[0], views[2]]), 1);
        let mut other_port = segments[1].clone();
        other_port[34] ^= 1;
        assert_eq!(coalescable_run(&[views[0], &other_port]), 1);
        let mut pushed = segments[0].clone();
        pushed[47] |= 0x08;
        assert_eq!(coalescable_run(&[&pushed, views[1]]), 1);
        assert_eq!(
            coalescable_run(&[&[0u8; 10][..], views[1]]),
            1,
            "not TCP: alone"
        );
    }

    #[test]
    fn tun_super_packets_are_cut_and_joined_without_an_ethernet_header() {
        // The same TSO packet as a TUN device hands it: the IP header first, csum_start
        // counted from it.
        let payload = pattern(4000, 7);
        let mut packet = tcp_v4_frame(&payload, 0x18 | 0x80).split_off(14);
        let total = packet.len() as u16;
        packet[2..4].copy_from_slice(&total.to_be_bytes());
        let vnet = tcp_v4_gso(52, 1448, 20);
        let mut segments = Vec::new();
        assert_eq!(
            to_wire_packets(
                &packet,
                Framing::Ip,
                &vnet,
                &mut BufferPool::default(),
                &mut |s| {
                    segments.push(s);
                }
            )
            .unwrap(),
            3
        );
        let mut rebuilt = Vec::new();
        for (index, segment) in segments.iter().enumerate() {
            let mut framed = vec![0u8; 14];
            framed[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            framed.extend_from_slice(segment);
            verify_ipv4_tcp(&framed);
            let seq = u32::from_be_bytes(segment[24..28].try_into().unwrap());
            assert_eq!(seq, 1000 + (index * 1448) as u32);
            assert_eq!(
                u16::from_be_bytes([segment[4], segment[5]]),
                100 + index as u16
            );
            rebuilt.extend_from_slice(&segment[52..]);
        }
        assert_eq!(rebuilt, payload);
        let views: Vec<&[u8]> = segments.iter().map(Vec::as_slice).collect();
        assert_eq!(coalescable_run_framed(&views, Framing::Ip), 3);
        assert_eq!(
            coalescable_run_framed(&[views[0], views[2]], Framing::Ip),
            1
        );
        let (joined, header) = build_gso_framed(&views, Framing::Ip);
        assert_eq!(
            (header.gso_size, header.hdr_len, header.csum_start),
            (1448, 52, 20)
        );
        assert_eq!(joined.len(), packet.len());
        let mut again = Vec::new();
        to_wire_packets(
            &joined,
            Framing::Ip,
            &header,
            &mut BufferPool::default(),
            &mut |s| {
                again.push(s);
            },
        )
        .unwrap();
        assert_eq!(again, segments);
        // A packet that is not IP is malformed, not a panic.
        assert!(to_wire_packets(
            &[0x15; 60],
            Framing::Ip,
            &vnet,
            &mut BufferPool::default(),
            &mut |_| {}
        )
        .is_err());
    }

    #[test]
    fn partial_checksum_is_completed() {
        let payload = b"hello, partial checksum";
        let mut frame = tcp_v4_frame(payload, 0x18);
        let total = (frame.len() - 14) as u16;
        frame[16..18].copy_from_slice(&total.to_be_bytes());
        // IP checksum as a sender computes it; TCP field holds the pseudo-header sum only.
        let ip_sum = checksum_finish(checksum_add(0, &frame[14..34]));
        frame[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        let l4_len = frame.len() - 34;
        let pseudo = pseudo_header_sum(&frame, 14, 4, 6, l4_len);
        let folded = !checksum_finish(pseudo);
        frame[50..52].copy_from_slice(&folded.to_be_bytes());
        let vnet = VnetHeader {
            flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
            csum_start: 34,
            csum_offset: tcp::field::CHECKSUM.start as u16,
            ..VnetHeader::default()
        };
        verify_ipv4_tcp(&wire_frames(frame, &vnet)[0]);
    }

    #[test]
    fn bad_offload_metadata_is_an_error_not_a_panic() {
        let frame = tcp_v4_frame(b"x", 0x10);
        let vnet = VnetHeader {
            gso_type: GSO_TCPV6,
            gso_size: 100,
            csum_start: 34,
            ..VnetHeader::default()
        };
        assert_eq!(
            to_wire_frames(frame.clone(), &vnet, &mut |_| {}),
            Err(OffloadError::Malformed)
        );
        let vnet = VnetHeader {
            gso_type: 3,
            gso_size: 100,
            csum_start: 34,
            ..VnetHeader::default()
        };
        assert_eq!(
            to_wire_frames(frame.clone(), &vnet, &mut |_| {}),
            Err(OffloadError::UnsupportedGso(3))
        );
        let vnet = VnetHeader {
            flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
            csum_start: 200,
            csum_offset: tcp::field::CHECKSUM.start as u16,
            ..VnetHeader::default()
        };
        assert_eq!(
            to_wire_frames(frame, &vnet, &mut |_| {}),
            Err(OffloadError::Truncated)
        );
    }

    #[test]
    fn vlan_tag_goes_after_the_mac_addresses() {
        let mut frame: Vec<u8> = (0..20).collect();
        insert_vlan_tag(&mut frame, 0x0064, 0x8100);
        assert_eq!(&frame[12..16], &[0x81, 0x00, 0x00, 0x64]);
        assert_eq!(frame[16], 12);
        assert_eq!(frame.len(), 24);
    }
}
