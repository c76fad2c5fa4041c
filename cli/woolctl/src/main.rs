//! `woolctl`: the fleet job from a shell — poll, stop, discover, sweep and reap Wool workers.
//!
//! Results go to stdout (a table, or with `--output json` one JSON object per worker per
//! line), diagnostics to stderr. Exit status: 0 when every worker succeeded, 1 when any failed,
//! 2 on usage errors. TLS flags are named as grpc_health_probe names them.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};
use futures_util::StreamExt;
use libwool::connection::{ChannelOptions, Peers};
use libwool::fleet::discovery::{
    DiscoveredWorker, Discovery, DiscoveryEvent, DnsDiscovery, LanDiscovery, LocalDiscovery,
    Refusal,
};
use libwool::fleet::{
    parse_duration, retire, sweep_observed, Decision, RetirePolicy, SweepOptions,
};
use libwool::Grace;
use libwool::{Error, WorkerConnection, WorkerCredentials};
use serde_json::json;
use wool_cli as cli;

#[derive(Parser)]
#[command(
    name = "woolctl",
    version,
    about = "Poll, stop, discover, sweep and reap Wool workers"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Global {
    /// How results are printed: a table, or one JSON object per worker per line.
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// CA certificate (PEM) to verify workers with; turns TLS on.
    #[arg(long, global = true, value_name = "PATH")]
    tls_ca_cert: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for mutual TLS (with --tls-client-key).
    #[arg(long, global = true, value_name = "PATH", requires = "tls_client_key")]
    tls_client_cert: Option<std::path::PathBuf>,
    /// Client key (PEM) for mutual TLS (with --tls-client-cert).
    #[arg(long, global = true, value_name = "PATH", requires = "tls_client_cert")]
    tls_client_key: Option<std::path::PathBuf>,
    /// Name to verify the worker's certificate against instead of its address.
    #[arg(long, global = true, value_name = "NAME")]
    tls_server_name: Option<String>,
    /// A worker name to accept from discovery (repeatable; Wool's `peers`): a discovered
    /// worker is then admitted only if it advertises one of these names, and is verified
    /// against it (unless --tls-server-name is given, which wins). Needs --tls-ca-cert.
    #[arg(long = "peer", global = true, value_name = "NAME")]
    peers: Vec<String>,
    /// With --lan: also list workers whose advertised address is loopback, unspecified or
    /// link-local (refused by default: any host of the link can publish a record).
    #[arg(long, global = true)]
    lan_allow_local: bool,
    /// Limit on establishing each connection (e.g. 5s, 500ms, 2).
    #[arg(long, global = true, value_parser = parse_duration, default_value = "5s")]
    connect_timeout: Duration,
    /// Deadline of each poll, and of a whole sweep (e.g. 5s); a stop's deadline is its grace
    /// plus this.
    #[arg(long, global = true, value_parser = parse_duration, default_value = "5s")]
    rpc_timeout: Duration,
    /// Most calls in flight at once (polls of a sweep, stops).
    #[arg(long, global = true, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    max_in_flight: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
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
        #[arg(long, value_parser = parse_duration, default_value = "1500ms")]
        listen: Duration,
    },
    /// Poll every worker of a pool (or of a list) with one deadline.
    Sweep {
        #[command(flatten)]
        fleet: Fleet,
    },
    /// Retire the workers idle longer than a threshold (one round, or every --interval).
    Reap {
        /// Retire workers idle at least this long (e.g. 5m, 300s, 300).
        #[arg(long, value_parser = parse_duration)]
        idle_over: Duration,
        /// Never leave fewer than this many answering workers.
        #[arg(long, default_value_t = 0)]
        keep: usize,
        /// Grace for each stop, as `stop --grace`.
        #[arg(long, value_parser = parse_grace, default_value = "30", allow_hyphen_values = true)]
        grace: Grace,
        /// Most stops per round.
        #[arg(long)]
        max_stops: Option<usize>,
        /// Decide and print, stop nothing.
        #[arg(long)]
        dry_run: bool,
        /// Repeat every so often, at least 100ms (re-discovering a pool each round), until
        /// SIGINT or SIGTERM, which also end a round in progress.
        #[arg(long, value_parser = parse_interval)]
        interval: Option<Duration>,
        #[command(flatten)]
        fleet: Fleet,
    },
}

