//! A lab's credentials, made by `pathlab lab export`: a lab CA (its key stays in the
//! export's directory, [`CA_KEY_FILE`], and is given to no node), and for each node its
//! own key and certificate (the CA's signature on the node's name: what `lab collect`
//! checks before it sends the node anything) and its own bearer token, which that node
//! alone accepts: a node, or whoever holds its files, cannot drive another.
//!
//! Kept across exports into the same directory: the CA (its key and certificate), so
//! nodes already running keep proving themselves to a collector of the new export, and
//! each node's token. Each node's key and certificate are made anew each time, signed by
//! the kept CA.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The lab CA's private key, in the output directory (mode 0600). It signs the nodes'
/// certificates and never leaves the exporter's directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// The lab CA's certificate: what `lab collect` trusts, alone.
pub const CA_CERT_FILE: &str = "ca.crt";
/// The name the lab CA's certificate carries (the same every export, so a CA kept across
/// exports signs as itself).
const CA_NAME: &str = "pathlab lab CA";

/// A node's token file in the output directory.
pub fn token_file(node: &str) -> String {
    format!("{node}.token")
}

/// A node's private key file in the output directory.
pub fn key_file(node: &str) -> String {
    format!("{node}.key")
}

/// A node's certificate file in the output directory.
pub fn cert_file(node: &str) -> String {
    format!("{node}.crt")
}

/// One node's credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeCredentials {
    /// The node's name: the one name its certificate proves.
    pub node: String,
    /// Its bearer token.
    pub token: String,
    /// Its certificate, PEM, signed by the lab CA.
    pub cert_pem: String,
    /// Its private key, PEM.
    pub key_pem: String,
}

impl std::fmt::Debug for NodeCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCredentials")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// A lab's credentials, for an export.
#[derive(Clone)]
pub struct LabCredentials {
    /// The CA's certificate, PEM.
    pub ca_cert_pem: String,
    /// The CA's key, PEM: `None` when it was kept (it is in the directory already).
    pub ca_key_pem: Option<String>,
    /// Each node's, in the experiment's order.
    pub nodes: Vec<NodeCredentials>,
    /// Which of the nodes' tokens were kept from the directory.
    pub kept_tokens: Vec<bool>,
}

impl std::fmt::Debug for LabCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabCredentials")
            .field("nodes", &self.nodes)
            .field("ca_kept", &self.ca_key_pem.is_none())
            .finish_non_exhaustive()
    }
}

/// Why a lab's credentials could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// A file already in the directory will not do.
    #[error("{file}, kept across exports, will not do ({problem}): fix it, or remove it to have a new one made")]
    Kept {
        /// The file.
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// Making a key or certificate failed.
    #[error("making {what}: {reason}")]
    Make {
        /// What.
        what: String,
        /// Why.
        reason: String,
    },
}

/// The CA's parameters: the same name every time.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

/// Reads `name` in `out` if it is there: `None` when missing; a secret's file must be its
/// owner's only ([`pathlab_os::files::read_secret`]).
fn kept(out: &Path, name: &str, secret: bool) -> Result<Option<String>, CredentialError> {
    let path = out.join(name);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    let refused = |problem: String| CredentialError::Kept {
        file: path.display().to_string(),
        problem,
    };
    let bytes = if secret {
        pathlab_os::files::read_secret(&path).map_err(|e| refused(e.to_string()))?
    } else {
        pathlab_os::files::read_regular(&path, 64 * 1024).map_err(|e| refused(e.to_string()))?
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| refused("not text".into()))
}

/// The credentials of a lab of `nodes` exported into `out`: the CA and tokens already in
/// `out` kept (refused if they will not do), the rest made; nothing is written here.
pub fn make(out: &Path, nodes: &[String]) -> Result<LabCredentials, CredentialError> {
    let make_error = |what: &str| {
        let what = what.to_owned();
        move |e: rcgen::Error| CredentialError::Make {
            what,
            reason: e.to_string(),
        }
    };
    let (ca_key, ca_cert_pem, ca_key_pem) = match (
        kept(out, CA_KEY_FILE, true)?,
        kept(out, CA_CERT_FILE, false)?,
    ) {
        (Some(key), Some(cert)) => {
            let key = KeyPair::from_pem(&key).map_err(|e| CredentialError::Kept {
                file: out.join(CA_KEY_FILE).display().to_string(),
                problem: e.to_string(),
            })?;
            (key, cert, None)
        }
        (None, None) => {
            let key = KeyPair::generate().map_err(make_error("the lab CA's key"))?;
            let cert = ca_params()
                .self_signed(&key)
                .map_err(make_error("the lab CA's certificate"))?;
            let key_pem = key.serialize_pem();
            (key, cert.pem(), Some(key_pem))
        }
        (key, _) => {
            let (missing, there) = if key.is_none() {
                (CA_KEY_FILE, CA_CERT_FILE)
            } else {
                (CA_CERT_FILE, CA_KEY_FILE)
            };
            return Err(CredentialError::Kept {
                file: out.join(there).display().to_string(),
                problem: format!("{missing} is missing beside it"),
            });
        }
    };
    // The issuer as rcgen signs with it: the CA's name and key (a kept CA's certificate is
    // made again here only to sign; the one in the directory stays).
    let issuer = ca_params()
        .self_signed(&ca_key)
        .map_err(make_error("the lab CA"))?;
    let mut credentials = LabCredentials {
        ca_cert_pem,
        ca_key_pem,
        nodes: Vec::new(),
        kept_tokens: Vec::new(),
    };
    for node in nodes {
        let kept_token = kept(out, &token_file(node), true)?
            .map(|text| {
                pathlab_http::token_from_text(&text).map_err(|problem| CredentialError::Kept {
                    file: out.join(token_file(node)).display().to_string(),
                    problem: problem.to_string(),
                })
            })
            .transpose()?;
        credentials.kept_tokens.push(kept_token.is_some());
        let token = match kept_token {
            Some(token) => token,
            None => pathlab_http::new_token().map_err(|e| CredentialError::Make {
                what: format!("node {node}'s token"),
                reason: e.to_string(),
            })?,
        };
        let what = format!("node {node}'s certificate");
        let mut params = CertificateParams::new(vec![node.clone()]).map_err(make_error(&what))?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, node.as_str());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(make_error(&what))?;
        let cert = params
            .signed_by(&key, &issuer, &ca_key)
            .map_err(make_error(&what))?;
        credentials.nodes.push(NodeCredentials {
            node: node.clone(),
            token,
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        });
    }
    Ok(credentials)
}
