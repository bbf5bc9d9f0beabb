//! Any text given to the node config reader (`pathlab node CONFIG`'s input) is either
//! refused with an error or gives a config that writes itself back as text reading as the
//! same config. It never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_engines::export::node::NodeConfig;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = NodeConfig::parse(&text) {
        let written = config.to_toml();
        let again = NodeConfig::parse(&written)
            .unwrap_or_else(|e| panic!("a config read back is refused: {e}\n{written}"));
        assert_eq!(again, config);
    }
});
