//! What a node sends `pathlab lab collect` (its status, its result, its recordings) and
//! what a collector sends a node (the order to start) is outside input to the other: any
//! bytes are refused with an error or read within the bounds of the node's config, never
//! a panic. A status or result read back matches the config it was checked against, and
//! its start is checked against any ordered instant without overflow; two recordings are
//! merged (a line at a time, as collect streams them from disk) or refused.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pathlab_engines::collect::merge_recordings;
use pathlab_engines::export::node::{LabSettings, NodeConfig};
use pathlab_engines::node::wire::{NodeResult, NodeStatus, StartRequest};

/// h1 of the bufferbloat recipe's first run: a node with a link and workloads.
fn config() -> &'static NodeConfig {
    static CONFIG: OnceLock<NodeConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let text = pathlab_lab::recipes::recipe("bufferbloat").expect("a recipe");
        let point = pathlab_lab::spec::expand(text, true).expect("expands").remove(0);
        let experiment = pathlab_lab::spec::Experiment::parse(&point.text)
            .expect("parses")
            .quick();
        let settings = LabSettings {
            point: None,
            seed: 1,
            control: "0.0.0.0:8080".parse().expect("an address"),
        };
        NodeConfig::for_node(&experiment, 0, &settings).expect("a config")
    })
}

fuzz_target!(|data: &[u8]| {
    let config = config();
    let _ = StartRequest::parse(data, 1_800_000_000_000_000_000);
    if let Ok(status) = NodeStatus::parse(data, config, "0") {
        assert_eq!(status.node, config.node);
        assert!(status.underlay.len() <= config.interfaces.len());
    }
    if let Ok(result) = NodeResult::parse(data, config) {
        assert_eq!(result.node, config.node);
        assert!(result.links.len() <= config.interfaces.len());
        for ordered in [0, 1_800_000_000_000_000_000, u64::MAX] {
            let _ = result.check_start(ordered);
        }
    }
    let half = data.len() / 2;
    let mut merged = Vec::new();
    let _ = merge_recordings(&data[..half], &data[half..], &mut merged);
});
