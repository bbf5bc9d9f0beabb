//! The reader against captures written here byte by byte, in every format, byte order,
//! resolution and link type it reads; and against broken ones.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::format::*;
use super::*;

/// An IPv4 TCP packet: 20-byte IP header, TCP header with `options` (padded to 4),
/// `payload` bytes of payload.
fn ipv4_tcp(seq: u32, flags: u8, options: &[u8], payload: usize) -> Vec<u8> {
    let mut tcp = tcp_header(seq, flags, options);
    tcp.extend(std::iter::repeat_n(0xAB, payload));
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2,
    ];
    let total = (ip.len() + tcp.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend(tcp);
    ip
}

fn ipv6_tcp(seq: u32, payload: usize, extension: bool) -> Vec<u8> {
    let mut tcp = tcp_header(seq, TcpFlags::ACK, &[]);
    tcp.extend(std::iter::repeat_n(0xCD, payload));
    let mut ip = vec![0x60, 0, 0, 0, 0, 0, if extension { 0 } else { 6 }, 64];
    ip.extend(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 1).octets());
    ip.extend(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 2).octets());
    if extension {
        // Hop-by-hop options, 8 bytes: next header TCP, length 0, padding.
        ip.extend([6, 0, 1, 4, 0, 0, 0, 0]);
    }
    let payload_len = (ip.len() - 40 + tcp.len()) as u16;
    ip[4..6].copy_from_slice(&payload_len.to_be_bytes());
    ip.extend(tcp);
    ip
}

fn tcp_header(seq: u32, flags: u8, options: &[u8]) -> Vec<u8> {
    let mut options = options.to_vec();
    while !options.len().is_multiple_of(4) {
        options.push(1);
    }
    let mut tcp = Vec::new();
    tcp.extend(40_000u16.to_be_bytes());
    tcp.extend(5001u16.to_be_bytes());
    tcp.extend(seq.to_be_bytes());
    tcp.extend(7u32.to_be_bytes());
    tcp.push((((20 + options.len()) / 4) << 4) as u8);
    tcp.push(flags);
    tcp.extend(1000u16.to_be_bytes());
    tcp.extend([0, 0, 0, 0]);
    tcp.extend(options);
    tcp
}

fn ethernet(tags: &[u16], ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    for &tag in tags {
        frame.extend(tag.to_be_bytes());
        frame.extend([0, 100]);
    }
    frame.extend(ethertype.to_be_bytes());
    frame.extend(ip);
    frame
}

fn sll(ip: &[u8], ethertype: u16) -> Vec<u8> {
    let mut frame = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
    frame.extend(ethertype.to_be_bytes());
    frame.extend(ip);
    frame
}

fn sll2(ip: &[u8], ethertype: u16) -> Vec<u8> {
    let mut frame = ethertype.to_be_bytes().to_vec();
    frame.extend([0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
    frame.extend(ip);
    frame
}

fn put16(out: &mut Vec<u8>, big: bool, v: u16) {
    out.extend(if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    });
}

fn put32(out: &mut Vec<u8>, big: bool, v: u32) {
    out.extend(if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    });
}

