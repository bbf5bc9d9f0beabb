//! Who may use a server, and from which inner addresses: the peers (`--peer NAME,key=PUBLIC
//! [,allowed=CIDR...]` or a peers file), and the table that maps inner addresses to them
//! (cryptokey routing, as WireGuard's allowed IPs).
//!
//! Going down, an inner packet's destination picks the peer by longest prefix; coming up, a
//! decrypted packet whose inner source does not pick its sender is dropped and counted. So
//! one client's keys neither read another's traffic nor take its addresses, and the table
//! is exactly what the configuration lists: nothing a peer sends makes it grow.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::handshake::PublicKey;

/// The most peers a server takes (a peers file longer than this is refused).
pub const MAX_PEERS: usize = 65_536;
/// The most prefixes one peer may list.
pub const MAX_ALLOWED_PER_PEER: usize = 256;
/// The longest peer name.
pub const MAX_NAME_CHARS: usize = 64;
/// The largest peers file read.
pub const MAX_PEERS_FILE_BYTES: usize = 16 << 20;

/// Why a peer, a prefix or a peers file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// A prefix is not ADDRESS/LENGTH.
    #[error("'{text}': {why} (expected ADDRESS/LENGTH, e.g. 198.19.1.0/24 or 2001:2:1::/64)")]
    BadPrefix {
        /// The text.
        text: String,
        /// What is wrong.
        why: String,
    },
    /// A peer spec is malformed.
    #[error("peer '{text}': {why}")]
    BadPeer {
        /// The spec (a peers file's line is named by its number instead).
        text: String,
        /// What is wrong.
        why: String,
    },
    /// Two peers have the same name, key or prefix.
    #[error("{what} '{value}' is given to two peers")]
    Duplicate {
        /// "name", "key" or "allowed prefix".
        what: &'static str,
        /// The value.
        value: String,
    },
    /// Too many peers or too large a file.
    #[error("{0}")]
    TooMany(String),
}

/// An IP prefix: the address with its host bits cleared, and the length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    /// The network address (host bits zero).
    pub address: IpAddr,
    /// The prefix length (at most 32 or 128).
    pub len: u8,
}

/// `ADDRESS/LENGTH` as written, host bits kept (an interface address).
pub fn parse_cidr(text: &str) -> Result<(IpAddr, u8), PeerError> {
    let bad = |why: String| PeerError::BadPrefix {
        text: text.chars().take(80).collect(),
        why,
    };
    let (address, len) = text
        .split_once('/')
        .ok_or_else(|| bad("no /LENGTH".to_owned()))?;
    let address: IpAddr = address
        .parse()
        .map_err(|_| bad(format!("'{address}' is not an IP address")))?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= max && !len.starts_with('+'))
        .ok_or_else(|| bad(format!("'{len}' is not a prefix length of 0 to {max}")))?;
    Ok((address, len))
}

impl Prefix {
    /// The prefix of `address`'s first `len` bits.
    pub fn new(address: IpAddr, len: u8) -> Prefix {
        Prefix {
            address: masked(address, len),
            len,
        }
    }

    /// Parses `ADDRESS/LENGTH`; host bits are cleared.
    pub fn parse(text: &str) -> Result<Prefix, PeerError> {
        let (address, len) = parse_cidr(text)?;
        Ok(Prefix::new(address, len))
    }

    /// Whether `address` lies in the prefix.
    pub fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.address.is_ipv4() && masked(address, self.len) == self.address
    }

    /// Every address of both families.
    pub fn everything() -> [Prefix; 2] {
        [
            Prefix::new(Ipv4Addr::UNSPECIFIED.into(), 0),
            Prefix::new(Ipv6Addr::UNSPECIFIED.into(), 0),
        ]
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.len)
    }
}

/// `address` with all but its first `len` bits cleared.
fn masked(address: IpAddr, len: u8) -> IpAddr {
    /// The top `len` of `width` bits set.
    fn mask(width: u32, len: u8) -> u128 {
        let len = u32::from(len).min(width);
        u128::MAX.checked_shl(128 - len).unwrap_or(0) >> (128 - width)
    }
    match address {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask(32, len) as u32)),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask(128, len))),
    }
}

/// One client a server knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// Its name, for logs and stats.
    pub name: String,
    /// Its static public key.
    pub key: PublicKey,
    /// The inner addresses it may send from and receive at.
    pub allowed: Vec<Prefix>,
}

impl PeerConfig {
    /// Whether its allowed prefixes were narrowed (`allowed=`): without, it has every
    /// address of both families.
    pub fn is_narrowed(&self) -> bool {
        self.allowed != Prefix::everything()
    }

