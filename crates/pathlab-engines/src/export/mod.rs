//! Exporting a lab to an engine that runs it beyond one machine's namespaces: KNE on
//! Kubernetes ([`kne`]) or containerlab ([`containerlab`]). Every node of the lab becomes a
//! pod or container running pathlab's image with `pathlab node CONFIG`, CONFIG being its
//! [`NodeConfig`] (addresses, routes, its half of each link's spec, its workloads); every
//! link becomes the engine's link between the two nodes' interfaces, named as in a
//! one-machine run (`to-PEER`).
//!
//! Every node serves its control API beyond loopback, in TLS, so it needs its own
//! credentials ([`credentials`]): a key and a certificate of the lab's CA for its name, and
//! its own bearer token. The CA's key stays in the output directory, given to no node;
//! `pathlab lab collect --export DIR` reads the CA's certificate and the nodes' tokens
//! there. containerlab bind-mounts each node's files beside its config; KNE has no way to
//! mount a file only its owner may read, so they go in the pod's environment
//! ([`TOKEN_ENV`], [`TLS_CERT_ENV`], [`TLS_KEY_ENV`]; see [`kne`]).
//!
//! The writers are pure: they return each file's name and contents, and [`save`] writes
//! them (the token file too). They refuse names the engines cannot take (node names that
//! are not DNS labels) instead of changing them, so every name in the files is the spec's.

pub mod containerlab;
pub mod credentials;
pub mod kne;
pub mod node;
pub mod save;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use node::{LabSettings, NodeConfig, NodeConfigError};
use pathlab_lab::spec::Experiment;
use pathlab_lab::sweep::PlannedRun;

/// The image the nodes run when the user names none.
pub const DEFAULT_IMAGE: &str = "pathlab:latest";

/// Where a node's config is mounted in its container.
pub const CONFIG_DIR: &str = "/etc/pathlab";

/// The config's file name in [`CONFIG_DIR`].
pub const CONFIG_FILE: &str = "node.toml";

/// The port each node serves its results and metrics on (on every address).
pub const CONTROL_PORT: u16 = 8080;

/// The node's control token's file in [`CONFIG_DIR`] (containerlab).
pub const TOKEN_FILE: &str = "token";
/// The node's certificate's file in [`CONFIG_DIR`] (containerlab).
pub const TLS_CERT_FILE: &str = "tls.crt";
/// The node's private key's file in [`CONFIG_DIR`] (containerlab).
pub const TLS_KEY_FILE: &str = "tls.key";

pub use pathlab_http::server::TOKEN_ENV;
pub use pathlab_http::tls::{TLS_CERT_ENV, TLS_KEY_ENV};

/// Longest image reference accepted (Docker's own limit on a name is 255 bytes, plus a tag
/// or digest).
const MAX_IMAGE: usize = 512;

/// A lab to export: the experiment as it is to run (one sweep point, `--quick` applied),
/// and what every node shares.
#[derive(Debug, Clone)]
pub struct Export<'a> {
    /// The experiment.
    pub experiment: &'a Experiment,
    /// The sweep point's label, if the lab is a sweep.
    pub point: Option<String>,
    /// Seed of the emulators' random choices.
    pub seed: u64,
    /// The container image every node runs.
    pub image: String,
}

/// One file of an export: its name in the output directory and its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportFile {
    /// File name, no directory.
    pub name: String,
    /// Contents.
    pub contents: String,
    /// It holds a token or a key: only its owner may read it (mode `0600`).
    pub secret: bool,
}

/// Why a lab cannot be exported as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// A name the engine would have to change.
    #[error(
        "{what} '{name}' is not a DNS label ({why}): the engine names {names} after it; \
         rename it in the spec"
    )]
    NotDnsLabel {
        /// What it names (`node`, `lab`).
        what: &'static str,
        /// The name.
        name: String,
        /// What is wrong with it.
        why: &'static str,
        /// What the engine names after it.
        names: &'static str,
    },
    /// An image reference no engine takes.
    #[error("image '{image}': {why}")]
    Image {
        /// The reference, shortened.
        image: String,
        /// What is wrong with it.
        why: String,
    },
    /// A node's config is out of the format's bounds.
    #[error("node {node}: {source}")]
    Config {
        /// The node.
        node: String,
        /// What is out of bounds.
        source: NodeConfigError,
    },
}

/// Why `name` is not a DNS label (RFC 1123: 1 to 63 of a-z, 0-9 and '-', starting and
/// ending with a letter or digit), or `None` if it is one.
pub fn dns_label_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty")
    } else if name.len() > 63 {
        Some("longer than 63 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Some("only a-z, 0-9 and '-'")
    } else if name.starts_with('-') || name.ends_with('-') {
        Some("it starts or ends with '-'")
    } else {
        None
    }
}

