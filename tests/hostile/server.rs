//! Issue 30, server.

#[allow(unused_imports)]
use super::util;