/// A pcap file of `packets` (timestamp ns, data, original length).
fn pcap_file(big: bool, nanos: bool, link_type: u16, packets: &[(u64, Vec<u8>, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    put32(
        &mut out,
        big,
        if nanos {
            PCAP_MAGIC_NANOS
        } else {
            PCAP_MAGIC_MICROS
        },
    );
    put16(&mut out, big, 2);
    put16(&mut out, big, 4);
    put32(&mut out, big, 0);
    put32(&mut out, big, 0);
    put32(&mut out, big, 65535);
    put32(&mut out, big, u32::from(link_type));
    for (ns, data, original) in packets {
        put32(&mut out, big, (ns / 1_000_000_000) as u32);
        let fraction = ns % 1_000_000_000;
        put32(
            &mut out,
            big,
            if nanos { fraction } else { fraction / 1000 } as u32,
        );
        put32(&mut out, big, data.len() as u32);
        put32(&mut out, big, *original);
        out.extend(data);
    }
    out
}

/// pcapng blocks in either byte order.
struct Pcapng {
    big: bool,
    out: Vec<u8>,
}

impl Pcapng {
    fn new(big: bool) -> Pcapng {
        let mut this = Pcapng {
            big,
            out: Vec::new(),
        };
        this.section();
        this
    }

    fn section(&mut self) {
        let mut body = Vec::new();
        put32(&mut body, self.big, BYTE_ORDER_MAGIC);
        put16(&mut body, self.big, 1);
        put16(&mut body, self.big, 0);
        body.extend([0xFF; 8]);
        self.block(BLOCK_SECTION_HEADER, &body);
    }

    fn block(&mut self, kind: u32, body: &[u8]) {
        let total = 12 + body.len() as u32;
        put32(&mut self.out, self.big, kind);
        put32(&mut self.out, self.big, total);
        self.out.extend(body);
        put32(&mut self.out, self.big, total);
    }

    fn option(&self, body: &mut Vec<u8>, code: u16, value: &[u8]) {
        put16(body, self.big, code);
        put16(body, self.big, value.len() as u16);
        body.extend(value);
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
    }

    fn interface(&mut self, link_type: u16, tsresol: Option<u8>, name: &str) {
        let mut body = Vec::new();
        put16(&mut body, self.big, link_type);
        put16(&mut body, self.big, 0);
        put32(&mut body, self.big, 65535);
        self.option(&mut body, IF_NAME, name.as_bytes());
        if let Some(resolution) = tsresol {
            self.option(&mut body, IF_TSRESOL, &[resolution]);
        }
        self.option(&mut body, OPT_END, &[]);
        self.block(BLOCK_INTERFACE, &body);
    }

    fn packet(
        &mut self,
        interface: u32,
        ticks: u64,
        data: &[u8],
        original: u32,
        comment: Option<&str>,
    ) {
        let mut body = Vec::new();
        put32(&mut body, self.big, interface);
        put32(&mut body, self.big, (ticks >> 32) as u32);
        put32(&mut body, self.big, ticks as u32);
        put32(&mut body, self.big, data.len() as u32);
        put32(&mut body, self.big, original);
        body.extend(data);
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let mut flags = Vec::new();
        put32(&mut flags, self.big, 0b10);
        self.option(&mut body, EPB_FLAGS, &flags);
        if let Some(comment) = comment {
            self.option(&mut body, OPT_COMMENT, comment.as_bytes());
        }
        self.option(&mut body, OPT_END, &[]);
        self.block(BLOCK_ENHANCED_PACKET, &body);
    }
}

fn all_packets(bytes: &[u8]) -> Result<Vec<Packet<'_>>, CaptureError> {
    let mut reader = CaptureReader::new(bytes)?;
    let mut packets = Vec::new();
    while let Some(packet) = reader.next_packet()? {
        packets.push(packet);
    }
    Ok(packets)
}

fn segment(packet: &Packet<'_>) -> TcpSegment {
    decode(packet.link_type, packet.data, packet.original_len)
        .expect("decodes")
        .expect("is TCP")
}

#[test]
fn pcap_in_both_byte_orders_and_both_resolutions() {
    let ip = ipv4_tcp(1000, TcpFlags::ACK, &[], 100);
    let frame = ethernet(&[], 0x0800, &ip);
    let ns = 1_700_000_000_123_456_789u64;
    for big in [false, true] {
        for nanos in [false, true] {
            let file = pcap_file(big, nanos, LINKTYPE_ETHERNET, &[(ns, frame.clone(), 154)]);
            let packets = all_packets(&file).unwrap();
            assert_eq!(packets.len(), 1);
            let expected = if nanos { ns } else { ns / 1000 * 1000 };
            assert_eq!(
                packets[0].timestamp_ns,
                Some(expected),
                "big {big} nanos {nanos}"
            );
            let tcp = segment(&packets[0]);
            assert_eq!((tcp.seq, tcp.payload_len, tcp.window), (1000, 100, 1000));
            assert_eq!(
                tcp.source,
                SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 40_000)
            );
        }
    }
}

