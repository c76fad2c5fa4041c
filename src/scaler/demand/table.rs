//! The demand table: each ScaledObject's clients and their figures, when each ends, each
//! client's rate, the bounds; and the watch each `StreamIsActive` holds on its ScaledObject's
//! sum. Plain data behind one lock, the time passed in: unit-tested without sockets or sleeps.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::{DemandOptions, Refusal};
use crate::scaler::metrics::ScalerMetrics;

/// A ScaledObject, by namespace and name (checked before it gets here).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjectKey {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ObjectKey {
    /// `namespace/name`, as the metrics label a ScaledObject.
    fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A token bucket: `rate` reports at once, refilled at `rate` a second.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: f64, now: Instant) -> Self {
        Self {
            tokens: rate,
            at: now,
        }
    }

    /// Takes one report's token; `false` when none is left.
    fn take(&mut self, rate: f64, now: Instant) -> bool {
        let refilled = now.saturating_duration_since(self.at).as_secs_f64() * rate;
        self.tokens = (self.tokens + refilled).min(rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When it is full again (at most a second after its last report).
    fn full_at(&self, rate: f64) -> Instant {
        self.at + Duration::from_secs_f64(((rate - self.tokens) / rate).clamp(0.0, 1.0))
    }
}

/// One client's figure for one ScaledObject.
#[derive(Debug)]
struct ClientDemand {
    /// Tasks waiting (0: withdrawn, kept only for its rate until `ends`).
    waiting: u32,
    /// When the entry goes: the TTL after its report, or once withdrawn, when its bucket is
    /// full again.
    ends: Instant,
    bucket: Bucket,
}

/// One ScaledObject: its clients, their sum, and the streams watching it. It exists while it
/// has clients or watchers.
#[derive(Debug)]
struct ObjectDemand {
    clients: HashMap<String, ClientDemand>,
    /// The sum of the clients' `waiting`, also in `sum`'s watch.
    waiting: u64,
    sum: watch::Sender<u64>,
    watchers: usize,
}

impl ObjectDemand {
    fn new() -> Self {
        Self {
            clients: HashMap::new(),
            waiting: 0,
            sum: watch::Sender::new(0),
            watchers: 0,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    objects: HashMap<ObjectKey, ObjectDemand>,
    /// ScaledObjects with at least one client entry (what the ScaledObject bound counts).
    with_clients: usize,
    /// Client entries with `waiting > 0`.
    live_clients: usize,
    /// Every client entry by when it ends.
    ends: BTreeSet<(Instant, ObjectKey, String)>,
}

/// The scaler's demand: what [`DemandService`](super::DemandService) writes and the KEDA
/// service reads.
#[derive(Debug)]
pub(crate) struct DemandTable {
    options: DemandOptions,
    state: Mutex<State>,
    /// Told when the earliest end moved earlier (the expiry task's sleep is then too long).
    earlier: Notify,
    metrics: Arc<ScalerMetrics>,
}

/// A stream's watch on its ScaledObject's demand; the table forgets the ScaledObject once no
/// client and no watch is left.
#[derive(Debug)]
pub(crate) struct DemandWatch {
    receiver: watch::Receiver<u64>,
    key: ObjectKey,
    table: Arc<DemandTable>,
}

impl DemandWatch {
    /// The ScaledObject's waiting tasks now (marks them seen).
    pub(crate) fn waiting(&mut self) -> u64 {
        *self.receiver.borrow_and_update()
    }

    /// Returns once the ScaledObject's waiting tasks changed since last seen.
    pub(crate) async fn changed(&mut self) {
        // The sender lives in the table while this watch does.
        if self.receiver.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for DemandWatch {
    fn drop(&mut self) {
        let mut state = self.table.lock();
        if let Some(object) = state.objects.get_mut(&self.key) {
            object.watchers -= 1;
            if object.watchers == 0 && object.clients.is_empty() {
                state.objects.remove(&self.key);
            }
        }
    }
}

impl DemandTable {
    pub(crate) fn new(options: DemandOptions, metrics: Arc<ScalerMetrics>) -> Self {
        Self {
            options,
            state: Mutex::new(State::default()),
            earlier: Notify::new(),
            metrics,
        }
    }

    pub(crate) fn options(&self) -> &DemandOptions {
        &self.options
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is made whole under the lock; a panic elsewhere leaves it consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The ScaledObject's waiting tasks now (0 without demand).
    pub(crate) fn waiting(&self, key: &ObjectKey) -> u64 {
        self.lock()
            .objects
            .get(key)
            .map_or(0, |object| object.waiting)
    }

    /// A watch on the ScaledObject's waiting tasks, for a stream.
    pub(crate) fn watch(self: &Arc<Self>, key: ObjectKey) -> DemandWatch {
        let mut state = self.lock();
        let object = state
            .objects
            .entry(key.clone())
            .or_insert_with(ObjectDemand::new);
        object.watchers += 1;
        let receiver = object.sum.subscribe();
        DemandWatch {
            receiver,
            key,
            table: Arc::clone(self),
        }
    }

    /// Takes `client`'s report of `waiting` tasks for `key` at `now` (`waiting` already checked
    /// against [`DemandOptions::max_waiting`]): replaces its figure, to end after the TTL;
    /// `0` withdraws it.
    ///
    /// Errors: [`Refusal::Rate`] past the client's rate, [`Refusal::ScaledObjects`] for a new
    /// ScaledObject past the bound, [`Refusal::Clients`] for a new client past the bound; the
    /// table is unchanged then.
    pub(crate) fn report(
        &self,
        key: &ObjectKey,
        client: &str,
        waiting: u32,
        now: Instant,
    ) -> Result<(), Refusal> {
        let rate = f64::from(self.options.reports_per_second);
        let mut guard = self.lock();
        let state = &mut *guard;
        let clients = state.objects.get(key).map_or(0, |o| o.clients.len());
        let known = state
            .objects
            .get(key)
            .is_some_and(|o| o.clients.contains_key(client));
        if !known {
            if waiting == 0 {
                // Nothing to withdraw.
                return Ok(());
            }
            if clients == 0 && state.with_clients >= self.options.max_scaled_objects {
                return Err(Refusal::ScaledObjects {
                    max: self.options.max_scaled_objects,
                });
            }
            if clients >= self.options.max_clients_per_scaled_object {
                return Err(Refusal::Clients {
                    max: self.options.max_clients_per_scaled_object,
                });
            }
        }
        let object = state
            .objects
            .entry(key.clone())
            .or_insert_with(ObjectDemand::new);
        let entry = object
            .clients
            .entry(client.to_owned())
            .or_insert_with(|| ClientDemand {
                waiting: 0,
                ends: now,
                bucket: Bucket::full(rate, now),
            });
        if !entry.bucket.take(rate, now) {
            return Err(Refusal::Rate {
                rate: self.options.reports_per_second,
            });
        }
        if known {
            state
                .ends
                .remove(&(entry.ends, key.clone(), client.to_owned()));
        } else if clients == 0 {
            state.with_clients += 1;
        }
        let before = entry.waiting;
        entry.waiting = waiting;
        entry.ends = if waiting > 0 {
            now + self.options.ttl
        } else {
            entry.bucket.full_at(rate)
        };
        let end = (entry.ends, key.clone(), client.to_owned());
        object.waiting = object.waiting - u64::from(before) + u64::from(waiting);
        match (before > 0, waiting > 0) {
            (false, true) => state.live_clients += 1,
            (true, false) => state.live_clients -= 1,
            _ => {}
        }
        let earliest = state.ends.first().is_none_or(|first| end < *first);
        state.ends.insert(end);
        self.publish(state, key);
        drop(guard);
        if earliest {
            self.earlier.notify_one();
        }
        Ok(())
    }

    /// Ends the entries whose time has come by `now`; returns when the next one ends.
    pub(crate) fn expire(&self, now: Instant) -> Option<Instant> {
        let mut guard = self.lock();
        let state = &mut *guard;
        while let Some(first) = state.ends.first() {
            if first.0 > now {
                break;
            }
            let (_, key, client) = state.ends.pop_first().expect("looked at first");
            let Some(object) = state.objects.get_mut(&key) else {
                continue;
            };
            let Some(entry) = object.clients.remove(&client) else {
                continue;
            };
            if entry.waiting > 0 {
                object.waiting -= u64::from(entry.waiting);
                state.live_clients -= 1;
                self.metrics.demand_expired();
            }
            if object.clients.is_empty() {
                state.with_clients -= 1;
            }
            self.publish(state, &key);
        }
        state.ends.first().map(|(at, _, _)| *at)
    }

    /// Tells `key`'s watchers and the metrics its sum; forgets it once it has neither clients
    /// nor watchers.
    fn publish(&self, state: &mut State, key: &ObjectKey) {
        let Some(object) = state.objects.get(key) else {
            return;
        };
        let waiting = object.waiting;
        object.sum.send_if_modified(|sum| {
            let changed = *sum != waiting;
            *sum = waiting;
            changed
        });
        if waiting == 0 {
            self.metrics.demand_gone(&key.label());
        } else {
            self.metrics.demand_waiting(&key.label(), waiting);
        }
        if object.clients.is_empty() && object.watchers == 0 {
            state.objects.remove(key);
        }
        self.metrics.demand_clients(state.live_clients);
    }

    /// Ends figures as their time comes, until `shutdown`: sleeps until the next end, or until
    /// a report makes an earlier one.
    pub(crate) fn expire_until(self: &Arc<Self>, shutdown: CancellationToken) {
        let table = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let next = table.expire(Instant::now());
                let due = async {
                    match next {
                        Some(at) => tokio::time::sleep_until(at.into()).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = due => {}
                    () = table.earlier.notified() => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(options: DemandOptions) -> Arc<DemandTable> {
        Arc::new(DemandTable::new(options, Arc::new(ScalerMetrics::new())))
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn figures_add_up_per_scaled_object_replace_withdraw_and_expire() {
        let t = table(DemandOptions::default());
        let now = Instant::now();
        let (a, b) = (key("a"), key("b"));
        t.report(&a, "c1", 3, now).unwrap();
        t.report(&a, "c2", 2, now).unwrap();
        t.report(&b, "c1", 7, now).unwrap();
        assert_eq!((t.waiting(&a), t.waiting(&b)), (5, 7));
        // A report replaces the client's figure.
        t.report(&a, "c1", 1, now + Duration::from_secs(1)).unwrap();
        assert_eq!(t.waiting(&a), 3);
        // 0 withdraws it.
        t.report(&a, "c2", 0, now + Duration::from_secs(1)).unwrap();
        assert_eq!(t.waiting(&a), 1);
        // The withdrawn entry goes once its bucket is full; the others at their TTL.
        assert!(t.expire(now + Duration::from_secs(3)).is_some());
        assert_eq!(t.lock().objects[&a].clients.len(), 1);
        t.expire(now + DEFAULT_TTL_PLUS);
        assert_eq!(t.waiting(&b), 0);
        assert_eq!(t.waiting(&a), 0);
        let state = t.lock();
        assert!(state.objects.is_empty() && state.ends.is_empty());
        assert_eq!((state.with_clients, state.live_clients), (0, 0));
    }

    const DEFAULT_TTL_PLUS: Duration = Duration::from_secs(32);

    #[test]
    fn a_new_zero_report_holds_nothing() {
        let t = table(DemandOptions::default());
        t.report(&key("a"), "c", 0, Instant::now()).unwrap();
        assert!(t.lock().objects.is_empty());
    }

    #[test]
    fn the_rate_is_per_client_and_refills() {
        let t = table(DemandOptions {
            reports_per_second: 2,
            ..DemandOptions::default()
        });
        let now = Instant::now();
        let a = key("a");
        t.report(&a, "c", 1, now).unwrap();
        t.report(&a, "c", 2, now).unwrap();
        assert_eq!(t.report(&a, "c", 3, now), Err(Refusal::Rate { rate: 2 }));
        // The refused report changed nothing; another client is not held back.
        assert_eq!(t.waiting(&a), 2);
        t.report(&a, "d", 1, now).unwrap();
        // Half a second refills one token at 2 a second.
        t.report(&a, "c", 3, now + Duration::from_millis(500))
            .unwrap();
        // Withdrawing and reporting again does not reset the bucket.
        let later = now + Duration::from_millis(600);
        t.report(&a, "d", 0, later).unwrap();
        t.report(&a, "d", 1, later).unwrap();
        assert_eq!(t.report(&a, "d", 0, later), Err(Refusal::Rate { rate: 2 }));
    }

    #[test]
    fn scaled_objects_and_clients_are_bounded_and_freed() {
        let t = table(DemandOptions {
            max_scaled_objects: 2,
            max_clients_per_scaled_object: 2,
            ..DemandOptions::default()
        });
        let now = Instant::now();
        t.report(&key("a"), "c1", 1, now).unwrap();
        t.report(&key("a"), "c2", 1, now).unwrap();
        assert_eq!(
            t.report(&key("a"), "c3", 1, now),
            Err(Refusal::Clients { max: 2 })
        );
        t.report(&key("b"), "c1", 1, now).unwrap();
        assert_eq!(
            t.report(&key("c"), "c1", 1, now),
            Err(Refusal::ScaledObjects { max: 2 })
        );
        // A known client always reports; a watch alone holds no place.
        t.report(&key("a"), "c1", 4, now).unwrap();
        let watch = t.watch(key("d"));
        t.expire(now + DEFAULT_TTL_PLUS);
        t.report(&key("c"), "c1", 1, now + DEFAULT_TTL_PLUS)
            .unwrap();
        drop(watch);
        assert!(!t.lock().objects.contains_key(&key("d")));
    }

    #[tokio::test]
    async fn a_watch_sees_demand_appear_and_expire() {
        let t = table(DemandOptions::default());
        let now = Instant::now();
        let mut watch = t.watch(key("a"));
        assert_eq!(watch.waiting(), 0);
        t.report(&key("a"), "c", 2, now).unwrap();
        watch.changed().await;
        assert_eq!(watch.waiting(), 2);
        t.expire(now + DEFAULT_TTL_PLUS);
        watch.changed().await;
        assert_eq!(watch.waiting(), 0);
        // The ScaledObject stays while watched.
        assert!(t.lock().objects.contains_key(&key("a")));
        drop(watch);
        assert!(t.lock().objects.is_empty());
    }

    #[test]
    fn metrics_follow_the_table() {
        let metrics = Arc::new(ScalerMetrics::new());
        let t = DemandTable::new(DemandOptions::default(), Arc::clone(&metrics));
        let now = Instant::now();
        t.report(&key("a"), "c1", 3, now).unwrap();
        t.report(&key("a"), "c2", 4, now).unwrap();
        let text = metrics.encode();
        assert!(
            text.contains("wool_scaler_demand_waiting{scaledobject=\"default/a\"} 7"),
            "{text}"
        );
        assert!(text.contains("wool_scaler_demand_clients 2"), "{text}");
        t.expire(now + DEFAULT_TTL_PLUS);
        let text = metrics.encode();
        assert!(!text.contains("scaledobject=\"default/a\""), "{text}");
        assert!(text.contains("wool_scaler_demand_clients 0"), "{text}");
        assert!(
            text.contains("wool_scaler_demand_expired_total 2"),
            "{text}"
        );
    }
}
