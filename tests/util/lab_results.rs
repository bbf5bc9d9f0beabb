//! Reading a lab run's results: a spec run under a name of its own, a command workload's
//! final JSON, a TCP workload's goodput (the bond tests share them).

use std::path::Path;

use super::emulated::run_quick_recipe;
use super::TempDir;

/// Runs the lab spec `text` (its `NAME` replaced by a name unique to this test process, so
/// the tunnels' stats sockets do not meet another run's) from `dir`, output in `out`.
pub fn run_spec(dir: &TempDir, text: &str, out: &Path) -> String {
    let name = format!("t{}", std::process::id());
    let spec = dir.path("spec.toml");
    std::fs::write(&spec, text.replace("NAME", &name)).unwrap();
    run_quick_recipe(spec.to_str().unwrap(), out);
    name
}

/// A `command` workload's JSON output.
pub fn json_out(out: &Path, workload: &str) -> serde_json::Value {
    let path = out.join(format!("{workload}.out"));
    let text = std::fs::read_to_string(&path).expect("the workload wrote its output");
    // `pathlab bond` prints its events before the final JSON.
    let json = &text[text
        .find('{')
        .unwrap_or_else(|| panic!("{}: {text}", path.display()))..];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

/// A lab workload's result (`result.json`).
pub fn lab_outcome(out: &Path, workload: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("result.json")).expect("the lab wrote a result");
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let found = value["result"]["data"]["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == workload)
        .unwrap_or_else(|| panic!("no workload {workload}"))
        .clone();
    assert_ne!(
        found["outcome"]["kind"], "failed",
        "{workload}: {}",
        found["outcome"]
    );
    found
}

/// Mean goodput (Mbit/s) of a lab `tcp` workload over the intervals that lie within
/// `[from_s, to_s)` of its start.
pub fn lab_goodput(out: &Path, workload: &str, from_s: f64, to_s: f64) -> f64 {
    let data = &lab_outcome(out, workload)["outcome"]["data"];
    let interval_s = data["interval_ns"].as_f64().expect("the interval") / 1e9;
    let within: Vec<f64> = lab_intervals(out, workload)
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| {
            let start = i as f64 * interval_s;
            start >= from_s - 1e-9 && start + interval_s <= to_s + 1e-9
        })
        .map(|(_, mbps)| mbps)
        .collect();
    assert!(
        !within.is_empty(),
        "{workload}: no interval in [{from_s}, {to_s}) s"
    );
    within.iter().sum::<f64>() / within.len() as f64
}

/// Goodput per interval (Mbit/s) of a lab `tcp` workload's upward stream.
pub fn lab_intervals(out: &Path, workload: &str) -> Vec<f64> {
    let data = &lab_outcome(out, workload)["outcome"]["data"];
    let interval_s = data["interval_ns"].as_f64().expect("the interval") / 1e9;
    data["up"][0]["interval_bytes"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|b| b.as_f64().unwrap() * 8.0 / interval_s / 1e6)
        .collect()
}
