//! The twin file: a TOML a person can read and change, one spec per direction in
//! pathlab's spec language (which the emulator runs) and the figures it was made from,
//! each with its 95% interval and how it was measured (which document it). A trace file
//! a spec names (`trace FILE`) lies beside the twin.
//!
//! ```toml
//! version = 1
//! host = "192.0.2.7"
//!
//! [up]
//! spec = "delay 19.8ms quantiles 0ms 120us 400us 2ms loss 0.5% rate 9900kbit limit 124146b"
//!
//! [up.figures]
//! base_delay_ms = { value = 19.96, low = 19.95, high = 19.97, how = "least one-way delay ..." }
//! loss_percent = { value = 0.5, low = 0.4, high = 0.6, how = "61 of 12000 packets lost ..." }
//! ```
//!
//! [`TwinFile::parse`] refuses a missing or malformed figure or spec with its line and
//! field; [`TwinFile::to_toml`] prints it back in that form.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pathlab_core::LinkSpec;
use serde::Deserialize;
use toml::Spanned;

use crate::figure::Figure;

/// A small twin, by hand: what the file looks like at least (the examples and tests
/// start from it).
pub const EXAMPLE: &str = r#"version = 1

[up]
spec = "delay 10ms quantiles 0 1ms 3ms loss 1%"

[up.figures]
base_delay_ms = { value = 10.0, low = 9.99, high = 10.01, how = "least delay" }
loss_percent = { value = 1.0, low = 0.8, high = 1.2, how = "counted" }

[down]
spec = "delay 10ms"

[down.figures]
base_delay_ms = { value = 10.0, low = 9.99, high = 10.01, how = "least delay" }
loss_percent = { value = 0, low = 0, high = 0.1, how = "counted" }
"#;

/// The largest twin file read (1 MiB): a twin is a few kilobytes.
pub const MAX_TWIN_BYTES: u64 = 1 << 20;

/// The version of the twin file this crate reads and writes.
pub const VERSION: u32 = 1;

/// The figures every direction has: measured without saturating anything.
pub const REQUIRED_FIGURES: [&str; 2] = ["base_delay_ms", "loss_percent"];

/// Every figure a twin may hold, with its unit in its name.
pub const KNOWN_FIGURES: [&str; 19] = [
    "base_delay_ms",
    "delay_variation_p50_ms",
    "delay_variation_p99_ms",
    "loss_percent",
    "loss_p_percent",
    "loss_r_percent",
    "loss_in_bad_percent",
    "loss_in_good_percent",
    "rate_mbit",
    "packet_rate_pps",
    "buffer_delay_ms",
    "buffer_bytes",
    "buffer_packets",
    "drop_onset_ms",
    "sparse_flow_delay_ms",
    "clock_drift_ppm",
    "tcp_goodput_mbit",
    "restart_from_percent",
    "restart_ramp_ms",
];

/// Why a twin file was refused: the line (1-based) and the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TwinError {
    /// Not TOML, or not the twin's shape (a field missing, of the wrong type, unknown).
    #[error("twin file line {line}: {message}")]
    Toml {
        /// Line of the fault.
        line: usize,
        /// What the TOML reader said.
        message: String,
    },
    /// A field that is there but wrong.
    #[error("twin file line {line}, {field}: {problem}")]
    Field {
        /// Line of the fault.
        line: usize,
        /// The field, dotted (`up.figures.rate_mbit`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// One direction of a twin.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionTwin {
    /// The spec the emulator runs for this direction.
    pub spec: LinkSpec,
    /// The figures, by name ([`KNOWN_FIGURES`]).
    pub figures: BTreeMap<String, Figure>,
}

