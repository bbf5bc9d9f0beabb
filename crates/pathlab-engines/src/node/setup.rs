//! What `pathlab node` is given before it plays its part: its config file read and
//! checked ([`load_config`]), its control token ([`control_token`]), its certificate and
//! key ([`tls_identity`]), and the run they make ([`NodeRunConfig`], [`serve`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use pathlab_http::{HttpServer, HttpServerError, TokenProblem};

use super::wire::{sha256_hex, NodeResult};
use super::{NodeError, NodeOptions};
use crate::export::node::{NodeConfig, NodeConfigError, MAX_TEXT_BYTES};
use crate::export::{TLS_CERT_ENV, TLS_KEY_ENV, TOKEN_ENV};

/// Why a node's config file is not one.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read '{}'", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than any config the export writes.
    #[error("{}: over {MAX_TEXT_BYTES} bytes", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not UTF-8.
    #[error("{}: not UTF-8 text", .path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// The text is not a node's config.
    #[error("{}: {error}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        error: NodeConfigError,
    },
}

/// Reads and checks the node's config at `path`, as `pathlab lab export` wrote it.
pub fn load_config(path: &Path) -> Result<NodeConfig, LoadError> {
    // Read with a bound, and only a regular file: `/dev/zero` or a FIFO is refused, not
    // read without end before its size is known.
    let bytes =
        pathlab_os::files::read_regular(path, MAX_TEXT_BYTES as u64).map_err(
            |error| match error {
                pathlab_os::files::FileError::TooLarge { .. } => LoadError::TooLarge {
                    path: path.to_owned(),
                },
                other => LoadError::Read {
                    path: path.to_owned(),
                    source: other.into_io(),
                },
            },
        )?;
    let text = String::from_utf8(bytes).map_err(|_| LoadError::NotText {
        path: path.to_owned(),
    })?;
    NodeConfig::parse(&text).map_err(|error| LoadError::Invalid {
        path: path.to_owned(),
        error,
    })
}

/// Why the control token given will not do.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file's.
    #[error(transparent)]
    File(HttpServerError),
    /// The environment's ([`TOKEN_ENV`]).
    #[error("{TOKEN_ENV}: {problem}")]
    Environment {
        /// What is wrong with it.
        problem: TokenProblem,
    },
}

/// The control token: `file`'s if given, else `env`'s (the value of [`TOKEN_ENV`]) if
/// set, each checked by [`pathlab_http::token_from_text`]; `None` if neither. A file named
/// wins over the environment, so the token a user gives by hand is the one used.
pub fn control_token(
    file: Option<&Path>,
    env: Option<OsString>,
) -> Result<Option<String>, TokenError> {
    if let Some(file) = file {
        return pathlab_http::read_token(file)
            .map(Some)
            .map_err(TokenError::File);
    }
    let Some(value) = env else {
        return Ok(None);
    };
    value
        .into_string()
        .map_err(|_| TokenProblem::NotText)
        .and_then(|text| pathlab_http::token_from_text(&text))
        .map(Some)
        .map_err(|problem| TokenError::Environment { problem })
}

