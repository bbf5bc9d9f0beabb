//! Any bytes given to the recording reader are read or rejected with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pathlab_results::recording::read_recording(data);
});
