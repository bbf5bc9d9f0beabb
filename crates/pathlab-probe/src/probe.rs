//! The UDP probe: a fixed header, padding, and a tag when the test is authenticated.
//!
//! ```text
//!  0      2   3    4     5        8             16            24             32
//!  | "PL" | v | kind | flags | 0 0 0 | session u64 | seq u64 | sent_ns u64 |
//!  32 (reflected probes only)                                              56
//!  | reflector_received_ns u64 | reflector_sent_ns u64 | reflector_count u64 |
//!  | padding (random bytes) ... | HMAC-SHA256 tag (32 bytes, if flags & 1) |
//! ```
//!
//! All integers are big-endian. `sent_ns` is the sender's clock in nanoseconds (any
//! epoch: one-way figures are computed as deviations, never as absolute delays). A
//! reflected probe (an `rtt` reply) is the request with the reflector's fields filled in:
//! the same length, so a reply is never larger than its request.

use crate::auth::{Key, TAG_LEN};

/// First two bytes of every probe.
pub const MAGIC: [u8; 2] = *b"PL";
/// The probe format version this build speaks.
pub const VERSION: u8 = 1;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 32;
/// Bytes of the reflector's fields.
pub const REFLECTOR_LEN: usize = 24;
/// The largest probe (the largest UDP payload over IPv4).
pub const MAX_LEN: usize = 65_507;

const FLAG_AUTH: u8 = 1;

/// What a probe is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// One way: the receiver records it.
    OneWay,
    /// A round-trip request, to be reflected.
    Request,
    /// A reflected request.
    Reply,
}

impl ProbeKind {
    fn code(self) -> u8 {
        match self {
            ProbeKind::OneWay => 1,
            ProbeKind::Request => 2,
            ProbeKind::Reply => 3,
        }
    }

    fn from_code(code: u8) -> Option<ProbeKind> {
        match code {
            1 => Some(ProbeKind::OneWay),
            2 => Some(ProbeKind::Request),
            3 => Some(ProbeKind::Reply),
            _ => None,
        }
    }
}

/// The reflector's timestamps and count in a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reflection {
    /// When the reflector received the request (its clock).
    pub received_ns: u64,
    /// When it sent the reply (its clock).
    pub sent_ns: u64,
    /// How many requests of this session it had received, this one included.
    pub received_count: u64,
}

/// A probe's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// What it is for.
    pub kind: ProbeKind,
    /// The test it belongs to.
    pub session: u64,
    /// Its sequence number in the test, from 0.
    pub seq: u64,
    /// The sender's clock when it was sent.
    pub sent_ns: u64,
    /// The reflector's fields (requests carry zeros, replies the values).
    pub reflection: Reflection,
}

/// Why bytes are not a probe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// Shorter than its header (and tag).
    #[error("probe truncated: {got} bytes, at least {need} needed")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        got: usize,
    },
    /// Longer than any UDP payload.
    #[error("probe of {0} bytes is larger than {MAX_LEN}")]
    Oversized(usize),
    /// Not a pathlab probe.
    #[error("not a pathlab probe (bad magic)")]
    BadMagic,
    /// A version this build does not speak.
    #[error("probe version {0}, this pathlab speaks {VERSION}")]
    WrongVersion(u8),
    /// An unknown kind code.
    #[error("unknown probe kind {0}")]
    UnknownKind(u8),
    /// The test is authenticated and the probe is not.
    #[error("unauthenticated probe in an authenticated test")]
    Unauthenticated,
    /// The tag does not match: tampered, or another key.
    #[error("probe tag does not match")]
    BadTag,
    /// The probe is tagged but the test has no key.
    #[error("authenticated probe in a test without a key")]
    UnexpectedTag,
}

/// The smallest probe of a kind: its header, plus the tag when authenticated.
pub fn min_len(kind: ProbeKind, authenticated: bool) -> usize {
    let reflector = if matches!(kind, ProbeKind::OneWay) {
        0
    } else {
        REFLECTOR_LEN
    };
    HEADER_LEN + reflector + if authenticated { TAG_LEN } else { 0 }
}

