//! Any text given to the experiment spec reader (sweep expansion, then parsing and every
//! check) either fails with an error naming a line inside the text or gives an experiment
//! whose quick form keeps every time within the run. It never panics, whether a link's
//! `twin = FILE` is refused (a spec from no file) or read (here, as a fixed pair of specs).
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
    let twin = |_: &str| {
        let spec = |text: &str| pathlab_core::spec::LinkSpec::parse(text).map_err(|e| e.to_string());
        Ok((spec("delay 10ms rate 2mbit")?, spec("delay 5ms")?))
    };
    let parsed = points.iter().take(4).flat_map(|point| {
        [Experiment::parse(&point.text), Experiment::parse_with(&point.text, &twin)]
    });
    for parsed in parsed {
        match parsed {
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
