//! A lab as a KNE topology: text protobuf of `topo.Topology` (openconfig/kne,
//! `proto/topo.proto`). Each node is a `vendor: HOST` node running pathlab's image with
//! `pathlab node` and its config file (`config.file`, relative to the topology file, which
//! KNE mounts at `config_path/config_file`), its control port as a service; each link a
//! `links` entry between the nodes' `to-PEER` interfaces, which meshnet adds to the pods.
//!
//! Link ids: `topo.proto` carries them as each interface's `uid` (meshnet's link id, its
//! VXLAN VNI is 5000 + uid). KNE numbers the links in file order from 0 when it loads the
//! topology; the writer gives each interface that same number, the link's index in the
//! spec, so the file says what KNE will use and every link's two ends share one id.
//!
//! The node's token, key and certificate: `topo.proto`'s `Config` offers `env` (a map of
//! environment variables KNE copies into the pod spec as plain values) and one file, the
//! config (a config map, mounted readable by all, which `pathlab node` refuses for a
//! secret); it has no secret and no second file. So each node gets its own token, key and
//! certificate as [`TOKEN_ENV`], [`TLS_KEY_ENV`] and [`TLS_CERT_ENV`] in `env`: whoever
//! can read the pod spec (or this file, written for its owner only) sees them, and they
//! are the ones who can exec into the pod anyway. The lab CA's key is not in the file.

use std::fmt::Write as _;

use super::{
    check_dns_label, config_file_name, node_command, Export, ExportError, ExportFile, CONFIG_DIR,
    CONFIG_FILE, CONTROL_PORT, TLS_CERT_ENV, TLS_KEY_ENV, TOKEN_ENV,
};
use crate::export::credentials::NodeCredentials;

/// The topology file's name for lab `lab` (KNE's examples name theirs `NAME.pb.txt`).
pub fn topology_file_name(lab: &str) -> String {
    format!("{lab}.pb.txt")
}

/// The topology file, then every node's config; every node gets its `credentials` (one
/// per node, in the experiment's order) in its environment, so the topology file is a
/// secret one.
pub fn files(
    export: &Export<'_>,
    credentials: &[NodeCredentials],
) -> Result<Vec<ExportFile>, ExportError> {
    let experiment = export.experiment;
    check_dns_label(
        "lab",
        &experiment.name,
        "the Kubernetes namespace of the topology",
    )?;
    let configs = export.node_configs("pods, services and config maps")?;
    let mut out = TextProto::default();
    out.comment(&format!(
        "KNE topology (openconfig/kne proto/topo.proto), written by `pathlab lab export kne`: {}",
        export.summary()
    ));
    out.comment("Each node runs `pathlab node` with its config file; docs/engines.md.");
    out.string("name", &experiment.name);
    let command = node_command(false);
    let (program, arguments) = command.split_first().expect("a program");
    for (config, own) in configs.iter().zip(credentials) {
        out.open("nodes");
        out.string("name", &config.node);
        out.enumeration("vendor", "HOST");
        out.open("config");
        out.string("image", &export.image);
        out.string("command", program);
        for argument in arguments {
            out.string("args", argument);
        }
        for (key, value) in [
            (TOKEN_ENV, &own.token),
            (TLS_CERT_ENV, &own.cert_pem),
            (TLS_KEY_ENV, &own.key_pem),
        ] {
            out.open("env");
            out.string("key", key);
            out.string("value", value);
            out.close();
        }
        out.string("config_path", CONFIG_DIR);
        out.string("config_file", CONFIG_FILE);
        out.string("file", &config_file_name(&config.node));
        out.close();
        out.open("services");
        out.number("key", CONTROL_PORT);
        out.open("value");
        out.string("name", "pathlab-control");
        out.number("inside", CONTROL_PORT);
        out.close();
        out.close();
        for interface in &config.interfaces {
            out.open("interfaces");
            out.string("key", &interface.name);
            out.open("value");
            out.number("uid", interface.id);
            out.close();
            out.close();
        }
        out.close();
    }
    let names: Vec<&str> = experiment.nodes.iter().map(|n| n.name.as_str()).collect();
    for link in &experiment.links {
        let (a, z) = (names[link.a], names[link.b]);
        out.open("links");
        out.string("a_node", a);
        out.string("a_int", &pathlab_lab::topology::port_name(z));
        out.string("z_node", z);
        out.string("z_int", &pathlab_lab::topology::port_name(a));
        out.close();
    }
    let mut files = vec![ExportFile {
        name: topology_file_name(&experiment.name),
        contents: out.text,
        secret: true,
    }];
    files.extend(super::config_files(&configs));
    Ok(files)
}

/// A writer of protobuf's text format: fields one per line, messages indented.
#[derive(Debug, Default)]
struct TextProto {
    text: String,
    depth: usize,
}

impl TextProto {
    fn line(&mut self, line: &str) {
        for _ in 0..self.depth {
            self.text.push_str("  ");
        }
        self.text.push_str(line);
        self.text.push('\n');
    }

    fn comment(&mut self, text: &str) {
        self.line(&format!("# {text}"));
    }

    fn open(&mut self, field: &str) {
        self.line(&format!("{field}: {{"));
        self.depth += 1;
    }

