//! A lab as a containerlab topology (`LAB.clab.yml`) for users on one machine: each node a
//! `linux` container running pathlab's image with `pathlab node` and its config file
//! bind-mounted read-only (a relative path: containerlab reads it from beside the topology
//! file), each link a veth between the nodes' `to-PEER` interfaces (linux nodes take any
//! interface name). The node's own token, key and certificate are bind-mounted the same
//! way beside the config and named by `--control-token`, `--tls-key` and `--tls-cert`: a
//! bind keeps the files' owner-only mode, which `pathlab node` checks, and the container's
//! root reads them. The lab CA's key is not mounted anywhere.
//!
//! What a working lab needs beyond containerlab's defaults: `pathlab node` configures its
//! interfaces and puts emulators on them, so it needs CAP_NET_ADMIN and packet sockets
//! (CAP_NET_RAW), and it holds each interface it emulates on in a namespace of its own,
//! bind-mounted (CAP_SYS_ADMIN); containerlab runs nodes privileged by default, and the
//! file asks for the three capabilities so a lab with `privileged: false` defaults still
//! works. Docker mounts `/proc/sys` read-only in a container that is not privileged, so
//! the sysctls a node needs are the file's too: forwarding on, IPv6 not disabled (Docker
//! disables it in a container whose network has none). Tested in Docker, unprivileged, as
//! containerlab would start the nodes (tests/alone/docker.rs). A linux node
//! restarts by default, and a restarted container has lost every interface but eth0
//! (containerlab's docs): the nodes say `restart-policy: "no"`. eth0 stays on the
//! management network, where each node serves its results and metrics.
//!
//! Every string is written as a double-quoted YAML scalar (JSON's escapes, which YAML
//! reads the same), so no name or image is read as a number, a boolean or YAML syntax.

use std::fmt::Write as _;

use super::credentials::{cert_file, key_file, token_file};
use super::{
    config_file_name, config_in_container, in_container, node_command, Export, ExportError,
    ExportFile, TLS_CERT_FILE, TLS_KEY_FILE, TOKEN_FILE,
};

/// The topology file's name for lab `lab`.
pub fn topology_file_name(lab: &str) -> String {
    format!("{lab}.clab.yml")
}

/// The capabilities `pathlab node` needs.
const CAPABILITIES: [&str; 3] = ["NET_ADMIN", "NET_RAW", "SYS_ADMIN"];

/// The sysctls `pathlab node` needs, set by the engine where `/proc/sys` is read-only.
const SYSCTLS: [(&str, &str); 3] = [
    ("net.ipv4.ip_forward", "1"),
    ("net.ipv6.conf.all.forwarding", "1"),
    ("net.ipv6.conf.all.disable_ipv6", "0"),
];

