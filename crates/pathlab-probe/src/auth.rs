//! Optional authentication with a pre-shared key: HMAC-SHA256 on every control message and
//! every probe.
//!
//! Both ends read the same key file (`--psk FILE`). The control connection opens with a
//! nonce from each side; every authenticated control message carries a counter, and its
//! tag covers both nonces and the counter, so a recorded control message can be replayed
//! neither into another connection nor twice into the same one. Probes of a test are
//! tagged with a session key derived from the key and both nonces, so probes recorded from
//! one test are worthless in another; within a test the sequence number tracker drops
//! copies (a replay is counted as a duplicate).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of an HMAC-SHA256 tag.
pub const TAG_LEN: usize = 32;

/// Bytes of a connection nonce.
pub const NONCE_LEN: usize = 16;

/// A pre-shared key.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Why a key file's contents cannot be a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Fewer than 16 bytes after trimming whitespace.
    #[error("a pre-shared key needs at least 16 bytes, the file has {0}")]
    TooShort(usize),
}

impl Key {
    /// A key from a key file's contents (surrounding whitespace and newlines ignored).
    pub fn from_file_contents(contents: &[u8]) -> Result<Key, KeyError> {
        let trimmed = contents.trim_ascii();
        if trimmed.len() < 16 {
            return Err(KeyError::TooShort(trimmed.len()));
        }
        Ok(Key(trimmed.to_vec()))
    }

    /// The tag of `parts` concatenated.
    pub fn tag(&self, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// Whether `tag` is the tag of `parts` (compared in constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        for part in parts {
            mac.update(part);
        }
        mac.verify_slice(tag).is_ok()
    }

    /// The key that tags the probes of one test: HMAC(key, "pathlab probes" | nonces | session).
    pub fn probe_key(
        &self,
        client_nonce: &[u8; NONCE_LEN],
        server_nonce: &[u8; NONCE_LEN],
        session: u64,
    ) -> Key {
        Key(self
            .tag(&[
                b"pathlab probes",
                client_nonce,
                server_nonce,
                &session.to_be_bytes(),
            ])
            .to_vec())
    }
}

/// The authentication state of one control connection.
#[derive(Debug, Clone)]
pub struct ControlAuth {
    key: Key,
    client_nonce: [u8; NONCE_LEN],
    server_nonce: [u8; NONCE_LEN],
    next_send: u64,
    next_receive: u64,
}

impl ControlAuth {
    /// The state after the hello exchange.
    pub fn new(
        key: Key,
        client_nonce: [u8; NONCE_LEN],
        server_nonce: [u8; NONCE_LEN],
    ) -> ControlAuth {
        ControlAuth {
            key,
            client_nonce,
            server_nonce,
            next_send: 0,
            next_receive: 0,
        }
    }

    /// The tag and counter for the next message sent with `body`.
    pub fn seal(&mut self, body: &[u8]) -> (u64, [u8; TAG_LEN]) {
        let counter = self.next_send;
        self.next_send += 1;
        (counter, self.tag(counter, body))
    }

    /// Checks a received message: its counter must be the next one and its tag right.
    pub fn open(&mut self, counter: u64, body: &[u8], tag: &[u8]) -> bool {
        if counter != self.next_receive {
            return false;
        }
        let ok = self.key.verify(
            &[
                b"pathlab control",
                &self.client_nonce,
                &self.server_nonce,
                &counter.to_be_bytes(),
                body,
            ],
            tag,
        );
        if ok {
            self.next_receive += 1;
        }
        ok
    }

    fn tag(&self, counter: u64, body: &[u8]) -> [u8; TAG_LEN] {
        self.key.tag(&[
            b"pathlab control",
            &self.client_nonce,
            &self.server_nonce,
            &counter.to_be_bytes(),
            body,
        ])
    }

    /// The key for the probes of test `session`.
    pub fn probe_key(&self, session: u64) -> Key {
        self.key
            .probe_key(&self.client_nonce, &self.server_nonce, session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_test_case_2() {
        // RFC 4231 section 4.3: key "Jefe", data "what do ya want for nothing?".
        let key = Key(b"Jefe".to_vec());
        let tag = key.tag(&[b"what do ya want ", b"for nothing?"]);
        let expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let hex: Vec<String> = tag.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex.concat(), expected);
    }

    #[test]
    fn control_messages_cannot_be_replayed_reordered_or_moved_to_another_connection() {
        let key = Key::from_file_contents(b"  correct horse battery staple\n").unwrap();
        let mut client = ControlAuth::new(key.clone(), [1; 16], [2; 16]);
        let mut server = ControlAuth::new(key.clone(), [1; 16], [2; 16]);
        let (c0, t0) = client.seal(b"first");
        let (c1, t1) = client.seal(b"second");
        assert!(!server.open(c1, b"second", &t1), "out of order");
        assert!(server.open(c0, b"first", &t0));
        assert!(!server.open(c0, b"first", &t0), "replayed");
        assert!(!server.open(c1, b"tampered", &t1), "tampered");
        assert!(server.open(c1, b"second", &t1));
        let mut other = ControlAuth::new(key, [1; 16], [3; 16]);
        assert!(!other.open(c0, b"first", &t0), "another connection's nonce");
    }

    #[test]
    fn short_keys_are_refused() {
        assert_eq!(
            Key::from_file_contents(b"short\n").unwrap_err(),
            KeyError::TooShort(5)
        );
    }
}
