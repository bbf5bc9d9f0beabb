//! Checked views over wire bytes: each format's header sizes and code points, defined
//! once, and a view that checks a buffer's length when it is made, then reads its fields
//! by name.
//!
//! A view borrows the caller's buffer and never allocates, so the emulator's per-packet
//! path can use it; no input, however short or odd, makes it panic (smoltcp's `wire`
//! contract).

/// Read accessors of a view's fields, one line each: `name: Type = field::PLACE;` (after
/// its doc) is `pub fn name(&self) -> Type`, the field's big-endian bytes as a `Type`
/// ([`FieldValue`]). The view has checked the bytes are there.
macro_rules! getters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $place:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> $ty {
            $crate::wire::FieldValue::read(&self.buffer.as_ref()[$crate::wire::bytes_of($place)])
        }
    )*};
}

/// Write accessors of a view's fields, as [`getters`] reads them: `set_name: Type =
/// field::PLACE;` is `pub fn set_name(&mut self, value: Type)`.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $place:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name(&mut self, value: $ty) {
            let place = $crate::wire::bytes_of($place);
            $crate::wire::FieldValue::write(value, &mut self.buffer.as_mut()[place]);
        }
    )*};
}

pub mod checksum;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
pub mod offload;
pub mod tcp;
pub mod udp;

/// Bytes of an IPv4 header without options (RFC 791).
pub const IPV4_HEADER_LEN: usize = ipv4::HEADER_LEN;
/// Bytes of an IPv6 header without extension headers (RFC 8200).
pub const IPV6_HEADER_LEN: usize = ipv6::HEADER_LEN;
/// Bytes of a UDP header (RFC 768).
pub const UDP_HEADER_LEN: usize = udp::HEADER_LEN;

/// IP protocol number of TCP.
pub const PROTOCOL_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

/// Why bytes are not the IPv4, IPv6, TCP or UDP header a view reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The buffer ends before the header does.
    #[error("a {len}-byte buffer is shorter than the {need}-byte {header} header")]
    Truncated {
        /// Which header.
        header: &'static str,
        /// The buffer's length, bytes.
        len: usize,
        /// The header's length, bytes.
        need: usize,
    },
    /// An IP header of another version.
    #[error("version {found} in an {header} header")]
    Version {
        /// Which header.
        header: &'static str,
        /// The version the header states.
        found: u8,
    },
    /// A header length below the header's fixed part.
    #[error("a {header} header length of {len} bytes is below the fixed header's")]
    HeaderLen {
        /// Which header.
        header: &'static str,
        /// The length the header states, bytes.
        len: usize,
    },
}

impl HeaderError {
    /// [`HeaderError::Truncated`] unless a buffer of `len` bytes holds the `need` bytes of
    /// a `header` header.
    fn check_len(header: &'static str, len: usize, need: usize) -> Result<(), HeaderError> {
        if len < need {
            return Err(HeaderError::Truncated { header, len, need });
        }
        Ok(())
    }
}

/// The IP version of a packet (its first byte's high nibble), if 4 or 6.
pub fn ip_version(packet: &[u8]) -> Option<u8> {
    packet
        .first()
        .map(|b| b >> 4)
        .filter(|v| *v == 4 || *v == 6)
}

/// A field's value as its big-endian bytes hold it: what [`getters`] and [`setters`] read
/// and write.
pub(crate) trait FieldValue: Sized {
    /// The value of `bytes`, the field's own (exactly its width).
    fn read(bytes: &[u8]) -> Self;
    /// Writes the value into `bytes`, the field's own.
    fn write(self, bytes: &mut [u8]);
}

/// `FieldValue` for a type made from its big-endian byte array by `$from` and turned back
/// into one by `$to_bytes`.
macro_rules! field_value {
    ($($ty:ty: $width:literal, $from:ident, $to_bytes:ident;)*) => {$(
        impl FieldValue for $ty {
            fn read(bytes: &[u8]) -> Self {
                <$ty>::$from(<[u8; $width]>::try_from(bytes).expect("a field of its width"))
            }

            fn write(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.$to_bytes());
            }
        }
    )*};
}

field_value! {
    u16: 2, from_be_bytes, to_be_bytes;
    u32: 4, from_be_bytes, to_be_bytes;
    std::net::Ipv4Addr: 4, from, octets;
    std::net::Ipv6Addr: 16, from, octets;
}

impl FieldValue for u8 {
    fn read(bytes: &[u8]) -> Self {
        bytes[0]
    }

    fn write(self, bytes: &mut [u8]) {
        bytes[0] = self;
    }
}

/// The bytes a field's place in a `field` table covers: a one-byte field's index, or a
/// wider one's range.
pub(crate) fn bytes_of(place: impl Into<FieldPlace>) -> core::ops::Range<usize> {
    place.into().0
}

/// A field's bytes; see [`bytes_of`].
pub(crate) struct FieldPlace(core::ops::Range<usize>);

impl From<usize> for FieldPlace {
    fn from(at: usize) -> FieldPlace {
        FieldPlace(at..at + 1)
    }
}

impl From<core::ops::Range<usize>> for FieldPlace {
    fn from(range: core::ops::Range<usize>) -> FieldPlace {
        FieldPlace(range)
    }
}

/// The big-endian `u16` at `at`; the caller's view has checked the bytes are there.
fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

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