/// Which workers: a discovered pool or a list of targets.
#[derive(Args)]
struct Fleet {
    /// The pool's discovery namespace.
    #[arg(
        long,
        conflicts_with_all = ["addresses", "dns_name"],
        required_unless_present_any = ["addresses", "dns_name"]
    )]
    namespace: Option<String>,
    /// With --namespace: browse DNS-SD over multicast DNS.
    #[arg(long, requires = "namespace", conflicts_with = "dns_name")]
    lan: bool,
    #[command(flatten)]
    dns: DnsName,
    /// Worker targets (instead of --namespace or --dns-name).
    #[arg(conflicts_with = "dns_name")]
    addresses: Vec<String>,
}

/// A fleet named by DNS (instead of a namespace): each address the name resolves to.
#[derive(Args)]
struct DnsName {
    /// List the workers by DNS name: each A/AAAA address it resolves to (e.g. a Kubernetes
    /// headless Service) is a worker at --port. The lookup's deadline is --rpc-timeout.
    #[arg(long, value_name = "NAME", requires = "port")]
    dns_name: Option<String>,
    /// With --dns-name: the workers' port (1 to 65535).
    #[arg(long, requires = "dns_name", value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
}

impl DnsName {
    /// The DNS discovery asked for, if any, its lookup bounded by `timeout`.
    fn discovery(&self, timeout: Duration) -> Result<Option<Discovery>, Failure> {
        let (Some(name), Some(port)) = (&self.dns_name, self.port) else {
            return Ok(None);
        };
        Ok(Some(Discovery::Dns(
            DnsDiscovery::new(name, port)?.timeout(timeout),
        )))
    }
}

/// A usage error (exit 2) or a run that had failures (exit 1).
enum Failure {
    Usage(String),
    Some,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Usage(error.to_string())
    }
}

/// The shortest `--interval`: rounds back to back would only load the workers.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if interval < MIN_INTERVAL {
        return Err(format!("the interval must be at least 100ms, got {text:?}"));
    }
    Ok(interval)
}

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

/// One worker as the commands see it: how it is named in the output, and its connection.
struct Member {
    target: String,
    discovered: Option<DiscoveredWorker>,
    connection: Result<WorkerConnection, Error>,
}

struct Context {
    output: Output,
    credentials: Option<WorkerCredentials>,
    options: ChannelOptions,
    lan_allow_local: bool,
    rpc_timeout: Duration,
    max_in_flight: usize,
}

