//! The spec parser (netem syntax plus pathlab's additions).

use super::LinkSpec;

/// Why a link specification was rejected; every message names the token at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A keyword pathlab does not know.
    #[error("unknown keyword '{0}'")]
    UnknownKeyword(String),
}

pub(super) fn parse(text: &str) -> Result<LinkSpec, SpecError> {
    match text.split_whitespace().next() {
        None => Ok(LinkSpec::default()),
        Some(word) => Err(SpecError::UnknownKeyword(word.to_owned())),
    }
}
