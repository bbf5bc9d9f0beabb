//! How a lab's links are numbered: the benchmarking ranges of RFC 2544 and RFC 5180, a
//! subnet per link. Both the spec (its limit on links) and the built topology use it.

use std::net::{Ipv4Addr, Ipv6Addr};

/// How a lab's links are numbered, the one definition every route, neighbour and report
/// uses: link i's IPv4 subnet is the i-th block of [`Addressing::v4_prefix_len`] bits in
/// 198.18.0.0/15 (a /24 in labs of up to [`Addressing::SLASH_24_LINKS`] links, a /30 in
/// larger ones: 512 /24s fill the /15), its IPv6 subnet 2001:2:0:i::/64; its first node
/// has the subnet's first address (.1, ::1), the second the next (.2, ::2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addressing {
    v4_prefix_len: u8,
}

impl Addressing {
    /// The IPv4 range links are numbered from (RFC 2544's benchmarking range).
    pub const V4_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);
    /// Labs of up to this many links give each link a /24 (as many as the range holds).
    pub const SLASH_24_LINKS: usize = 1 << (24 - Self::V4_RANGE.1);
    /// Prefix of a link's subnet in larger labs: a /30 holds its two ends.
    pub const SMALL_PREFIX_LEN: u8 = 30;
    /// Most links a lab can number: /30s of the /15.
    pub const MAX_LINKS: usize = 1 << (Self::SMALL_PREFIX_LEN - Self::V4_RANGE.1);

    /// The numbering of a lab of `links` links.
    pub fn for_links(links: usize) -> Addressing {
        Addressing {
            v4_prefix_len: if links <= Self::SLASH_24_LINKS {
                24
            } else {
                Self::SMALL_PREFIX_LEN
            },
        }
    }

    /// The prefix length of every link's IPv4 subnet.
    pub fn v4_prefix_len(self) -> u8 {
        self.v4_prefix_len
    }

    /// Link `index`'s IPv4 subnet (network address, prefix length).
    pub fn v4_subnet(self, index: usize) -> (Ipv4Addr, u8) {
        assert!(index < Addressing::MAX_LINKS, "link {index} has no subnet");
        let block = 1u32 << (32 - self.v4_prefix_len);
        let base = u32::from(Addressing::V4_RANGE.0) + index as u32 * block;
        (Ipv4Addr::from(base), self.v4_prefix_len)
    }

    /// Link `index`'s IPv6 subnet (network address, prefix length): 2001:2:0:i::/64.
    pub fn v6_subnet(self, index: usize) -> (Ipv6Addr, u8) {
        assert!(index < Addressing::MAX_LINKS, "link {index} has no subnet");
        (Ipv6Addr::new(0x2001, 2, 0, index as u16, 0, 0, 0, 0), 64)
    }

    /// The addresses of link `index`'s two ends, IPv4 and IPv6.
    pub fn ends(self, index: usize) -> [(Ipv4Addr, Ipv6Addr); 2] {
        let v4 = u32::from(self.v4_subnet(index).0);
        let v6 = u128::from(self.v6_subnet(index).0);
        [1, 2].map(|host| {
            (
                Ipv4Addr::from(v4 + host),
                Ipv6Addr::from(v6 + u128::from(host)),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(text: &str) -> Ipv6Addr {
        text.parse().unwrap()
    }

    #[test]
    fn labs_of_up_to_512_links_give_each_link_its_own_slash_24_and_slash_64() {
        let addressing = Addressing::for_links(512);
        assert_eq!(addressing.v4_prefix_len(), 24);
        assert_eq!(
            addressing.ends(0),
            [
                (Ipv4Addr::new(198, 18, 0, 1), v6("2001:2:0:0::1")),
                (Ipv4Addr::new(198, 18, 0, 2), v6("2001:2:0:0::2"))
            ]
        );
        assert_eq!(addressing.ends(3)[1].0, Ipv4Addr::new(198, 18, 3, 2));
        assert_eq!(addressing.ends(300)[0].0, Ipv4Addr::new(198, 19, 44, 1));
        assert_eq!(addressing.ends(511)[1].1, v6("2001:2:0:1ff::2"));
        assert_eq!(
            addressing.v4_subnet(511),
            (Ipv4Addr::new(198, 19, 255, 0), 24)
        );
        assert_eq!(addressing.v6_subnet(511), (v6("2001:2:0:1ff::"), 64));
        assert_eq!(Addressing::for_links(1), addressing);
    }

    #[test]
    fn larger_labs_give_each_link_a_slash_30_and_keep_the_slash_64() {
        let addressing = Addressing::for_links(513);
        assert_eq!(addressing.v4_prefix_len(), 30);
        assert_eq!(addressing, Addressing::for_links(Addressing::MAX_LINKS));
        assert_eq!(
            addressing.ends(1),
            [
                (Ipv4Addr::new(198, 18, 0, 5), v6("2001:2:0:1::1")),
                (Ipv4Addr::new(198, 18, 0, 6), v6("2001:2:0:1::2"))
            ]
        );
        // 999 x 4 = 3996 = 15 x 256 + 156.
        assert_eq!(
            addressing.v4_subnet(999),
            (Ipv4Addr::new(198, 18, 15, 156), 30)
        );
        assert_eq!(addressing.ends(999)[1].1, v6("2001:2:0:3e7::2"));
        // The last link's /30 is the range's last.
        let last = Addressing::MAX_LINKS - 1;
        assert_eq!(Addressing::MAX_LINKS, 32_768);
        assert_eq!(
            addressing.v4_subnet(last),
            (Ipv4Addr::new(198, 19, 255, 252), 30)
        );
        assert_eq!(addressing.ends(last)[1].0, Ipv4Addr::new(198, 19, 255, 254));
        assert_eq!(addressing.ends(last)[1].1, v6("2001:2:0:7fff::2"));
    }
}
