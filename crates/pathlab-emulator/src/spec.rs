//! Specs as the emulator takes them: parsed, with the trace file they name loaded.
//!
//! Two callers, two rules. The command line and the control socket (whose peer is root or
//! the emulator's own user) name a trace by its path, as they could read it themselves:
//! [`load_spec`]. A client of the HTTP API may be anyone holding the token, so its specs
//! name a trace by a plain file name inside the directory given at start with
//! `--trace-dir`, and nothing else: [`load_spec_in`]; its errors say which line of the
//! trace is wrong and how, never what the line holds. Both read a trace as
//! [`pathlab_os::files`] reads: a regular file only (a FIFO or a device is refused at
//! once, never waited on), at most [`MAX_TRACE_BYTES`].

use pathlab_core::spec::{RateSpec, SpecError};
use pathlab_core::stage::rate::{Trace, TraceError};
use pathlab_core::LinkSpec;
use pathlab_os::files::{Dir, FileError};

/// The largest trace file read. A line is a delivery opportunity of one 1500-byte frame,
/// a few bytes long: 8 MiB holds over a million, minutes of a gigabit link, far beyond
/// mahimahi's recorded cellular traces (under 1 MB), and the parsed trace stays a few
/// tens of MB at the most.
pub const MAX_TRACE_BYTES: u64 = 8 * 1024 * 1024;

/// Why a spec could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadSpecError {
    /// The text is not a valid spec.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The trace file it names cannot be read (or is no regular file, or too large).
    #[error("cannot read trace file: {0}")]
    TraceFile(FileError),
    /// The trace file is not a mahimahi trace.
    #[error("bad trace file '{path}': {source}")]
    Trace {
        /// The file.
        path: String,
        /// Why.
        source: TraceError,
    },
    /// The trace file named over the API is not a mahimahi trace: the line and the
    /// problem, without the line's text.
    #[error("bad trace file '{name}': {problem}")]
    TraceInDir {
        /// The name as the spec gave it.
        name: String,
        /// What is wrong, without what the file holds.
        problem: String,
    },
    /// A spec over the API names a trace, and the emulator was started without
    /// `--trace-dir`.
    #[error(
        "this emulator reads no trace files for the API: start it with --trace-dir DIR and \
         name a file of DIR"
    )]
    NoTraceDir,
}

impl LoadSpecError {
    /// Whether the client named a file it may not (as opposed to a spec or a trace that is
    /// wrong): the API answers 403 to that, 400 to the rest.
    pub fn is_forbidden(&self) -> bool {
        matches!(
            self,
            LoadSpecError::NoTraceDir | LoadSpecError::TraceFile(FileError::NotAName { .. })
        )
    }
}

/// Parses a spec and loads the trace file it names by its path, if any; the trace's path
/// is made absolute so the spec means the same to an emulator running elsewhere. For specs
/// of the command line and the control socket.
pub fn load_spec(text: &str) -> Result<LinkSpec, LoadSpecError> {
    let mut spec = LinkSpec::parse(text)?;
    load_trace(&mut spec)?;
    Ok(spec)
}

/// Loads the trace file a parsed spec names by its path, if it names one not loaded yet
/// (a lab's link spec, parsed with its experiment, which reads no file); the path is made
/// absolute as [`load_spec`] makes it.
pub fn load_trace(spec: &mut LinkSpec) -> Result<(), LoadSpecError> {
    if let Some(RateSpec::Trace(trace)) = &mut spec.rate {
        if trace.trace.is_some() {
            return Ok(());
        }
        let bytes = pathlab_os::files::read_regular(trace.path.as_ref(), MAX_TRACE_BYTES)
            .map_err(LoadSpecError::TraceFile)?;
        let parsed = Trace::parse(&String::from_utf8_lossy(&bytes)).map_err(|source| {
            LoadSpecError::Trace {
                path: trace.path.clone(),
                source,
            }
        })?;
        if let Ok(absolute) = std::path::absolute(&trace.path) {
            trace.path = absolute.to_string_lossy().into_owned();
        }
        trace.trace = Some(std::sync::Arc::new(parsed));
    }
    Ok(())
}

