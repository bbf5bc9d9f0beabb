//! The tunnel's Data encryption: ChaCha20-Poly1305 under the keys a handshake
//! ([`crate::handshake`], Noise IKpsk2) agreed, and the per-line replay window.
//!
//! Each direction has its own key (Noise's split), so a datagram reflected back to its
//! sender never opens. The AEAD nonce is the clear header, `kind u8 | line u8 | session u32
//! | seq u48` (big-endian), which is also the associated data: two lines never share a
//! nonce, and `seq` counts from 1 per line under each session's fresh keys.
//!
//! Every secret here is zeroed when dropped: the pre-shared key's bytes and what derives
//! from it ([`Zeroizing`]), the ciphers' keys (`chacha20poly1305` wipes its key in its own
//! `Drop`), and a session's rekey secret ([`SessionKeys::chain`]).
//!
//! [`seal`] and [`open`] work in place on the caller's buffer and never allocate (a [`seal`]
//! appends the 16-byte tag, which needs that much spare capacity to stay allocation-free).

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Tag};
use pathlab_probe::auth::{hkdf_sha256, key_material};
pub use pathlab_probe::auth::{KeyError, Role};
use zeroize::{Zeroize as _, ZeroizeOnDrop, Zeroizing};

use crate::wire::{Header, WireError, HEADER_BYTES, MAX_DATAGRAM_BYTES, MAX_SEQ, TAG_BYTES};

/// The fewest bytes of key material a pre-shared key file must hold.
pub const MIN_PSK_BYTES: usize = 32;

/// Bytes of a ChaCha20-Poly1305 key.
const KEY_BYTES: usize = 32;

/// Bytes of a ChaCha20-Poly1305 nonce.
const NONCE_BYTES: usize = 12;

/// The HKDF salt of what derives from a pre-shared key.
const PSK_SALT: &[u8] = b"pathlab-bond v2";

/// The seqs behind the highest one that a [`ReplayWindow`] still accepts (the highest
/// included).
pub const REPLAY_WINDOW: u64 = 1024;

/// The pre-shared key both ends read from the same file.
///
/// Make one with
///
/// ```text
/// (umask 077; head -c 32 /dev/urandom | base64 > bond.key)
/// ```
///
/// (44 characters of base64 for 256 random bits; the umask makes the file its owner's
/// only, which the command line requires of a key file), or with `pathlab bond key FILE`. The file's bytes are the HKDF input
/// keying material as they are: base64 is not decoded, and a text file only loses its
/// trailing whitespace and newline, so any file of at least [`MIN_PSK_BYTES`] bytes works,
/// such as 32 raw random bytes. A typed passphrase of that length is accepted too, but has
/// far less than 256 bits of entropy.
#[derive(Clone)]
pub struct Psk(Zeroizing<Vec<u8>>);

impl ZeroizeOnDrop for Psk {}

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Psk(..)")
    }
}

impl Psk {
    /// The key in a key file's contents.
    ///
    /// A text file (printable ASCII and whitespace only) loses its trailing whitespace, so
    /// an editor's final newline does not change the key; a binary file is used whole.
    pub fn from_file_contents(contents: &[u8]) -> Result<Psk, KeyError> {
        Ok(Psk(Zeroizing::new(
            key_material(contents, MIN_PSK_BYTES)?.to_vec(),
        )))
    }

    /// 32 bytes derived from the key for one use (`label`): HKDF-SHA256 with the salt
    /// "pathlab-bond v2" (the simple mode's server key, the Noise pre-shared key).
    pub(crate) fn derive(&self, label: &[u8]) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(hkdf_sha256(&self.0, PSK_SALT, &[label]))
    }
}

/// A ChaCha20-Poly1305 key, its cipher set up once (the cipher zeroes its key when
/// dropped).
#[derive(Clone)]
pub struct Key {
    /// The cipher, keyed.
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// The key with these bytes.
    fn new(bytes: &[u8; KEY_BYTES]) -> Key {
        Key {
            cipher: ChaCha20Poly1305::new(bytes.into()),
        }
    }
}

