//! pathlab-results: versioned result files.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
