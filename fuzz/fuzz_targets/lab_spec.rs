//! Any text given to the experiment spec reader (sweep expansion, then parsing and every
//! check) either fails with an error naming a line inside the text or gives an experiment
//! whose quick form keeps every time within the run. It never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_lab::spec::{expand, Experiment};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.lines().count().max(1);
    let points = match expand(&text, false) {
        Ok(points) => points,
        Err(error) => {
            assert!(error.line >= 1 && error.line <= lines + 1, "{error}");
            return;
        }
    };
    for point in points.iter().take(4) {
        match Experiment::parse(&point.text) {
            Ok(experiment) => {
                let quick = experiment.quick();
                for workload in &quick.workloads {
                    assert!(workload.start + workload.duration <= quick.duration + std::time::Duration::from_micros(1));
                }
            }
            Err(error) => assert!(error.line >= 1, "{error}"),
        }
    }
});
