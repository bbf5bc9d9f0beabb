//! Any text given to the spec parser either fails with an error or parses to a spec whose
//! canonical form parses back to the same canonical form. It never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_core::LinkSpec;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(spec) = LinkSpec::parse(&text) {
        let canonical = spec.to_string();
        let again = LinkSpec::parse(&canonical).expect("the canonical form parses");
        assert_eq!(again.to_string(), canonical);
    }
});
