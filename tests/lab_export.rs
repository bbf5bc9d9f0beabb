//! `pathlab lab export`: every recipe's every run, exported for KNE and for containerlab by
//! the built binary, read back and checked against the spec it came from: every node and
//! every link appears exactly once, names are valid (DNS labels, interfaces of at most 15
//! bytes), link ids are unique and shared by a link's two ends, each end is an interface of
//! the right node whose config names the same peer, and every config parses and carries
//! the addresses a one-machine run gives the node. Every export carries the lab's
//! credentials: a CA whose key stays in the directory, and each node's own token, key and
//! certificate (the secrets files only their owner may read, the CA and tokens kept across
//! exports), which containerlab mounts and names and KNE puts in each pod's environment;
//! `pathlab node` refuses to serve beyond loopback without them, before it needs any
//! privilege.
//!
//! The KNE file is read by a parser of protobuf's text format written here (messages,
//! repeated fields, strings with every escape, numbers, enums) and each field checked
//! against `proto/topo.proto` (openconfig/kne); the containerlab file by a parser of the
//! YAML subset the writer emits (no YAML crate is in the lockfile, and serde_yaml, the one
//! most used, is unmaintained).

use crate::util;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;
use std::process::Output;

use crate::util::emulated::pathlab;
use crate::util::TempDir;
use pathlab_engines::export::node::{NodeConfig, Role};
use pathlab_lab::addressing::Addressing;
use pathlab_lab::recipes::RECIPES;
use pathlab_lab::spec::{expand, Experiment};

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

// ---------------------------------------------------------------------------------------
// Protobuf text format.

/// A field's value in the text format.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    /// A string (bytes: escapes may make any byte).
    Bytes(Vec<u8>),
    /// A number, as written.
    Number(String),
    /// An identifier: an enum value (or true, false, inf).
    Identifier(String),
    /// A nested message.
    Message(Message),
}

/// A message: its fields in the order written, repeated ones once per value.
#[derive(Debug, Clone, PartialEq, Default)]
struct Message {
    fields: Vec<(String, Value)>,
}

impl Message {
    fn all(&self, name: &str) -> impl Iterator<Item = &Value> + '_ {
        let name = name.to_owned();
        self.fields
            .iter()
            .filter(move |(field, _)| *field == name)
            .map(|(_, value)| value)
    }

    fn one(&self, name: &str) -> &Value {
        let values: Vec<&Value> = self.all(name).collect();
        assert_eq!(values.len(), 1, "{name} once in {self:?}");
        values[0]
    }

    fn string(&self, name: &str) -> String {
        match self.one(name) {
            Value::Bytes(bytes) => String::from_utf8(bytes.clone()).expect("UTF-8"),
            other => panic!("{name}: a string, not {other:?}"),
        }
    }

    fn strings(&self, name: &str) -> Vec<String> {
        self.all(name)
            .map(|value| match value {
                Value::Bytes(bytes) => String::from_utf8(bytes.clone()).expect("UTF-8"),
                other => panic!("{name}: a string, not {other:?}"),
            })
            .collect()
    }

    fn number(&self, name: &str) -> i64 {
        match self.one(name) {
            Value::Number(text) => text.parse().expect("an integer"),
            other => panic!("{name}: a number, not {other:?}"),
        }
    }

    fn message(&self, name: &str) -> &Message {
        match self.one(name) {
            Value::Message(message) => message,
            other => panic!("{name}: a message, not {other:?}"),
        }
    }

    fn messages(&self, name: &str) -> impl Iterator<Item = &Message> + '_ {
        let name = name.to_owned();
        self.all(&name).map(move |value| match value {
            Value::Message(message) => message,
            other => panic!("{name}: a message, not {other:?}"),
        })
    }
}

