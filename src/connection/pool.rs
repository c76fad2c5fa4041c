//! The process-wide channel pool: one HTTP/2 channel per (target, credentials, options), shared
//! by every [`WorkerConnection`](super::WorkerConnection) with that key.
//!
//! Like Wool's client pool, a channel is counted by its users and kept for a while after the
//! last one lets go ([`UNUSED_CHANNEL_TTL`], Wool's 60 s), so a host that reconnects to the same
//! worker reuses the open HTTP/2 connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::channel::{ChannelConfig, Http2Channel};
use super::credentials::TlsKey;
use super::{ChannelOptions, Error, Target};
use crate::process::PerProcess;

/// How long an unused channel stays in the pool (Wool's client pool keeps one 60 s).
pub const UNUSED_CHANNEL_TTL: Duration = Duration::from_secs(60);

/// What makes two connections share a channel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    pub(crate) target: Target,
    /// The TLS material and identity; `None` for plaintext.
    pub(crate) tls: Option<TlsKey>,
    pub(crate) options: ChannelOptions,
}

#[derive(Debug)]
struct PoolEntry {
    channel: Http2Channel,
    users: usize,
    /// When `users` last dropped to zero.
    unused_since: Option<Instant>,
}

/// The channels by key, and when the soonest unused one expires (`None`: none is unused), so
/// that eviction scans the pool only when something is due, not on every acquisition (which
/// made connecting to N workers cost O(N²)).
#[derive(Debug, Default)]
struct PoolState {
    entries: HashMap<Arc<PoolKey>, PoolEntry>,
    next_expiry: Option<Instant>,
    /// When a task waiting to evict, spawned on some runtime, is to run: one is enough. (One
    /// whose runtime has ended never runs; a second after its time another may be spawned.)
    eviction_pending: Option<Instant>,
}

type Pool = Mutex<PoolState>;

/// The pool of this process: a child forked after the library was used gets a pool of its own
/// and never touches (or locks) the parent's.
static POOL: PerProcess<Pool> = PerProcess::new();

fn pool() -> std::sync::MutexGuard<'static, PoolState> {
    let pool = POOL
        .get_or_try_init(
            || Ok::<_, std::convert::Infallible>(Pool::default()),
            |_| {},
        )
        .unwrap_or_else(|never| match never {});
    // A panic while holding the lock cannot leave the map inconsistent (every update is one
    // insert, remove or counter change), so a poisoned lock is still usable.
    pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One user's share of a pooled channel; dropping it releases the share.
#[derive(Debug)]
pub(crate) struct ChannelLease {
    key: Arc<PoolKey>,
    /// Never dropped in a process other than the one that leased it (see [`Drop`]).
    channel: std::mem::ManuallyDrop<Http2Channel>,
    /// The fork generation of the pool it came from.
    generation: u64,
}

impl ChannelLease {
    /// Takes a share of the channel for `key`, creating it (lazily: no I/O) if needed.
    /// Must run inside a tokio runtime (the channel spawns its worker task there).
    pub(crate) fn acquire(key: &Arc<PoolKey>) -> Result<Self, Error> {
        let mut pool = pool();
        pool.evict_if_due();
        let entry = match pool.entries.get_mut(key) {
            Some(entry) => entry,
            None => {
                let channel = open_channel(key)?;
                pool.entries.entry(Arc::clone(key)).or_insert(PoolEntry {
                    channel,
                    users: 0,
                    unused_since: None,
                })
            }
        };
        entry.users += 1;
        entry.unused_since = None;
        Ok(Self {
            key: Arc::clone(key),
            channel: std::mem::ManuallyDrop::new(entry.channel.clone()),
            generation: crate::process::generation(),
        })
    }

    /// The key the channel is pooled under.
    pub(crate) fn key(&self) -> &Arc<PoolKey> {
        &self.key
    }

