//! Optional authentication with a pre-shared key: HMAC-SHA256 on every control message,
//! every data stream's greeting and every probe.
//!
//! Both ends read the same key file (`--psk FILE`). The control connection opens with a
//! random nonce from each side; from the key and both nonces HKDF-SHA256 (RFC 5869)
//! derives one key per direction and per use:
//!
//! - control messages, client to server and server to client: each tag covers a counter
//!   and the message, so a message can be replayed neither into another connection (other
//!   nonces, other keys), nor twice or out of order into the same one (the counter), nor
//!   back to the side that sent it (the other direction's key);
//! - probes of one test, one key per direction: a probe recorded in one test, or a request
//!   turned around, is worthless; within a test the sequence tracker drops copies;
//! - the greetings that open a TCP test's data streams, client to server.
//!
//! What it does not do: encrypt. Anyone on the path reads the probes and the control
//! messages (test parameters, results); they cannot forge, alter or replay them.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of an HMAC-SHA256 tag.
pub const TAG_LEN: usize = 32;

/// Bytes of a connection nonce.
pub const NONCE_LEN: usize = 16;

/// Fewest bytes of a measurement key file (`pathlab server --psk`, the clients' `--psk`).
pub const MIN_KEY_BYTES: usize = 16;

/// Which end of a dialogue this is: it decides which direction's key tags what it sends
/// and which checks what it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The end that opens the dialogue (sends the hello).
    Client,
    /// The end that answers it.
    Server,
}

/// One direction of a dialogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// From the client to the server.
    ClientToServer,
    /// From the server to the client.
    ServerToClient,
}

impl Way {
    /// The label that keeps the two directions' keys apart.
    pub fn label(self) -> &'static [u8] {
        match self {
            Way::ClientToServer => b"c2s",
            Way::ServerToClient => b"s2c",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Client => "client",
            Role::Server => "server",
        })
    }
}

impl Role {
    /// The direction this end sends in.
    pub fn sends(self) -> Way {
        match self {
            Role::Client => Way::ClientToServer,
            Role::Server => Way::ServerToClient,
        }
    }

    /// The direction this end receives in.
    pub fn receives(self) -> Way {
        match self {
            Role::Client => Way::ServerToClient,
            Role::Server => Way::ClientToServer,
        }
    }
}

/// Why a key file's contents cannot be a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The file holds too few bytes of key material.
    #[error(
        "a pre-shared key needs at least {needed} bytes, the file has {found} (make one, its \
         owner's only, with `(umask 077; head -c 32 /dev/urandom | base64 > pathlab.key)`)"
    )]
    TooShort {
        /// Bytes found (after trimming a text file's trailing whitespace).
        found: usize,
        /// Bytes needed.
        needed: usize,
    },
}

/// The key material in a key file's contents, at least `min` bytes: the one reading of
/// key files that every `--psk` shares.
///
/// A text file (printable ASCII and whitespace only) loses its trailing whitespace, so an
/// editor's final newline does not change the key; a binary file is used whole. Base64 is
/// not decoded: the bytes are the HKDF input as they are.
pub fn key_material(contents: &[u8], min: usize) -> Result<&[u8], KeyError> {
    let is_text = contents
        .iter()
        .all(|byte| byte.is_ascii_graphic() || byte.is_ascii_whitespace());
    let material = if is_text {
        contents.trim_ascii_end()
    } else {
        contents
    };
    if material.len() < min {
        return Err(KeyError::TooShort {
            found: material.len(),
            needed: min,
        });
    }
    Ok(material)
}

/// HKDF-SHA256 (RFC 5869), extract then expand to 32 bytes.
pub fn hkdf_sha256(ikm: &[u8], salt: &[u8], info: &[&[u8]]) -> [u8; 32] {
    let prk = hmac_sha256(salt, &[ikm]);
    // One block of expand: T(1) = HMAC(PRK, info | 0x01).
    let mut parts: Vec<&[u8]> = info.to_vec();
    parts.push(&[1]);
    hmac_sha256(&prk, &parts)
}

fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// A key: a pre-shared key as read from its file, or one derived from it.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key from a key file's contents ([`key_material`], at least [`MIN_KEY_BYTES`]).
    pub fn from_file_contents(contents: &[u8]) -> Result<Key, KeyError> {
        Ok(Key(key_material(contents, MIN_KEY_BYTES)?.to_vec()))
    }

    /// The tag of `parts` concatenated.
    pub fn tag(&self, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        hmac_sha256(&self.0, parts)
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

    /// The key of one use and direction of the dialogue opened with these nonces.
    fn derive(
        &self,
        client_nonce: &[u8; NONCE_LEN],
        server_nonce: &[u8; NONCE_LEN],
        info: &[&[u8]],
    ) -> Key {
        let mut salt = [0u8; 2 * NONCE_LEN];
        salt[..NONCE_LEN].copy_from_slice(client_nonce);
        salt[NONCE_LEN..].copy_from_slice(server_nonce);
        Key(hkdf_sha256(&self.0, &salt, info).to_vec())
    }
}

/// The keys of one control connection, derived once both nonces are known.
#[derive(Debug, Clone)]
pub struct DialogueKeys {
    key: Key,
    client_nonce: [u8; NONCE_LEN],
    server_nonce: [u8; NONCE_LEN],
}

/// The two probe keys of one test.
#[derive(Debug, Clone)]
pub struct ProbeKeys {
    /// Tags probes the client sends (one-way up, round-trip requests).
    pub client_to_server: Key,
    /// Tags probes the server sends (one-way down, round-trip replies).
    pub server_to_client: Key,
}

impl ProbeKeys {
    /// The key of probes going `way`.
    pub fn of(&self, way: Way) -> &Key {
        match way {
            Way::ClientToServer => &self.client_to_server,
            Way::ServerToClient => &self.server_to_client,
        }
    }
}

impl DialogueKeys {
    /// The keys of the dialogue between these nonces.
    pub fn new(
        key: Key,
        client_nonce: [u8; NONCE_LEN],
        server_nonce: [u8; NONCE_LEN],
    ) -> DialogueKeys {
        DialogueKeys {
            key,
            client_nonce,
            server_nonce,
        }
    }

    fn derive(&self, info: &[&[u8]]) -> Key {
        self.key
            .derive(&self.client_nonce, &self.server_nonce, info)
    }

    /// The key of control messages going `way`.
    pub fn control(&self, way: Way) -> Key {
        self.derive(&[b"pathlab control ", way.label()])
    }

    /// The keys of the probes of test `session`.
    pub fn probes(&self, session: u64) -> ProbeKeys {
        let session = session.to_be_bytes();
        ProbeKeys {
            client_to_server: self.derive(&[
                b"pathlab probes ",
                Way::ClientToServer.label(),
                &session,
            ]),
            server_to_client: self.derive(&[
                b"pathlab probes ",
                Way::ServerToClient.label(),
                &session,
            ]),
        }
    }

    /// The key of the greetings of test `session`'s data streams (client to server).
    pub fn greetings(&self, session: u64) -> Key {
        self.derive(&[b"pathlab streams c2s", &session.to_be_bytes()])
    }
}

/// The authentication state of one end of a control connection.
#[derive(Debug, Clone)]
pub struct ControlAuth {
    keys: DialogueKeys,
    send_key: Key,
    receive_key: Key,
    next_send: u64,
    next_receive: u64,
}

impl ControlAuth {
    /// The state of `role`'s end after the hello exchange.
    pub fn new(
        key: Key,
        client_nonce: [u8; NONCE_LEN],
        server_nonce: [u8; NONCE_LEN],
        role: Role,
    ) -> ControlAuth {
        let keys = DialogueKeys::new(key, client_nonce, server_nonce);
        ControlAuth {
            send_key: keys.control(role.sends()),
            receive_key: keys.control(role.receives()),
            keys,
            next_send: 0,
            next_receive: 0,
        }
    }

    /// The tag and counter for the next message sent with `body`.
    pub fn seal(&mut self, body: &[u8]) -> (u64, [u8; TAG_LEN]) {
        let counter = self.next_send;
        self.next_send += 1;
        (counter, self.send_key.tag(&[&counter.to_be_bytes(), body]))
    }