/// A reader of protobuf's text format (as Go's prototext and C++'s TextFormat write it).
struct TextFormat<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl TextFormat<'_> {
    fn parse(text: &str) -> Result<Message, String> {
        let mut parser = TextFormat {
            bytes: text.as_bytes(),
            at: 0,
        };
        parser.message(None)
    }

    fn error(&self, what: &str) -> String {
        let line = self.bytes[..self.at].split(|&b| b == b'\n').count();
        format!("line {line}: {what}")
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Skips whitespace and `#` comments.
    fn skip(&mut self) {
        while let Some(byte) = self.peek() {
            if byte.is_ascii_whitespace() {
                self.at += 1;
            } else if byte == b'#' {
                while self.peek().is_some_and(|b| b != b'\n') {
                    self.at += 1;
                }
            } else {
                break;
            }
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip();
        if self.peek() == Some(byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn identifier(&mut self) -> Result<String, String> {
        self.skip();
        let start = self.at;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            self.at += 1;
        }
        let word = &self.bytes[start..self.at];
        if word.is_empty() || word[0].is_ascii_digit() {
            return Err(self.error("expected a field name"));
        }
        Ok(String::from_utf8_lossy(word).into_owned())
    }

    /// Fields until `end` (`}` or `>`), or until the end of the text at the top.
    fn message(&mut self, end: Option<u8>) -> Result<Message, String> {
        let mut message = Message::default();
        loop {
            self.skip();
            match (self.peek(), end) {
                (None, None) => return Ok(message),
                (None, Some(_)) => return Err(self.error("the text ends inside a message")),
                (Some(byte), Some(end)) if byte == end => {
                    self.at += 1;
                    return Ok(message);
                }
                _ => {}
            }
            let name = self.identifier()?;
            let colon = self.eat(b':');
            self.skip();
            match self.peek() {
                Some(open @ (b'{' | b'<')) => {
                    self.at += 1;
                    let close = if open == b'{' { b'}' } else { b'>' };
                    let inner = self.message(Some(close))?;
                    message.fields.push((name, Value::Message(inner)));
                }
                Some(b'[') if colon => {
                    self.at += 1;
                    if !self.eat(b']') {
                        loop {
                            let value = self.value()?;
                            message.fields.push((name.clone(), value));
                            if self.eat(b']') {
                                break;
                            }
                            if !self.eat(b',') {
                                return Err(self.error("expected ',' or ']' in a list"));
                            }
                        }
                    }
                }
                _ if colon => {
                    let value = self.value()?;
                    message.fields.push((name, value));
                }
                _ => return Err(self.error(&format!("expected ':' after {name}"))),
            }
            // Fields may be separated by ',' or ';'.
            let _ = self.eat(b',') || self.eat(b';');
        }
    }

    /// A scalar, or a message in a list.
    fn value(&mut self) -> Result<Value, String> {
        self.skip();
        match self.peek() {
            Some(b'"' | b'\'') => {
                // Adjacent strings concatenate.
                let mut bytes = Vec::new();
                while matches!(self.peek(), Some(b'"' | b'\'')) {
                    bytes.extend(self.string()?);
                    self.skip();
                }
                Ok(Value::Bytes(bytes))
            }
            Some(b'{') => {
                self.at += 1;
                Ok(Value::Message(self.message(Some(b'}'))?))
            }
            Some(b'-' | b'.' | b'0'..=b'9') => {
                let start = self.at;
                self.at += 1;
                while self
                    .peek()
                    .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
                {
                    self.at += 1;
                }
                Ok(Value::Number(
                    String::from_utf8_lossy(&self.bytes[start..self.at]).into_owned(),
                ))
            }
            _ => Ok(Value::Identifier(self.identifier()?)),
        }
    }

    /// A quoted string with the format's escapes.
    fn string(&mut self) -> Result<Vec<u8>, String> {
        let quote = self.bytes[self.at];
        self.at += 1;
        let mut bytes = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.error("the text ends inside a string"));
            };
            self.at += 1;
            match byte {
                b'\n' => return Err(self.error("a line end inside a string")),
                _ if byte == quote => return Ok(bytes),
                b'\\' => {
                    let Some(escape) = self.peek() else {
                        return Err(self.error("the text ends inside an escape"));
                    };
                    self.at += 1;
                    match escape {
                        b'n' => bytes.push(b'\n'),
                        b'r' => bytes.push(b'\r'),
                        b't' => bytes.push(b'\t'),
                        b'a' => bytes.push(0x07),
                        b'b' => bytes.push(0x08),
                        b'f' => bytes.push(0x0c),
                        b'v' => bytes.push(0x0b),
                        b'\\' | b'\'' | b'"' | b'?' => bytes.push(escape),
                        b'0'..=b'7' => {
                            let mut code = u32::from(escape - b'0');
                            for _ in 0..2 {
                                match self.peek() {
                                    Some(digit @ b'0'..=b'7') => {
                                        code = code * 8 + u32::from(digit - b'0');
                                        self.at += 1;
                                    }
                                    _ => break,
                                }
                            }
                            bytes.push(
                                u8::try_from(code)
                                    .map_err(|_| self.error("octal escape above 255"))?,
                            );
                        }
                        b'x' => {
                            let mut code = 0u32;
                            let mut digits = 0;
                            while digits < 2 {
                                match self.peek().and_then(|b| char::from(b).to_digit(16)) {
                                    Some(digit) => {
                                        code = code * 16 + digit;
                                        self.at += 1;
                                        digits += 1;
                                    }
                                    None => break,
                                }
                            }
                            if digits == 0 {
                                return Err(self.error("\\x without hex digits"));
                            }
                            bytes.push(code as u8);
                        }
                        b'u' | b'U' => {
                            let count = if escape == b'u' { 4 } else { 8 };
                            let digits = self
                                .bytes
                                .get(self.at..self.at + count)
                                .ok_or_else(|| self.error("a short \\u escape"))?;
                            let code = u32::from_str_radix(&String::from_utf8_lossy(digits), 16)
                                .map_err(|_| self.error("a bad \\u escape"))?;
                            self.at += count;
                            let c = char::from_u32(code).ok_or_else(|| self.error("not a char"))?;
                            bytes.extend(c.to_string().as_bytes());
                        }
                        other => {
                            return Err(
                                self.error(&format!("unknown escape \\{}", char::from(other)))
                            )
                        }
                    }
                }
                _ => bytes.push(byte),
            }
        }
    }
}

/// What a field of `proto/topo.proto` holds.
#[derive(Debug, Clone, Copy)]
enum Kind {
    String,
    /// An integer of at most this value.
    Integer(u64),
    /// An enum with these values.
    Enum(&'static [&'static str]),
    /// A message of this (schema) name.
    Message(&'static str),
}

const UINT32: Kind = Kind::Integer(u32::MAX as u64);
const INT64: Kind = Kind::Integer(i64::MAX as u64);
const VENDORS: &[&str] = &[
    "UNKNOWN",
    "HOST",
    "ARISTA",
    "CISCO",
    "JUNIPER",
    "KEYSIGHT",
    "FRR",
    "QUAGGA",
    "GOBGP",
    "NOKIA",
    "OPENCONFIG",
    "ALPINE",
    "DRIVENETS",
    "FORWARD",
    "IN_CLUSTER_PROXY",
    "SONIC",
    "CIENA",
];