/// Refuses `name` unless it is a DNS label.
fn check_dns_label(what: &'static str, name: &str, names: &'static str) -> Result<(), ExportError> {
    match dns_label_problem(name) {
        None => Ok(()),
        Some(why) => Err(ExportError::NotDnsLabel {
            what,
            name: name.to_owned(),
            why,
            names,
        }),
    }
}

/// The config files of `configs`, each opening with a comment of what it is.
fn config_files(configs: &[NodeConfig]) -> Vec<ExportFile> {
    configs
        .iter()
        .map(|config| ExportFile {
            name: config_file_name(&config.node),
            secret: false,
            contents: format!(
                "# pathlab node config (docs/engines.md): node {} of lab {}{}, read by \
                 `pathlab node`\n{}",
                config.node,
                config.lab,
                config
                    .point
                    .as_ref()
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default(),
                config.to_toml()
            ),
        })
        .collect()
}

/// `text` without its comment lines: what a writer's test compares.
#[cfg(test)]
fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .flat_map(|line| [line, "\n"])
        .collect()
}

/// A node config's file name in the output directory.
pub fn config_file_name(node: &str) -> String {
    format!("{node}.toml")
}

/// The path of a node's config inside its container.
pub fn config_in_container() -> String {
    format!("{CONFIG_DIR}/{CONFIG_FILE}")
}

/// The path of one of [`TOKEN_FILE`], [`TLS_CERT_FILE`], [`TLS_KEY_FILE`] inside a container
/// that mounts them (containerlab).
pub fn in_container(file: &str) -> String {
    format!("{CONFIG_DIR}/{file}")
}

/// The command every node runs: program, then arguments; `files`: with `--control-token`,
/// `--tls-cert` and `--tls-key` and their files' paths in the container, else the node
/// reads them from [`TOKEN_ENV`], [`TLS_CERT_ENV`] and [`TLS_KEY_ENV`].
pub fn node_command(files: bool) -> Vec<String> {
    let mut command = vec!["pathlab".into(), "node".into(), config_in_container()];
    if files {
        for (option, file) in [
            ("--control-token", TOKEN_FILE),
            ("--tls-cert", TLS_CERT_FILE),
            ("--tls-key", TLS_KEY_FILE),
        ] {
            command.extend([option.into(), in_container(file)]);
        }
    }
    command
}

impl<'a> Export<'a> {
    /// The export of `run` (one sweep point of a lab, `--quick` applied), its point named
    /// by its label if the lab is a sweep, its nodes running `image`.
    pub fn of(run: &'a PlannedRun, seed: u64, image: String) -> Export<'a> {
        Export {
            experiment: &run.experiment,
            point: Some(run.point.label.clone()).filter(|label| !label.is_empty()),
            seed,
            image,
        }
    }

    /// Every node's config, in the spec's order, after checking the names and the image
    /// every engine needs: node names are DNS labels (pod, container and host names,
    /// `names` in the error).
    pub fn node_configs(&self, names: &'static str) -> Result<Vec<NodeConfig>, ExportError> {
        let image = &self.image;
        let bad_image = |why: &str| ExportError::Image {
            image: image.chars().take(80).collect(),
            why: why.to_owned(),
        };
        if image.is_empty() || image.len() > MAX_IMAGE {
            return Err(bad_image(&format!("1 to {MAX_IMAGE} bytes")));
        }
        if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad_image(
                "no spaces or control characters in an image reference",
            ));
        }
        let settings = LabSettings {
            point: self.point.clone(),
            seed: self.seed,
            control: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), CONTROL_PORT),
        };
        let experiment = self.experiment;
        (0..experiment.nodes.len())
            .map(|node| {
                let name = &experiment.nodes[node].name;
                check_dns_label("node", name, names)?;
                NodeConfig::for_node(experiment, node, &settings).map_err(|source| {
                    ExportError::Config {
                        node: name.clone(),
                        source,
                    }
                })
            })
            .collect()
    }

    /// A line saying what was exported, for the top of a topology file.
    fn summary(&self) -> String {
        let experiment = self.experiment;
        format!(
            "lab {}{}: {} nodes, {} links, {:.3} s",
            experiment.name,
            self.point
                .as_ref()
                .map(|p| format!(" ({p})"))
                .unwrap_or_default(),
            experiment.nodes.len(),
            experiment.links.len(),
            experiment.duration.as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_are_lowercase_letters_digits_and_inner_hyphens() {
        for good in ["h1", "r1", "isp-0", "a", "9", &"x".repeat(63)] {
            assert_eq!(dns_label_problem(good), None, "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("H1", "only a-z, 0-9 and '-'"),
            ("h_1", "only a-z, 0-9 and '-'"),
            ("h.1", "only a-z, 0-9 and '-'"),
            ("-h1", "it starts or ends with '-'"),
            ("h1-", "it starts or ends with '-'"),
            (&"x".repeat(64), "longer than 63 characters"),
        ] {
            assert_eq!(dns_label_problem(bad), Some(why), "{bad}");
        }
    }
}