/// The topology file, then every node's config.
pub fn files(export: &Export<'_>) -> Result<Vec<ExportFile>, ExportError> {
    let experiment = export.experiment;
    let configs = export.node_configs("containers and their host names")?;
    let mut text = String::new();
    let mut line = |indent: usize, content: &str| {
        let _ = writeln!(text, "{:indent$}{content}", "");
    };
    line(
        0,
        &format!(
            "# containerlab topology, written by `pathlab lab export containerlab`: {}",
            export.summary()
        ),
    );
    line(
        0,
        &format!(
            "# Deploy from this directory: sudo containerlab deploy -t {} (docs/engines.md)",
            topology_file_name(&experiment.name)
        ),
    );
    line(0, &format!("name: {}", quote(&experiment.name)));
    line(0, "topology:");
    line(2, "nodes:");
    let command = node_command(true).join(" ");
    for config in &configs {
        line(4, &format!("{}:", quote(&config.node)));
        line(6, "kind: \"linux\"");
        line(6, &format!("image: {}", quote(&export.image)));
        line(6, &format!("cmd: {}", quote(&command)));
        line(6, "binds:");
        for (file, in_container) in [
            (config_file_name(&config.node), config_in_container()),
            (token_file(&config.node), in_container(TOKEN_FILE)),
            (cert_file(&config.node), in_container(TLS_CERT_FILE)),
            (key_file(&config.node), in_container(TLS_KEY_FILE)),
        ] {
            line(
                8,
                &format!("- {}", quote(&format!("{file}:{in_container}:ro"))),
            );
        }
        line(6, "cap-add:");
        for capability in CAPABILITIES {
            line(8, &format!("- {}", quote(capability)));
        }
        line(6, "sysctls:");
        for (key, value) in SYSCTLS {
            line(8, &format!("{}: {}", quote(key), quote(value)));
        }
        line(6, "restart-policy: \"no\"");
    }
    line(2, "links:");
    let names: Vec<&str> = experiment.nodes.iter().map(|n| n.name.as_str()).collect();
    for link in &experiment.links {
        let (a, b) = (names[link.a], names[link.b]);
        let end = |node: &str, peer: &str| {
            quote(&format!(
                "{node}:{}",
                pathlab_lab::topology::port_name(peer)
            ))
        };
        line(4, &format!("- endpoints: [{}, {}]", end(a, b), end(b, a)));
    }
    let mut files = vec![ExportFile {
        name: topology_file_name(&experiment.name),
        contents: text,
        secret: false,
    }];
    files.extend(super::config_files(&configs));
    Ok(files)
}

/// `text` as a double-quoted YAML scalar.
fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_lab::spec::Experiment;

    #[test]
    fn nodes_are_linux_containers_with_their_config_and_links_veths_between_to_peer() {
        let experiment = Experiment::parse(
            "name = \"line\"\nduration = \"10s\"\n[[node]]\nname = \"h1\"\n\
             [[node]]\nname = \"no\"\n[[link]]\nbetween = [\"h1\", \"no\"]\n",
        )
        .unwrap();
        let files = files(&Export {
            experiment: &experiment,
            point: Some("queue=10".into()),
            seed: 1,
            image: "pathlab:\"x\"".into(),
        })
        .unwrap();
        assert_eq!(files[0].name, "line.clab.yml");
        let body = super::super::without_comments(&files[0].contents);
        let node = |name: &str| {
            format!(
                "    \"{name}\":\n      kind: \"linux\"\n      image: \"pathlab:\\\"x\\\"\"\n      \
                 cmd: \"pathlab node /etc/pathlab/node.toml --control-token \
                 /etc/pathlab/token --tls-cert /etc/pathlab/tls.crt --tls-key \
                 /etc/pathlab/tls.key\"\n      binds:\n        \
                 - \"{name}.toml:/etc/pathlab/node.toml:ro\"\n        \
                 - \"{name}.token:/etc/pathlab/token:ro\"\n        \
                 - \"{name}.crt:/etc/pathlab/tls.crt:ro\"\n        \
                 - \"{name}.key:/etc/pathlab/tls.key:ro\"\n      cap-add:\n        \
                 - \"NET_ADMIN\"\n        - \"NET_RAW\"\n        - \"SYS_ADMIN\"\n      \
                 sysctls:\n        \"net.ipv4.ip_forward\": \"1\"\n        \
                 \"net.ipv6.conf.all.forwarding\": \"1\"\n        \
                 \"net.ipv6.conf.all.disable_ipv6\": \"0\"\n      restart-policy: \"no\"\n"
            )
        };
        // A node named `no` stays a string, not YAML 1.1's false.
        assert_eq!(
            body,
            format!(
                "name: \"line\"\ntopology:\n  nodes:\n{}{}  links:\n    \
                 - endpoints: [\"h1:to-no\", \"no:to-h1\"]\n",
                node("h1"),
                node("no")
            )
        );
        assert!(files[0]
            .contents
            .contains("lab line (queue=10): 2 nodes, 1 links"));
    }
}
