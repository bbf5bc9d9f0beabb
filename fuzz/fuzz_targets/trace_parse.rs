//! Any text given to the mahimahi trace parser is accepted or rejected, never a panic; an
//! accepted trace drives a rate model without panicking.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use pathlab_core::spec::{RateSpec, TraceRef};
use pathlab_core::stage::rate::{RateModel, Trace};
use pathlab_core::Instant;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(trace) = Trace::parse(&text) {
        let spec = RateSpec::Trace(TraceRef {
            path: "fuzz".into(),
            trace: Some(Arc::new(trace)),
        });
        let mut model = RateModel::new(&spec).expect("loaded");
        let mut now = Instant::ZERO;
        for len in [64, 1514, 9000] {
            let start = model.next_start(now);
            now = model.transmit(start, len).max(now);
        }
    }
});
