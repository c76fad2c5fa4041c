//! What every command is given: the global flags turned into credentials, channel options and
//! limits ([`Context`]); the workers to act on ([`Member`]), named on the command line or
//! discovered; the discoveries the flags name; and how a run fails ([`Failure`]).

use std::time::Duration;

use libwool::connection::{ChannelOptions, Peers};
use libwool::fleet::discovery::{
    DiscoveredWorker, Discovery, DnsDiscovery, LanDiscovery, LocalDiscovery,
};
use libwool::fleet::SweepOptions;
use libwool::Grace;
use libwool::{Error, WorkerConnection, WorkerCredentials};
use wool_cli as cli;

use crate::args::{DnsName, Fleet, Format, Global};

/// How a command fails: a usage error (exit 2, its message on stderr), or a run that had
/// failures (exit 1; they were reported as they happened).
pub enum Failure {
    /// Bad usage: the message, said on stderr after `woolctl: `.
    Usage(String),
    /// Some worker (or the listing, or the output) failed; already reported.
    Some,
}

impl From<Error> for Failure {
    /// A libwool error met before any worker was called (a malformed target, unreadable TLS
    /// files, a policy out of range) is a usage error.
    fn from(error: Error) -> Self {
        Failure::Usage(error.to_string())
    }
}

/// Reports `error` on stderr and fails the run (exit 1).
pub fn reported(error: impl std::fmt::Display) -> Failure {
    eprintln!("woolctl: {error}");
    Failure::Some
}

/// One worker as the commands see it: how it is named in the output, and its connection (or
/// why there is none; it then counts as failed and is never called).
pub struct Member {
    /// The target it is dialled at: as given on the command line, or its discovered address.
    pub target: String,
    /// Its discovery record, when it was discovered.
    pub discovered: Option<DiscoveredWorker>,
    /// Its connection, or why it could not be made.
    pub connection: Result<WorkerConnection, Error>,
}

/// The global flags, checked and turned into what the commands use.
pub struct Context {
    /// How results are printed.
    pub output: Format,
    /// TLS credentials (with the `--peer` policy), `None` for plaintext.
    pub credentials: Option<WorkerCredentials>,
    /// Channel options of every connection (the connect timeout).
    pub options: ChannelOptions,
    /// Whether a LAN listing keeps loopback, unspecified and link-local addresses.
    pub lan_allow_local: bool,
    /// Deadline of each poll, of a whole sweep and of a DNS lookup; added to a stop's grace.
    pub rpc_timeout: Duration,
    /// Most calls in flight at once.
    pub max_in_flight: usize,
}

impl Context {
    /// Checks the global flags and reads the TLS files.
    ///
    /// Errors (usage): TLS flags without `--tls-ca-cert`, unreadable or invalid TLS files or
    /// `--peer` names, a zero timeout.
    pub fn new(global: &Global) -> Result<Self, Failure> {
        let credentials = match &global.tls_ca_cert {
            None if global.tls_client_cert.is_some()
                || global.tls_server_name.is_some()
                || !global.peers.is_empty() =>
            {
                return Err(Failure::Usage(
                    "--tls-client-cert, --tls-client-key, --tls-server-name and --peer need \
                     --tls-ca-cert"
                        .into(),
                ))
            }
            None => None,
            Some(ca) => Some(WorkerCredentials::from_files(
                ca,
                global.tls_client_key.as_deref(),
                global.tls_client_cert.as_deref(),
                global.tls_client_cert.is_some(),
                global.tls_server_name.as_deref(),
            )?),
        };
        let credentials = match credentials {
            Some(credentials) if !global.peers.is_empty() => {
                Some(credentials.with_peers(Peers::names(&global.peers)?))
            }
            credentials => credentials,
        };
        let mut options = ChannelOptions::default();
        options.connect_timeout = Some(global.connect_timeout);
        Ok(Self {
            output: global.output,
            credentials,
            options,
            lan_allow_local: global.lan_allow_local,
            rpc_timeout: global.rpc_timeout,
            max_in_flight: usize::try_from(global.max_in_flight).unwrap_or(usize::MAX),
        })
    }

    /// Connections to the targets named on the command line, in their order.
    ///
    /// Errors (usage): a malformed target.
    pub fn members_of_targets(&self, targets: &[String]) -> Result<Vec<Member>, Failure> {
        targets
            .iter()
            .map(|target| {
                let connection = WorkerConnection::with_options(
                    target,
                    self.credentials.clone(),
                    self.options.clone(),
                )?;
                Ok(Member {
                    target: target.clone(),
                    discovered: None,
                    connection: Ok(connection),
                })
            })
            .collect()
    }

    /// The workers of a pool that the admission gate admits for these credentials; each one
    /// refused is named on stderr with why, and is never polled or stopped.
    ///
    /// Errors: the pool cannot be listed (reported on stderr, exit 1).
    pub fn members_of_pool(&self, discovery: &Discovery) -> Result<Vec<Member>, Failure> {
        let admission = discovery
            .list_admitted(self.credentials.as_ref())
            .map_err(reported)?;
        for (worker, refusal) in &admission.refused {
            eprintln!(
                "woolctl: not admitting worker {} at {}: incompatible {refusal}",
                worker.uid, worker.address
            );
        }
        if admission.admitted.is_empty() {
            eprintln!(
                "woolctl: {}",
                nobody_listed(discovery, Some(admission.refused.len()))
            );
        }
        Ok(admission
            .admitted
            .into_iter()
            .map(|worker| Member {
                target: worker.address.clone(),
                connection: worker.connect(self.credentials.as_ref(), self.options.clone()),
                discovered: Some(worker),
            })
            .collect())
    }

