//! TLS for a control address and its client (rustls with its `ring` provider): a server
//! proves who it is with a certificate a lab's CA signed, and a client trusts that CA
//! alone and checks the name in the certificate before it sends anything.
//!
//! The certificates and keys come as PEM text (what `pathlab lab export` writes); this
//! makes rustls configurations of them and wraps a TCP stream, nothing more.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The environment variable `pathlab node` reads its certificate (PEM) from when given no
/// `--tls-cert` file (how KNE hands it over).
pub const TLS_CERT_ENV: &str = "PATHLAB_TLS_CERT";
/// The environment variable `pathlab node` reads its private key (PEM) from when given no
/// `--tls-key` file; a lab's programs never inherit it.
pub const TLS_KEY_ENV: &str = "PATHLAB_TLS_KEY";

/// Why a certificate, key or name will not do for TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The text holds no PEM certificate.
    #[error("{what}: no PEM certificate in it")]
    NoCertificate {
        /// Which file or variable.
        what: String,
    },
    /// The text holds no PEM private key, or a bad one.
    #[error("{what}: no usable PEM private key in it ({reason})")]
    NoKey {
        /// Which file or variable.
        what: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the certificate, key or CA.
    #[error("{what}: {reason}")]
    Refused {
        /// What was being set up.
        what: String,
        /// rustls's reason.
        reason: rustls::Error,
    },
    /// The name a server must prove is not a DNS name.
    #[error("'{0}' is not a name a certificate can prove")]
    BadName(String),
}

/// The one crypto provider: ring (built with the C compiler alone; aws-lc, rustls's
/// default, needs cmake and more). rustls 0.23.48 deprecates it for lacking post-quantum
/// key exchange, which a lab's management network, whose recordings are worth nothing in
/// ten years, does not need.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS 1.3 only: both ends are pathlab's.
const VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// The certificates in PEM `text` (`what` names it in an error).
fn certificates(text: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(text)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what: what.to_owned(),
        });
    }
    Ok(certs)
}

/// A server's TLS: its certificate chain and key, as PEM.
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    what: &str,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = certificates(cert_pem, what)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::NoKey {
        what: what.to_owned(),
        reason: e.to_string(),
    })?;
    let refused = |reason| TlsError::Refused {
        what: what.to_owned(),
        reason,
    };
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(refused)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(refused)?;
    Ok(Arc::new(config))
}

/// How a client proves who answers: the only CA it trusts, and the name the answering
/// server's certificate must carry.
#[derive(Debug, Clone)]
pub struct TlsClient {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl TlsClient {
    /// Trusts the CA of `ca_pem` alone; the server must prove `name`.
    pub fn new(ca_pem: &[u8], name: &str, what: &str) -> Result<TlsClient, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in certificates(ca_pem, what)? {
            roots.add(cert).map_err(|reason| TlsError::Refused {
                what: what.to_owned(),
                reason,
            })?;
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|reason| TlsError::Refused {
                what: what.to_owned(),
                reason,
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name =
            ServerName::try_from(name.to_owned()).map_err(|_| TlsError::BadName(name.into()))?;
        Ok(TlsClient {
            config: Arc::new(config),
            name,
        })
    }

    /// The same trust, another name to prove.
    pub fn for_name(&self, name: &str) -> Result<TlsClient, TlsError> {
        let name =
            ServerName::try_from(name.to_owned()).map_err(|_| TlsError::BadName(name.into()))?;
        Ok(TlsClient {
            config: Arc::clone(&self.config),
            name,
        })
    }

    /// The name the server must prove.
    pub fn name(&self) -> String {
        self.name.to_str().into_owned()
    }

    /// A client connection over `tcp`, its handshake done: the server proved the name with
    /// a certificate of the CA before this returns (the socket's read timeout bounds each
    /// wait).
    pub(crate) fn connect(&self, tcp: TcpStream) -> io::Result<Stream<rustls::ClientConnection>> {
        let connection = rustls::ClientConnection::new(Arc::clone(&self.config), self.name.clone())
            .map_err(io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(connection, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Stream::Tls(Box::new(stream)))
    }
}

/// A connection in the clear or in TLS (`C`: a rustls client or server connection).
pub(crate) enum Stream<C> {
    /// In the clear.
    Plain(TcpStream),
    /// In TLS.
    Tls(Box<rustls::StreamOwned<C, TcpStream>>),
}

impl<C> Stream<C> {
    /// The TCP stream under it (for its timeouts).
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => &tls.sock,
        }
    }
}

impl<C, S> Read for Stream<C>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<S>>,
    S: rustls::SideData,
{
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}

impl<C, S> Write for Stream<C>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<S>>,
    S: rustls::SideData,
{
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.write(buf),
            Stream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(tcp) => tcp.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}

impl<C, S> Stream<C>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<S>>,
    S: rustls::SideData,
{
    /// Ends the writing side: TLS's close_notify first, then TCP's.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        if let Stream::Tls(tls) = self {
            tls.conn.send_close_notify();
            tls.flush()?;
        }
        self.tcp().shutdown(std::net::Shutdown::Write)
    }
}