/// The fields of `proto/topo.proto` (openconfig/kne, 577a223f) a topology written for
/// `HOST` nodes may hold: (message, field, kind, repeated). Maps are repeated entries of
/// `key` and `value` (`StringMap`, `ServicesEntry`, `InterfacesEntry`).
const TOPO_PROTO: &[(&str, &str, Kind, bool)] = &[
    ("Topology", "name", Kind::String, false),
    ("Topology", "nodes", Kind::Message("Node"), true),
    ("Topology", "links", Kind::Message("Link"), true),
    ("Node", "name", Kind::String, false),
    ("Node", "labels", Kind::Message("StringMap"), true),
    ("Node", "config", Kind::Message("Config"), false),
    ("Node", "services", Kind::Message("ServicesEntry"), true),
    ("Node", "constraints", Kind::Message("StringMap"), true),
    ("Node", "vendor", Kind::Enum(VENDORS), false),
    ("Node", "model", Kind::String, false),
    ("Node", "version", Kind::String, false),
    ("Node", "os", Kind::String, false),
    ("Node", "interfaces", Kind::Message("InterfacesEntry"), true),
    ("Config", "command", Kind::String, true),
    ("Config", "args", Kind::String, true),
    ("Config", "image", Kind::String, false),
    ("Config", "env", Kind::Message("StringMap"), true),
    ("Config", "entry_command", Kind::String, false),
    ("Config", "config_path", Kind::String, false),
    ("Config", "config_file", Kind::String, false),
    ("Config", "sleep", UINT32, false),
    ("Config", "data", Kind::String, false),
    ("Config", "file", Kind::String, false),
    ("Config", "init_image", Kind::String, false),
    ("StringMap", "key", Kind::String, false),
    ("StringMap", "value", Kind::String, false),
    ("ServicesEntry", "key", UINT32, false),
    ("ServicesEntry", "value", Kind::Message("Service"), false),
    ("Service", "name", Kind::String, false),
    ("Service", "inside", UINT32, false),
    ("Service", "outside", UINT32, false),
    ("Service", "names", Kind::String, true),
    ("InterfacesEntry", "key", Kind::String, false),
    (
        "InterfacesEntry",
        "value",
        Kind::Message("Interface"),
        false,
    ),
    ("Interface", "name", Kind::String, false),
    ("Interface", "int_name", Kind::String, false),
    ("Interface", "mtu", UINT32, false),
    ("Interface", "peer_name", Kind::String, false),
    ("Interface", "peer_int_name", Kind::String, false),
    ("Interface", "uid", INT64, false),
    ("Interface", "group", Kind::String, false),
    ("Interface", "ip_address", Kind::String, false),
    ("Link", "a_node", Kind::String, false),
    ("Link", "a_int", Kind::String, false),
    ("Link", "z_node", Kind::String, false),
    ("Link", "z_int", Kind::String, false),
];

/// Checks `message` (of schema type `type_name`) field by field against [`TOPO_PROTO`]:
/// known names, the right kind of value, singular fields at most once.
fn check_against_topo_proto(message: &Message, type_name: &str, path: &str) {
    let mut seen = BTreeSet::new();
    for (name, value) in &message.fields {
        let &(_, _, kind, repeated) = TOPO_PROTO
            .iter()
            .find(|(m, f, _, _)| *m == type_name && f == name)
            .unwrap_or_else(|| panic!("{path}.{name}: not a field of {type_name} in topo.proto"));
        assert!(
            seen.insert(name.as_str()) || repeated,
            "{path}.{name}: a singular field given twice"
        );
        let here = format!("{path}.{name}");
        match (kind, value) {
            (Kind::String, Value::Bytes(bytes)) => {
                assert!(std::str::from_utf8(bytes).is_ok(), "{here}: not UTF-8");
            }
            (Kind::Integer(most), Value::Number(text)) => {
                let number: u64 = text.parse().unwrap_or_else(|_| panic!("{here}: {text}"));
                assert!(number <= most, "{here}: {number} above {most}");
            }
            (Kind::Enum(values), Value::Identifier(word)) => {
                assert!(values.contains(&word.as_str()), "{here}: {word}");
            }
            (Kind::Message(inner), Value::Message(nested)) => {
                check_against_topo_proto(nested, inner, &here);
            }
            (kind, value) => panic!("{here}: {value:?} is no {kind:?}"),
        }
    }
}

#[test]
fn the_text_format_reader_reads_what_the_format_allows() {
    let text = "# a comment\nname: \"a\\\"b\\\\c\\n\\303\\251\\x41\\u00e9\" 'd'\n\
                nodes { name: 'x' vendor: HOST config < args: [\"p\", \"q\"] sleep: 3 > };\n\
                links: { a_node: \"x\", a_int: \"eth1\" }\n";
    let topology = TextFormat::parse(text).expect("parses");
    assert_eq!(topology.string("name"), "a\"b\\c\né\u{41}éd");
    let node = topology.message("nodes");
    assert_eq!(node.one("vendor"), &Value::Identifier("HOST".into()));
    assert_eq!(node.message("config").strings("args"), ["p", "q"]);
    assert_eq!(node.message("config").number("sleep"), 3);
    check_against_topo_proto(&topology, "Topology", "topology");
    for bad in [
        "name \"x\"",
        "nodes { name: \"x\"",
        "name: \"x",
        "name: \"\\q\"",
    ] {
        assert!(TextFormat::parse(bad).is_err(), "{bad}");
    }
    let unknown = std::panic::catch_unwind(|| {
        check_against_topo_proto(
            &TextFormat::parse("nodes { color: \"red\" }").unwrap(),
            "Topology",
            "topology",
        );
    });
    assert!(unknown.is_err(), "a field topo.proto lacks is caught");
}

// ---------------------------------------------------------------------------------------
// The YAML the containerlab writer emits: block mappings and sequences by indentation,
// double-quoted scalars (JSON's escapes), flow sequences of them, plain scalars, comments.