/// The two keys of one end: one seals what it sends, the other opens what its peer sent;
/// and the secret the session's next keys derive from.
#[derive(Clone)]
pub struct SessionKeys {
    /// Seals this end's datagrams (the key of the direction it sends in).
    pub seal: Key,
    /// Opens the peer's datagrams (the key of the direction it receives in).
    pub open: Key,
    /// The rekey chain: the pre-shared key of the next rekey's handshake
    /// ([`crate::rekey`]), so that new keys depend on the session's secrets as well as on
    /// the rekey's fresh Diffie-Hellman.
    pub(crate) chain: Zeroizing<[u8; KEY_BYTES]>,
}

impl ZeroizeOnDrop for SessionKeys {}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

/// The HKDF salt of a session's rekey chain.
const CHAIN_SALT: &[u8] = b"pathlab-bond v2 rekey chain";

impl SessionKeys {
    /// The keys of a Noise split: `initiator` seals what the client sends, `responder` what
    /// the server sends; `is_initiator` says which end this is. The rekey chain is
    /// HKDF-SHA256 of both (salt "pathlab-bond v2 rekey chain"), the same at both ends.
    pub fn from_split(
        initiator: &[u8; KEY_BYTES],
        responder: &[u8; KEY_BYTES],
        is_initiator: bool,
    ) -> SessionKeys {
        let (seal, open) = if is_initiator {
            (initiator, responder)
        } else {
            (responder, initiator)
        };
        let mut both = Zeroizing::new([0; 2 * KEY_BYTES]);
        both[..KEY_BYTES].copy_from_slice(initiator);
        both[KEY_BYTES..].copy_from_slice(responder);
        SessionKeys {
            seal: Key::new(seal),
            open: Key::new(open),
            chain: Zeroizing::new(hkdf_sha256(&*both, CHAIN_SALT, &[b"chain"])),
        }
    }

    /// Zeroes a split's two keys once they are [`SessionKeys`].
    pub(crate) fn from_split_wiping(
        mut split: ([u8; KEY_BYTES], [u8; KEY_BYTES]),
        is_initiator: bool,
    ) -> SessionKeys {
        let keys = SessionKeys::from_split(&split.0, &split.1, is_initiator);
        split.zeroize();
        keys
    }
}

/// Why a datagram cannot be sealed or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The buffer cannot hold a header (seal) or a header and a tag (open).
    #[error("datagram too short: {len} bytes, at least {needed} expected")]
    TooShort {
        /// The buffer's length.
        len: usize,
        /// The least it needs.
        needed: usize,
    },
    /// The clear header is invalid, or the datagram is (or would be) oversized.
    #[error("bad datagram: {0}")]
    Wire(#[from] WireError),
    /// The header's `seq` does not fit the wire's 48 bits (sealing it would reuse a nonce
    /// the receiver cannot tell apart).
    #[error("seq {0} is past the wire's 48 bits: the line must not send again under this key")]
    SeqExhausted(u64),
    /// The tag does not match: wrong key or direction, or the datagram was altered.
    #[error("authentication failed: wrong key or direction, or an altered datagram")]
    BadTag,
}

/// The AEAD nonce of the datagram with this header: `kind | line | session | seq` (the
/// header's 12 bytes: seq is 48 bits).
fn nonce(header: &Header) -> [u8; NONCE_BYTES] {
    header.to_bytes()
}

