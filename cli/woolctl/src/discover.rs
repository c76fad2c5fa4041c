//! `woolctl discover`: list the workers of a pool (by namespace or DNS name), each with the
//! admission gate's verdict for the credentials given, or with `--watch` print its joins,
//! changes and leaves until SIGINT or SIGTERM.

use libwool::fleet::discovery::{DiscoveredWorker, Discovery, DiscoveryEvent, Refusal};
use serde::Serialize;

use crate::args::DnsName;
use crate::context::{discovery, nobody_listed, reported, signals, Context, Failure};
use crate::output::{print_rows, Column, Printer, Row};

/// `discover`'s arguments, as on the command line.
pub struct Discover {
    /// The pool's namespace (unless `dns` names the pool).
    pub namespace: Option<String>,
    /// The pool by DNS name instead.
    pub dns: DnsName,
    /// Browse DNS-SD over multicast DNS instead of this host's registry.
    pub lan: bool,
    /// Watch instead of listing once.
    pub watch: bool,
    /// How long a LAN listing listens for answers.
    pub listen: std::time::Duration,
}

/// Lists (or watches) the pool. Refused workers are listed, not failed: the run succeeds
/// when the pool could be listed (a count of the refused goes to stderr); a watch succeeds
/// when a signal ends it.
///
/// Errors: a bad namespace or DNS name (usage); the pool cannot be listed or watched
/// (reported on stderr, exit 1).
pub async fn run(context: &Context, args: Discover) -> Result<bool, Failure> {
    let discovery = match (args.dns.discovery(context.rpc_timeout)?, &args.namespace) {
        (Some(dns), _) => dns,
        (None, Some(namespace)) => discovery(
            namespace,
            args.lan,
            Some(args.listen),
            context.lan_allow_local,
        )?,
        (None, None) => return Err(Failure::Usage("give a namespace or --dns-name".into())),
    };
    if args.watch {
        watch(context, &discovery).await?;
        return Ok(true);
    }
    let workers = discovery.list().map_err(reported)?;
    if workers.is_empty() {
        eprintln!("woolctl: {}", nobody_listed(&discovery, None));
    }
    let rows: Vec<DiscoveredRow> = workers
        .iter()
        .map(|worker| DiscoveredRow::new(context, worker))
        .collect();
    let refused = rows.iter().filter(|row| !row.admission.admitted).count();
    print_rows(context.output, rows);
    if refused > 0 {
        eprintln!(
            "woolctl: {refused} of {} workers refused by the admission gate (never polled or \
             stopped with these credentials)",
            workers.len()
        );
    }
    Ok(true)
}

/// Prints a watch's events until SIGINT or SIGTERM.
///
/// Errors: the pool cannot be watched, or the watch fails (reported on stderr, exit 1).
async fn watch(context: &Context, discovery: &Discovery) -> Result<(), Failure> {
    let watch = discovery.watch().map_err(reported)?;
    let printer = Printer::start::<WatchRow>(context.output);
    let mut signals = signals()?;
    loop {
        tokio::select! {
            event = watch.next() => {
                let event = event.map_err(reported)?;
                let name = match &event {
                    DiscoveryEvent::Added(_) => "worker-added",
                    DiscoveryEvent::Updated(_) => "worker-updated",
                    DiscoveryEvent::Dropped(_) => "worker-dropped",
                };
                printer.print(&WatchRow {
                    event: name,
                    worker: DiscoveredRow::new(context, event.worker()),
                });
            }
            () = signals.next_stop() => return Ok(()),
        }
    }
}

/// A discovered worker with the admission gate's verdict for the credentials given. JSON: the
/// worker's record (`uid`, `address`, `pid`, `version`, `tags`, `extra`, `secure`, `identity`)
/// and an `admission` object, `{"admitted": true}` or `{"admitted": false, "arm", "reason",
/// "refusal"}`. Table: `UID  ADDRESS  PID  VERSION  SERVES  IDENTITY  ADMISSION  TAGS`
/// (SERVES `tls` or `plain`; ADMISSION `ok` or `refused:<arm>`; `-` for no identity or tags).
#[derive(Serialize)]
pub struct DiscoveredRow<'a> {
    #[serde(flatten)]
    worker: &'a DiscoveredWorker,
    admission: Admission,
}

/// The admission gate's verdict on a discovered worker.
#[derive(Serialize)]
struct Admission {
    admitted: bool,
    /// Which rule refused it: `security`, `version` or `identity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    arm: Option<&'static str>,
    /// Why, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The refusal itself (tagged by `arm`, with the values compared).
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<Refusal>,
}

impl<'a> DiscoveredRow<'a> {
    /// The row of `worker`, judged for the context's credentials.
    pub fn new(context: &Context, worker: &'a DiscoveredWorker) -> Self {
        let refusal = worker.refusal(context.credentials.as_ref());
        Self {
            worker,
            admission: Admission {
                admitted: refusal.is_none(),
                arm: refusal.as_ref().map(Refusal::arm),
                reason: refusal.as_ref().map(ToString::to_string),
                refusal,
            },
        }
    }
}

impl Row for DiscoveredRow<'_> {
    fn columns() -> Vec<Column> {
        vec![
            Column::left("UID", 36),
            Column::left("ADDRESS", 21),
            Column::right("PID", 7),
            Column::left("VERSION", 8),
            Column::left("SERVES", 6),
            Column::left("IDENTITY", 16),
            Column::left("ADMISSION", 17),
            Column::left("TAGS", 0),
        ]
    }

    fn cells(&self) -> Vec<String> {
        let worker = self.worker;
        let tags = worker.tags.iter().cloned().collect::<Vec<_>>().join(",");
        vec![
            worker.uid.to_string(),
            worker.address.clone(),
            worker.pid.to_string(),
            worker.version.clone(),
            if worker.secure { "tls" } else { "plain" }.to_string(),
            worker.identity.as_deref().unwrap_or("-").to_string(),
            match self.admission.arm {
                None => "ok".to_string(),
                Some(arm) => format!("refused:{arm}"),
            },
            if tags.is_empty() {
                "-".to_string()
            } else {
                tags
            },
        ]
    }
}

/// A watch's event: `{"event": "worker-added" | "worker-updated" | "worker-dropped",
/// "worker": <a DiscoveredRow>}`; in the table, an EVENT column before the worker's.
#[derive(Serialize)]
pub struct WatchRow<'a> {
    event: &'static str,
    worker: DiscoveredRow<'a>,
}

impl Row for WatchRow<'_> {
    fn columns() -> Vec<Column> {
        // As wide as the longest event name, `worker-updated`.
        let mut columns = vec![Column::left("EVENT", 14)];
        columns.extend(DiscoveredRow::columns());
        columns
    }

    fn cells(&self) -> Vec<String> {
        let mut cells = vec![self.event.to_string()];
        cells.extend(self.worker.cells());
        cells
    }
}