/// Why the node's certificate or key will not do.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// One of the two given, not the other.
    #[error("give both the certificate and the key (--tls-cert and --tls-key, or {TLS_CERT_ENV} and {TLS_KEY_ENV}), not one")]
    Half,
    /// A file that cannot be read, or (the key) is open to others.
    #[error("{what}: {source}")]
    File {
        /// Which.
        what: String,
        /// Why.
        source: pathlab_os::files::FileError,
    },
    /// A variable that is not text.
    #[error("{0}: not text")]
    NotText(&'static str),
    /// Not a certificate and key rustls takes.
    #[error(transparent)]
    Tls(#[from] pathlab_http::TlsError),
}

/// The node's TLS: its certificate and key from `cert_file` and `key_file` if given (the key
/// readable by its owner only), else from `env_cert` and `env_key` (the values of
/// [`TLS_CERT_ENV`] and [`TLS_KEY_ENV`]); `None` when neither is given.
pub fn tls_identity(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
    env_cert: Option<OsString>,
    env_key: Option<OsString>,
) -> Result<Option<Arc<rustls::ServerConfig>>, IdentityError> {
    let file = |path: &Path, secret: bool| {
        let read = if secret {
            pathlab_os::files::read_secret(path)
        } else {
            pathlab_os::files::read_regular(path, 64 * 1024)
        };
        read.map_err(|source| IdentityError::File {
            what: path.display().to_string(),
            source,
        })
    };
    let (cert, key, what) = match (cert_file, key_file) {
        (Some(cert), Some(key)) => (
            file(cert, false)?,
            file(key, true)?,
            key.display().to_string(),
        ),
        (None, None) => {
            let text = |value: OsString, name| {
                value
                    .into_string()
                    .map_err(|_| IdentityError::NotText(name))
            };
            match (env_cert, env_key) {
                (Some(cert), Some(key)) => (
                    text(cert, TLS_CERT_ENV)?.into_bytes(),
                    text(key, TLS_KEY_ENV)?.into_bytes(),
                    TLS_KEY_ENV.to_owned(),
                ),
                (None, None) => return Ok(None),
                _ => return Err(IdentityError::Half),
            }
        }
        _ => return Err(IdentityError::Half),
    };
    Ok(Some(pathlab_http::tls::server_config(&cert, &key, &what)?))
}

/// The capabilities `pathlab node` needs beyond CAP_NET_ADMIN, which a container engine
/// gives only when asked (`cap-add`), and the lines that ask: said at start, before
/// anything is touched, rather than at the first interface it cannot emulate on.
#[derive(Debug, thiserror::Error)]
#[error(
    "pathlab node needs {}: {}. containerlab: `cap-add: [NET_ADMIN, NET_RAW, SYS_ADMIN]` \
     (as `lab export containerlab` writes it) or `privileged: true`; docker run: \
     `--cap-add NET_ADMIN --cap-add NET_RAW --cap-add SYS_ADMIN`; KNE pods are privileged \
     (docs/engines.md). Nothing was changed.",
    .missing.iter().map(|c| format!("CAP_{}", c.name())).collect::<Vec<_>>().join(" and "),
    .missing.iter().map(|c| c.needed_for()).collect::<Vec<_>>().join("; ")
)]
pub struct MissingCapabilities {
    /// What the process lacks.
    pub missing: Vec<pathlab_os::Capability>,
}

/// Checks that the process has what [`MissingCapabilities`] names.
pub fn check_capabilities() -> Result<(), MissingCapabilities> {
    use pathlab_os::Capability;
    let missing = pathlab_os::missing_capabilities(&[Capability::NetRaw, Capability::SysAdmin]);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(MissingCapabilities { missing })
    }
}

/// A node's run, as `pathlab node` makes it.
#[derive(Debug, Clone)]
pub struct NodeRunConfig {
    /// Its config, read and checked.
    pub node: NodeConfig,
    /// The bearer token its control address requires; `None` only on loopback.
    pub token: Option<String>,
    /// Its certificate and key: the control address speaks TLS only; `None` only on
    /// loopback.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Where its recordings, outputs and result go ([`default_out`] unless given).
    pub out: PathBuf,
    /// How long to wait for its interfaces, and for each link's far end to answer.
    pub wait: Duration,
    /// How the emulators' forwarding threads are scheduled (`--priority`, `--cpus`).
    pub scheduling: pathlab_os::scheduling::Request,
}

/// Where node `node` keeps its recordings, outputs and result when told nowhere:
/// `node/NODE` in the runtime directory (`/run/pathlab`), which only root writes in, not a
/// shared directory such as `/tmp` where another user could have put something first.
pub fn default_out(node: &str) -> PathBuf {
    pathlab_os::runtime::runtime_dir().join("node").join(node)
}