#[derive(Debug, Clone, PartialEq)]
enum Yaml {
    Map(Vec<(String, Yaml)>),
    Seq(Vec<Yaml>),
    Str(String),
}

impl Yaml {
    fn get(&self, key: &str) -> &Yaml {
        match self {
            Yaml::Map(entries) => {
                let found: Vec<&Yaml> = entries
                    .iter()
                    .filter(|(k, _)| k == key)
                    .map(|(_, v)| v)
                    .collect();
                assert_eq!(found.len(), 1, "{key} once");
                found[0]
            }
            other => panic!("{key} of {other:?}"),
        }
    }

    fn str(&self) -> &str {
        match self {
            Yaml::Str(text) => text,
            other => panic!("a string, not {other:?}"),
        }
    }

    fn seq(&self) -> &[Yaml] {
        match self {
            Yaml::Seq(items) => items,
            other => panic!("a sequence, not {other:?}"),
        }
    }

    fn entries(&self) -> &[(String, Yaml)] {
        match self {
            Yaml::Map(entries) => entries,
            other => panic!("a mapping, not {other:?}"),
        }
    }

    fn parse(text: &str) -> Yaml {
        let lines: Vec<(usize, &str)> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|l| (l.len() - l.trim_start().len(), l.trim_start()))
            .collect();
        let mut at = 0;
        let value = Yaml::block(&lines, &mut at, 0);
        assert_eq!(at, lines.len(), "every line read");
        value
    }

    fn block(lines: &[(usize, &str)], at: &mut usize, indent: usize) -> Yaml {
        if lines[*at].1.starts_with("- ") {
            let mut items = Vec::new();
            while *at < lines.len() && lines[*at].0 == indent && lines[*at].1.starts_with("- ") {
                let rest = &lines[*at].1[2..];
                match split_key(rest) {
                    // `- key: value`: a mapping whose other keys follow, indented by 2.
                    Some(_) => {
                        let mut inner = vec![(indent + 2, rest)];
                        *at += 1;
                        while *at < lines.len() && lines[*at].0 > indent {
                            inner.push(lines[*at]);
                            *at += 1;
                        }
                        let mut inner_at = 0;
                        items.push(Yaml::block(&inner, &mut inner_at, indent + 2));
                    }
                    None => {
                        items.push(Yaml::scalar(rest));
                        *at += 1;
                    }
                }
            }
            return Yaml::Seq(items);
        }
        let mut entries = Vec::new();
        while *at < lines.len() && lines[*at].0 == indent {
            let (key, rest) =
                split_key(lines[*at].1).unwrap_or_else(|| panic!("a key in {:?}", lines[*at].1));
            *at += 1;
            let value = if rest.is_empty() {
                let inner = lines[*at].0;
                assert!(inner > indent, "a nested block under {key}");
                Yaml::block(lines, at, inner)
            } else {
                Yaml::scalar(rest)
            };
            entries.push((key, value));
        }
        Yaml::Map(entries)
    }

    fn scalar(text: &str) -> Yaml {
        if text.starts_with('"') {
            return Yaml::Str(serde_json::from_str(text).expect("a double-quoted scalar"));
        }
        if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            // Items are double-quoted: split at commas outside quotes.
            let mut items = Vec::new();
            let mut start = 0;
            let mut quoted = false;
            let mut escaped = false;
            for (i, c) in inner.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => quoted = !quoted,
                    ',' if !quoted => {
                        items.push(Yaml::scalar(inner[start..i].trim()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items.push(Yaml::scalar(inner[start..].trim()));
            return Yaml::Seq(items);
        }
        assert!(
            text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "plain scalars here are words: {text}"
        );
        Yaml::Str(text.to_owned())
    }
}

/// `key: rest` (the key maybe double-quoted), or `None` if the text is no mapping entry.
fn split_key(text: &str) -> Option<(String, &str)> {
    if let Some(quoted) = text.strip_prefix('"') {
        let (inside, rest) = quoted.split_once("\":")?;
        let key: String = serde_json::from_str(&format!("\"{inside}\"")).expect("a quoted key");
        return Some((key, rest.trim()));
    }
    let (key, rest) = text.split_once(':')?;
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return None;
    }
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    Some((key.to_owned(), rest.trim()))
}

// ---------------------------------------------------------------------------------------

/// What both exports must say about an experiment: its nodes, and each link's two ends as
/// (node, interface).
struct Expected<'a> {
    experiment: &'a Experiment,
}

impl Expected<'_> {
    fn node_names(&self) -> BTreeSet<String> {
        self.experiment
            .nodes
            .iter()
            .map(|n| n.name.clone())
            .collect()
    }

    /// Each link as its two ends `(node, interface)`, in the spec's order.
    fn link_ends(&self) -> Vec<[(String, String); 2]> {
        let names: Vec<&str> = self
            .experiment
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        self.experiment
            .links
            .iter()
            .map(|link| {
                let (a, b) = (names[link.a], names[link.b]);
                [
                    (a.to_owned(), format!("to-{b}")),
                    (b.to_owned(), format!("to-{a}")),
                ]
            })
            .collect()
    }
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn is_interface_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 15 && !name.contains(['/', ':', ' '])
}