#[test]
fn pcapng_of_either_byte_order_with_interfaces_of_different_link_types() {
    let v4 = ipv4_tcp(5, TcpFlags::ACK, &[], 10);
    let v6 = ipv6_tcp(6, 20, true);
    for big in [false, true] {
        let mut file = Pcapng::new(big);
        file.interface(LINKTYPE_ETHERNET, Some(9), "eth0");
        file.interface(LINKTYPE_LINUX_SLL2, None, "any");
        file.interface(LINKTYPE_RAW, Some(0x80 | 0x0A), "tun0");
        file.interface(LINKTYPE_IPV6, Some(3), "v6");
        file.block(0x0000_0BAD, &[1, 2, 3, 4]); // unknown: skipped
        file.packet(
            0,
            1_000_000_001,
            &ethernet(&[0x8100, 0x88A8], 0x0800, &v4),
            0,
            Some("dropped r-h1 -> r-h2: loss"),
        );
        file.packet(1, 2_000_000, &sll2(&v6, 0x86DD), 0, None);
        file.packet(2, 3 << 10, &v4, 0, None);
        file.packet(3, 4000, &v6, 0, None);
        let bytes = file.out;
        let packets = all_packets(&bytes).unwrap();
        let times: Vec<_> = packets.iter().map(|p| p.timestamp_ns.unwrap()).collect();
        // ns; µs (the default); 2^-10 s; ms.
        assert_eq!(
            times,
            vec![1_000_000_001, 2_000_000_000, 3_000_000_000, 4_000_000_000]
        );
        assert!(packets[0].dropped_by_emulator());
        assert_eq!(packets[0].direction, Some(Direction::Outbound));
        let tcp: Vec<_> = packets.iter().map(segment).collect();
        assert!(tcp[0].vlan && !tcp[2].vlan);
        assert_eq!(
            tcp.iter().map(|t| t.payload_len).collect::<Vec<_>>(),
            vec![10, 20, 10, 20]
        );
        assert_eq!(tcp[1].ip_header_len, 48, "hop-by-hop header skipped");
        assert_eq!(tcp[3].seq, 6);
        let reader = CaptureReader::new(&bytes).unwrap();
        assert_eq!(reader.format(), Format::Pcapng);
    }
}

#[test]
fn a_new_section_may_change_byte_order_and_forgets_interfaces() {
    let v4 = ipv4_tcp(5, TcpFlags::ACK, &[], 10);
    let mut first = Pcapng::new(false);
    first.interface(LINKTYPE_RAW, Some(9), "a");
    first.packet(0, 1, &v4, 0, None);
    let mut second = Pcapng::new(true);
    second.interface(LINKTYPE_LINUX_SLL, Some(9), "b");
    second.packet(0, 2, &sll(&v4, 0x0800), 0, None);
    let mut bytes = first.out;
    bytes.extend(second.out);
    let packets = all_packets(&bytes).unwrap();
    assert_eq!(packets.len(), 2);
    assert_eq!(packets[1].link_type, LINKTYPE_LINUX_SLL);
    assert_eq!(segment(&packets[1]).payload_len, 10);
}