impl Context {
    fn new(global: &Global) -> Result<Self, Failure> {
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
        if global.connect_timeout.is_zero() || global.rpc_timeout.is_zero() {
            return Err(Failure::Usage(
                "--connect-timeout and --rpc-timeout must be positive".into(),
            ));
        }
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

    /// Connections to the targets named on the command line; a malformed one is a usage error.
    fn members_of_targets(&self, targets: &[String]) -> Result<Vec<Member>, Failure> {
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
    fn members_of_pool(&self, discovery: &Discovery) -> Result<Vec<Member>, Failure> {
        let admission = discovery
            .list_admitted(self.credentials.as_ref())
            .map_err(|e| {
                eprintln!("woolctl: {e}");
                Failure::Some
            })?;
        for (worker, refusal) in &admission.refused {
            eprintln!(
                "woolctl: not admitting worker {} at {}: incompatible {refusal}",
                worker.uid, worker.address
            );
        }
        if admission.admitted.is_empty() {
            eprintln!(
                "woolctl: no admitted workers in namespace {:?} ({} refused)",
                discovery.namespace(),
                admission.refused.len()
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

    fn members(&self, fleet: &Fleet) -> Result<Vec<Member>, Failure> {
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

    fn sweep_options(&self) -> SweepOptions {
        let mut options = SweepOptions::default();
        options.max_in_flight = self.max_in_flight;
        options.timeout = Some(self.rpc_timeout);
        options
    }

    /// The stop deadline for `grace`: the grace plus the RPC timeout (none when unbounded).
    fn stop_timeout(&self, grace: Grace) -> Option<Duration> {
        match grace {
            Grace::None => Some(self.rpc_timeout),
            Grace::Within(grace) => grace.checked_add(self.rpc_timeout),
            Grace::Unbounded => None,
        }
    }
}

fn discovery(
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

/// Polls the members (those that could not be made into connections report why), showing a
/// progress line on a terminal's stderr once the sweep has taken a second.
async fn sweep_members(context: &Context, members: &[Member]) -> Vec<Result<f64, Error>> {
    let live: Vec<&WorkerConnection> = members
        .iter()
        .filter_map(|m| m.connection.as_ref().ok())
        .collect();
    let done = Arc::new(AtomicUsize::new(0));
    let progress = std::io::stderr().is_terminal().then(|| {
        let done = Arc::clone(&done);
        let total = live.len();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            loop {
                eprint!(
                    "\rsweeping: {}/{} answered",
                    done.load(Ordering::Relaxed),
                    total
                );
                let _ = std::io::stderr().flush();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    });
    let outcomes = sweep_observed(live, &context.sweep_options(), |_, _| {
        done.fetch_add(1, Ordering::Relaxed);
    })
    .await
    .expect("the sweep options are valid");
    if let Some(progress) = progress {
        progress.abort();
        eprint!("\r\x1b[K");
    }
    let mut outcomes = outcomes.into_iter();
    members
        .iter()
        .map(|member| match &member.connection {
            Ok(_) => outcomes.next().expect("one outcome per connection"),
            Err(error) => Err(error.clone()),
        })
        .collect()
}

fn error_json(error: &Error) -> serde_json::Value {
    json!({
        "kind": error.kind().as_str(),
        "code": error.code().map(|c| c as i32),
        "message": error.message(),
    })
}

fn member_json(member: &Member) -> serde_json::Value {
    let mut object = json!({ "target": member.target });
    if let Some(worker) = &member.discovered {
        object["uid"] = json!(worker.uid);
    }
    object
}

/// Set once stdout failed for a reason other than a closed pipe: the run then exits 1.
static OUTPUT_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn print_line(line: impl std::fmt::Display) {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        Ok(()) => {}
        // A closed pipe (woolctl ... | head) ends the output, not the program's decisions.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(error) => {
            if !OUTPUT_FAILED.swap(true, Ordering::Relaxed) {
                eprintln!("woolctl: cannot write the results: {error}");
            }
        }
    }
}

fn seconds_cell(outcome: &Result<f64, Error>) -> String {
    match outcome {
        Ok(seconds) => format!("{seconds:.3}"),
        Err(_) => "-".into(),
    }
}

fn print_idle(context: &Context, members: &[Member], outcomes: &[Result<f64, Error>]) -> bool {
    let mut all_ok = true;
    if context.output == Output::Table {
        print_line(format!(
            "{:<36}  {:>12}  {}",
            "TARGET", "IDLE_SECONDS", "STATUS"
        ));
    }
    for (member, outcome) in members.iter().zip(outcomes) {
        all_ok &= outcome.is_ok();
        match context.output {
            Output::Json => {
                let mut object = member_json(member);
                match outcome {
                    Ok(seconds) => {
                        object["ok"] = json!(true);
                        object["idle_seconds"] = json!(seconds);
                    }
                    Err(error) => {
                        object["ok"] = json!(false);
                        object["error"] = error_json(error);
                    }
                }
                print_line(object);
            }
            Output::Table => {
                let status = match outcome {
                    Ok(_) => "ok".to_string(),
                    Err(error) => error.to_string(),
                };
                print_line(format!(
                    "{:<36}  {:>12}  {status}",
                    member.target,
                    seconds_cell(outcome)
                ));
            }
        }
    }
    all_ok
}

/// A discovered worker's line; `refusal` is the admission gate's verdict for the credentials
/// given (JSON: an `admission` object, `{"admitted": true}` or `{"admitted": false, "arm": ...,
/// "reason": ...}`; table: an ADMISSION column, `ok` or `refused:<arm>`).
fn print_discovered(
    output: Output,
    worker: &DiscoveredWorker,
    refusal: Option<&Refusal>,
    event: Option<&str>,
) {
    let admission = match refusal {
        None => json!({ "admitted": true }),
        Some(refusal) => json!({
            "admitted": false,
            "arm": refusal.arm(),
            "reason": refusal.to_string(),
            "refusal": refusal,
        }),
    };
    match output {
        Output::Json => {
            let mut object = serde_json::to_value(worker).expect("serializes");
            object["admission"] = admission;
            match event {
                None => print_line(object),
                Some(event) => print_line(json!({ "event": event, "worker": object })),
            }
        }
        Output::Table => {
            let tags = worker.tags.iter().cloned().collect::<Vec<_>>().join(",");
            let prefix = event.map(|e| format!("{e:<15} ")).unwrap_or_default();
            print_line(format!(
                "{prefix}{:<36}  {:<21}  {:>7}  {:<8}  {:<6}  {:<16}  {:<17}  {}",
                worker.uid,
                worker.address,
                worker.pid,
                worker.version,
                if worker.secure { "tls" } else { "plain" },
                worker.identity.as_deref().unwrap_or("-"),
                match refusal {
                    None => "ok".to_string(),
                    Some(refusal) => format!("refused:{}", refusal.arm()),
                },
                if tags.is_empty() {
                    "-".to_string()
                } else {
                    tags
                },
            ));
        }
    }
}

fn discovered_header(event: bool) {
    print_line(format!(
        "{}{:<36}  {:<21}  {:>7}  {:<8}  {:<6}  {:<16}  {:<17}  {}",
        if event {
            format!("{:<15} ", "EVENT")
        } else {
            String::new()
        },
        "UID",
        "ADDRESS",
        "PID",
        "VERSION",
        "SERVES",
        "IDENTITY",
        "ADMISSION",
        "TAGS"
    ));
}

fn print_decisions(
    context: &Context,
    members: &[Member],
    decisions: &[Decision],
    dry_run: bool,
) -> bool {
    let mut all_ok = true;
    if context.output == Output::Table {
        print_line(format!(
            "{:<36}  {:>12}  {:<12}  {:<17}  {}",
            "TARGET", "IDLE_SECONDS", "ACTION", "REASON", "DETAIL"
        ));
    }
    for (member, decision) in members.iter().zip(decisions) {
        all_ok &= decision.idle.is_ok() && !matches!(decision.stop, Some(Err(_)));
        let action = match (decision.retires(), &decision.stop, dry_run) {
            (false, _, _) => "keep",
            (true, _, true) => "would-retire",
            (true, Some(Ok(())), _) => "retired",
            (true, _, _) => "stop-failed",
        };
        let detail = match (&decision.idle, &decision.stop) {
            (Err(error), _) | (_, Some(Err(error))) => Some(error),
            _ => None,
        };
        match context.output {
            Output::Json => {
                let mut object = member_json(member);
                object["action"] = json!(action);
                object["reason"] = json!(decision.reason.as_str());
                object["idle_seconds"] = json!(decision.idle.as_ref().ok());
                object["ok"] = json!(detail.is_none());
                if let Some(error) = detail {
                    object["error"] = error_json(error);
                }
                print_line(object);
            }
            Output::Table => print_line(format!(
                "{:<36}  {:>12}  {:<12}  {:<17}  {}",
                member.target,
                seconds_cell(&decision.idle),
                action,
                decision.reason.as_str(),
                detail.map(ToString::to_string).unwrap_or_default(),
            )),
        }
    }
    all_ok
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let context = Context::new(&cli.global)?;
    let all_ok = match cli.command {
        Command::Idle { addresses } => {
            let members = context.members_of_targets(&addresses)?;
            let outcomes = sweep_members(&context, &members).await;
            print_idle(&context, &members, &outcomes)
        }
        Command::Sweep { fleet } => {
            let members = context.members(&fleet)?;
            let outcomes = sweep_members(&context, &members).await;
            print_idle(&context, &members, &outcomes)
        }
        Command::Stop { grace, addresses } => {
            let members = context.members_of_targets(&addresses)?;
            let timeout = context.stop_timeout(grace);
            let stops: Vec<Result<(), Error>> = futures_util::stream::iter(members.iter())
                .map(|member| async move {
                    match &member.connection {
                        Ok(connection) => connection.stop(grace, timeout).await,
                        Err(error) => Err(error.clone()),
                    }
                })
                .buffered(context.max_in_flight)
                .collect()
                .await;
            let mut all_ok = true;
            if context.output == Output::Table {
                print_line(format!("{:<36}  {}", "TARGET", "STATUS"));
            }
            for (member, stop) in members.iter().zip(&stops) {
                all_ok &= stop.is_ok();
                match context.output {
                    Output::Json => {
                        let mut object = member_json(member);
                        object["ok"] = json!(stop.is_ok());
                        if let Err(error) = stop {
                            object["error"] = error_json(error);
                        } else {
                            object["stopped"] = json!(true);
                        }
                        print_line(object);
                    }
                    Output::Table => print_line(format!(
                        "{:<36}  {}",
                        member.target,
                        match stop {
                            Ok(()) => "stopped".to_string(),
                            Err(error) => error.to_string(),
                        }
                    )),
                }
            }
            all_ok
        }
        Command::Discover {
            namespace,
            dns,
            lan,
            watch,
            listen,
        } => {
            let discovery = match (dns.discovery(context.rpc_timeout)?, &namespace) {
                (Some(dns), _) => dns,
                (None, Some(namespace)) => {
                    discovery(namespace, lan, Some(listen), context.lan_allow_local)?
                }
                (None, None) => {
                    return Err(Failure::Usage("give a namespace or --dns-name".into()))
                }
            };
            let namespace = discovery.namespace().to_owned();
            if watch {
                return watch_pool(&context, &discovery).await;
            }
            let workers = discovery.list().map_err(|e| {
                eprintln!("woolctl: {e}");
                Failure::Some
            })?;
            if workers.is_empty() {
                eprintln!("woolctl: no workers found in namespace {namespace:?}");
            }
            if context.output == Output::Table {
                discovered_header(false);
            }
            let mut refused = 0;
            for worker in &workers {
                let refusal = worker.refusal(context.credentials.as_ref());
                refused += usize::from(refusal.is_some());
                print_discovered(context.output, worker, refusal.as_ref(), None);
            }
            if refused > 0 {
                eprintln!(
                    "woolctl: {refused} of {} workers refused by the admission gate (never \
                     polled or stopped with these credentials)",
                    workers.len()
                );
            }
            true
        }
        Command::Reap {
            idle_over,
            keep,
            grace,
            max_stops,
            dry_run,
            interval,
            fleet,
        } => {
            let mut policy = RetirePolicy::new(idle_over);
            policy.grace = grace;
            policy.stop_timeout = context.stop_timeout(grace);
            policy.keep_min = keep;
            policy.max_stops = max_stops;
            policy.dry_run = dry_run;
            policy.validate()?;
            // With an interval, SIGINT and SIGTERM end the loop, also in the middle of a round.
            let mut signals = interval.map(|_| signals()).transpose()?;
            let mut all_ok = true;
            loop {
                let round = reap_round(&context, &fleet, &policy, dry_run);
                all_ok &= match signals.as_mut() {
                    None => round.await?,
                    Some(signals) => tokio::select! {
                        ok = round => ok?,
                        () = signals.next_stop() => break,
                    },
                };
                let (Some(interval), Some(signals)) = (interval, signals.as_mut()) else {
                    break;
                };
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    () = signals.next_stop() => break,
                }
            }
            all_ok
        }
    };
    if all_ok {
        Ok(())
    } else {
        Err(Failure::Some)
    }
}

/// One reap round: discover (or take the targets), sweep, decide, stop, print; whether every
/// worker succeeded.
async fn reap_round(
    context: &Context,
    fleet: &Fleet,
    policy: &RetirePolicy,
    dry_run: bool,
) -> Result<bool, Failure> {
    let members = context.members(fleet)?;
    let polls = sweep_members(context, &members).await;
    let mut decisions = retire::decide(polls, policy);
    // Workers that could not be made into connections failed their poll: never stopped.
    let workers: Vec<Option<&WorkerConnection>> =
        members.iter().map(|m| m.connection.as_ref().ok()).collect();
    retire::apply(&workers, &mut decisions, policy, context.max_in_flight).await?;
    Ok(print_decisions(context, &members, &decisions, dry_run))
}

/// Prints a watch's events until SIGINT or SIGTERM.
async fn watch_pool(context: &Context, discovery: &Discovery) -> Result<(), Failure> {
    let output = context.output;
    let watch = discovery.watch().map_err(|e| {
        eprintln!("woolctl: {e}");
        Failure::Some
    })?;
    if output == Output::Table {
        discovered_header(true);
    }
    let mut signals = signals()?;
    loop {
        tokio::select! {
            event = watch.next() => {
                let event = event.map_err(|e| {
                    eprintln!("woolctl: {e}");
                    Failure::Some
                })?;
                let name = match &event {
                    DiscoveryEvent::Added(_) => "worker-added",
                    DiscoveryEvent::Updated(_) => "worker-updated",
                    DiscoveryEvent::Dropped(_) => "worker-dropped",
                };
                let refusal = event.worker().refusal(context.credentials.as_ref());
                print_discovered(output, event.worker(), refusal.as_ref(), Some(name));
            }
            () = signals.next_stop() => return Ok(()),
        }
    }
}

/// SIGINT and SIGTERM (and SIGHUP, ignored), caught from now on, for the commands that run
/// until interrupted (a signal that arrives while no one waits is kept for the next wait).
fn signals() -> Result<cli::Signals, Failure> {
    cli::Signals::take().map_err(|message| {
        eprintln!("woolctl: {message}");
        Failure::Some
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse(); // usage errors exit 2 here
                            // Text logs on stderr at RUST_LOG's level, else warn: the rows are the output.
    if let Err(message) = cli::init_logs(cli::LogFormat::Text, None, "warn") {
        eprintln!("woolctl: {message}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let started = Instant::now();
    let outcome = runtime.block_on(run(cli));
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "done");
    if OUTPUT_FAILED.load(Ordering::Relaxed) {
        return ExitCode::from(1);
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Some) => ExitCode::from(1),
        Err(Failure::Usage(message)) => {
            eprintln!("woolctl: {message}");
            ExitCode::from(2)
        }
    }
}