    /// The workers `fleet` names: by DNS name, by namespace, or as targets.
    ///
    /// Errors: as [`Context::members_of_pool`] and [`Context::members_of_targets`]; a bad DNS
    /// name or namespace is a usage error.
    pub fn members(&self, fleet: &Fleet) -> Result<Vec<Member>, Failure> {
        if let Some(dns) = fleet.dns.discovery(self.rpc_timeout)? {
            return self.members_of_pool(&dns);
        }
        match &fleet.namespace {
            Some(namespace) => self.members_of_pool(&discovery(
                namespace,
                fleet.lan,
                None,
                self.lan_allow_local,
            )?),
            None if fleet.lan => Err(Failure::Usage("--lan needs --namespace".into())),
            None => self.members_of_targets(&fleet.addresses),
        }
    }

    /// A sweep's options: `--max-in-flight` polls at once, all within `--rpc-timeout`.
    pub fn sweep_options(&self) -> SweepOptions {
        let mut options = SweepOptions::default();
        options.max_in_flight = self.max_in_flight;
        options.timeout = Some(self.rpc_timeout);
        options
    }

    /// The stop deadline for `grace`: the grace plus the RPC timeout (none when unbounded).
    pub fn stop_timeout(&self, grace: Grace) -> Option<Duration> {
        match grace {
            Grace::None => Some(self.rpc_timeout),
            Grace::Within(grace) => grace.checked_add(self.rpc_timeout),
            Grace::Unbounded => None,
        }
    }
}

impl DnsName {
    /// The DNS discovery asked for, if any, its lookup bounded by `timeout`.
    ///
    /// Errors (usage): the name is no valid DNS name.
    pub fn discovery(&self, timeout: Duration) -> Result<Option<Discovery>, Failure> {
        let (Some(name), Some(port)) = (&self.dns_name, self.port) else {
            return Ok(None);
        };
        Ok(Some(Discovery::Dns(
            DnsDiscovery::new(name, port)?.timeout(timeout),
        )))
    }
}

/// What stderr says when a listing leaves no worker to act on, `refused` of them refused by
/// the admission gate (`None`: not gated, `discover`): for a DNS name, that it resolves to no
/// addresses (the name exists, without A/AAAA records; a name that does not exist failed the
/// listing instead) or that none of its addresses was admitted; for a namespace, that it has
/// no (admitted) workers.
pub fn nobody_listed(discovery: &Discovery, refused: Option<usize>) -> String {
    match (discovery, refused) {
        (Discovery::Dns(dns), None | Some(0)) => format!(
            "{} resolves to no addresses (the name exists, with no A/AAAA records)",
            dns.name()
        ),
        (Discovery::Dns(dns), Some(refused)) => {
            format!("no admitted workers at {} ({refused} refused)", dns.name())
        }
        (_, None) => format!("no workers found in namespace {:?}", discovery.namespace()),
        (_, Some(refused)) => format!(
            "no admitted workers in namespace {:?} ({refused} refused)",
            discovery.namespace()
        ),
    }
}

/// The discovery of `namespace`: this host's shared-memory registry, or with `lan` DNS-SD over
/// multicast DNS (listening for `listen` when given, else the default; keeping local addresses
/// when `allow_local`).
///
/// Errors (usage): an invalid namespace.
pub fn discovery(
    namespace: &str,
    lan: bool,
    listen: Option<Duration>,
    allow_local: bool,
) -> Result<Discovery, Failure> {
    Ok(if lan {
        let lan = LanDiscovery::new(namespace)?.allow_local_addresses(allow_local);
        Discovery::Lan(match listen {
            Some(listen) => lan.listen_for(listen),
            None => lan,
        })
    } else {
        Discovery::Local(LocalDiscovery::new(namespace)?)
    })
}

/// SIGINT and SIGTERM (and SIGHUP, ignored), caught from now on, for the commands that run
/// until interrupted (a signal that arrives while no one waits is kept for the next wait).
///
/// Errors: a handler cannot be installed (reported on stderr, exit 1).
pub fn signals() -> Result<cli::Signals, Failure> {
    cli::Signals::take().map_err(reported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_listing_is_said_as_what_it_is() {
        let dns = Discovery::Dns(DnsDiscovery::new("workers.example", 50051).unwrap());
        let namespace = Discovery::Local(LocalDiscovery::new("batch").unwrap());
        assert_eq!(
            nobody_listed(&dns, Some(0)),
            "workers.example resolves to no addresses (the name exists, with no A/AAAA records)"
        );
        assert_eq!(nobody_listed(&dns, None), nobody_listed(&dns, Some(0)));
        assert_eq!(
            nobody_listed(&dns, Some(2)),
            "no admitted workers at workers.example (2 refused)"
        );
        assert_eq!(
            nobody_listed(&namespace, Some(1)),
            "no admitted workers in namespace \"batch\" (1 refused)"
        );
        assert_eq!(
            nobody_listed(&namespace, None),
            "no workers found in namespace \"batch\""
        );
    }
}