/// Seals a datagram in place: `buf` holds [`HEADER_BYTES`] for the header, then the plain
/// body.
///
/// Writes `header` into the first [`HEADER_BYTES`] (whatever they held), encrypts the body
/// in place with the header as associated data, and appends the tag. Allocates only if
/// `buf` lacks [`TAG_BYTES`] of spare capacity. Fails if `buf` is shorter than a header, the
/// sealed datagram would exceed [`MAX_DATAGRAM_BYTES`] or `seq` is past [`MAX_SEQ`]; `buf`
/// is then unchanged.
pub fn seal(key: &Key, header: &Header, buf: &mut Vec<u8>) -> Result<(), CryptoError> {
    if header.seq > MAX_SEQ {
        return Err(CryptoError::SeqExhausted(header.seq));
    }
    if buf.len() < HEADER_BYTES {
        return Err(CryptoError::TooShort {
            len: buf.len(),
            needed: HEADER_BYTES,
        });
    }
    let sealed_len = buf.len() + TAG_BYTES;
    if sealed_len > MAX_DATAGRAM_BYTES {
        return Err(WireError::Oversized { len: sealed_len }.into());
    }
    let (head, body) = buf.split_at_mut(HEADER_BYTES);
    head.copy_from_slice(&header.to_bytes());
    let tag = key
        .cipher
        .encrypt_in_place_detached(&nonce(header).into(), head, body)
        .expect("ChaCha20-Poly1305 seals up to 256 GiB, a datagram is at most 64 KiB");
    buf.extend_from_slice(&tag);
    Ok(())
}

/// Opens a datagram in place: checks its header and tag and decrypts its body.
///
/// Returns the header and the plain body, which borrows from `datagram`. On failure the
/// body's bytes are unspecified. A datagram that opens is authentic, not fresh: pass its
/// `seq` to the line's [`ReplayWindow`] next.
pub fn open<'a>(key: &Key, datagram: &'a mut [u8]) -> Result<(Header, &'a [u8]), CryptoError> {
    let needed = HEADER_BYTES + TAG_BYTES;
    if datagram.len() < needed {
        return Err(CryptoError::TooShort {
            len: datagram.len(),
            needed,
        });
    }
    let header = Header::decode(datagram)?;
    let (head, rest) = datagram.split_at_mut(HEADER_BYTES);
    let (body, tag) = rest.split_at_mut(rest.len() - TAG_BYTES);
    key.cipher
        .decrypt_in_place_detached(&nonce(&header).into(), head, body, Tag::from_slice(tag))
        .map_err(|_| CryptoError::BadTag)?;
    Ok((header, body))
}

/// Why a replay window refuses a seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Replay {
    /// Seq 0, which no sender uses (they count from 1).
    #[error("seq 0 is never sent, seqs start at 1")]
    Zero,
    /// The seq is more than [`REPLAY_WINDOW`] behind the highest one seen.
    #[error("seq {seq} is too old: the highest seen is {highest}, the window {REPLAY_WINDOW}")]
    TooOld {
        /// The refused seq.
        seq: u64,
        /// The highest seq seen on the line.
        highest: u64,
    },
    /// The seq was already seen.
    #[error("seq {0} was already received")]
    Duplicate(u64),
}

/// Words of the bitmap: the window's 16 and one more, so that advancing clears whole words
/// (the WireGuard layout, RFC 6479).
const REPLAY_WORDS: usize = (REPLAY_WINDOW as usize) / 64 + 1;

/// Which of the last [`REPLAY_WINDOW`] seqs of one line in one direction have been
/// received.
///
/// Feed it only seqs of datagrams that [`open`] authenticated: a forged datagram with a
/// huge seq would otherwise push the window past every genuine datagram still on its way,
/// and the receiver would drop them all as too old.
#[derive(Debug, Clone, Default)]
pub struct ReplayWindow {
    /// The highest seq received (0: none yet).
    highest: u64,
    /// Bit `seq % 64` of word `(seq / 64) % REPLAY_WORDS`: whether `seq` was received.
    bits: [u64; REPLAY_WORDS],
}

impl ReplayWindow {
    /// A window that has received nothing.
    pub fn new() -> ReplayWindow {
        ReplayWindow::default()
    }

    /// The highest seq received (0 before the first).
    pub fn highest(&self) -> u64 {
        self.highest
    }

