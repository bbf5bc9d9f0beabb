//! Any bytes given to the bonding tunnel's decoders (header, Data frames, `open` with a
//! fixed key, a server's and a client's handshake handling, a peers file, the header
//! decompressor) are a value or a typed error, never a panic; whatever decodes re-encodes
//! to the same bytes, and whatever the header compressor codes decodes to the packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_bond::crypto::{open, Psk, SessionKeys};
use pathlab_bond::headers::{Compressor, CompressorConfig, Decompressor};
use pathlab_bond::peers::PeerConfig;
use pathlab_bond::sim::{SeededEntropy, SIM_UNIX_START_NS};
use pathlab_bond::wire::{decode_data, Frames, Header, FRAGMENT_HEADER_BYTES, HEADER_BYTES, PACKET_HEADER_BYTES};
use pathlab_bond::{Address, Bond, BondConfig, ClientKeys, SecretKey, Server, ServerConfig};
use pathlab_core::rng::Rng;
use pathlab_core::Instant;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = Header::decode(data) {
        // The header's own length: the target said 16 after the header shrank to 12, so
        // every datagram of 12 to 15 bytes with a valid header panicked here.
        assert_eq!(&header.to_bytes()[..], &data[..HEADER_BYTES]);
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

    let keys = SessionKeys::from_split(&[1; 32], &[2; 32], false);
    let mut datagram = data.to_vec();
    let _ = open(&keys.open, &mut datagram);

    // A server and a client (handshaking) take the bytes as a datagram: whatever they
    // answer before authentication is no larger than what they received.
    let psk = Psk::from_file_contents(b"fuzzing key for the bond tunnel, 32+ bytes").unwrap();
    let mut server = Server::with_psk(
        ServerConfig::new(BondConfig::new(2), 4),
        &psk,
        Box::new(SeededEntropy(Rng::seed_from(1))),
    );
    let from = Address {
        remote: "198.18.0.1:4000".parse().unwrap(),
        local: None,
    };
    server.handle_datagram(Instant::ZERO, from, &mut data.to_vec());
    let mut buf = Vec::new();
    while server.poll_transmit(Instant::ZERO, &mut buf).is_some() {
        assert!(buf.len() <= data.len().max(HEADER_BYTES));
    }
    let mut entropy = SeededEntropy(Rng::seed_from(2));
    let keys = ClientKeys::from_psk(&psk, SecretKey::generate(&mut entropy));
    let mut client = Bond::client(BondConfig::new(2), keys, Box::new(entropy), Instant::ZERO, SIM_UNIX_START_NS);
    while client.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
    let _ = client.handle_datagram(Instant::ZERO, &mut data.to_vec());

    // The header decompressor, with the input cut at each 0xff into header-compressed
    // packets: a Full one stores a reference the ones after it may be compressed against.
    let mut decompressor = Decompressor::new(true);
    for packet in data.split(|&byte| byte == 0xff) {
        if let Ok(rebuilt) = decompressor.decompress(packet) {
            assert!(rebuilt.len() <= usize::from(u16::MAX));
        }
    }
    // The input as an inner packet: what the compressor codes decodes to it, first whole,
    // then (acknowledged) compressed against itself.
    let mut compressor = Compressor::new(CompressorConfig::default());
    let mut decompressor = Decompressor::new(true);
    let mut coded = Vec::new();
    let mut acks = Vec::new();
    for ms in [0, 50] {
        let now = Instant::ZERO + pathlab_core::Duration::from_millis(ms);
        if compressor.compress(now, data, &mut coded) {
            assert_eq!(decompressor.decompress(&coded).as_deref(), Ok(data));
        }
        decompressor.take_acks(16, &mut acks);
        for ack in &acks {
            compressor.handle_ack(now, *ack);
        }
    }

    // A peers file.
    if let Ok(peers) = PeerConfig::parse_file(data) {
        let _ = pathlab_bond::peers::AllowedIps::new(&peers);
    }
});