    /// Parses `NAME,key=PUBLIC[,allowed=CIDR]...` (no `allowed`: every address, for a
    /// server with one client).
    pub fn parse(text: &str) -> Result<PeerConfig, PeerError> {
        let bad = |why: String| PeerError::BadPeer {
            text: text.chars().take(200).collect(),
            why,
        };
        let mut parts = text.trim().split(',');
        let name = parts.next().unwrap_or_default().trim();
        if name.is_empty()
            || name.chars().count() > MAX_NAME_CHARS
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(format!(
                "a name is 1 to {MAX_NAME_CHARS} letters, digits, '-', '_' or '.'"
            )));
        }
        let mut key = None;
        let mut allowed = Vec::new();
        for part in parts {
            match part.trim().split_once('=') {
                Some(("key", value)) => {
                    key = Some(PublicKey::from_hex(value).map_err(|e| bad(e.to_string()))?);
                }
                Some(("allowed", value)) => {
                    if allowed.len() == MAX_ALLOWED_PER_PEER {
                        return Err(bad(format!(
                            "at most {MAX_ALLOWED_PER_PEER} allowed prefixes"
                        )));
                    }
                    allowed.push(Prefix::parse(value).map_err(|e| bad(e.to_string()))?);
                }
                _ => {
                    return Err(bad(format!(
                        "'{}' is neither key=PUBLIC nor allowed=CIDR",
                        part.chars().take(80).collect::<String>()
                    )))
                }
            }
        }
        let key = key.ok_or_else(|| bad("no key=PUBLIC".to_owned()))?;
        if allowed.is_empty() {
            allowed.extend(Prefix::everything());
        }
        Ok(PeerConfig {
            name: name.to_owned(),
            key,
            allowed,
        })
    }

    /// Parses a peers file: one peer per line as `--peer` takes it; blank lines and lines
    /// starting with `#` are skipped. Errors name the line by its number.
    pub fn parse_file(contents: &[u8]) -> Result<Vec<PeerConfig>, PeerError> {
        if contents.len() > MAX_PEERS_FILE_BYTES {
            return Err(PeerError::TooMany(format!(
                "a peers file of {} bytes, at most {MAX_PEERS_FILE_BYTES} read",
                contents.len()
            )));
        }
        let text = std::str::from_utf8(contents).map_err(|_| PeerError::BadPeer {
            text: "the peers file".to_owned(),
            why: "it is not UTF-8 text".to_owned(),
        })?;
        let mut peers = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if peers.len() == MAX_PEERS {
                return Err(PeerError::TooMany(format!("at most {MAX_PEERS} peers")));
            }
            peers.push(PeerConfig::parse(line).map_err(|error| match error {
                PeerError::BadPeer { why, .. } => PeerError::BadPeer {
                    text: format!("on line {}", number + 1),
                    why,
                },
                other => other,
            })?);
        }
        Ok(peers)
    }
}

/// Longest-prefix lookup of inner addresses to peers (indices into the peer list).
#[derive(Debug, Clone, Default)]
pub struct AllowedIps {
    /// (is IPv4, length, network address) to peer.
    table: HashMap<(bool, u8, IpAddr), usize>,
    /// The lengths present per family, longest first.
    lengths_v4: Vec<u8>,
    lengths_v6: Vec<u8>,
}

impl AllowedIps {
    /// The table of `peers`' allowed prefixes; a prefix given to two peers is refused, as
    /// is a name or key given twice.
    pub fn new(peers: &[PeerConfig]) -> Result<AllowedIps, PeerError> {
        let mut table = AllowedIps::default();
        let mut names = std::collections::HashSet::new();
        let mut keys = std::collections::HashSet::new();
        for (index, peer) in peers.iter().enumerate() {
            if !names.insert(peer.name.as_str()) {
                return Err(PeerError::Duplicate {
                    what: "name",
                    value: peer.name.clone(),
                });
            }
            if !keys.insert(peer.key) {
                return Err(PeerError::Duplicate {
                    what: "key",
                    value: peer.key.to_string(),
                });
            }
            for prefix in &peer.allowed {
                let slot = (prefix.address.is_ipv4(), prefix.len, prefix.address);
                if table.table.insert(slot, index).is_some() {
                    return Err(PeerError::Duplicate {
                        what: "allowed prefix",
                        value: prefix.to_string(),
                    });
                }
                let lengths = if prefix.address.is_ipv4() {
                    &mut table.lengths_v4
                } else {
                    &mut table.lengths_v6
                };
                if !lengths.contains(&prefix.len) {
                    lengths.push(prefix.len);
                    lengths.sort_unstable_by(|a, b| b.cmp(a));
                }
            }
        }
        Ok(table)
    }