#[test]
fn snaplen_cut_packets_keep_their_payload_length_and_options() {
    // MSS, SACK permitted, timestamps, window scale: a SYN's options.
    let options = [
        2, 4, 5, 0xB4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 3, 3, 7,
    ];
    let ip = ipv4_tcp(1, TcpFlags::SYN, &options, 0);
    let whole = segment(
        &all_packets(&pcap_file(
            false,
            false,
            LINKTYPE_RAW,
            &[(1, ip.clone(), ip.len() as u32)],
        ))
        .unwrap()[0],
    );
    assert_eq!(whole.options.mss, Some(1460));
    assert_eq!(whole.options.window_scale, Some(7));
    assert!(whole.options.sack_permitted);
    assert_eq!(whole.options.timestamps, Some((1, 2)));
    assert_eq!(whole.seq_len(), 1, "a SYN takes one sequence number");
    // A data packet of 1448 bytes cut at 96 bytes: the payload is still 1448.
    let data = ipv4_tcp(
        1,
        TcpFlags::ACK,
        &[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8],
        1448,
    );
    let file = pcap_file(
        true,
        true,
        LINKTYPE_ETHERNET,
        &[(1, ethernet(&[], 0x0800, &data)[..96].to_vec(), 1514)],
    );
    let cut = segment(&all_packets(&file).unwrap()[0]);
    assert_eq!(cut.payload_len, 1448);
    assert_eq!(cut.options.timestamps, Some((9, 8)));
    // Cut inside the options: what was captured is read, the rest is marked missing.
    let file = pcap_file(
        false,
        false,
        LINKTYPE_RAW,
        &[(1, ip[..44].to_vec(), ip.len() as u32)],
    );
    let cut = segment(&all_packets(&file).unwrap()[0]);
    assert_eq!(cut.options.mss, Some(1460));
    assert!(cut.options.truncated);
    // Cut inside the TCP header: a decode error that says so.
    let file = pcap_file(
        false,
        false,
        LINKTYPE_RAW,
        &[(1, ip[..30].to_vec(), ip.len() as u32)],
    );
    let packet = &all_packets(&file).unwrap()[0];
    let error = decode(packet.link_type, packet.data, packet.original_len).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the capture kept 10 bytes, too few for the TCP header"
    );
}

#[test]
fn linux_cooked_v1_and_other_protocols() {
    let v6 = ipv6_tcp(77, 5, false);
    let file = pcap_file(
        false,
        false,
        LINKTYPE_LINUX_SLL,
        &[(1, sll(&v6, 0x86DD), 0), (2, sll(&[0; 28], 0x0806), 0)],
    );
    let packets = all_packets(&file).unwrap();
    assert_eq!(segment(&packets[0]).seq, 77);
    assert_eq!(
        decode(packets[1].link_type, packets[1].data, 0),
        Ok(None),
        "ARP is not TCP"
    );
    assert!(matches!(
        decode(147, &[0; 40], 40),
        Err(DecodeError::UnknownLinkType(147))
    ));
}

#[test]
fn broken_files_are_errors_that_name_the_block_and_offset() {
    assert_eq!(
        CaptureReader::new(&[1, 2]).unwrap_err(),
        CaptureError::TooShort { len: 2 }
    );
    assert!(matches!(
        CaptureReader::new(b"GIF89a.."),
        Err(CaptureError::UnknownFormat { .. })
    ));
    // A bad block length: the leading and trailing lengths disagree.
    let mut file = Pcapng::new(false);
    file.interface(LINKTYPE_RAW, None, "x");
    let interface_at = 28;
    let mut bytes = file.out;
    let end = bytes.len();
    bytes[end - 4] = 99;
    let error = all_packets(&bytes).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("pcapng block 1 at offset {interface_at}: block of type 0x1: its trailing length 99 differs from its leading length {}", end - interface_at)
    );
    // A file cut in the middle of a block.
    let mut file = Pcapng::new(true);
    file.interface(LINKTYPE_RAW, None, "x");
    file.packet(0, 1, &ipv4_tcp(1, TcpFlags::ACK, &[], 100), 0, None);
    let cut = &file.out[..file.out.len() - 10];
    let error = all_packets(cut).unwrap_err().to_string();
    assert!(
        error.starts_with("pcapng block 2 at offset 60: truncated: block of type 0x6 is"),
        "{error}"
    );
    // A packet on an interface never described.
    let mut file = Pcapng::new(false);
    file.packet(3, 1, &[0; 20], 0, None);
    let error = all_packets(&file.out).unwrap_err().to_string();
    assert!(
        error.contains("packet on interface 3, but the section has described 0"),
        "{error}"
    );
    // A pcap record longer than the file.
    let file = pcap_file(false, false, LINKTYPE_RAW, &[(1, vec![0x45; 40], 40)]);
    let error = all_packets(&file[..50]).unwrap_err().to_string();
    assert_eq!(
        error,
        "pcap record 0 at offset 24: truncated: it holds 40 bytes of packet, the file has 10 left"
    );
}

