//! The numbers of the capture formats: pcap's magics, pcapng's block and option codes, and
//! the tcpdump LINKTYPE_ registry. One definition each, for the reader here and the pcapng
//! writer in `pathlab-results`.

/// pcap, microsecond timestamps, as the writer's byte order wrote it.
pub const PCAP_MAGIC_MICROS: u32 = 0xA1B2_C3D4;
/// pcap, nanosecond timestamps.
pub const PCAP_MAGIC_NANOS: u32 = 0xA1B2_3C4D;
/// pcap's file header: magic, version, zone, sigfigs, snaplen, link type.
pub const PCAP_FILE_HEADER_BYTES: usize = 24;
/// pcap's record header: seconds, sub-seconds, captured and original length.
pub const PCAP_RECORD_HEADER_BYTES: usize = 16;

/// pcapng Section Header Block (the same in either byte order).
pub const BLOCK_SECTION_HEADER: u32 = 0x0A0D_0D0A;
/// pcapng Interface Description Block.
pub const BLOCK_INTERFACE: u32 = 0x0000_0001;
/// pcapng Packet Block (obsolete, still written by old tools).
pub const BLOCK_OBSOLETE_PACKET: u32 = 0x0000_0002;
/// pcapng Simple Packet Block: no interface, no timestamp.
pub const BLOCK_SIMPLE_PACKET: u32 = 0x0000_0003;
/// pcapng Enhanced Packet Block.
pub const BLOCK_ENHANCED_PACKET: u32 = 0x0000_0006;
/// The Section Header Block's byte-order magic.
pub const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
/// The smallest pcapng block: type, length, trailing length.
pub const BLOCK_MIN_BYTES: usize = 12;

/// Option code: end of options.
pub const OPT_END: u16 = 0;
/// Option code: a comment (UTF-8), on any block.
pub const OPT_COMMENT: u16 = 1;
/// Section header option: the application that wrote the file.
pub const SHB_USERAPPL: u16 = 4;
/// Interface option: its name.
pub const IF_NAME: u16 = 2;
/// Interface option: timestamp resolution (bit 7 clear: 10^-n s, set: 2^-n s).
pub const IF_TSRESOL: u16 = 9;
/// Interface option: seconds added to every timestamp.
pub const IF_TSOFFSET: u16 = 14;
/// Enhanced packet option: flags (bits 0-1: direction, 01 inbound, 10 outbound).
pub const EPB_FLAGS: u16 = 2;

/// `LINKTYPE_NULL` (0): BSD loopback, a 4-byte address family in the writer's byte order.
pub const LINKTYPE_NULL: u16 = 0;
/// `LINKTYPE_ETHERNET` (1).
pub const LINKTYPE_ETHERNET: u16 = 1;
/// `LINKTYPE_RAW` (101): packets begin with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u16 = 101;
/// `LINKTYPE_LOOP` (108): OpenBSD loopback, the address family big-endian.
pub const LINKTYPE_LOOP: u16 = 108;
/// `LINKTYPE_LINUX_SLL` (113): Linux cooked capture v1 (`tcpdump -i any` before 4.99).
pub const LINKTYPE_LINUX_SLL: u16 = 113;
/// `LINKTYPE_IPV4` (228): raw IPv4.
pub const LINKTYPE_IPV4: u16 = 228;
/// `LINKTYPE_IPV6` (229): raw IPv6.
pub const LINKTYPE_IPV6: u16 = 229;
/// `LINKTYPE_LINUX_SLL2` (276): Linux cooked capture v2 (`tcpdump -i any` since 4.99).
pub const LINKTYPE_LINUX_SLL2: u16 = 276;
