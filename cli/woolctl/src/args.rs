//! The command line: the global flags ([`Global`]), the commands ([`Command`]) and the flag
//! value parsers. Clap rejects bad usage here (exit 2) before any command runs.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use libwool::fleet::parse_duration;
use libwool::Grace;

/// The usage line of a command taking a [`Fleet`]: its name, its own required flags, then the
/// three ways to name the workers.
macro_rules! usage {
    ($command:literal, $required:literal) => {
        concat!(
            "woolctl ",
            $command,
            " [OPTIONS]",
            $required,
            " (<ADDRESSES>... | --namespace <NAMESPACE> | --dns-name <NAME> --port <PORT>)"
        )
    };
}

/// What `sweep` and `reap` say when no workers are named.
pub const NO_TARGET: &str = "give addresses, --namespace or --dns-name: the workers to act on";

/// `woolctl`'s whole command line.
#[derive(Parser)]
#[command(
    name = "woolctl",
    version,
    about = "Poll, stop, discover, sweep and reap Wool workers",
    long_about = None
)]
pub struct Cli {
    /// The flags every command takes.
    #[command(flatten)]
    pub global: Global,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the command line as [`Parser::parse`] does (usage errors exit 2 with clap's
    /// message and the usage line), then what clap's requirements cannot say: `sweep` or `reap`
    /// with no workers named is refused with [`NO_TARGET`], also exit 2.
    pub fn parse_checked() -> Self {
        let cli = Self::parse();
        let (name, fleet) = match &cli.command {
            Command::Sweep { fleet } => ("sweep", fleet),
            Command::Reap(reap) => ("reap", &reap.fleet),
            _ => return cli,
        };
        if fleet.namespace.is_none() && fleet.dns.dns_name.is_none() && fleet.addresses.is_empty() {
            let mut command = Self::command();
            command.build();
            let subcommand = command
                .find_subcommand_mut(name)
                .expect("the command parsed is defined");
            subcommand
                .error(clap::error::ErrorKind::MissingRequiredArgument, NO_TARGET)
                .exit();
        }
        cli
    }
}

/// The flags every command takes: output format, TLS, discovery admission, deadlines. Listed
/// under "Global options" in every command's help, apart from the command's own.
#[derive(Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// How results are printed: a table, or one JSON object per worker per line.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// CA certificate (PEM) to verify workers with; turns TLS on.
    #[arg(long, global = true, value_name = "PATH")]
    pub tls_ca_cert: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS (with --tls-client-key).
    #[arg(long, global = true, value_name = "PATH", requires = "tls_client_key")]
    pub tls_client_cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS (with --tls-client-cert).
    #[arg(long, global = true, value_name = "PATH", requires = "tls_client_cert")]
    pub tls_client_key: Option<PathBuf>,
    /// Name to verify the worker's certificate against instead of its address.
    #[arg(long, global = true, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// A worker name to accept from discovery (repeatable; Wool's `peers`): a discovered
    /// worker is then admitted only if it advertises one of these names, and is verified
    /// against it (unless --tls-server-name is given, which wins). Needs --tls-ca-cert.
    #[arg(long = "peer", global = true, value_name = "NAME")]
    pub peers: Vec<String>,
    /// With --lan: also list workers whose advertised address is loopback, unspecified or
    /// link-local (refused by default: any host of the link can publish a record).
    #[arg(long, global = true)]
    pub lan_allow_local: bool,
    /// Limit on establishing each connection (e.g. 5s, 500ms, 2).
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_timeout, default_value = "5s", allow_hyphen_values = true)]
    pub connect_timeout: Duration,
    /// Deadline of each poll, and of a whole sweep (e.g. 5s); a stop's deadline is its grace
    /// plus this.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_timeout, default_value = "5s", allow_hyphen_values = true)]
    pub rpc_timeout: Duration,
    /// Most calls in flight at once (polls of a sweep, stops).
    #[arg(long, global = true, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_in_flight: u64,
}