/// Writes `probe` as `len` bytes into `out` (cleared first): header, `padding` filling the
/// rest, and the tag when `key` is given. `len` is raised to the minimum if smaller.
pub fn encode(
    probe: &Probe,
    len: usize,
    key: Option<&Key>,
    padding: &mut dyn FnMut(&mut [u8]),
    out: &mut Vec<u8>,
) -> Result<(), ProbeError> {
    let len = len.max(min_len(probe.kind, key.is_some()));
    if len > MAX_LEN {
        return Err(ProbeError::Oversized(len));
    }
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(probe.kind.code());
    out.push(if key.is_some() { FLAG_AUTH } else { 0 });
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&probe.session.to_be_bytes());
    out.extend_from_slice(&probe.seq.to_be_bytes());
    out.extend_from_slice(&probe.sent_ns.to_be_bytes());
    if probe.kind != ProbeKind::OneWay {
        out.extend_from_slice(&probe.reflection.received_ns.to_be_bytes());
        out.extend_from_slice(&probe.reflection.sent_ns.to_be_bytes());
        out.extend_from_slice(&probe.reflection.received_count.to_be_bytes());
    }
    let body_len = len - if key.is_some() { TAG_LEN } else { 0 };
    let header_end = out.len();
    out.resize(body_len, 0);
    padding(&mut out[header_end..]);
    if let Some(key) = key {
        let tag = key.tag(&[&out[..]]);
        out.extend_from_slice(&tag);
    }
    Ok(())
}

/// Reads a probe. With `key`, the probe must carry a matching tag; without, it must carry
/// none.
pub fn decode(bytes: &[u8], key: Option<&Key>) -> Result<Probe, ProbeError> {
    if bytes.len() > MAX_LEN {
        return Err(ProbeError::Oversized(bytes.len()));
    }
    if bytes.len() < HEADER_LEN {
        return Err(ProbeError::Truncated {
            need: HEADER_LEN,
            got: bytes.len(),
        });
    }
    if bytes[..2] != MAGIC {
        return Err(ProbeError::BadMagic);
    }
    if bytes[2] != VERSION {
        return Err(ProbeError::WrongVersion(bytes[2]));
    }
    let kind = ProbeKind::from_code(bytes[3]).ok_or(ProbeError::UnknownKind(bytes[3]))?;
    let authenticated = bytes[4] & FLAG_AUTH != 0;
    let need = min_len(kind, authenticated);
    if bytes.len() < need {
        return Err(ProbeError::Truncated {
            need,
            got: bytes.len(),
        });
    }
    match (key, authenticated) {
        (Some(key), true) => {
            let (body, tag) = bytes.split_at(bytes.len() - TAG_LEN);
            if !key.verify(&[body], tag) {
                return Err(ProbeError::BadTag);
            }
        }
        (Some(_), false) => return Err(ProbeError::Unauthenticated),
        (None, true) => return Err(ProbeError::UnexpectedTag),
        (None, false) => {}
    }
    let u64_at = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let reflection = if kind == ProbeKind::OneWay {
        Reflection::default()
    } else {
        Reflection {
            received_ns: u64_at(32),
            sent_ns: u64_at(40),
            received_count: u64_at(48),
        }
    };
    Ok(Probe {
        kind,
        session: u64_at(8),
        seq: u64_at(16),
        sent_ns: u64_at(24),
        reflection,
    })
}