impl NodeRunConfig {
    /// Opens (makes if missing) its output directory: refused if it is a link, another
    /// user's, or others may write in it ([`pathlab_os::files::Dir::output`]).
    pub fn open_out(&self) -> Result<pathlab_os::files::Dir, pathlab_os::files::FileError> {
        pathlab_os::files::Dir::output(&self.out)
    }

    /// Binds the node's control address with its token, in TLS with its certificate.
    pub fn bind(&self) -> Result<HttpServer, HttpServerError> {
        let server = HttpServer::bind(self.node.control, self.token.clone())?;
        Ok(match &self.tls {
            Some(tls) => server.tls(Arc::clone(tls)),
            None => server,
        })
    }
}

/// Plays the node of `config` ([`super::run`]), serving its control address on `server`
/// (from [`NodeRunConfig::bind`]) until `stop` is set, its files in `out` (from
/// [`NodeRunConfig::open_out`]), its emulators' metrics alone also on `metrics` (plain
/// HTTP) if given; `trace_dir` is where a spec sent
/// there may name trace files. Returns its result, or `None` when stopped before the run
/// ended: a stop is how a node ends, not a failure.
pub fn serve(
    config: &NodeRunConfig,
    server: HttpServer,
    out: pathlab_os::files::Dir,
    trace_dir: Option<pathlab_os::files::Dir>,
    metrics: Option<HttpServer>,
    stop: Arc<AtomicBool>,
) -> Result<Option<NodeResult>, NodeError> {
    let result = super::run(&NodeOptions {
        // Of the config as read, written back: comments and layout do not count.
        config_sha256: sha256_hex(config.node.to_toml().as_bytes()),
        config: config.node.clone(),
        out: Arc::new(out),
        wait: config.wait,
        stop,
        server: Arc::new(server),
        trace_dir: trace_dir.map(Arc::new),
        metrics: metrics.map(Arc::new),
        scheduling: config.scheduling.clone(),
    });
    match result {
        Ok(result) => Ok(Some(result)),
        Err(NodeError::Stopped) => Ok(None),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_file_else_the_environment_checked_alike() {
        let token = "0123456789abcdef0123";
        assert_eq!(control_token(None, None).unwrap(), None);
        assert_eq!(
            control_token(None, Some(format!(" {token}\n").into())).unwrap(),
            Some(token.to_owned())
        );
        for (value, problem) in [
            ("short", "the token is 5 characters; use at least 16"),
            ("", "the token is 0 characters"),
            (
                "0123456789 abcdef",
                "the token has spaces or characters outside printable ASCII",
            ),
        ] {
            let error = control_token(None, Some(value.into())).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains(&format!("{TOKEN_ENV}: {problem}")),
                "{value:?}: {error}"
            );
        }
        // A file named wins over the environment, and is read as a file.
        let error =
            control_token(Some(Path::new("/nonexistent/token")), Some(token.into())).unwrap_err();
        assert!(matches!(error, TokenError::File(_)), "{error}");
        assert!(error.to_string().contains("/nonexistent/token"), "{error}");
    }

    #[test]
    fn a_config_file_that_is_missing_too_large_or_not_text_is_refused_naming_it() {
        let missing = Path::new("/nonexistent/node.toml");
        let error = load_config(missing).unwrap_err();
        assert!(matches!(error, LoadError::Read { .. }), "{error}");
        assert_eq!(error.to_string(), "cannot read '/nonexistent/node.toml'");
        let dir = std::env::temp_dir().join(format!("pathlab-node-setup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let binary = dir.join("binary.toml");
        std::fs::write(&binary, [0xff, 0xfe, b'\n']).unwrap();
        assert_eq!(
            load_config(&binary).unwrap_err().to_string(),
            format!("{}: not UTF-8 text", binary.display())
        );
        let garbage = dir.join("garbage.toml");
        std::fs::write(&garbage, "this is not toml = = =\n").unwrap();
        let error = load_config(&garbage).unwrap_err();
        assert!(matches!(error, LoadError::Invalid { .. }), "{error}");
        assert!(
            error
                .to_string()
                .starts_with(&format!("{}: ", garbage.display())),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
