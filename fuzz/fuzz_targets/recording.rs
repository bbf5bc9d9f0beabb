//! Any bytes given to the recording reader are read or rejected with an error, never a
//! panic; and a recording read is turned into a report's series as `pathlab report` does,
//! in bounded memory whatever its timestamps say (issue 30: the delivered rate's intervals
//! once came from them unbounded).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_results::lab::LabRun;
use pathlab_results::recording::read_recording;
use pathlab_results::series::link_series;

fuzz_target!(|data: &[u8]| {
    let Ok(recording) = read_recording(data) else {
        return;
    };
    let run = LabRun {
        name: "fuzz".into(),
        description: String::new(),
        spec: String::new(),
        kernel: String::new(),
        started_unix_ns: recording
            .header
            .as_ref()
            .map_or(0, |h| h.clock_zero_unix_ns),
        duration_ns: 1_000_000_000,
        interrupted: false,
        parameters: Vec::new(),
        links: Vec::new(),
        workloads: Vec::new(),
        scheduling: None,
    };
    let _ = link_series(&run, "a-b", &recording);
});
