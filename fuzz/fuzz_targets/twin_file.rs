//! Any text given to the twin file reader is accepted or refused, never a panic; an
//! accepted twin prints to a file that reads back and prints the same, and its specs
//! build links.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_core::Link;
use pathlab_twin::file::TwinFile;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(twin) = TwinFile::parse(&text) {
        let printed = twin.to_toml();
        let again = TwinFile::parse(&printed).expect("a printed twin reads back");
        assert_eq!(again.to_toml(), printed);
        for direction in [&twin.up, &twin.down] {
            // A trace the spec names is not loaded here: such a spec cannot build a link.
            let _ = Link::new(&direction.spec, 1);
        }
    }
});
