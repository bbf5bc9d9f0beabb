//! `pathlab lab export`'s writing: the lab's control token (kept when a valid one is
//! already in the output directory, so nodes running with it keep working), the engine's
//! topology and every node's config, into one directory. The writers of [`super::kne`] and
//! [`super::containerlab`] make the files; this writes them, secrets readable by their
//! owner only.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use pathlab_lab::sweep::PlannedRun;
use pathlab_os::files::{Dir, FileError};

use super::{containerlab, kne, Export, ExportError, ExportFile, TOKEN_FILE};

/// The engines a lab exports to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// KNE on Kubernetes: a text protobuf topology and a config per node.
    Kne,
    /// containerlab on one machine: a YAML topology and a config per node.
    Containerlab,
}

impl Engine {
    /// The command that starts the lab of `topology` (the topology file's path) on this
    /// engine, as the export tells the user.
    pub fn deploy_command(self, topology: &Path) -> String {
        match self {
            Engine::Kne => format!("kne create {}", topology.display()),
            Engine::Containerlab => format!("sudo containerlab deploy -t {}", topology.display()),
        }
    }
}

/// An export, as `pathlab lab export ENGINE` makes it.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// The engine to write for.
    pub engine: Engine,
    /// The lab: one sweep point, `--quick` applied.
    pub run: PlannedRun,
    /// Seed of the emulators' random choices.
    pub seed: u64,
    /// The container image every node runs.
    pub image: String,
    /// The directory to write into (created if missing).
    pub out: PathBuf,
}

/// What happened to the lab's control token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFate {
    /// The valid token already in the directory was kept.
    Kept,
    /// A new one was made and written (mode 0600).
    New,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The engine's topology file, in the output directory.
    pub topology: PathBuf,
    /// Every file written but the token, the topology first, then each node's config.
    pub files: Vec<String>,
    /// The command that starts the lab.
    pub deploy_command: String,
}

