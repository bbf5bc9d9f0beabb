//! Issue 30, local.

#[allow(unused_imports)]
use super::util;
