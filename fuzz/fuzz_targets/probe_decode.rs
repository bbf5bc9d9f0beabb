//! Any datagram given to the probe decoder (with or without a key) is a probe or a typed
//! error, never a panic; a decoded request can be reflected without changing its length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_probe::auth::Key;
use pathlab_probe::probe::{decode, reflect, ProbeKind, Reflection};

fuzz_target!(|data: &[u8]| {
    let key = Key::from_file_contents(b"fuzzing key, 16+ bytes").unwrap();
    for key in [None, Some(&key)] {
        if let Ok(probe) = decode(data, key) {
            if probe.kind == ProbeKind::Request {
                let mut copy = data.to_vec();
                reflect(&mut copy, Reflection::default(), key, key).expect("a decoded request reflects");
                assert_eq!(copy.len(), data.len());
            }
        }
    }
});
