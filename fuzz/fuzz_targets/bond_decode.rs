//! Any bytes given to the bonding tunnel's decoders (header, Hello, Welcome, Data frames,
//! and `open` with a fixed key) are a value or a typed error, never a panic; whatever
//! decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_bond::crypto::{open, Psk, Role, SessionKeys};
use pathlab_bond::wire::{
    decode_data, Frames, Header, Hello, Welcome, FRAGMENT_HEADER_BYTES, HEADER_BYTES,
    PACKET_HEADER_BYTES,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = Header::decode(data) {
        // The header's own length: the target said 16 after the header shrank to 12, so
        // every datagram of 12 to 15 bytes with a valid header panicked here.
        assert_eq!(&header.to_bytes()[..], &data[..HEADER_BYTES]);
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

    // Frames straight from the input: each valid one re-encodes to the bytes it came from,
    // and the frames decode again to themselves. The one exception is in the format: a whole
    // packet sent as a Fragment (type 1, offset 0, total_len = len) is valid, but the encoder
    // writes a whole packet as the 4-byte shorter Packet frame (type 7).
    let mut out = Vec::new();
    let mut frames = Vec::new();
    let mut errors = 0;
    let mut at = 0;
    for frame in Frames::new(data) {
        match frame {
            Ok(frame) => {
                let before = out.len();
                frame.encode(&mut out);
                let len = out.len() - before;
                assert_eq!(len, frame.encoded_len());
                if data[at] == 1 && out[before] == 7 {
                    assert_eq!(&out[before + 1..before + 7], &data[at + 1..at + 7]);
                    at += len + (FRAGMENT_HEADER_BYTES - PACKET_HEADER_BYTES);
                } else {
                    assert_eq!(&out[before..], &data[at..at + len]);
                    at += len;
                }
                frames.push(frame);
            }
            Err(_) => errors += 1,
        }
    }
    assert!(errors <= 1);
    let again: Vec<_> = Frames::new(&out)
        .map(|f| f.expect("re-encoded frames decode"))
        .collect();
    assert_eq!(again, frames);

    let psk = Psk::from_file_contents(b"fuzzing key for the bond tunnel, 32+ bytes").unwrap();
    let keys = SessionKeys::hello(&psk, Role::Server);
    let mut datagram = data.to_vec();
    let _ = open(&keys.open, &mut datagram);
});
