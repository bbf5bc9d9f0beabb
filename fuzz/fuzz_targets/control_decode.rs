//! Any byte stream given to the control frame reader and decoder, and to both ends of the
//! dialogue, yields messages or typed errors, never a panic, and never a frame larger than
//! the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_probe::auth::Key;
use pathlab_probe::control::{decode, decode_welcome, FrameReader, Limits, MAX_FRAME};
use pathlab_probe::session::{ClientSession, ServerPolicy, ServerSession};

fuzz_target!(|data: &[u8]| {
    let mut reader = FrameReader::default();
    reader.push(data);
    while let Ok(Some(frame)) = reader.next_frame() {
        assert!(frame.len() <= MAX_FRAME);
        let _ = decode(&frame, None);
    }
    let _ = decode(data, None);
    let key = Key::from_file_contents(b"0123456789abcdef").ok();
    let _ = decode_welcome(data, key.as_ref(), [1; 16]);
    let now = pathlab_core::Instant::ZERO;
    let peer = std::net::IpAddr::from([198, 18, 0, 1]);
    let policy = ServerPolicy {
        limits: Limits {
            max_rate_bps: 1_000_000,
            max_duration_ns: 1_000_000_000,
            max_tests: 1,
            max_test_memory: 1 << 20,
        },
        key: key.clone(),
        software: String::new(),
        congestion_allowed: vec!["reno".into()],
    };
    let mut server = ServerSession::new(now, policy, peer, [2; 16]);
    let mut client = ClientSession::new(now, key, peer, [1; 16], String::new());
    server.handle_control(now, data);
    client.handle_control(now, data);
    while server.poll_event().is_some() {}
    while client.poll_event().is_some() {}
});