/// Every node's config in `dir` parses and says what the spec does: each of the node's
/// links once as an interface with the right peer, id and addresses; its workloads.
fn check_configs(dir: &Path, experiment: &Experiment, label: &str) {
    let addressing = Addressing::for_links(experiment.links.len());
    let names: Vec<&str> = experiment.nodes.iter().map(|n| n.name.as_str()).collect();
    for (node, name) in names.iter().enumerate() {
        let path = dir.join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{label}: {}: {e}", path.display()));
        let config =
            NodeConfig::parse(&text).unwrap_or_else(|e| panic!("{label}: {name}.toml: {e}"));
        assert_eq!(config.node, *name, "{label}");
        assert_eq!(config.lab, experiment.name, "{label}");
        assert_eq!(
            config.duration_ns,
            experiment.duration.as_nanos() as u64,
            "{label}"
        );
        let mut expected_ids = Vec::new();
        for (i, link) in experiment.links.iter().enumerate() {
            if link.a != node && link.b != node {
                continue;
            }
            expected_ids.push(i as u32);
            let end = usize::from(link.b == node);
            let peer = names[if end == 0 { link.b } else { link.a }];
            let matching: Vec<_> = config
                .interfaces
                .iter()
                .filter(|interface| interface.id == i as u32)
                .collect();
            assert_eq!(matching.len(), 1, "{label}: {name} on link {i} once");
            let interface = matching[0];
            assert_eq!(interface.name, format!("to-{peer}"), "{label}: {name}");
            assert_eq!(interface.peer, peer, "{label}: {name}");
            assert_eq!(interface.peer_interface, format!("to-{name}"), "{label}");
            assert_eq!(interface.link, link.name, "{label}");
            let [own, other] = [end, 1 - end].map(|e| addressing.ends(i)[e]);
            assert_eq!(
                (interface.ipv4, interface.ipv6),
                own,
                "{label}: {name} on {}",
                link.name
            );
            assert_eq!((interface.peer_ipv4, interface.peer_ipv6), other, "{label}");
            assert_eq!(interface.ipv4_prefix_len, addressing.v4_prefix_len());
            let own_spec = if end == 0 {
                &link.forward
            } else {
                &link.reverse
            };
            assert_eq!(
                &pathlab_core::LinkSpec::parse(&interface.egress).expect("a SPEC"),
                own_spec,
                "{label}: {name}'s half of {}",
                link.name
            );
        }
        let ids: Vec<u32> = config.interfaces.iter().map(|i| i.id).collect();
        assert_eq!(ids, expected_ids, "{label}: {name}'s interfaces, no others");
        // Routes leave by the node's own interfaces, through its peer's address there.
        for route in &config.routes {
            let interface = config
                .interfaces
                .iter()
                .find(|i| i.name == route.interface)
                .unwrap_or_else(|| panic!("{label}: {name}: route by {}", route.interface));
            let gateway: IpAddr = if route.via.is_ipv4() {
                interface.peer_ipv4.into()
            } else {
                interface.peer_ipv6.into()
            };
            assert_eq!(route.via, gateway, "{label}: {name}");
        }
        // Every workload it runs, and every one it serves with a listener.
        let runs: BTreeSet<&str> = experiment
            .workloads
            .iter()
            .filter(|w| w.from == node)
            .map(|w| w.name.as_str())
            .collect();
        let clients: BTreeSet<&str> = config
            .workloads
            .iter()
            .filter(|w| w.role == Role::Client)
            .map(|w| w.name.as_str())
            .collect();
        assert_eq!(clients, runs, "{label}: {name}");
        for server in config.workloads.iter().filter(|w| w.role == Role::Server) {
            let workload = experiment
                .workloads
                .iter()
                .find(|w| w.name == server.name)
                .expect("a workload of the spec");
            assert_eq!(workload.to, Some(node), "{label}: {name}");
            assert!(server.port.is_some(), "{label}: {name}");
        }
    }
}

/// The permission bits of the file at `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    let metadata = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    metadata.permissions().mode() & 0o7777
}

/// The export's token file of `node`: its owner's only, one line of 128 bits as hex; its
/// token. Its key too is its owner's only, and the lab CA's key.
fn check_token_file(dir: &Path, node: &str, label: &str) -> String {
    for secret in [format!("{node}.key"), "ca.key".to_owned()] {
        assert_eq!(mode(&dir.join(&secret)), 0o600, "{label}: {secret}");
    }
    let path = dir.join(format!("{node}.token"));
    assert_eq!(
        mode(&path),
        0o600,
        "{label}: the token file is its owner's only"
    );
    let token = pathlab_http::read_token(&path).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("{token}\n"),
        "{label}: one line"
    );
    assert!(
        token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{label}: 128 bits as hex, not {token:?}"
    );
    token
}

/// Reads a KNE export back and checks it against the spec.
fn check_kne(dir: &Path, experiment: &Experiment, label: &str) {
    let expected = Expected { experiment };
    let path = dir.join(format!("{}.pb.txt", experiment.name));
    assert_eq!(
        mode(&path),
        0o600,
        "{label}: the topology holds the tokens and keys"
    );
    let text = std::fs::read_to_string(&path).expect("the topology file");
    let ca_key = std::fs::read_to_string(dir.join("ca.key")).unwrap();
    assert!(
        !text.contains(ca_key.trim()),
        "{label}: the CA's key is given to no node"
    );
    let topology =
        TextFormat::parse(&text).unwrap_or_else(|e| panic!("{label}: {}: {e}", path.display()));
    check_against_topo_proto(&topology, "Topology", "topology");
    assert_eq!(topology.string("name"), experiment.name);
    // Every node once.
    let nodes: Vec<&Message> = topology.messages("nodes").collect();
    let names: Vec<String> = nodes.iter().map(|n| n.string("name")).collect();
    let unique: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(
        unique.len(),
        names.len(),
        "{label}: a node twice: {names:?}"
    );
    assert_eq!(unique, expected.node_names(), "{label}");
    // Each node: a HOST running `pathlab node` on its config, its interfaces with ids.
    let mut uids: BTreeMap<(String, String), i64> = BTreeMap::new();
    for node in &nodes {
        check_kne_node(dir, node, label, &mut uids);
    }
    // Every link once, its ends the right nodes' interfaces; ids unique, shared by both
    // ends, and the ones KNE gives (file order from 0).
    let links: Vec<[(String, String); 2]> = topology
        .messages("links")
        .map(|link| {
            [
                (link.string("a_node"), link.string("a_int")),
                (link.string("z_node"), link.string("z_int")),
            ]
        })
        .collect();
    assert_eq!(
        links,
        expected.link_ends(),
        "{label}: the links, once each, in order"
    );
    let mut ids = BTreeSet::new();
    for (index, ends) in links.iter().enumerate() {
        let [a, z] = ends.each_ref().map(|end| {
            *uids
                .get(end)
                .unwrap_or_else(|| panic!("{label}: {end:?} is no interface of its node"))
        });
        assert_eq!(a, z, "{label}: both ends of link {index} share its id");
        assert_eq!(a, index as i64, "{label}: KNE numbers links in file order");
        assert!(ids.insert(a), "{label}: link id {a} twice");
    }
    assert_eq!(
        uids.len(),
        2 * links.len(),
        "{label}: an interface on no link"
    );
    check_configs(dir, experiment, label);
}

