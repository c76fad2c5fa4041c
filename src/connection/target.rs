//! Worker targets as Wool and gRPC write them.
//!
//! Accepted forms: `host:port`, `dns://host:port`, `dns:///host:port` (gRPC's form, an optional
//! DNS authority before the third slash is ignored), `ipv4:address:port`, `ipv6:[address]:port`,
//! `[v6address]:port`, `unix:path` and `unix:///abs/path`. Ports are 1–65535.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use super::Error;

/// A parsed, canonical worker target. Equal targets share pooled channels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A TCP endpoint. `host` is a DNS name, an IPv4 address, or an IPv6 address without brackets.
    Tcp {
        /// Host name or IP address (IPv6 without brackets).
        host: String,
        /// TCP port, 1–65535.
        port: u16,
    },
    /// A Unix domain socket.
    Unix(PathBuf),
}

impl Target {
    /// Parses any of the forms in the module docs.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](super::ErrorKind::InvalidArgument) naming what is
    /// wrong (empty, unknown scheme, missing or out-of-range port, bad address).
    pub fn parse(text: &str) -> Result<Self, Error> {
        Self::parse_with(text, 1)
    }

    /// As [`parse`](Self::parse), for an address to listen on: port 0 (any free port) allowed.
    #[cfg(feature = "worker")]
    pub(crate) fn parse_listen(text: &str) -> Result<Self, Error> {
        Self::parse_with(text, 0)
    }

    fn parse_with(text: &str, min_port: u16) -> Result<Self, Error> {
        let invalid =
            |why: &str| Error::invalid_argument(format!("invalid target {text:?}: {why}"));
        if text.is_empty() {
            return Err(invalid("empty"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid("contains whitespace or control characters"));
        }
        if let Some(path) = text.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(invalid("empty socket path"));
            }
            if path.len() >= MAX_SOCKET_PATH {
                return Err(invalid(
                    "socket path too long (a Unix socket path holds at most 107 bytes)",
                ));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = text.strip_prefix("ipv4:") {
            let (host, port) = split_port(rest, min_port).map_err(&invalid)?;
            host.parse::<Ipv4Addr>()
                .map_err(|_| invalid("not an IPv4 address"))?;
            return Ok(Target::Tcp {
                host: host.into(),
                port,
            });
        }
        if let Some(rest) = text.strip_prefix("ipv6:") {
            let (host, port) = split_port(rest, min_port).map_err(&invalid)?;
            let host =
                unbracket(host).ok_or_else(|| invalid("IPv6 address must be in brackets"))?;
            host.parse::<Ipv6Addr>()
                .map_err(|_| invalid("not an IPv6 address"))?;
            return Ok(Target::Tcp {
                host: host.into(),
                port,
            });
        }
        let rest = match text.strip_prefix("dns:") {
            // dns://host:port, or dns://[authority]/host:port (gRPC), whose authority we ignore
            Some(rest) => match rest.strip_prefix("//") {
                Some(rest) => rest.split_once('/').map_or(rest, |(_, name)| name),
                None => rest,
            },
            None => text,
        };
        if rest.contains("://") || rest.contains('/') {
            return Err(invalid(
                "unknown scheme or stray '/' (use host:port, dns:, ipv4:, ipv6: or unix:)",
            ));
        }
        let (host, port) = split_port(rest, min_port).map_err(&invalid)?;
        let host = match unbracket(host) {
            Some(v6) => {
                v6.parse::<Ipv6Addr>()
                    .map_err(|_| invalid("not an IPv6 address"))?;
                v6
            }
            None if host.contains(':') => return Err(invalid("IPv6 address must be in brackets")),
            None if host.is_empty() => return Err(invalid("missing host")),
            None if !is_host_name(host) => {
                return Err(invalid("host must be a DNS name (letters, digits, '-', '_', '.'; at most 253) or an IP address"))
            }
            None => host,
        };
        Ok(Target::Tcp {
            host: host.into(),
            port,
        })
    }

    /// The name a worker certificate is verified against by default: the dialed host
    /// (`localhost` for a Unix socket).
    pub(crate) fn tls_name(&self) -> &str {
        match self {
            Target::Tcp { host, .. } => host,
            Target::Unix(_) => "localhost",
        }
    }
}

impl std::str::FromStr for Target {
    type Err = Error;