    /// Checks a received message: its counter must be the next one and its tag right.
    pub fn open(&mut self, counter: u64, body: &[u8], tag: &[u8]) -> bool {
        if counter != self.next_receive {
            return false;
        }
        let ok = self
            .receive_key
            .verify(&[&counter.to_be_bytes(), body], tag);
        if ok {
            self.next_receive += 1;
        }
        ok
    }

    /// The dialogue's keys (for probes and greetings).
    pub fn keys(&self) -> &DialogueKeys {
        &self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_core::format::hex;

    #[test]
    fn rfc4231_test_case_2() {
        // RFC 4231 section 4.3: key "Jefe", data "what do ya want for nothing?".
        let key = Key(b"Jefe".to_vec());
        let tag = key.tag(&[b"what do ya want ", b"for nothing?"]);
        let expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(hex(&tag), expected);
    }

    #[test]
    fn rfc5869_test_case_1() {
        // RFC 5869 appendix A.1: the first 32 bytes of OKM.
        let ikm = [0x0bu8; 22];
        let salt: Vec<u8> = (0x00..=0x0c).collect();
        let info: Vec<u8> = (0xf0..=0xf9).collect();
        let okm = hkdf_sha256(&ikm, &salt, &[&info[..5], &info[5..]]);
        assert_eq!(
            hex(&okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
        );
    }

    fn pair(nonce: u8) -> (ControlAuth, ControlAuth) {
        let key = Key::from_file_contents(b"correct horse battery staple\n").unwrap();
        (
            ControlAuth::new(key.clone(), [1; 16], [nonce; 16], Role::Client),
            ControlAuth::new(key, [1; 16], [nonce; 16], Role::Server),
        )
    }

    #[test]
    fn control_messages_cannot_be_replayed_reordered_reflected_or_moved() {
        let (mut client, mut server) = pair(2);
        let (c0, t0) = client.seal(b"first");
        let (c1, t1) = client.seal(b"second");
        assert!(!server.open(c1, b"second", &t1), "out of order");
        assert!(server.open(c0, b"first", &t0));
        assert!(!server.open(c0, b"first", &t0), "replayed");
        assert!(!server.open(c1, b"tampered", &t1), "tampered");
        assert!(server.open(c1, b"second", &t1));
        // The server's own message 2, sent back to it as the client's message 2.
        let (s0, u0) = server.seal(b"welcome");
        let (s1, u1) = server.seal(b"accept");
        let (_, u2) = server.seal(b"done");
        assert!(client.open(s0, b"welcome", &u0) && client.open(s1, b"accept", &u1));
        assert!(!server.open(2, b"done", &u2), "reflected");
        let (_, mut other) = pair(3);
        assert!(!other.open(c0, b"first", &t0), "another connection's nonce");
    }

    #[test]
    fn every_use_and_direction_has_its_own_key() {
        let key = Key::from_file_contents(b"0123456789abcdef").unwrap();
        let keys = DialogueKeys::new(key, [1; 16], [2; 16]);
        let all = [
            keys.control(Way::ClientToServer),
            keys.control(Way::ServerToClient),
            keys.probes(7).client_to_server,
            keys.probes(7).server_to_client,
            keys.probes(8).client_to_server,
            keys.greetings(7),
            keys.greetings(8),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.0, b.0);
            }
        }
    }

    #[test]
    fn key_files_text_trimmed_at_the_end_binary_whole_short_refused() {
        assert_eq!(
            Key::from_file_contents(b"short\n").unwrap_err(),
            KeyError::TooShort {
                found: 5,
                needed: MIN_KEY_BYTES
            }
        );
        let a = Key::from_file_contents(b"0123456789abcdef \r\n").unwrap();
        assert_eq!(a.0, b"0123456789abcdef");
        let binary: Vec<u8> = (0..16).map(|i| i * 17).collect();
        assert_eq!(Key::from_file_contents(&binary).unwrap().0, binary);
        // Leading whitespace is part of a text key (as for the bond's keys).
        assert_eq!(
            key_material(b"  0123456789abcdef\n", 16).unwrap(),
            b"  0123456789abcdef"
        );
    }
}