    fn close(&mut self) {
        self.depth -= 1;
        self.line("}");
    }

    fn string(&mut self, field: &str, value: &str) {
        self.line(&format!("{field}: {}", quote(value)));
    }

    fn number(&mut self, field: &str, value: impl Into<u64>) {
        self.line(&format!("{field}: {}", value.into()));
    }

    fn enumeration(&mut self, field: &str, value: &str) {
        self.line(&format!("{field}: {value}"));
    }
}

/// `text` as a text-format string literal: quotes, backslashes and line ends escaped, and
/// every byte outside printable ASCII as a three-digit octal escape (which the format
/// reads back as that byte, so UTF-8 survives).
pub fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for &byte in text.as_bytes() {
        match byte {
            b'"' => quoted.push_str("\\\""),
            b'\'' => quoted.push_str("\\'"),
            b'\\' => quoted.push_str("\\\\"),
            b'\n' => quoted.push_str("\\n"),
            b'\r' => quoted.push_str("\\r"),
            b'\t' => quoted.push_str("\\t"),
            0x20..=0x7e => quoted.push(char::from(byte)),
            _ => {
                let _ = write!(quoted, "\\{byte:03o}");
            }
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_lab::spec::Experiment;

    fn export(text: &str) -> Result<Vec<ExportFile>, ExportError> {
        let experiment = Experiment::parse(text).unwrap();
        files(
            &Export {
                experiment: &experiment,
                point: None,
                seed: 1,
                image: "registry.example/pathlab:1.0".into(),
            },
            &["h1", "h2"].map(|node| NodeCredentials {
                node: node.into(),
                token: "0123456789abcdef0123456789abcdef".into(),
                cert_pem: format!("CERT {node}\n"),
                key_pem: format!("KEY {node}\n"),
            }),
        )
    }

    const LINE: &str = "name = \"line\"\nduration = \"10s\"\n\
        [[node]]\nname = \"h1\"\n[[node]]\nname = \"h2\"\n\
        [[link]]\nbetween = [\"h1\", \"h2\"]\nspec = \"delay 5ms\"\n";

    #[test]
    fn a_link_between_two_hosts_is_two_host_nodes_and_one_link() {
        let files = export(LINE).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["line.pb.txt", "h1.toml", "h2.toml"]);
        let secret: Vec<bool> = files.iter().map(|f| f.secret).collect();
        assert_eq!(
            secret,
            [true, false, false],
            "the tokens and keys are in the topology only"
        );
        let topology = &files[0].contents;
        let body = super::super::without_comments(topology);
        let node = |name: &str, peer: &str| {
            format!(
                "nodes: {{\n  name: \"{name}\"\n  vendor: HOST\n  config: {{\n    \
                 image: \"registry.example/pathlab:1.0\"\n    command: \"pathlab\"\n    \
                 args: \"node\"\n    args: \"/etc/pathlab/node.toml\"\n    \
                 env: {{\n      key: \"PATHLAB_CONTROL_TOKEN\"\n      \
                 value: \"0123456789abcdef0123456789abcdef\"\n    }}\n    \
                 env: {{\n      key: \"PATHLAB_TLS_CERT\"\n      \
                 value: \"CERT {name}\\n\"\n    }}\n    \
                 env: {{\n      key: \"PATHLAB_TLS_KEY\"\n      \
                 value: \"KEY {name}\\n\"\n    }}\n    \
                 config_path: \"/etc/pathlab\"\n    config_file: \"node.toml\"\n    \
                 file: \"{name}.toml\"\n  }}\n  services: {{\n    key: 8080\n    value: {{\n      \
                 name: \"pathlab-control\"\n      inside: 8080\n    }}\n  }}\n  \
                 interfaces: {{\n    key: \"to-{peer}\"\n    value: {{\n      uid: 0\n    }}\n  \
                 }}\n}}\n"
            )
        };
        assert_eq!(
            body,
            format!(
                "name: \"line\"\n{}{}links: {{\n  a_node: \"h1\"\n  a_int: \"to-h2\"\n  \
                 z_node: \"h2\"\n  z_int: \"to-h1\"\n}}\n",
                node("h1", "h2"),
                node("h2", "h1")
            )
        );
    }

    #[test]
    fn names_that_are_not_dns_labels_are_refused_not_changed() {
        let error = export(&LINE.replace("line", "Line_1")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "lab 'Line_1' is not a DNS label (only a-z, 0-9 and '-'): the engine names the \
             Kubernetes namespace of the topology after it; rename it in the spec"
        );
        let error = export(&LINE.replace("\"h2\"", "\"h2-\"")).unwrap_err();
        assert!(
            matches!(&error, ExportError::NotDnsLabel { what: "node", name, .. } if name == "h2-"),
            "{error}"
        );
    }

    #[test]
    fn strings_are_escaped_as_the_text_format_reads_them() {
        assert_eq!(quote("plain:1.0"), "\"plain:1.0\"");
        assert_eq!(quote("a\"b\\c'd\ne"), "\"a\\\"b\\\\c\\'d\\ne\"");
        // UTF-8 as octal bytes: é is C3 A9.
        assert_eq!(quote("é\u{1}"), "\"\\303\\251\\001\"");
    }
}