    /// As [`Target::parse`].
    fn from_str(text: &str) -> Result<Self, Error> {
        Target::parse(text)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            // A host named like a scheme (`ipv6:6` would read as an IPv6 target): the explicit
            // DNS form.
            Target::Tcp { host, port }
                if matches!(host.as_str(), "unix" | "ipv4" | "ipv6" | "dns") =>
            {
                write!(f, "dns:///{host}:{port}")
            }
            Target::Tcp { host, port } => write!(f, "{host}:{port}"),
            // A path starting with `//` needs the `unix://` form: `unix://x` means the path `x`.
            Target::Unix(path) if path.to_string_lossy().starts_with("//") => {
                write!(f, "unix://{}", path.display())
            }
            Target::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 108;

/// A name a resolver could look up: DNS labels (`_` allowed, as resolvers accept it), at most
/// 253 bytes; anything else can never be dialed and is the caller's mistake.
fn is_host_name(host: &str) -> bool {
    host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// `host:port`, the port at least `min_port` (1 to dial, 0 to listen on any free port).
fn split_port(text: &str, min_port: u16) -> Result<(&str, u16), &'static str> {
    let (host, port) = text.rsplit_once(':').ok_or("missing :port")?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err("port must be a number");
    }
    match port.parse::<u16>() {
        Ok(port) if port >= min_port => Ok((host, port)),
        _ if min_port == 0 => Err("port must be 0-65535"),
        _ => Err("port must be 1-65535"),
    }
}

fn unbracket(host: &str) -> Option<&str> {
    host.strip_prefix('[')?.strip_suffix(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Target {
        Target::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn every_wool_target_form_parses_to_its_canonical_target() {
        let cases = [
            ("localhost:50051", tcp("localhost", 50051)),
            ("dns://localhost:50051", tcp("localhost", 50051)),
            ("dns:///localhost:50051", tcp("localhost", 50051)),
            ("dns://8.8.8.8/localhost:50051", tcp("localhost", 50051)),
            ("127.0.0.1:1", tcp("127.0.0.1", 1)),
            ("ipv4:127.0.0.1:65535", tcp("127.0.0.1", 65535)),
            ("ipv6:[::1]:50051", tcp("::1", 50051)),
            ("[::1]:50051", tcp("::1", 50051)),
            ("unix:/tmp/w.sock", Target::Unix("/tmp/w.sock".into())),
            ("unix:///tmp/w.sock", Target::Unix("/tmp/w.sock".into())),
            ("unix:relative.sock", Target::Unix("relative.sock".into())),
        ];
        for (text, expected) in cases {
            assert_eq!(Target::parse(text).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn malformed_targets_are_invalid_arguments() {
        for text in [
            "",
            "localhost",
            "localhost:",
            ":50051",
            "localhost:99999",
            "localhost:0",
            "localhost:-1",
            "localhost:5x",
            "::1:50051",
            "ipv4:localhost:1",
            "ipv6:::1:5",
            "ipv6:[zz]:5",
            "unix:",
            "http://localhost:1",
            "host name:1",
            "a/b:1",
        ] {
            let error = Target::parse(text).unwrap_err();
            assert_eq!(
                error.kind(),
                super::super::ErrorKind::InvalidArgument,
                "{text}"
            );
            assert!(
                error.message().contains("invalid target"),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn overlong_names_and_socket_paths_are_invalid_arguments() {
        let long_host = format!("{}:1", "a".repeat(300));
        let long_path = format!("unix:/tmp/{}", "p".repeat(110));
        for text in [long_host, long_path] {
            let error = Target::parse(&text).unwrap_err();
            assert_eq!(error.kind(), super::super::ErrorKind::InvalidArgument);
            assert!(
                error.message().len() < 600,
                "the message does not repeat a huge input whole"
            );
        }
        assert!(Target::parse(&format!("unix:/tmp/{}", "p".repeat(90))).is_ok());
    }

    #[test]
    fn display_brackets_ipv6_and_tls_name_does_not() {
        let target = Target::parse("ipv6:[::1]:7").unwrap();
        assert_eq!(target.to_string(), "[::1]:7");
        assert_eq!(target.tls_name(), "::1");
    }

    /// Found by the fuzz target `target_parse`: a socket path starting with `//` printed as
    /// `unix://…`, which parses as the path without them; a host named `ipv6` (or another
    /// scheme) printed as `ipv6:6`, which parses as an IPv6 target.
    #[test]
    fn every_target_prints_as_text_that_parses_back_to_it() {
        for text in [
            "unix:////tmt/w.sock",
            "unix://x",
            "unix:///tmp/w.sock",
            "unix:rel/w.sock",
            "[::1]:50051",
            "ipv4:127.0.0.1:1",
            "dns://8.8.8.8/worker.svc:443",
            "dns://ipv6:06",
            "dns:unix:1",
            "dns:///dns:53",
        ] {
            let target = Target::parse(text).unwrap();
            assert_eq!(
                Target::parse(&target.to_string()).unwrap(),
                target,
                "{text}"
            );
        }
    }
}
