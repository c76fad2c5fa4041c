//! The evidence of each case: a timeline sampled every second (the Deployment's
//! `spec.replicas` and what wool-scaler last answered for the ScaledObject: its
//! `wool_scaler_active` and `wool_scaler_busy_workers`, with the calls counted), the case's
//! marks between the samples, and the checks made on them.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Seconds since the Unix epoch, with fractions.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// One sample of a metrics exposition: its name, labels and value.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Series {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses `name{k="v",…} value` (OpenMetrics text; quoted values may hold commas).
fn parse_series(line: &str) -> Option<Series> {
    let (head, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (head, ""),
    };
    let mut parsed = Vec::new();
    let mut rest = labels;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, next)) = chars.next() {
                        value.push(next);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        parsed.push((key.trim_start_matches(',').to_owned(), value));
        rest = &after[end..];
    }
    Some(Series {
        name: name.to_owned(),
        labels: parsed,
        value,
    })
}

/// One scrape of the metrics endpoint at `address` (plain HTTP/1.1); empty when it does not
/// answer within 2 s.
pub async fn scrape(address: &str) -> Vec<Series> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        let request =
            format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
    };
    let body = tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(parse_series)
        .collect()
}

/// Whether the scaler at `metrics` recorded an answer for ScaledObject `object` (`ns/name`).
pub async fn served(metrics: &str, object: &str) -> bool {
    scrape(metrics)
        .await
        .iter()
        .any(|s| s.name == "wool_scaler_busy_workers" && s.label("scaledobject") == Some(object))
}

/// A line of the timeline.
#[derive(Debug, Clone)]
enum Entry {
    Sample {
        at: f64,
        replicas: Option<i32>,
        active: Option<f64>,
        metric: Option<f64>,
        calls: String,
    },
    Mark {
        at: f64,
        text: String,
    },
}

/// A case's timeline: sampled every second by a task of its own from [`Timeline::start`] until
/// [`Timeline::stop`].
pub struct Timeline {
    pub t0: f64,
    /// `ns/name` of the Deployment and ScaledObject sampled.
    pub object: String,
    entries: Arc<Mutex<Vec<Entry>>>,
    sampler: Option<tokio::task::JoinHandle<()>>,
}

fn show(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v}"))
}