/// Parses a spec that came over the API: a trace it names must be a plain file name
/// inside `traces` (`--trace-dir`; none: no trace may be named), is read from there, and
/// keeps its name as given, so the spec reads back as it was sent. Errors never quote the
/// file.
pub fn load_spec_in(text: &str, traces: Option<&Dir>) -> Result<LinkSpec, LoadSpecError> {
    let mut spec = LinkSpec::parse(text)?;
    if let Some(RateSpec::Trace(trace)) = &mut spec.rate {
        let dir = traces.ok_or(LoadSpecError::NoTraceDir)?;
        let bytes = dir
            .read(&trace.path, MAX_TRACE_BYTES)
            .map_err(LoadSpecError::TraceFile)?;
        let parsed = Trace::parse(&String::from_utf8_lossy(&bytes)).map_err(|source| {
            LoadSpecError::TraceInDir {
                name: trace.path.clone(),
                problem: source.without_contents(),
            }
        })?;
        trace.trace = Some(std::sync::Arc::new(parsed));
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    use pathlab_os::testing::ScratchDir;

    #[test]
    fn an_api_spec_names_a_trace_of_the_trace_dir_and_nothing_else() {
        let traces = ScratchDir::new("traces-names");
        std::fs::write(traces.path("ok.trace"), "1\n2\n3\n").unwrap();
        std::fs::write(traces.path("secret"), "THE FIRST LINE\n").unwrap();
        let dir = Dir::open(traces.root()).unwrap();
        let spec = load_spec_in("trace ok.trace", Some(&dir)).unwrap();
        assert_eq!(spec.to_string(), "trace ok.trace", "reads back as sent");
        for path in [
            "/etc/passwd".to_owned(),
            "../x".to_owned(),
            "..".to_owned(),
            traces.path("ok.trace").display().to_string(),
        ] {
            let error = load_spec_in(&format!("trace {path}"), Some(&dir)).unwrap_err();
            assert!(error.is_forbidden(), "{path}: {error}");
        }
        let error = load_spec_in("trace ok.trace", None).unwrap_err();
        assert!(matches!(error, LoadSpecError::NoTraceDir) && error.is_forbidden());
        let error = load_spec_in("trace secret", Some(&dir)).unwrap_err();
        let text = error.to_string();
        assert!(!error.is_forbidden());
        assert!(text.contains("line 1") && !text.contains("FIRST"), "{text}");
        // A spec without a trace needs no directory.
        assert!(load_spec_in("delay 10ms", None).is_ok());
    }

    /// Regression: a lab's link spec is parsed with its experiment, which reads no file,
    /// so a twin whose rate is a trace (`trace NAME-up.trace`, beside the twin) made
    /// `twin check` and `lab` fail with "trace ... was not loaded" until the lab loaded it
    /// when starting the link's emulator.
    #[test]
    fn a_parsed_spec_s_trace_is_loaded_once_and_the_link_then_builds() {
        let traces = ScratchDir::new("traces-parsed");
        std::fs::write(traces.path("up.trace"), "1\n2\n3\n").unwrap();
        let text = format!("delay 5ms trace {}", traces.path("up.trace").display());
        let mut spec = LinkSpec::parse(&text).unwrap();
        assert!(pathlab_core::Link::new(&spec, 1).is_err(), "not loaded yet");
        load_trace(&mut spec).unwrap();
        assert!(pathlab_core::Link::new(&spec, 1).is_ok());
        assert_eq!(
            spec,
            load_spec(&text).unwrap(),
            "as the command line loads it"
        );
        // Loaded, it is not read again: the file may go.
        std::fs::remove_file(traces.path("up.trace")).unwrap();
        assert!(load_trace(&mut spec).is_ok());
        let mut plain = LinkSpec::parse("delay 5ms rate 10mbit").unwrap();
        load_trace(&mut plain).unwrap();
    }

    #[test]
    fn a_trace_is_a_bounded_regular_file() {
        let traces = ScratchDir::new("traces-bounded");
        let big = traces.path("big.trace");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(MAX_TRACE_BYTES + 1).unwrap();
        let dir = Dir::open(traces.root()).unwrap();
        assert!(matches!(
            load_spec_in("trace big.trace", Some(&dir)),
            Err(LoadSpecError::TraceFile(FileError::TooLarge { .. }))
        ));
        assert!(matches!(
            load_spec("trace /dev/zero"),
            Err(LoadSpecError::TraceFile(FileError::NotRegular { .. }))
        ));
    }
}