/// Why a write failed: making the file or writing to it.
#[derive(Debug, thiserror::Error)]
pub enum WriteFailure {
    /// Making the file in the directory.
    #[error(transparent)]
    File(#[from] FileError),
    /// Writing or renaming it.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Why an export was not written, or not whole.
#[derive(Debug, thiserror::Error)]
pub enum ExportWriteError {
    /// The lab cannot be exported as it is (names, image): nothing was written.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The token file already in the directory will not do: nothing was written.
    #[error(
        "the lab's control token, kept across exports, will not do (fix it, or remove it to \
         have a new one made)"
    )]
    KeptToken(#[source] pathlab_http::HttpServerError),
    /// The output directory could not be opened.
    #[error(transparent)]
    Dir(FileError),
    /// A file could not be written.
    #[error("writing {}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: WriteFailure,
    },
    /// Another step failed: looking for the token, making one, creating the directory.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

/// The lab's control token for an export into `out`.
enum LabToken {
    /// The valid token already in `out`, kept: nodes running with it must keep working.
    Kept(String),
    /// A new one, to write.
    New(String),
}

impl LabToken {
    fn text(&self) -> &str {
        match self {
            LabToken::Kept(token) | LabToken::New(token) => token,
        }
    }
}

/// The token in `out`'s token file if there is one (refused if it will not do, as `pathlab
/// node` would refuse it), else a new one; nothing is written here.
fn lab_token(out: &Path) -> Result<LabToken, ExportWriteError> {
    let path = out.join(TOKEN_FILE);
    match std::fs::symlink_metadata(&path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => pathlab_http::new_token()
            .map(LabToken::New)
            .map_err(|source| ExportWriteError::Io {
                context: "making a control token from the kernel's random bytes".to_owned(),
                source,
            }),
        Err(source) => Err(ExportWriteError::Io {
            context: format!("looking for {}", path.display()),
            source,
        }),
        Ok(_) => pathlab_http::read_token(&path)
            .map(LabToken::Kept)
            .map_err(ExportWriteError::KeptToken),
    }
}

/// Writes `file` into `out`. A secret one is written to a new file only its owner may read,
/// then renamed over the old one: whoever holds the old file open never reads the new one.
fn write_file(out: &Dir, file: &ExportFile) -> Result<(), ExportWriteError> {
    let path = out.path().join(&file.name);
    let written = if file.secret {
        let temporary = format!(".{}.new", file.name);
        let _ = std::fs::remove_file(out.path().join(&temporary));
        out.create_new(&temporary)
            .map_err(WriteFailure::from)
            .and_then(|mut new| Ok(new.write_all(file.contents.as_bytes())?))
            .and_then(|()| Ok(std::fs::rename(out.path().join(&temporary), &path)?))
    } else {
        std::fs::write(&path, &file.contents).map_err(WriteFailure::from)
    };
    written.map_err(|source| ExportWriteError::Write { path, source })
}

/// Writes the export of `config`: checks the lab and the token file already there before
/// anything is written, then writes the control token (unless a valid one is there; O_EXCL,
/// so a token file that appeared meanwhile is never replaced), tells `token` where it is and
/// whether it was kept, then writes the engine's topology and every node's config.
pub fn write(
    config: &ExportConfig,
    token: &mut dyn FnMut(TokenFate, &Path),
) -> Result<Exported, ExportWriteError> {
    let out = &config.out;
    let lab_token = lab_token(out)?;
    let export = Export::of(&config.run, config.seed, config.image.clone());
    let files = match config.engine {
        Engine::Kne => kne::files(&export, lab_token.text()),
        Engine::Containerlab => containerlab::files(&export),
    }?;
    // Bad input stops above, before anything is written.
    std::fs::create_dir_all(out).map_err(|source| ExportWriteError::Io {
        context: format!("creating {}", out.display()),
        source,
    })?;
    let dir = Dir::open(out).map_err(ExportWriteError::Dir)?;
    let token_path = out.join(TOKEN_FILE);
    match &lab_token {
        LabToken::New(text) => {
            dir.create_new(TOKEN_FILE)
                .map_err(WriteFailure::from)
                .and_then(|mut file| Ok(file.write_all(format!("{text}\n").as_bytes())?))
                .map_err(|source| ExportWriteError::Write {
                    path: token_path.clone(),
                    source,
                })?;
            token(TokenFate::New, &token_path);
        }
        LabToken::Kept(_) => token(TokenFate::Kept, &token_path),
    }
    for file in &files {
        write_file(&dir, file)?;
    }
    let topology = out.join(&files[0].name);
    Ok(Exported {
        deploy_command: config.engine.deploy_command(&topology),
        topology,
        files: files.into_iter().map(|file| file.name).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_lab::sweep::ExperimentSource;
    use std::os::unix::fs::PermissionsExt as _;

    /// A fresh directory under the system's temporary one, removed on drop.
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn config(out: &Path) -> ExportConfig {
        let run = ExperimentSource::read("bufferbloat")
            .unwrap()
            .point(true, Some(1))
            .unwrap();
        ExportConfig {
            engine: Engine::Containerlab,
            run,
            seed: 1,
            image: crate::export::DEFAULT_IMAGE.to_owned(),
            out: out.to_owned(),
        }
    }

    #[test]
    fn a_new_token_is_written_once_and_kept_by_the_next_export() {
        let dir = TempDir(
            std::env::temp_dir().join(format!("pathlab-export-save-{}", std::process::id())),
        );
        let out = dir.0.join("out");
        let config = config(&out);
        let mut fates = Vec::new();
        let exported = write(&config, &mut |fate, path| {
            fates.push((fate, path.to_owned()));
        })
        .expect("exports");
        let token_path = out.join(TOKEN_FILE);
        assert_eq!(fates, [(TokenFate::New, token_path.clone())]);
        assert_eq!(exported.files[0], "bufferbloat.clab.yml");
        assert_eq!(
            exported.files.len(),
            1 + 3,
            "the topology and a config per node"
        );
        assert_eq!(exported.topology, out.join("bufferbloat.clab.yml"));
        assert_eq!(
            exported.deploy_command,
            format!(
                "sudo containerlab deploy -t {}",
                exported.topology.display()
            )
        );
        let token = std::fs::read_to_string(&token_path).unwrap();
        let mode = std::fs::metadata(&token_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        fates.clear();
        write(&config, &mut |fate, path| {
            fates.push((fate, path.to_owned()));
        })
        .expect("again");
        assert_eq!(fates, [(TokenFate::Kept, token_path.clone())]);
        assert_eq!(std::fs::read_to_string(&token_path).unwrap(), token);

        // A token file that will not do is refused before anything is written.
        std::fs::write(&token_path, "short\n").unwrap();
        std::fs::remove_file(&exported.topology).unwrap();
        let error = write(&config, &mut |_, _| panic!("nothing is written")).unwrap_err();
        assert!(matches!(error, ExportWriteError::KeptToken(_)), "{error}");
        assert!(!exported.topology.exists());
    }
}