/// Turns a request into its reply in place: kind, reflector fields, a new tag. The request
/// is checked with `request_key`, the reply tagged with `reply_key` (each direction of an
/// authenticated test has its own, so a request sent back is no reply). The length does
/// not change.
pub fn reflect(
    bytes: &mut [u8],
    reflection: Reflection,
    request_key: Option<&Key>,
    reply_key: Option<&Key>,
) -> Result<(), ProbeError> {
    let probe = decode(bytes, request_key)?;
    if probe.kind != ProbeKind::Request {
        return Err(ProbeError::UnknownKind(bytes[3]));
    }
    bytes[3] = ProbeKind::Reply.code();
    bytes[32..40].copy_from_slice(&reflection.received_ns.to_be_bytes());
    bytes[40..48].copy_from_slice(&reflection.sent_ns.to_be_bytes());
    bytes[48..56].copy_from_slice(&reflection.received_count.to_be_bytes());
    if let Some(key) = reply_key {
        let body_len = bytes.len() - TAG_LEN;
        let tag = key.tag(&[&bytes[..body_len]]);
        bytes[body_len..].copy_from_slice(&tag);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> Key {
        Key::from_file_contents(b"sixteen byte key!").unwrap()
    }

    fn probe(kind: ProbeKind) -> Probe {
        Probe {
            kind,
            session: 0xdead_beef,
            seq: 42,
            sent_ns: 1_700_000_000_000_000_000,
            reflection: Reflection::default(),
        }
    }

    fn encoded(probe: &Probe, len: usize, key: Option<&Key>) -> Vec<u8> {
        let mut out = Vec::new();
        encode(probe, len, key, &mut |pad| pad.fill(0xa5), &mut out).unwrap();
        out
    }

    #[test]
    fn layout_is_the_documented_one() {
        let bytes = encoded(&probe(ProbeKind::OneWay), 64, None);
        assert_eq!(bytes.len(), 64);
        assert_eq!(&bytes[..8], &[b'P', b'L', 1, 1, 0, 0, 0, 0]);
        assert_eq!(u64::from_be_bytes(bytes[16..24].try_into().unwrap()), 42);
        assert!(bytes[32..].iter().all(|&b| b == 0xa5), "padding");
    }

    #[test]
    fn every_error_is_named() {
        let good = encoded(&probe(ProbeKind::OneWay), 100, None);
        assert_eq!(
            decode(&good[..10], None),
            Err(ProbeError::Truncated { need: 32, got: 10 })
        );
        assert_eq!(
            decode(&vec![0; MAX_LEN + 1], None),
            Err(ProbeError::Oversized(MAX_LEN + 1))
        );
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(decode(&bad, None), Err(ProbeError::BadMagic));
        let mut bad = good.clone();
        bad[2] = 9;
        assert_eq!(decode(&bad, None), Err(ProbeError::WrongVersion(9)));
        let mut bad = good.clone();
        bad[3] = 7;
        assert_eq!(decode(&bad, None), Err(ProbeError::UnknownKind(7)));
        assert_eq!(
            decode(&good, Some(&key())),
            Err(ProbeError::Unauthenticated)
        );
        let signed = encoded(&probe(ProbeKind::OneWay), 100, Some(&key()));
        assert_eq!(decode(&signed, None), Err(ProbeError::UnexpectedTag));
        let mut tampered = signed.clone();
        tampered[20] ^= 1;
        assert_eq!(decode(&tampered, Some(&key())), Err(ProbeError::BadTag));
        let other = Key::from_file_contents(b"another sixteen bytes").unwrap();
        assert_eq!(decode(&signed, Some(&other)), Err(ProbeError::BadTag));
        let request = encoded(&probe(ProbeKind::Request), 0, None);
        assert_eq!(
            decode(&request[..40], None),
            Err(ProbeError::Truncated { need: 56, got: 40 })
        );
    }

    #[test]
    fn reflecting_keeps_the_length_and_fills_the_reflector_fields() {
        for key in [None, Some(key())] {
            let mut bytes = encoded(&probe(ProbeKind::Request), 200, key.as_ref());
            let reflection = Reflection {
                received_ns: 5,
                sent_ns: 6,
                received_count: 7,
            };
            let reply_key = key
                .as_ref()
                .map(|_| Key::from_file_contents(b"the other direction's key").unwrap());
            reflect(&mut bytes, reflection, key.as_ref(), reply_key.as_ref()).unwrap();
            assert_eq!(bytes.len(), 200, "no amplification");
            if key.is_some() {
                assert_eq!(decode(&bytes, key.as_ref()), Err(ProbeError::BadTag));
            }
            let reply = decode(&bytes, reply_key.as_ref()).unwrap();
            assert_eq!(reply.kind, ProbeKind::Reply);
            assert_eq!(reply.reflection, reflection);
            assert_eq!(reply.seq, 42);
        }
        let mut one_way = encoded(&probe(ProbeKind::OneWay), 64, None);
        assert!(
            reflect(&mut one_way, Reflection::default(), None, None).is_err(),
            "only requests are reflected"
        );
    }

    proptest! {
        #[test]
        fn round_trip(kind in 1u8..=3, session: u64, seq: u64, sent: u64, len in 0usize..2000, signed: bool, r in any::<(u64, u64, u64)>()) {
            let kind = ProbeKind::from_code(kind).unwrap();
            let key = signed.then(key);
            let reflection = if kind == ProbeKind::OneWay { Reflection::default() } else { Reflection { received_ns: r.0, sent_ns: r.1, received_count: r.2 } };
            let probe = Probe { kind, session, seq, sent_ns: sent, reflection };
            let bytes = encoded(&probe, len, key.as_ref());
            prop_assert_eq!(bytes.len(), len.max(min_len(kind, signed)));
            prop_assert_eq!(decode(&bytes, key.as_ref()), Ok(probe));
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), signed: bool) {
            let key = signed.then(key);
            let _ = decode(&bytes, key.as_ref());
        }
    }
}
