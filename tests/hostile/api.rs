//! Issue 30, api.

#[allow(unused_imports)]
use super::util;