/// A twin: what a path does, each way.
#[derive(Debug, Clone, PartialEq)]
pub struct TwinFile {
    /// The host measured, as given.
    pub host: Option<String>,
    /// From this host to the far one.
    pub up: DirectionTwin,
    /// From the far host to this one.
    pub down: DirectionTwin,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<u32>,
    #[serde(default)]
    host: Option<String>,
    up: Spanned<RawDirection>,
    down: Spanned<RawDirection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDirection {
    spec: Spanned<String>,
    figures: Spanned<BTreeMap<String, Spanned<Figure>>>,
}

/// The 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl TwinFile {
    /// Reads a twin file's text.
    pub fn parse(text: &str) -> Result<TwinFile, TwinError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| TwinError::Toml {
            line: e.span().map_or(1, |span| line_of(text, span.start)),
            message: e.message().trim().to_owned(),
        })?;
        if *raw.version.get_ref() != VERSION {
            return Err(TwinError::Field {
                line: line_of(text, raw.version.span().start),
                field: "version".into(),
                problem: format!(
                    "version {} is not one this pathlab reads (it reads {VERSION})",
                    raw.version.get_ref()
                ),
            });
        }
        Ok(TwinFile {
            host: raw.host,
            up: direction(text, "up", raw.up)?,
            down: direction(text, "down", raw.down)?,
        })
    }

    /// The file's text, as [`TwinFile::parse`] reads it.
    pub fn to_toml(&self) -> String {
        let mut text = format!(
            "# A pathlab twin: one spec per direction (what the emulator runs) and the\n\
             # figures it was made from, each with its 95% interval and how it was measured.\n\
             version = {VERSION}\n"
        );
        if let Some(host) = &self.host {
            let _ = writeln!(text, "host = {}", quoted(host));
        }
        for (name, direction) in [("up", &self.up), ("down", &self.down)] {
            let _ = writeln!(
                text,
                "\n[{name}]\nspec = {}",
                quoted(&direction.spec.to_string())
            );
            let _ = writeln!(text, "\n[{name}.figures]");
            for (figure, f) in &direction.figures {
                let _ = writeln!(
                    text,
                    "{figure} = {{ value = {}, low = {}, high = {}, how = {} }}",
                    number(f.value),
                    number(f.low),
                    number(f.high),
                    quoted(&f.how)
                );
            }
        }
        text
    }
}

impl DirectionTwin {
    /// The spec's text with a trace it names found beside the twin: a relative path is
    /// taken from `twin_dir`, the twin file's directory (the caller loads the trace).
    pub fn spec_beside(&self, twin_dir: &std::path::Path) -> String {
        let mut spec = self.spec.clone();
        if let Some(pathlab_core::spec::RateSpec::Trace(trace)) = &mut spec.rate {
            if std::path::Path::new(&trace.path).is_relative() {
                trace.path = twin_dir.join(&trace.path).to_string_lossy().into_owned();
            }
        }
        spec.to_string()
    }
}

/// A TOML float to six significant digits (a person reads it; the interval says how
/// many of them mean anything).
fn number(value: f64) -> String {
    let magnitude = if value == 0.0 {
        0
    } else {
        value.abs().log10().floor() as i32
    };
    let decimals = (5 - magnitude).clamp(1, 12) as usize;
    let text = format!("{value:.decimals$}");
    // Trailing zeros say nothing; one digit after the point keeps it a float.
    let trimmed = text.trim_end_matches('0');
    if trimmed.ends_with('.') {
        format!("{trimmed}0")
    } else {
        trimmed.to_owned()
    }
}

/// A TOML basic string.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

fn direction(
    text: &str,
    name: &str,
    raw: Spanned<RawDirection>,
) -> Result<DirectionTwin, TwinError> {
    let raw = raw.into_inner();
    let figures_line = line_of(text, raw.figures.span().start);
    let spec = LinkSpec::parse(raw.spec.get_ref()).map_err(|e| TwinError::Field {
        line: line_of(text, raw.spec.span().start),
        field: format!("{name}.spec"),
        problem: e.to_string(),
    })?;
    let mut figures = BTreeMap::new();
    for (figure, spanned) in raw.figures.into_inner() {
        let line = line_of(text, spanned.span().start);
        let field = format!("{name}.figures.{figure}");
        if !KNOWN_FIGURES.contains(&figure.as_str()) {
            return Err(TwinError::Field {
                line,
                field,
                problem: format!(
                    "not a figure of a twin; they are: {}",
                    KNOWN_FIGURES.join(", ")
                ),
            });
        }
        let f = spanned.into_inner();
        if let Some(problem) = malformed(&f) {
            return Err(TwinError::Field {
                line,
                field,
                problem,
            });
        }
        figures.insert(figure, f);
    }
    for required in REQUIRED_FIGURES {
        if !figures.contains_key(required) {
            return Err(TwinError::Field {
                line: figures_line,
                field: format!("{name}.figures.{required}"),
                problem: "missing: every direction has it".into(),
            });
        }
    }
    Ok(DirectionTwin { spec, figures })
}

/// What is wrong with a figure, if anything: numbers not finite, an interval that does not
/// hold the value, no word on how it was measured.
fn malformed(figure: &Figure) -> Option<String> {
    if ![figure.value, figure.low, figure.high]
        .iter()
        .all(|x| x.is_finite())
    {
        return Some("value, low and high must be finite numbers".into());
    }
    if !(figure.low <= figure.value && figure.value <= figure.high) {
        return Some(format!(
            "the interval [{}, {}] does not hold the value {}",
            figure.low, figure.high, figure.value
        ));
    }
    if figure.how.trim().is_empty() {
        return Some("'how' must say how it was measured".into());
    }
    None
}

#[cfg(test)]
mod tests;
