//! Any byte stream given to the control frame reader and decoder yields messages or typed
//! errors, never a panic, and never a frame larger than the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_probe::control::{decode, FrameReader, MAX_FRAME};

fuzz_target!(|data: &[u8]| {
    let mut reader = FrameReader::default();
    reader.push(data);
    while let Ok(Some(frame)) = reader.next_frame() {
        assert!(frame.len() <= MAX_FRAME);
        let _ = decode(&frame, None);
    }
    let _ = decode(data, None);
});