    /// Whether `seq` would be accepted, without recording it (a cheap early drop before
    /// decrypting).
    pub fn check(&self, seq: u64) -> Result<(), Replay> {
        if seq == 0 {
            return Err(Replay::Zero);
        }
        if seq > self.highest {
            return Ok(());
        }
        if self.highest - seq >= REPLAY_WINDOW {
            return Err(Replay::TooOld {
                seq,
                highest: self.highest,
            });
        }
        let (word, bit) = Self::position(seq);
        if self.bits[word] & bit != 0 {
            return Err(Replay::Duplicate(seq));
        }
        Ok(())
    }

    /// Accepts `seq` if it is new and within the window, and records it.
    pub fn check_and_update(&mut self, seq: u64) -> Result<(), Replay> {
        self.check(seq)?;
        if seq > self.highest {
            // Words between the old highest's and the new one's hold seqs a whole bitmap
            // ago: clear them before they are reused.
            let old_word = self.highest / 64;
            let new_word = seq / 64;
            let stale = (new_word - old_word).min(REPLAY_WORDS as u64);
            for step in 1..=stale {
                self.bits[((old_word + step) % REPLAY_WORDS as u64) as usize] = 0;
            }
            self.highest = seq;
        }
        let (word, bit) = Self::position(seq);
        self.bits[word] |= bit;
        Ok(())
    }

