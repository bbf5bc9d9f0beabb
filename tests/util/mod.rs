//! Helpers shared by the end-to-end tests.

#![allow(dead_code)] // each test crate uses a different part

use std::path::PathBuf;

pub mod emulated;
pub mod lab_fixture;

/// A scratch directory removed when the test ends.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("pathlab-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("can create a temp dir");
        TempDir(dir)
    }

    pub fn root(&self) -> &std::path::Path {
        &self.0
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