/// One node of a KNE export: a HOST running `pathlab node` on its config, with its own
/// credentials in its environment, its interfaces' ids put in `uids`.
fn check_kne_node(
    dir: &Path,
    node: &Message,
    label: &str,
    uids: &mut BTreeMap<(String, String), i64>,
) {
    let name = node.string("name");
    assert!(is_dns_label(&name), "{label}: {name}");
    assert_eq!(node.one("vendor"), &Value::Identifier("HOST".into()));
    let config = node.message("config");
    assert_eq!(config.strings("command"), ["pathlab"]);
    assert_eq!(
        config.strings("args"),
        [
            "node".to_owned(),
            format!(
                "{}/{}",
                config.string("config_path"),
                config.string("config_file")
            )
        ]
    );
    assert_eq!(config.string("file"), format!("{name}.toml"));
    assert!(dir.join(config.string("file")).is_file(), "{label}: {name}");
    // The node's own token, certificate and key as environment variables, which
    // `pathlab node` reads when given no --control-token, --tls-cert, --tls-key.
    let env: Vec<(String, String)> = config
        .messages("env")
        .map(|entry| (entry.string("key"), entry.string("value")))
        .collect();
    let token = check_token_file(dir, &name, label);
    let file = |ext: &str| std::fs::read_to_string(dir.join(format!("{name}.{ext}"))).unwrap();
    assert_eq!(
        env,
        [
            ("PATHLAB_CONTROL_TOKEN".to_owned(), token),
            ("PATHLAB_TLS_CERT".to_owned(), file("crt")),
            ("PATHLAB_TLS_KEY".to_owned(), file("key")),
        ],
        "{label}: {name}"
    );
    for entry in node.messages("interfaces") {
        let interface = entry.string("key");
        assert!(
            is_interface_name(&interface),
            "{label}: {name}: {interface}"
        );
        let uid = entry.message("value").number("uid");
        assert!(
            uids.insert((name.clone(), interface.clone()), uid)
                .is_none(),
            "{label}: {name}: {interface} twice"
        );
    }
}

/// Reads a containerlab export back and checks it against the spec.
fn check_containerlab(dir: &Path, experiment: &Experiment, label: &str) {
    let expected = Expected { experiment };
    let path = dir.join(format!("{}.clab.yml", experiment.name));
    let yaml = Yaml::parse(&std::fs::read_to_string(&path).expect("the topology file"));
    assert_eq!(yaml.get("name").str(), experiment.name);
    let topology = yaml.get("topology");
    let nodes = topology.get("nodes").entries();
    let names: Vec<&str> = nodes.iter().map(|(name, _)| name.as_str()).collect();
    let unique: BTreeSet<String> = names.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(unique.len(), names.len(), "{label}: a node twice");
    assert_eq!(unique, expected.node_names(), "{label}");
    for (name, node) in nodes {
        assert!(is_dns_label(name), "{label}: {name}");
        assert_eq!(node.get("kind").str(), "linux");
        assert_eq!(
            node.get("cmd").str(),
            "pathlab node /etc/pathlab/node.toml --control-token /etc/pathlab/token --tls-cert \
             /etc/pathlab/tls.crt --tls-key /etc/pathlab/tls.key"
        );
        check_token_file(dir, name, label);
        let binds: Vec<&str> = node.get("binds").seq().iter().map(Yaml::str).collect();
        assert_eq!(
            binds,
            [
                format!("{name}.toml:/etc/pathlab/node.toml:ro"),
                format!("{name}.token:/etc/pathlab/token:ro"),
                format!("{name}.crt:/etc/pathlab/tls.crt:ro"),
                format!("{name}.key:/etc/pathlab/tls.key:ro"),
            ],
            "{label}: the config, the node's own token, certificate and key, read-only"
        );
        assert!(
            dir.join(format!("{name}.toml")).is_file(),
            "{label}: {name}"
        );
        assert_eq!(node.get("restart-policy").str(), "no");
        let capabilities: Vec<&str> = node.get("cap-add").seq().iter().map(Yaml::str).collect();
        assert!(capabilities.contains(&"NET_ADMIN"), "{label}: {name}");
    }
    let links: Vec<[(String, String); 2]> = topology
        .get("links")
        .seq()
        .iter()
        .map(|link| {
            let endpoints = link.get("endpoints").seq();
            assert_eq!(endpoints.len(), 2, "{label}: a link has two ends");
            [0, 1].map(|i| {
                let (node, interface) = endpoints[i].str().split_once(':').expect("NODE:IFACE");
                assert!(is_interface_name(interface), "{label}: {interface}");
                (node.to_owned(), interface.to_owned())
            })
        })
        .collect();
    assert_eq!(links, expected.link_ends(), "{label}: the links, once each");
    let all_ends: BTreeSet<&(String, String)> = links.iter().flatten().collect();
    assert_eq!(
        all_ends.len(),
        2 * links.len(),
        "{label}: an interface on two links"
    );
    check_configs(dir, experiment, label);
}

