//! Specs as the emulator takes them: parsed, with the trace file they name loaded.

use pathlab_core::spec::{RateSpec, SpecError};
use pathlab_core::stage::rate::{Trace, TraceError};
use pathlab_core::LinkSpec;

/// Why a spec could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadSpecError {
    /// The text is not a valid spec.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The trace file it names cannot be read.
    #[error("cannot read trace file '{path}': {source}")]
    TraceFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The trace file is not a mahimahi trace.
    #[error("bad trace file '{path}': {source}")]
    Trace {
        /// The file.
        path: String,
        /// Why.
        source: TraceError,
    },
}

/// Parses a spec and loads the trace file it names, if any; the trace's path is made
/// absolute so the spec means the same to an emulator running elsewhere.
pub fn load_spec(text: &str) -> Result<LinkSpec, LoadSpecError> {
    let mut spec = LinkSpec::parse(text)?;
    if let Some(RateSpec::Trace(trace)) = &mut spec.rate {
        let contents =
            std::fs::read_to_string(&trace.path).map_err(|source| LoadSpecError::TraceFile {
                path: trace.path.clone(),
                source,
            })?;
        let parsed = Trace::parse(&contents).map_err(|source| LoadSpecError::Trace {
            path: trace.path.clone(),
            source,
        })?;
        if let Ok(absolute) = std::path::absolute(&trace.path) {
            trace.path = absolute.to_string_lossy().into_owned();
        }
        trace.trace = Some(std::sync::Arc::new(parsed));
    }
    Ok(spec)
}
