//! Where a worker listens: [`ListenAddress`] (parsed as the client parses targets, so the two
//! agree on `host:port`, `[v6]:port` and the `unix:` forms).

use std::path::PathBuf;
use std::str::FromStr;

use super::WorkerError;
use crate::connection::Target;

/// Where a worker listens: a TCP `host:port` (port 0 picks a free port) or a Unix socket path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    /// TCP, e.g. `127.0.0.1:0` or `[::1]:50051`.
    Tcp(String),
    /// A Unix domain socket at this path (given as `unix:PATH` or `unix:///abs/path`).
    Unix(PathBuf),
}

impl std::fmt::Display for ListenAddress {
    /// The address in the form [`FromStr`] reads: `host:port` or `unix:PATH`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddress::Tcp(address) => f.write_str(address),
            ListenAddress::Unix(path) => write!(f, "{}", Target::Unix(path.clone())),
        }
    }
}

impl FromStr for ListenAddress {
    type Err = WorkerError;

    /// Any form [`Target::parse`] accepts (the client's parser: one reading of addresses),
    /// and port 0 for any free port.
    ///
    /// Errors: [`WorkerError::InvalidAddress`] for anything else.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match Target::parse_listen(s) {
            Ok(Target::Unix(path)) => Ok(ListenAddress::Unix(path)),
            Ok(tcp @ Target::Tcp { .. }) => Ok(ListenAddress::Tcp(tcp.to_string())),
            Err(error) => Err(WorkerError::InvalidAddress(error.message().to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_read_as_targets_do_with_port_zero_allowed() {
        let tcp = |s: &str| ListenAddress::Tcp(s.to_string());
        for (text, want) in [
            ("127.0.0.1:0", tcp("127.0.0.1:0")),
            ("0.0.0.0:50051", tcp("0.0.0.0:50051")),
            ("[::1]:0", tcp("[::1]:0")),
            ("localhost:8081", tcp("localhost:8081")),
            (
                "unix:/run/w.sock",
                ListenAddress::Unix("/run/w.sock".into()),
            ),
            (
                "unix:///run/w.sock",
                ListenAddress::Unix("/run/w.sock".into()),
            ),
        ] {
            assert_eq!(text.parse::<ListenAddress>().unwrap(), want, "{text}");
        }
        for bad in [
            "",
            "127.0.0.1",
            "127.0.0.1:65536",
            "::1:0",
            "unix:",
            "host :1",
        ] {
            assert!(
                matches!(
                    bad.parse::<ListenAddress>(),
                    Err(WorkerError::InvalidAddress(_))
                ),
                "{bad}"
            );
        }
    }
}