#[test]
fn every_run_of_every_recipe_exports_to_kne_and_containerlab_and_reads_back() {
    let dir = TempDir::new("lab-export-recipes");
    let mut exported = 0;
    for (name, text) in RECIPES {
        for quick in [false, true] {
            let points = expand(text, quick).expect("a recipe expands");
            for (index, point) in points.iter().enumerate() {
                let experiment = Experiment::parse(&point.text).expect("a recipe parses");
                let experiment = if quick {
                    experiment.quick()
                } else {
                    experiment
                };
                let number = (index + 1).to_string();
                for engine in ["kne", "containerlab"] {
                    let out = dir.path(&format!("{name}-{quick}-{number}-{engine}"));
                    let out_text = out.to_str().expect("UTF-8");
                    let mut args = vec!["lab", "export", engine, name, "--out", out_text];
                    if points.len() > 1 {
                        args.extend(["--point", &number]);
                    }
                    if quick {
                        args.push("--quick");
                    }
                    let output = pathlab(&args);
                    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
                    let label = format!(
                        "{engine} {name} {}{}",
                        point.label,
                        if quick { " quick" } else { "" }
                    );
                    match engine {
                        "kne" => check_kne(&out, &experiment, &label),
                        _ => check_containerlab(&out, &experiment, &label),
                    }
                    exported += 1;
                }
            }
        }
    }
    assert!(exported >= 2 * 2 * RECIPES.len(), "{exported} exports");
}

