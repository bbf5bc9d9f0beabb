//! Any bytes given to the bonding tunnel's decoders (header, Hello, Welcome, Data frames,
//! and `open` with a fixed key) are a value or a typed error, never a panic; whatever
//! decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_bond::crypto::{open, Psk, Role, SessionKeys};
use pathlab_bond::wire::{decode_data, Frames, Header, Hello, Welcome};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = Header::decode(data) {
        assert_eq!(&header.to_bytes()[..], &data[..16]);
    }
    if let Ok(hello) = Hello::decode(data) {
        let mut out = Vec::new();
        hello.encode(&mut out);
        assert_eq!(out, data);
    }
    if let Ok(welcome) = Welcome::decode(data) {
        let mut out = Vec::new();
        welcome.encode(&mut out);
        assert_eq!(out, data);
    }
    let _ = decode_data(data).map(|(_, frames)| frames.count());

    // Frames straight from the input: a valid prefix re-encodes to the same bytes.
    let mut out = Vec::new();
    let mut errors = 0;
    for frame in Frames::new(data) {
        match frame {
            Ok(frame) => {
                let before = out.len();
                frame.encode(&mut out);
                assert_eq!(out.len() - before, frame.encoded_len());
            }
            Err(_) => errors += 1,
        }
    }
    assert!(errors <= 1);
    assert_eq!(&out[..], &data[..out.len()]);

    let psk = Psk::from_file_contents(b"fuzzing key for the bond tunnel, 32+ bytes").unwrap();
    let keys = SessionKeys::hello(&psk, Role::Server);
    let mut datagram = data.to_vec();
    let _ = open(&keys.open, &mut datagram);
});