#[test]
fn the_writer_in_pathlab_results_is_read_back() {
    // The same layout the writer produces (tested byte for byte there): SHB, IDB with
    // tsresol 9, EPB with flags and a comment; here both ends share the format module.
    let mut file = Pcapng::new(false);
    file.interface(LINKTYPE_ETHERNET, Some(9), "r-h1");
    let frame = ethernet(&[], 0x0800, &ipv4_tcp(9, TcpFlags::ACK, &[], 1));
    file.packet(
        0,
        42,
        &frame,
        frame.len() as u32,
        Some("dropped r-h1 -> r-h2: queue-full"),
    );
    let packets = all_packets(&file.out).unwrap();
    assert_eq!(
        packets[0].comment.as_deref(),
        Some("dropped r-h1 -> r-h2: queue-full")
    );
    assert_eq!(packets[0].timestamp_ns, Some(42));
}

proptest! {
    /// Random bytes, and random bytes after a valid header, never panic the reader or
    /// the decoder.
    #[test]
    fn random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..600), header in 0usize..3) {
        let prefix: Vec<u8> = match header {
            0 => Vec::new(),
            1 => pcap_file(false, true, LINKTYPE_ETHERNET, &[]),
            _ => { let mut f = Pcapng::new(false); f.interface(LINKTYPE_ETHERNET, Some(9), "x"); f.out }
        };
        let mut input = prefix;
        input.append(&mut bytes);
        if let Ok(mut reader) = CaptureReader::new(&input) {
            for _ in 0..1000 {
                match reader.next_packet() {
                    Ok(Some(packet)) => { let _ = decode(packet.link_type, packet.data, packet.original_len); }
                    _ => break,
                }
            }
        }
        for link_type in [LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, LINKTYPE_NULL] {
            let _ = decode(link_type, &input, input.len() as u32);
        }
    }
}

/// Regression: a Simple Packet Block with an empty body (shorter than its 4-byte fixed part)
/// made the reader slice past the block (`body[4..4]`) and panic; `pathlab analyze` died on
/// such a file (issue 30). It is now a named error.
#[test]
fn a_simple_packet_block_shorter_than_its_fixed_part_is_an_error_not_a_panic() {
    for big in [false, true] {
        // Block lengths are multiples of 4: the only body shorter than 4 is the empty one.
        let mut file = Pcapng::new(big);
        file.interface(LINKTYPE_ETHERNET, None, "eth0");
        file.block(BLOCK_SIMPLE_PACKET, &[]);
        let error = all_packets(&file.out).expect_err("an empty simple packet block");
        assert!(
            error
                .to_string()
                .contains("simple packet block body of 0 bytes"),
            "{error}"
        );
        // The shortest valid one: an original length and no data.
        let mut file = Pcapng::new(big);
        file.interface(LINKTYPE_ETHERNET, None, "eth0");
        file.block(BLOCK_SIMPLE_PACKET, &[0; 4]);
        let packets = all_packets(&file.out).expect("a valid empty simple packet");
        assert_eq!(packets.len(), 1);
        assert!(packets[0].data.is_empty());
    }
}
