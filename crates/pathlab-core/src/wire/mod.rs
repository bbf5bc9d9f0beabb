//! Checked views over wire bytes: each format's header sizes and code points, defined
//! once, and a view that checks a buffer's length when it is made, then reads its fields
//! by name.
//!
//! A view borrows the caller's buffer and never allocates, so the emulator's per-packet
//! path can use it; no input, however short or odd, makes it panic (smoltcp's `wire`
//! contract).

pub mod checksum;
pub mod ethernet;
pub mod offload;

/// Bytes of an IPv4 header without options (RFC 791).
pub const IPV4_HEADER_LEN: usize = 20;
/// Bytes of an IPv6 header without extension headers (RFC 8200).
pub const IPV6_HEADER_LEN: usize = 40;
/// Bytes of a UDP header (RFC 768).
pub const UDP_HEADER_LEN: usize = 8;

use std::net::IpAddr;

/// Where a peer comes from, as a per-source bound counts it (the measurement server's
/// `--max-clients`, the HTTP servers' connections per source): an IPv4 address as itself
/// (an IPv4-mapped IPv6 one, as a dual-stack socket shows it, as its IPv4), an IPv6 one by
/// its /64, the least a site or a host is given, so one host cannot take a slot per
/// address of its prefix.
pub fn source_prefix(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 @ IpAddr::V4(_) => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_an_ipv4_address_or_an_ipv6_64() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert_eq!(
            source_prefix(ip("2001:2:0:1:aaaa:bbbb:cccc:dddd")),
            ip("2001:2:0:1::")
        );
        assert_eq!(
            source_prefix(ip("2001:2:0:1:ffff::9")),
            source_prefix(ip("2001:2:0:1::1"))
        );
        assert_ne!(
            source_prefix(ip("2001:2:0:1::1")),
            source_prefix(ip("2001:2:0:2::1"))
        );
        assert_eq!(source_prefix(ip("::ffff:198.18.0.1")), ip("198.18.0.1"));
        assert_eq!(source_prefix(ip("198.18.0.1")), ip("198.18.0.1"));
    }
}
