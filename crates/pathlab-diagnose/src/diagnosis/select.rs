//! Which sockets to watch, in `ss`'s filter words.

use std::net::SocketAddr;

use super::SocketSample;

/// Which end of a connection a selector term looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Local,
    Remote,
    Either,
}

/// One term of a [`Selector`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    Port(Side, u16),
    /// An address and prefix length.
    Net(Side, std::net::IpAddr, u8),
}

/// Which sockets to watch, in `ss`'s filter words: `sport N`, `dport N`, `port N` (either
/// end), `src ADDR[/LEN]`, `dst ADDR[/LEN]`, each optionally with `=`, `==` or `eq`, a port
/// optionally written `:N`, joined by `and` (or nothing). `ss`'s source port is this end's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    terms: Vec<Term>,
}

impl Selector {
    /// Every socket.
    pub fn all() -> Selector {
        Selector::default()
    }

    /// Sockets with port `port` at either end.
    pub fn port(port: u16) -> Selector {
        Selector {
            terms: vec![Term::Port(Side::Either, port)],
        }
    }

    /// Both this selector's and `other`'s terms.
    pub fn and(mut self, other: Selector) -> Selector {
        self.terms.extend(other.terms);
        self
    }

    /// Parses a filter; the error names the word it could not read.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut words = text.split_whitespace().peekable();
        let mut terms = Vec::new();
        while let Some(word) = words.next() {
            let key = word.to_ascii_lowercase();
            if key == "and" || key == "&&" {
                continue;
            }
            if key == "or" || key == "||" || key == "not" || key == "!" {
                return Err(format!(
                    "`{word}`: only terms joined by `and` are supported (run inspect twice for \
                     either of two sets)"
                ));
            }
            let side = match key.as_str() {
                "sport" | "src" => Side::Local,
                "dport" | "dst" => Side::Remote,
                "port" => Side::Either,
                _ => return Err(format!("`{word}`: expected sport, dport, port, src or dst")),
            };
            if words
                .peek()
                .is_some_and(|w| matches!(*w, "=" | "==" | "eq"))
            {
                words.next();
            }
            let value = words
                .next()
                .ok_or_else(|| format!("`{word}` needs a value"))?;
            let term = if key.ends_with("port") {
                let number = value.trim_start_matches(':');
                Term::Port(
                    side,
                    number
                        .parse()
                        .map_err(|_| format!("`{value}`: not a port number (0 to 65535)"))?,
                )
            } else {
                let (address, len) = match value.split_once('/') {
                    Some((address, len)) => (address, Some(len)),
                    None => (value, None),
                };
                let address: std::net::IpAddr = address
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse()
                    .map_err(|_| format!("`{value}`: not an address (ADDR or ADDR/LEN)"))?;
                let most = if address.is_ipv4() { 32 } else { 128 };
                let len = match len {
                    Some(len) => len
                        .parse::<u8>()
                        .ok()
                        .filter(|&l| l <= most)
                        .ok_or_else(|| format!("`{value}`: prefix length beyond {most}"))?,
                    None => most,
                };
                Term::Net(side, address, len)
            };
            terms.push(term);
        }
        Ok(Selector { terms })
    }

    /// Whether `sample` passes every term.
    pub fn matches(&self, sample: &SocketSample) -> bool {
        self.terms.iter().all(|term| {
            let ends = |side: Side, check: &dyn Fn(&SocketAddr) -> bool| match side {
                Side::Local => check(&sample.local),
                Side::Remote => check(&sample.remote),
                Side::Either => check(&sample.local) || check(&sample.remote),
            };
            match *term {
                Term::Port(side, port) => ends(side, &|a| a.port() == port),
                Term::Net(side, net, len) => ends(side, &|a| in_prefix(a.ip(), net, len)),
            }
        })
    }
}

/// Whether `address` is in `net/len` (an IPv4-mapped IPv6 address counts as IPv4).
fn in_prefix(address: std::net::IpAddr, net: std::net::IpAddr, len: u8) -> bool {
    use std::net::IpAddr;
    let address = match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    match (address, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}