impl Timeline {
    /// Starts sampling Deployment `ns/name` and the scaler's metrics at `metrics` for
    /// ScaledObject `ns/name`; times count from `t0`.
    pub fn start(client: &Client, ns: &str, name: &str, metrics: &str, t0: f64) -> Self {
        let entries = Arc::new(Mutex::new(Vec::new()));
        let (client, ns, name, metrics) = (
            client.clone(),
            ns.to_owned(),
            name.to_owned(),
            metrics.to_owned(),
        );
        let object = format!("{ns}/{name}");
        let sampled = Arc::clone(&entries);
        let key = object.clone();
        let sampler = tokio::spawn(async move {
            loop {
                let replicas = tokio::time::timeout(
                    Duration::from_secs(2),
                    crate::api::replicas(&client, &ns, &name),
                )
                .await
                .ok()
                .flatten();
                let at = now();
                let series = scrape(&metrics).await;
                let of_object = |metric: &str| {
                    series
                        .iter()
                        .find(|s| s.name == metric && s.label("scaledobject") == Some(key.as_str()))
                        .map(|s| s.value)
                };
                let calls = series
                    .iter()
                    .filter(|s| s.name == "wool_scaler_calls_total")
                    .map(|s| {
                        format!(
                            "{}.{}={}",
                            s.label("rpc").unwrap_or("?"),
                            s.label("answer").unwrap_or("?"),
                            s.value
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                sampled.lock().unwrap().push(Entry::Sample {
                    at,
                    replicas,
                    active: of_object("wool_scaler_active"),
                    metric: of_object("wool_scaler_busy_workers"),
                    calls,
                });
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Self {
            t0,
            object,
            entries,
            sampler: Some(sampler),
        }
    }

    /// Adds a mark at this moment.
    pub fn mark(&self, text: impl Into<String>) {
        self.entries.lock().unwrap().push(Entry::Mark {
            at: now(),
            text: text.into(),
        });
    }

    /// Stops sampling.
    pub fn stop(&mut self) {
        if let Some(sampler) = self.sampler.take() {
            sampler.abort();
        }
    }

    fn samples(&self) -> Vec<(f64, i32)> {
        self.entries
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Entry::Sample {
                    at,
                    replicas: Some(r),
                    ..
                } => Some((*at, *r)),
                _ => None,
            })
            .collect()
    }

    /// The time of the first sample at or after `after` whose replicas satisfy `condition`.
    pub fn first_time(&self, after: f64, condition: impl Fn(i32) -> bool) -> Option<f64> {
        self.samples()
            .into_iter()
            .find(|(at, r)| *at >= after && condition(*r))
            .map(|(at, _)| at)
    }

    /// The most replicas sampled in `[from, to]` (0 when none).
    pub fn max_between(&self, from: f64, to: f64) -> i32 {
        self.samples()
            .into_iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(_, r)| r)
            .max()
            .unwrap_or(0)
            .max(0)
    }

    /// Whether the scaler answered active for the object at a sample in `[from, to]`.
    pub fn active_between(&self, from: f64, to: f64) -> bool {
        self.entries.lock().unwrap().iter().any(|e| {
            matches!(e, Entry::Sample { at, active: Some(a), .. } if *at >= from && *at <= to && *a > 0.0)
        })
    }

    /// The timeline as printed: seconds from `t0`, a line per sample that differs from the one
    /// before (the call counters aside), and every mark.
    pub fn render(&self) -> String {
        let mut text = format!(
            "    timeline of {} (s from the case's start; replicas = Deployment spec.replicas; \
             active/metric = wool-scaler's last IsActive and metric for it):\n",
            self.object
        );
        let mut last = String::new();
        for entry in self.entries.lock().unwrap().iter() {
            match entry {
                Entry::Sample {
                    at,
                    replicas,
                    active,
                    metric,
                    calls,
                } => {
                    let key = format!(
                        "replicas={} active={} metric={}",
                        replicas.map_or("?".into(), |r| r.to_string()),
                        show(*active),
                        show(*metric)
                    );
                    if key != last {
                        let line = format!("{key} {calls}");
                        let _ = writeln!(text, "    {:7.1} {}", at - self.t0, line.trim_end());
                        last = key;
                    }
                }
                Entry::Mark { at, text: mark } => {
                    let _ = writeln!(text, "    {:7.1} --- {mark}", at - self.t0);
                    last.clear();
                }
            }
        }
        text
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A case's checks: each printed as it is made (`ok:` or `FAILED:`); the failed ones make the
/// case fail, naming the case, the object and the evidence (the timeline).
pub struct Checks {
    case: &'static str,
    object: String,
    failed: Vec<String>,
    evidence: String,
}

impl Checks {
    pub fn new(case: &'static str, object: impl Into<String>) -> Self {
        Self {
            case,
            object: object.into(),
            failed: Vec::new(),
            evidence: String::new(),
        }
    }

    /// Records whether `what` holds.
    pub fn check(&mut self, holds: bool, what: impl Into<String>) -> bool {
        let what = what.into();
        if holds {
            println!("    ok: {what}");
        } else {
            println!("    FAILED: {what}");
            self.failed.push(what);
        }
        holds
    }

    /// Records that a check could not be made: what it needed did not happen.
    pub fn precondition(&mut self, what: impl Into<String>) {
        let what = format!("precondition not met: {}", what.into());
        println!("    FAILED: {what}");
        self.failed.push(what);
    }

    /// Adds to the evidence printed with a failure (a timeline, the runs' lines).
    pub fn evidence(&mut self, text: &str) {
        self.evidence.push_str(text);
        if !text.ends_with('\n') {
            self.evidence.push('\n');
        }
    }

    /// The case's verdict.
    pub fn verdict(self) -> Result<(), String> {
        if self.failed.is_empty() {
            return Ok(());
        }
        let mut message = format!(
            "case {}: {} check(s) failed on {}:\n",
            self.case,
            self.failed.len(),
            self.object
        );
        for what in &self.failed {
            let _ = writeln!(message, "  - {what}");
        }
        message.push_str(&self.evidence);
        Err(message)
    }
}
