//! Any bytes given to the capture reader and the TCP analysis are read or rejected with an
//! error, never a panic: pcap and pcapng headers, blocks, link layers, IP and TCP headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_diagnose::tcpflow::{analyze_capture, AnalyzerConfig};

fuzz_target!(|data: &[u8]| {
    let _ = analyze_capture(
        data,
        AnalyzerConfig {
            bottleneck_bps: Some(1e7),
            ..AnalyzerConfig::default()
        },
    );
});