    /// The word and bit mask of `seq` in the bitmap.
    fn position(seq: u64) -> (usize, u64) {
        (((seq / 64) % REPLAY_WORDS as u64) as usize, 1 << (seq % 64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Kind;
    use proptest::prelude::*;

    const PSK_TEXT: &[u8] = b"q0Yv3C1nX7d6m2Jx9oU4b8Ws5Lk0Tg1Rz2Ea3Hf4Ip8=\n";

    fn psk() -> Psk {
        Psk::from_file_contents(PSK_TEXT).unwrap()
    }

    fn data_header(seq: u64) -> Header {
        Header {
            kind: Kind::Data,
            line: 2,
            session: 77,
            seq,
        }
    }

    /// A sealed Data datagram with `body`.
    fn sealed(key: &Key, header: &Header, body: &[u8]) -> Vec<u8> {
        let mut buf = vec![0; HEADER_BYTES];
        buf.extend_from_slice(body);
        seal(key, header, &mut buf).unwrap();
        buf
    }

    #[test]
    fn psk_files_of_32_bytes_or_more_are_accepted_and_text_is_trimmed() {
        // `head -c 32 /dev/urandom | base64` gives 44 characters and a newline.
        assert_eq!(PSK_TEXT.len(), 45);
        assert_eq!(psk().0.len(), 44);
        let crlf = Psk::from_file_contents(b"q0Yv3C1nX7d6m2Jx9oU4b8Ws5Lk0Tg1Rz2Ea3Hf4Ip8= \r\n\n")
            .unwrap();
        assert_eq!(crlf.0, psk().0);
        // Raw random bytes are used whole, a final 0x0a included.
        let mut binary = vec![0xff; 31];
        binary.push(b'\n');
        assert_eq!(*Psk::from_file_contents(&binary).unwrap().0, binary);
        assert_eq!(
            Psk::from_file_contents(b"0123456789abcdef0123456789abcde\n").unwrap_err(),
            KeyError::TooShort {
                found: 31,
                needed: 32
            }
        );
        assert_eq!(format!("{:?}", psk()), "Psk(..)");
    }

    /// One end's keys of session `session` (a stand-in for a handshake's split).
    fn keys(role: Role, session: u8) -> SessionKeys {
        SessionKeys::from_split(&[session; 32], &[session ^ 0xff; 32], role == Role::Client)
    }

    #[test]
    fn derived_keys_differ_per_label_and_follow_the_documented_schedule() {
        assert_ne!(psk().derive(b"a"), psk().derive(b"b"));
        assert_eq!(
            *psk().derive(b"noise psk2"),
            hkdf_sha256(&psk().0, b"pathlab-bond v2", &[b"noise psk2"])
        );
    }

    /// Compiles only if every type that holds a secret wipes it when dropped.
    fn wipes_on_drop<T: ZeroizeOnDrop>() {}

    #[test]
    fn secrets_are_zeroed_when_dropped() {
        wipes_on_drop::<Psk>();
        wipes_on_drop::<SessionKeys>();
        wipes_on_drop::<ChaCha20Poly1305>();
        wipes_on_drop::<Zeroizing<[u8; KEY_BYTES]>>();
        // What `Drop` runs, observed: the split's copies and the chain are zeros after it.
        let mut split = ([1; KEY_BYTES], [2; KEY_BYTES]);
        let keys = SessionKeys::from_split(&split.0, &split.1, true);
        split.zeroize();
        assert_eq!(split, ([0; KEY_BYTES], [0; KEY_BYTES]));
        let mut chain = keys.chain.clone();
        assert_ne!(*chain, [0; KEY_BYTES]);
        chain.zeroize();
        assert_eq!(*chain, [0; KEY_BYTES]);
        // Both ends derive the same chain, and it is neither key.
        let server = SessionKeys::from_split(&[1; KEY_BYTES], &[2; KEY_BYTES], false);
        assert_eq!(*server.chain, *keys.chain);
        assert_ne!(*keys.chain, [1; KEY_BYTES]);
    }

    #[test]
    fn nonces_separate_kinds_and_lines() {
        let header = |kind| Header {
            kind,
            line: 9,
            session: 0x0a0b_0c0d,
            seq: 0x0000_0304_0506_0708,
        };
        assert_eq!(
            nonce(&header(Kind::Welcome)),
            [2, 9, 0x0a, 0x0b, 0x0c, 0x0d, 3, 4, 5, 6, 7, 8]
        );
        assert_ne!(nonce(&header(Kind::Hello)), nonce(&header(Kind::Data)));
        assert_ne!(nonce(&header(Kind::Hello)), nonce(&header(Kind::Welcome)));
    }

    #[test]
    fn seal_is_chacha20_poly1305_with_the_header_as_associated_data() {
        let key_bytes = [7; 32];
        let header = data_header(5);
        let datagram = sealed(&Key::new(&key_bytes), &header, b"inner packet");

        let mut expected = b"inner packet".to_vec();
        let nonce = [3, 2, 0, 0, 0, 77, 0, 0, 0, 0, 0, 5];
        let tag = ChaCha20Poly1305::new(&key_bytes.into())
            .encrypt_in_place_detached(&nonce.into(), &header.to_bytes(), &mut expected)
            .unwrap();
        expected.extend_from_slice(&tag);
        assert_eq!(&datagram[..HEADER_BYTES], &header.to_bytes());
        assert_eq!(&datagram[HEADER_BYTES..], &expected);
    }

    #[test]
    fn sealed_datagrams_open_in_place_without_reallocating() {
        let client = keys(Role::Client, 1);
        let server = keys(Role::Server, 1);
        let mut buf = Vec::with_capacity(HEADER_BYTES + 100 + TAG_BYTES);
        buf.resize(HEADER_BYTES, 0xee);
        buf.extend_from_slice(&[0x42; 100]);
        let allocation = buf.as_ptr();
        seal(&client.seal, &data_header(7), &mut buf).unwrap();
        assert_eq!(buf.as_ptr(), allocation);
        assert_eq!(buf.len(), HEADER_BYTES + 100 + TAG_BYTES);
        assert_ne!(&buf[HEADER_BYTES..HEADER_BYTES + 100], &[0x42; 100][..]);
        let (header, body) = open(&server.open, &mut buf).unwrap();
        assert_eq!(header, data_header(7));
        assert_eq!(body, &[0x42; 100][..]);
        // An empty body is a valid datagram too.
        let mut empty = sealed(&server.seal, &data_header(1), b"");
        assert_eq!(open(&client.open, &mut empty).unwrap().1, b"");
    }

    #[test]
    fn every_altered_byte_fails_to_open() {
        let keys = keys(Role::Client, 3);
        let server = self::keys(Role::Server, 3);
        let header = Header {
            kind: Kind::Data,
            line: 1,
            session: 0,
            seq: 0x1234,
        };
        let datagram = sealed(&keys.seal, &header, b"seventeen bytes!!");
        assert!(open(&server.open, &mut datagram.clone()).is_ok());
        for index in 0..datagram.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut altered = datagram.clone();
                altered[index] ^= flip;
                let result = open(&server.open, &mut altered);
                // Bytes of kind and reserved fail as a bad header, every other as a bad tag.
                if index == 0 || (2..4).contains(&index) {
                    assert!(
                        matches!(result, Err(CryptoError::Wire(_) | CryptoError::BadTag)),
                        "byte {index} ^ {flip:#x}: {result:?}"
                    );
                } else {
                    assert_eq!(
                        result.map(|_| ()),
                        Err(CryptoError::BadTag),
                        "byte {index} ^ {flip:#x}"
                    );
                }
            }
        }
        let mut cut = datagram.clone();
        assert_eq!(
            open(&server.open, &mut cut[..datagram.len() - 1]).map(|_| ()),
            Err(CryptoError::BadTag)
        );
        assert_eq!(
            open(&server.open, &mut cut[..HEADER_BYTES + TAG_BYTES - 1]).map(|_| ()),
            Err(CryptoError::TooShort {
                len: HEADER_BYTES + TAG_BYTES - 1,
                needed: HEADER_BYTES + TAG_BYTES
            })
        );
    }

    #[test]
    fn another_session_and_a_reflected_datagram_fail_to_open() {
        let client = keys(Role::Client, 1);
        let server = keys(Role::Server, 1);
        let stranger = keys(Role::Server, 2);
        let datagram = sealed(&client.seal, &data_header(3), b"to the server");
        assert!(open(&server.open, &mut datagram.clone()).is_ok());
        assert_eq!(
            open(&stranger.open, &mut datagram.clone()).map(|_| ()),
            Err(CryptoError::BadTag)
        );
        // Reflected to its sender, or opened with the key of the wrong direction.
        assert_eq!(
            open(&client.open, &mut datagram.clone()).map(|_| ()),
            Err(CryptoError::BadTag)
        );
        let reply = sealed(&server.seal, &data_header(3), b"to the client");
        assert_eq!(
            open(&server.open, &mut reply.clone()).map(|_| ()),
            Err(CryptoError::BadTag)
        );
        assert!(open(&client.open, &mut reply.clone()).is_ok());
        // Another session's keys do not open it either.
        let later = keys(Role::Server, 9);
        assert!(open(&later.open, &mut datagram.clone()).is_err());
    }

    #[test]
    fn seal_refuses_short_buffers_and_oversized_datagrams() {
        let keys = keys(Role::Client, 4);
        let mut short = vec![0; HEADER_BYTES - 1];
        assert_eq!(
            seal(&keys.seal, &data_header(1), &mut short),
            Err(CryptoError::TooShort {
                len: HEADER_BYTES - 1,
                needed: HEADER_BYTES
            })
        );
        let mut largest = vec![0; MAX_DATAGRAM_BYTES - TAG_BYTES];
        assert_eq!(seal(&keys.seal, &data_header(1), &mut largest), Ok(()));
        let mut too_large = vec![0; MAX_DATAGRAM_BYTES - TAG_BYTES + 1];
        assert_eq!(
            seal(&keys.seal, &data_header(1), &mut too_large),
            Err(CryptoError::Wire(WireError::Oversized {
                len: MAX_DATAGRAM_BYTES + 1
            }))
        );
        assert_eq!(too_large.len(), MAX_DATAGRAM_BYTES - TAG_BYTES + 1);
        let mut last = vec![0; HEADER_BYTES + 10];
        assert!(seal(&keys.seal, &data_header(MAX_SEQ), &mut last).is_ok());
        let mut past = vec![0; HEADER_BYTES + 10];
        assert_eq!(
            seal(&keys.seal, &data_header(MAX_SEQ + 1), &mut past),
            Err(CryptoError::SeqExhausted(MAX_SEQ + 1))
        );
    }

    #[test]
    fn replay_window_accepts_new_and_reordered_seqs_and_refuses_the_rest() {
        let mut window = ReplayWindow::new();
        assert_eq!(window.check_and_update(0), Err(Replay::Zero));
        for seq in 1..=10 {
            assert_eq!(window.check_and_update(seq), Ok(()));
        }
        assert_eq!(window.check_and_update(5), Err(Replay::Duplicate(5)));
        // Jump ahead, then the gap arrives late, oldest just inside the window.
        assert_eq!(window.check_and_update(2000), Ok(()));
        assert_eq!(window.highest(), 2000);
        assert_eq!(window.check_and_update(2000 - 1023), Ok(()));
        assert_eq!(window.check_and_update(1500), Ok(()));
        assert_eq!(window.check_and_update(1999), Ok(()));
        assert_eq!(window.check_and_update(1500), Err(Replay::Duplicate(1500)));
        assert_eq!(
            window.check_and_update(2000 - 1024),
            Err(Replay::TooOld {
                seq: 976,
                highest: 2000
            })
        );
        assert_eq!(
            window.check_and_update(10),
            Err(Replay::TooOld {
                seq: 10,
                highest: 2000
            })
        );
        // A far jump forgets everything before it, and reuses the words without leftovers.
        assert_eq!(window.check_and_update(2000 + 64 * 17), Ok(()));
        assert_eq!(window.check_and_update(2000 + 64 * 17 - 1), Ok(()));
        assert_eq!(
            window.check(2000 + 64 * 17 - 1),
            Err(Replay::Duplicate(3087))
        );
        assert_eq!(window.check(2000 + 64 * 16), Ok(()));
    }

    proptest! {
        #[test]
        fn replay_window_agrees_with_a_set(seqs in proptest::collection::vec(1u64..5000, 0..400)) {
            let mut window = ReplayWindow::new();
            let mut seen = std::collections::BTreeSet::new();
            let mut highest = 0;
            for seq in seqs {
                let expected = if seq + REPLAY_WINDOW <= highest {
                    Err(Replay::TooOld { seq, highest })
                } else if seen.contains(&seq) {
                    Err(Replay::Duplicate(seq))
                } else {
                    Ok(())
                };
                prop_assert_eq!(window.check_and_update(seq), expected);
                if expected.is_ok() {
                    seen.insert(seq);
                    highest = highest.max(seq);
                }
            }
        }

        #[test]
        fn any_body_round_trips(body in proptest::collection::vec(any::<u8>(), 0..2000), seq in 1..=MAX_SEQ, line in any::<u8>()) {
            let client = keys(Role::Client, 5);
            let server = keys(Role::Server, 5);
            let header = Header { kind: Kind::Data, line, session: 1, seq };
            let mut datagram = sealed(&client.seal, &header, &body);
            let (opened, plain) = open(&server.open, &mut datagram).unwrap();
            prop_assert_eq!(opened, header);
            prop_assert_eq!(plain, &body[..]);
        }

        #[test]
        fn an_altered_datagram_never_opens(body in proptest::collection::vec(any::<u8>(), 0..200), at in any::<prop::sample::Index>(), flip in 1u8..) {
            let client = keys(Role::Client, 5);
            let server = keys(Role::Server, 5);
            let mut datagram = sealed(&client.seal, &data_header(1), &body);
            let index = at.index(datagram.len());
            datagram[index] ^= flip;
            prop_assert!(open(&server.open, &mut datagram).is_err());
        }

        #[test]
        fn random_datagrams_never_open_or_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let server = keys(Role::Server, 6);
            prop_assert!(open(&server.open, &mut bytes).is_err());
        }
    }
}
