//! `pathlab lab export`'s writing: the lab's credentials ([`super::credentials`]: the CA
//! and the nodes' tokens kept when already in the output directory, so nodes running with
//! them keep working), the engine's topology and every node's config, into one directory.
//! The writers of [`super::kne`] and [`super::containerlab`] make the files; this writes
//! them, secrets (keys, tokens) readable by their owner only, each new one with O_EXCL.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use pathlab_lab::sweep::PlannedRun;
use pathlab_os::files::{Dir, FileError};

use super::credentials::{self, CredentialError, LabCredentials, CA_CERT_FILE, CA_KEY_FILE};
use super::{containerlab, kne, Export, ExportError, ExportFile};

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

/// What an export kept of the lab's credentials already in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// The lab CA (its key and certificate).
    pub ca: bool,
    /// How many nodes' tokens.
    pub tokens: usize,
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
    /// What of the credentials was kept.
    pub kept: Kept,
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
    /// The credentials already in the directory will not do, or new ones could not be
    /// made: nothing was written.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
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
        out.write_file(&file.name, file.contents.as_bytes())
            .map_err(WriteFailure::from)
    };
    written.map_err(|source| ExportWriteError::Write { path, source })
}

/// The credentials' files: the CA's (when new), each node's token (when new), key and
/// certificate.
fn credential_files(credentials: &LabCredentials) -> Vec<ExportFile> {
    let mut files = Vec::new();
    if let Some(key) = &credentials.ca_key_pem {
        files.push(ExportFile {
            name: CA_KEY_FILE.to_owned(),
            contents: key.clone(),
            secret: true,
        });
        files.push(ExportFile {
            name: CA_CERT_FILE.to_owned(),
            contents: credentials.ca_cert_pem.clone(),
            secret: false,
        });
    }
    for (node, kept) in credentials.nodes.iter().zip(&credentials.kept_tokens) {
        if !kept {
            files.push(ExportFile {
                name: credentials::token_file(&node.node),
                contents: format!("{}\n", node.token),
                secret: true,
            });
        }
        files.push(ExportFile {
            name: credentials::key_file(&node.node),
            contents: node.key_pem.clone(),
            secret: true,
        });
        files.push(ExportFile {
            name: credentials::cert_file(&node.node),
            contents: node.cert_pem.clone(),
            secret: false,
        });
    }
    files
}

/// Writes the export of `config`: checks the lab and the credentials already there before
/// anything is written, then writes the credentials (new ones only where none will do),
/// the engine's topology and every node's config.
pub fn write(config: &ExportConfig) -> Result<Exported, ExportWriteError> {
    let out = &config.out;
    let export = Export::of(&config.run, config.seed, config.image.clone());
    let files_with = |nodes: &[credentials::NodeCredentials]| match config.engine {
        Engine::Kne => kne::files(&export, nodes),
        Engine::Containerlab => containerlab::files(&export),
    };
    // The names and the image are checked (the engine's writer says what is wrong) before
    // credentials are made for the nodes.
    files_with(&[])?;
    let nodes = config.run.experiment.node_names();
    let credentials = credentials::make(out, &nodes)?;
    let files = files_with(&credentials.nodes)?;
    // Bad input stops above, before anything is written.
    // Made, or one no one else can change: every file written there is one this made.
    let dir = Dir::output(out).map_err(ExportWriteError::Dir)?;
    for file in credential_files(&credentials).iter().chain(&files) {
        write_file(&dir, file)?;
    }
    let topology = out.join(&files[0].name);
    Ok(Exported {
        deploy_command: config.engine.deploy_command(&topology),
        topology,
        files: files.into_iter().map(|file| file.name).collect(),
        kept: Kept {
            ca: credentials.ca_key_pem.is_none(),
            tokens: credentials.kept_tokens.iter().filter(|k| **k).count(),
        },
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

    /// The test's scratch directory, unique to it.
    fn scratch(name: &str) -> TempDir {
        TempDir(std::env::temp_dir().join(format!("pathlab-{name}-{}", std::process::id())))
    }

    #[test]
    fn each_node_gets_its_own_token_key_and_certificate_the_ca_key_stays_and_is_kept() {
        let dir = scratch("export-save");
        let out = dir.0.join("out");
        let config = config(&out);
        let exported = write(&config).expect("exports");
        assert_eq!(
            exported.kept,
            Kept {
                ca: false,
                tokens: 0
            }
        );
        assert_eq!(exported.files[0], "bufferbloat.clab.yml");
        assert_eq!(
            exported.files.len(),
            1 + 3,
            "the topology and a config per node"
        );
        assert_eq!(
            exported.deploy_command,
            format!(
                "sudo containerlab deploy -t {}",
                exported.topology.display()
            )
        );
        let mode = |name: &str| {
            std::fs::metadata(out.join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(CA_KEY_FILE), 0o600);
        let nodes = ["h1", "r1", "h2"];
        let mut tokens = Vec::new();
        for node in nodes {
            assert_eq!(mode(&credentials::token_file(node)), 0o600, "{node}");
            assert_eq!(mode(&credentials::key_file(node)), 0o600, "{node}");
            tokens
                .push(pathlab_http::read_token(&out.join(credentials::token_file(node))).unwrap());
        }
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), nodes.len(), "one token per node");
        // The CA's key is mounted in no container.
        let topology = std::fs::read_to_string(&exported.topology).unwrap();
        assert!(!topology.contains(CA_KEY_FILE), "{topology}");
        let ca_key = std::fs::read(out.join(CA_KEY_FILE)).unwrap();
        let h1_token = std::fs::read(out.join(credentials::token_file("h1"))).unwrap();

        let again = write(&config).expect("again");
        assert_eq!(
            again.kept,
            Kept {
                ca: true,
                tokens: 3
            }
        );
        assert_eq!(std::fs::read(out.join(CA_KEY_FILE)).unwrap(), ca_key);
        assert_eq!(
            std::fs::read(out.join(credentials::token_file("h1"))).unwrap(),
            h1_token
        );

        // A token file that will not do is refused before anything is written.
        std::fs::write(out.join(credentials::token_file("r1")), "short\n").unwrap();
        std::fs::remove_file(&exported.topology).unwrap();
        let error = write(&config).unwrap_err();
        assert!(matches!(error, ExportWriteError::Credentials(_)), "{error}");
        assert!(error.to_string().contains("r1.token"), "{error}");
        assert!(!exported.topology.exists());
    }
}
