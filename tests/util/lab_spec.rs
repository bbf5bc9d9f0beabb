//! A lab spec (docs/lab.md) for a test, written table by table instead of as escaped TOML:
//! `name` and `duration` first, then nodes, links and workloads, one `key = value` a line
//! (so a test can name the line a refusal points at).

use std::fmt::Write as _;

/// The spec's text so far.
pub struct LabSpec(String);

impl LabSpec {
    /// `name = NAME`, `duration = DURATION`.
    pub fn new(name: &str, duration: &str) -> LabSpec {
        LabSpec(String::new())
            .with("name", name)
            .with("duration", duration)
    }

    /// `[[node]]` named `name`.
    pub fn node(self, name: &str) -> LabSpec {
        self.table("node").with("name", name)
    }

    /// `[[node]]` named `name`, a router.
    pub fn router(self, name: &str) -> LabSpec {
        self.node(name).with("kind", "router")
    }

    /// `[[link]]` between `a` and `b` (its spec, if any, with [`LabSpec::with`]).
    pub fn link(mut self, a: &str, b: &str) -> LabSpec {
        self = self.table("link");
        writeln!(self.0, "between = [{}, {}]", quoted(a), quoted(b)).unwrap();
        self
    }

    /// `[[workload]]` `name` of `kind` from node `from` to node `to`.
    pub fn workload(self, name: &str, kind: &str, from: &str, to: &str) -> LabSpec {
        self.table("workload")
            .with("name", name)
            .with("kind", kind)
            .with("from", from)
            .with("to", to)
    }

    /// `key = "value"` in the table last begun (at the top before any).
    pub fn with(mut self, key: &str, value: &str) -> LabSpec {
        writeln!(self.0, "{key} = {}", quoted(value)).unwrap();
        self
    }

    /// `key = number` in the table last begun.
    pub fn with_number(mut self, key: &str, value: u64) -> LabSpec {
        writeln!(self.0, "{key} = {value}").unwrap();
        self
    }

    fn table(mut self, kind: &str) -> LabSpec {
        writeln!(self.0, "[[{kind}]]").unwrap();
        self
    }

    /// The TOML text.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// Writes the text to `path`.
    pub fn write(&self, path: &std::path::Path) {
        std::fs::write(path, &self.0).expect("writes the lab spec");
    }
}

/// A TOML basic string of `value` (the tests' values hold no control characters).
fn quoted(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}