/// `--output`: `table` (a header line, then a line per worker in columns) or `json` (one
/// compact JSON object per worker per line, no header).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// The commands, each run by the module of the same name.
#[derive(Subcommand)]
pub enum Command {
    /// Print each worker's idle seconds (as Wool's `WorkerConnection.idle`).
    Idle {
        /// Worker targets (host:port, unix:/path, ...).
        #[arg(required = true)]
        addresses: Vec<String>,
    },
    /// Stop (retire) workers, letting in-flight work run for the grace.
    Stop {
        /// Seconds (or a duration) for in-flight work: 0 cancels it, negative or inf waits
        /// however long.
        #[arg(long, value_parser = parse_grace, default_value = "30", allow_hyphen_values = true)]
        grace: Grace,
        /// Worker targets.
        #[arg(required = true)]
        addresses: Vec<String>,
    },
    /// List the workers of a Wool pool by its discovery namespace.
    Discover {
        /// The pool's namespace (as given to Wool's LocalDiscovery / LanDiscovery).
        #[arg(required_unless_present = "dns_name", conflicts_with = "dns_name")]
        namespace: Option<String>,
        #[command(flatten)]
        dns: DnsName,
        /// Browse DNS-SD over multicast DNS instead of this host's shared-memory registry.
        #[arg(long)]
        lan: bool,
        /// Keep watching and print joins, changes and leaves until interrupted.
        #[arg(long)]
        watch: bool,
        /// How long a LAN listing listens for answers.
        #[arg(long, value_parser = parse_duration, default_value = "1500ms", allow_hyphen_values = true)]
        listen: Duration,
    },
    /// Poll every worker of a pool (or of a list) with one deadline.
    #[command(override_usage = usage!("sweep", ""))]
    Sweep {
        #[command(flatten)]
        fleet: Fleet,
    },
    /// Retire the workers idle longer than a threshold (one round, or every --interval).
    #[command(override_usage = usage!("reap", " --idle-over <DURATION>"))]
    Reap(Reap),
}

/// `reap`'s flags.
#[derive(Args)]
pub struct Reap {
    /// Retire workers idle at least this long (e.g. 5m, 300s, 300).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub idle_over: Duration,
    /// Never leave fewer than this many answering workers.
    #[arg(long, default_value_t = 0)]
    pub keep: usize,
    /// Grace for each stop, as `stop --grace`.
    #[arg(long, value_parser = parse_grace, default_value = "30", allow_hyphen_values = true)]
    pub grace: Grace,
    /// Most stops per round.
    #[arg(long)]
    pub max_stops: Option<usize>,
    /// Decide and print, stop nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Repeat every so often, at least 100ms (re-discovering a pool each round), until
    /// SIGINT or SIGTERM, which also end a round in progress.
    #[arg(long, value_parser = parse_interval, allow_hyphen_values = true)]
    pub interval: Option<Duration>,
    #[command(flatten)]
    pub fleet: Fleet,
}

/// Which workers: a discovered pool or a list of targets; one of the three is needed, which
/// [`Cli::parse_checked`] asks for by name (clap's own requirement would name only one).
#[derive(Args)]
pub struct Fleet {
    /// The pool's discovery namespace.
    #[arg(long, conflicts_with_all = ["addresses", "dns_name"])]
    pub namespace: Option<String>,
    /// With --namespace: browse DNS-SD over multicast DNS.
    #[arg(long, requires = "namespace", conflicts_with = "dns_name")]
    pub lan: bool,
    #[command(flatten)]
    pub dns: DnsName,
    /// Worker targets (instead of --namespace or --dns-name).
    #[arg(conflicts_with = "dns_name")]
    pub addresses: Vec<String>,
}

/// A fleet named by DNS (instead of a namespace): each address the name resolves to.
#[derive(Args)]
pub struct DnsName {
    /// List the workers by DNS name: each A/AAAA address it resolves to (e.g. a Kubernetes
    /// headless Service) is a worker at --port. The lookup's deadline is --rpc-timeout.
    #[arg(long, value_name = "NAME", requires = "port")]
    pub dns_name: Option<String>,
    /// With --dns-name: the workers' port (1 to 65535).
    #[arg(long, requires = "dns_name", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
}

/// The shortest `--interval`: rounds back to back would only load the workers.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// `--interval`: a duration of at least [`MIN_INTERVAL`].
fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if interval < MIN_INTERVAL {
        return Err(format!("the interval must be at least 100ms, got {text:?}"));
    }
    Ok(interval)
}

/// `--connect-timeout`, `--rpc-timeout`: a duration above zero (a zero timeout would fail
/// every call before it is sent).
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout.is_zero() {
        return Err(format!("{text:?} is zero: a timeout is more than 0"));
    }
    Ok(timeout)
}

/// `--grace`: seconds (0 cancels in-flight work at once, negative or `inf` waits however
/// long), or a duration (`30s`, `2m`); NaN is refused.
fn parse_grace(text: &str) -> Result<Grace, String> {
    match text.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_nan() => Err("grace must be seconds, not NaN".into()),
        Ok(seconds) => Ok(Grace::from_seconds(seconds)),
        Err(_) => parse_duration(text).map(|d| {
            if d.is_zero() {
                Grace::None
            } else {
                Grace::Within(d)
            }
        }),
    }
}
