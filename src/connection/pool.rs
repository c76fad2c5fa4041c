//! The process-wide channel pool: one HTTP/2 channel per (target, credentials, options), shared
//! by every [`WorkerConnection`](super::WorkerConnection) with that key.
//!
//! Like Wool's client pool, a channel is counted by its users and kept for a while after the
//! last one lets go ([`UNUSED_CHANNEL_TTL`], Wool's 60 s), so a host that reconnects to the same
//! worker reuses the open HTTP/2 connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use once_cell::sync::Lazy;

use super::channel::{ChannelConfig, Http2Channel};
use super::{ChannelOptions, Error, Target, WorkerCredentials};

/// How long an unused channel stays in the pool (Wool's client pool keeps one 60 s).
pub const UNUSED_CHANNEL_TTL: Duration = Duration::from_secs(60);

/// What makes two connections share a channel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    pub(crate) target: Target,
    pub(crate) credentials: Option<WorkerCredentials>,
    pub(crate) options: ChannelOptions,
}

#[derive(Debug)]
struct PoolEntry {
    channel: Http2Channel,
    users: usize,
    /// When `users` last dropped to zero.
    unused_since: Option<Instant>,
}

static POOL: Lazy<Mutex<HashMap<Arc<PoolKey>, PoolEntry>>> = Lazy::new(Default::default);

fn pool() -> std::sync::MutexGuard<'static, HashMap<Arc<PoolKey>, PoolEntry>> {
    // A panic while holding the lock cannot leave the map inconsistent (every update is one
    // insert, remove or counter change), so a poisoned lock is still usable.
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One user's share of a pooled channel; dropping it releases the share.
#[derive(Debug)]
pub(crate) struct ChannelLease {
    key: Arc<PoolKey>,
    channel: Http2Channel,
}

impl ChannelLease {
    /// Takes a share of the channel for `key`, creating it (lazily: no I/O) if needed.
    /// Must run inside a tokio runtime (the channel spawns its worker task there).
    pub(crate) fn acquire(key: &Arc<PoolKey>) -> Result<Self, Error> {
        let mut pool = pool();
        evict_expired(&mut pool);
        let entry = match pool.get_mut(key) {
            Some(entry) => entry,
            None => {
                let channel = open_channel(key)?;
                pool.entry(Arc::clone(key)).or_insert(PoolEntry {
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
            channel: entry.channel.clone(),
        })
    }

    /// The shared channel (cheap to clone).
    pub(crate) fn channel(&self) -> &Http2Channel {
        &self.channel
    }
}

impl Drop for ChannelLease {
    fn drop(&mut self) {
        let mut pool = pool();
        if let Some(entry) = pool.get_mut(&self.key) {
            entry.users -= 1;
            if entry.users == 0 {
                entry.unused_since = Some(Instant::now());
                schedule_eviction();
            }
        }
    }
}

/// Drops channels unused for longer than the TTL (closing their connections).
fn evict_expired(pool: &mut HashMap<Arc<PoolKey>, PoolEntry>) {
    pool.retain(|_, entry| {
        entry
            .unused_since
            .is_none_or(|since| since.elapsed() < UNUSED_CHANNEL_TTL)
    });
}

/// Evicts expired channels once the TTL has passed, if a runtime is at hand to wait on;
/// otherwise the next [`ChannelLease::acquire`] does it.
fn schedule_eviction() {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async {
            tokio::time::sleep(UNUSED_CHANNEL_TTL + Duration::from_millis(10)).await;
            evict_expired(&mut pool());
        });
    }
}

/// Number of channels in the pool now (in use or lingering).
pub fn pooled_channels() -> usize {
    pool().len()
}

fn open_channel(key: &PoolKey) -> Result<Http2Channel, Error> {
    let tls = key
        .credentials
        .as_ref()
        .map(|credentials| credentials.client_config(key.target.tls_name()))
        .transpose()?;
    Ok(Http2Channel::new(ChannelConfig {
        target: key.target.clone(),
        tls,
        max_concurrent_calls: key.options.max_concurrent_calls.max(1),
        connect_timeout: key.options.connect_timeout,
    }))
}