    /// The peer whose longest prefix holds `address`.
    pub fn lookup(&self, address: IpAddr) -> Option<usize> {
        let v4 = address.is_ipv4();
        let lengths = if v4 {
            &self.lengths_v4
        } else {
            &self.lengths_v6
        };
        lengths
            .iter()
            .find_map(|&len| self.table.get(&(v4, len, masked(address, len))).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn key(byte: u8) -> String {
        pathlab_core::format::hex(&[byte; 32])
    }

    #[test]
    fn prefixes_clear_host_bits_and_contain_what_they_should() {
        let p = Prefix::parse("198.19.1.77/24").unwrap();
        assert_eq!(p.to_string(), "198.19.1.0/24");
        assert!(p.contains(ip("198.19.1.255")));
        assert!(!p.contains(ip("198.19.2.1")));
        assert!(!p.contains(ip("::ffff:198.19.1.1")));
        let p6 = Prefix::parse("2001:2:1::5/48").unwrap();
        assert!(p6.contains(ip("2001:2:1:ffff::1")));
        assert!(!p6.contains(ip("2001:2:2::1")));
        assert!(Prefix::parse("0.0.0.0/0")
            .unwrap()
            .contains(ip("203.0.113.1")));
        for bad in [
            "198.19.1.0",
            "198.19.1.0/33",
            "::/129",
            "x/8",
            "1.2.3.4/+8",
            "1.2.3.4/-1",
        ] {
            assert!(Prefix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn peers_parse_with_their_prefixes_and_bad_ones_say_why() {
        let peer = PeerConfig::parse(&format!(
            "site-a,key={},allowed=198.19.1.0/24,allowed=2001:2:1::/48",
            key(1)
        ))
        .unwrap();
        assert_eq!(peer.name, "site-a");
        assert_eq!(peer.allowed.len(), 2);
        let open = PeerConfig::parse(&format!("b,key={}", key(2))).unwrap();
        assert_eq!(open.allowed, Prefix::everything().to_vec());
        let no_key = PeerConfig::parse("c,allowed=198.19.0.0/16").unwrap_err();
        assert!(no_key.to_string().contains("no key=PUBLIC"), "{no_key}");
        let short = PeerConfig::parse("c,key=abcd").unwrap_err();
        assert!(short.to_string().contains("64 hex digits"), "{short}");
        assert!(PeerConfig::parse(&format!("bad name,key={}", key(3))).is_err());
        assert!(PeerConfig::parse(&format!("d,key={},via=1", key(3))).is_err());
        let file = format!(
            "# sites\n\na,key={}\nb,key={},allowed=198.19.2.0/24\n",
            key(1),
            key(2)
        );
        assert_eq!(PeerConfig::parse_file(file.as_bytes()).unwrap().len(), 2);
        let broken = format!("a,key={}\nb,key=zz\n", key(1));
        let error = PeerConfig::parse_file(broken.as_bytes()).unwrap_err();
        assert!(error.to_string().contains("on line 2"), "{error}");
    }

    #[test]
    fn the_longest_prefix_picks_the_peer_and_duplicates_are_refused() {
        let peers = vec![
            PeerConfig::parse(&format!("wide,key={},allowed=198.19.0.0/16", key(1))).unwrap(),
            PeerConfig::parse(&format!("narrow,key={},allowed=198.19.7.0/24", key(2))).unwrap(),
            PeerConfig::parse(&format!("six,key={},allowed=2001:2:9::/48", key(3))).unwrap(),
        ];
        let table = AllowedIps::new(&peers).unwrap();
        assert_eq!(table.lookup(ip("198.19.7.9")), Some(1));
        assert_eq!(table.lookup(ip("198.19.8.9")), Some(0));
        assert_eq!(table.lookup(ip("198.18.0.1")), None);
        assert_eq!(table.lookup(ip("2001:2:9::1")), Some(2));
        assert_eq!(table.lookup(ip("2001:2:8::1")), None);
        let mut twice = peers.clone();
        twice[1].allowed = twice[0].allowed.clone();
        assert!(matches!(
            AllowedIps::new(&twice),
            Err(PeerError::Duplicate {
                what: "allowed prefix",
                ..
            })
        ));
        let mut same_key = peers.clone();
        same_key[1].key = same_key[0].key;
        assert!(matches!(
            AllowedIps::new(&same_key),
            Err(PeerError::Duplicate { what: "key", .. })
        ));
    }
}