    /// Takes the channel for this lease's key out of the pool, because the credentials it was
    /// made with were replaced: no new lease gets it, and it does not linger unused. Leases
    /// still holding it keep it, and calls running on it finish; its connection closes once
    /// the last of them lets go (as Wool's pool expires a key superseded by rotation).
    pub(crate) fn retire(&self) {
        if !self.is_current() {
            return;
        }
        let mut pool = pool();
        if pool
            .entries
            .get(&self.key)
            .is_some_and(|entry| entry.channel.same_channel(&self.channel))
        {
            pool.entries.remove(&self.key);
        }
    }

    /// The shared channel (cheap to clone).
    pub(crate) fn channel(&self) -> &Http2Channel {
        &self.channel
    }

    /// Whether the lease belongs to this process's pool (not to a parent's, before a fork).
    pub(crate) fn is_current(&self) -> bool {
        self.generation == crate::process::generation()
    }
}

impl Drop for ChannelLease {
    fn drop(&mut self) {
        if !self.is_current() {
            // A parent's lease, in a forked child: its channel and pool are the parent's, and
            // even dropping them could wait on a lock held by a thread that does not exist
            // here. Leave them alone.
            return;
        }
        {
            let mut pool = pool();
            // The entry of this very channel: after a retirement the key may name a newer one.
            if let Some(entry) = pool
                .entries
                .get_mut(&self.key)
                .filter(|entry| entry.channel.same_channel(&self.channel))
            {
                entry.users -= 1;
                if entry.users == 0 {
                    let now = Instant::now();
                    entry.unused_since = Some(now);
                    let due = *pool.next_expiry.get_or_insert(now + UNUSED_CHANNEL_TTL);
                    pool.schedule_eviction(due.saturating_duration_since(now));
                }
            }
        }
        // SAFETY: dropped once, here, and never used again. Outside the pool's lock: for a
        // retired channel this may be the last handle, and its connection then closes.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.channel) };
    }
}

impl PoolState {
    /// When an unused channel is due to expire, drops every channel unused for longer than the
    /// TTL (closing their connections) and notes when the next one expires. O(1) otherwise.
    fn evict_if_due(&mut self) {
        let now = Instant::now();
        if self.next_expiry.is_none_or(|due| now < due) {
            return;
        }
        self.entries.retain(|_, entry| {
            entry
                .unused_since
                .is_none_or(|since| now.duration_since(since) < UNUSED_CHANNEL_TTL)
        });
        self.next_expiry = self
            .entries
            .values()
            .filter_map(|entry| entry.unused_since)
            .min()
            .map(|since| since + UNUSED_CHANNEL_TTL);
        if let Some(due) = self.next_expiry {
            self.schedule_eviction(due.saturating_duration_since(now));
        }
    }

    /// Evicts expired channels after `delay`, if a runtime is at hand to wait on and no such
    /// wait is pending; otherwise a pending wait or the next [`ChannelLease::acquire`] does it.
    fn schedule_eviction(&mut self, delay: Duration) {
        let now = Instant::now();
        if self
            .eviction_pending
            .is_some_and(|at| now < at + Duration::from_secs(1))
        {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.eviction_pending = Some(now + delay);
            runtime.spawn(async move {
                tokio::time::sleep(delay + Duration::from_millis(10)).await;
                let mut pool = pool();
                pool.eviction_pending = None;
                pool.evict_if_due();
            });
        }
    }
}

fn open_channel(key: &PoolKey) -> Result<Http2Channel, Error> {
    let tls = key
        .tls
        .as_ref()
        .map(|tls| tls.client_config(key.target.tls_name()))
        .transpose()?;
    Ok(Http2Channel::new(ChannelConfig {
        target: key.target.clone(),
        tls,
        max_concurrent_streams: key.options.max_concurrent_streams,
        connect_timeout: key.options.connect_timeout,
        keepalive: key.options.keepalive(),
        max_receive_message_bytes: key.options.max_receive_message_bytes,
    }))
}