#[test]
fn an_image_with_quotes_backslashes_and_utf8_reads_back_the_same_from_both_files() {
    let dir = TempDir::new("lab-export-image");
    let image = "registry.example/p\u{e4}thlab:\"v1\"\\x'";
    for engine in ["kne", "containerlab"] {
        let out = dir.path(engine);
        let output = pathlab(&[
            "lab",
            "export",
            engine,
            "modem-pps",
            "--out",
            out.to_str().unwrap(),
            "--image",
            image,
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        let read = if engine == "kne" {
            let text = std::fs::read_to_string(out.join("modem-pps.pb.txt")).unwrap();
            let topology = TextFormat::parse(&text).expect("parses");
            topology
                .messages("nodes")
                .map(|node| node.message("config").string("image"))
                .collect::<Vec<_>>()
        } else {
            let text = std::fs::read_to_string(out.join("modem-pps.clab.yml")).unwrap();
            let yaml = Yaml::parse(&text);
            yaml.get("topology")
                .get("nodes")
                .entries()
                .iter()
                .map(|(_, node)| node.get("image").str().to_owned())
                .collect()
        };
        assert_eq!(read.len(), 3, "{engine}");
        assert!(read.iter().all(|i| i == image), "{engine}: {read:?}");
    }
}

#[test]
fn bad_input_exits_2_with_the_reason() {
    let dir = TempDir::new("lab-export-bad");
    let out = dir.path("out");
    let out = out.to_str().unwrap();
    let spec = dir.path("Upper_Case.toml");
    std::fs::write(
        &spec,
        "name = \"Upper_Case\"\nduration = \"5s\"\n[[node]]\nname = \"h1\"\n[[node]]\n\
         name = \"h2\"\n[[link]]\nbetween = [\"h1\", \"h2\"]\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    for (args, reason) in [
        (
            vec!["lab", "export", "kne", "no-such-recipe", "--out", out],
            "no recipe 'no-such-recipe' (recipes: bufferbloat,",
        ),
        (
            vec!["lab", "export", "kne", "bufferbloat", "--out", out],
            "bufferbloat is a sweep of 3 runs (1: queue=10, 2: queue=50, 3: queue=100); an \
             engine runs one topology: export one with --point N",
        ),
        (
            vec![
                "lab",
                "export",
                "containerlab",
                "aqm",
                "--out",
                out,
                "--point",
                "6",
            ],
            "--point 6: aqm is a sweep of 5 runs (1: queue=taildrop",
        ),
        (
            vec!["lab", "export", "kne", "bond", "--out", out, "--point", "2"],
            "--point 2: bond is one run, not a sweep",
        ),
        (
            vec!["lab", "export", "mininet", "bond", "--out", out],
            "unrecognized subcommand 'mininet'",
        ),
        (
            vec!["lab", "export", "kne", spec, "--out", out],
            "lab 'Upper_Case' is not a DNS label (only a-z, 0-9 and '-'): the engine names \
             the Kubernetes namespace of the topology after it",
        ),
        (
            vec![
                "lab",
                "export",
                "kne",
                "bond",
                "--out",
                out,
                "--image",
                "pathlab latest",
            ],
            "image 'pathlab latest': no spaces or control characters",
        ),
    ] {
        util::assert_refused(&args, reason);
    }
    assert!(!Path::new(out).exists(), "nothing written for bad input");
    // containerlab takes the same lab: its name only names the lab's containers.
    let output = pathlab(&["lab", "export", "containerlab", spec, "--out", out]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(Path::new(out).join("Upper_Case.clab.yml").is_file());
}

#[test]
fn a_second_export_keeps_the_ca_and_tokens_and_a_token_that_will_not_do_is_refused() {
    let dir = TempDir::new("lab-export-token");
    let out = dir.path("out");
    let out_text = out.to_str().unwrap();
    let export = |engine: &str| {
        let output = pathlab(&["lab", "export", engine, "bond", "--out", out_text]);
        assert!(output.status.success(), "{engine}: {}", stderr(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let said = export("containerlab");
    assert!(said.contains("made the lab CA"), "{said}");
    assert!(said.contains("(0 of 5 tokens kept)"), "{said}");
    let tokens = ["site", "srv"].map(|node| check_token_file(&out, node, "first export"));
    assert_ne!(tokens[0], tokens[1], "each node its own token");
    let ca = std::fs::read(out.join("ca.key")).unwrap();
    // Re-exporting (another engine, a changed spec) must not break nodes running with
    // them.
    let said = export("kne");
    assert!(said.contains("kept the lab CA"), "{said}");
    assert!(said.contains("(5 of 5 tokens kept)"), "{said}");
    assert_eq!(std::fs::read(out.join("ca.key")).unwrap(), ca);
    for (node, token) in ["site", "srv"].iter().zip(&tokens) {
        assert_eq!(&check_token_file(&out, node, "second export"), token);
    }
    // A token file other users may read is refused, not replaced: a node may be using it.
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(
            out.join("srv.token"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    }
    util::assert_refused(
        &["lab", "export", "kne", "bond", "--out", out_text],
        "is open to other users (mode 0644)",
    );
    std::fs::remove_file(out.join("srv.token")).unwrap();
    util::write_secret(&out.join("srv.token"), "short\n");
    util::assert_refused(
        &["lab", "export", "containerlab", "bond", "--out", out_text],
        "the token is 5 characters; use at least 16",
    );
}

/// Runs the built `pathlab node CONFIG ARGS` with PATHLAB_CONTROL_TOKEN as `env_token`
/// (unset if `None`), as `uid` if given; its exit code and stderr.
fn node(config: &Path, args: &[&str], env_token: Option<&str>, uid: Option<u32>) -> (i32, String) {
    use std::os::unix::process::CommandExt as _;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_pathlab"));
    command.arg("node").arg(config).args(args);
    command.env_remove("PATHLAB_CONTROL_TOKEN");
    command.env_remove("PATHLAB_TLS_CERT");
    command.env_remove("PATHLAB_TLS_KEY");
    if let Some(token) = env_token {
        command.env("PATHLAB_CONTROL_TOKEN", token);
    }
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let output = command.output().expect("pathlab runs");
    (output.status.code().unwrap_or(-1), stderr(&output))
}

/// Guards the order in `pathlab node`: a config serving beyond loopback (0.0.0.0:8080, as
/// exported) with no token, or a token that will not do, is refused with the reason
/// (exit 2) before the node needs CAP_NET_ADMIN or touches anything: as nobody, the
/// reason is the token, not the privilege.
#[test]
fn pathlab_node_beyond_loopback_without_a_usable_token_exits_2_before_anything() {
    let dir = TempDir::new("lab-export-node-token");
    let out = dir.path("out");
    let output = pathlab(&[
        "lab",
        "export",
        "kne",
        "bond",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let config = out.join("site.toml");
    {
        // Readable by nobody, as a config map is.
        use std::os::unix::fs::PermissionsExt as _;
        for path in [dir.root(), out.as_path(), config.as_path()] {
            let mode = if path.is_dir() { 0o755 } else { 0o644 };
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
    let bad_file = dir.path("open-token");
    std::fs::write(&bad_file, "0123456789abcdef0123\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&bad_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let bad_file = bad_file.to_str().unwrap();
    for uid in [None, Some(65534)] {
        for (args, env_token, reason) in [
            (
                &[][..],
                None,
                "control address 0.0.0.0:8080 is reachable from other machines: give its \
                 token with --control-token FILE or in the environment as \
                 PATHLAB_CONTROL_TOKEN",
            ),
            (
                &[][..],
                Some("too-short"),
                "PATHLAB_CONTROL_TOKEN: the token is 9 characters; use at least 16",
            ),
            (
                &[][..],
                Some("0123456789 abcdef0123"),
                "PATHLAB_CONTROL_TOKEN: the token has spaces",
            ),
            (
                &["--control-token", bad_file][..],
                Some("0123456789abcdef0123"),
                "is open to other users (mode 0644)",
            ),
        ] {
            let (code, said) = node(&config, args, env_token, uid);
            assert_eq!(code, 2, "{uid:?} {args:?} {env_token:?}: {said}");
            assert!(
                said.contains(reason),
                "{uid:?} {args:?} {env_token:?}: {said}"
            );
            assert!(!said.contains("CAP_NET_ADMIN"), "{said}");
        }
    }
    // With a usable token, the node's certificate and key: without them, refused.
    let (code, said) = node(&config, &[], Some("0123456789abcdef0123"), Some(65534));
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("give the node's certificate and key"),
        "{said}"
    );
    // With both, the next check is the privilege: as nobody, that refusal. (Copies the
    // user nobody may read: the export's are root's only.)
    let copy = |ext: &str| {
        let to = dir.path(&format!("nobody.{ext}"));
        std::fs::copy(out.join(format!("site.{ext}")), &to).unwrap();
        std::os::unix::fs::chown(&to, Some(65534), Some(65534)).unwrap();
        to.to_str().unwrap().to_owned()
    };
    let (cert, key) = (copy("crt"), copy("key"));
    let (code, said) = node(
        &config,
        &["--tls-cert", &cert, "--tls-key", &key],
        Some("0123456789abcdef0123"),
        Some(65534),
    );
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("needs CAP_NET_ADMIN"), "{said}");
}
