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
use tonic::transport::{Channel, Endpoint};

use super::transport::Socket;
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
    channel: Channel,
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
    channel: Channel,
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
    pub(crate) fn channel(&self) -> &Channel {
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

fn open_channel(key: &PoolKey) -> Result<Channel, Error> {
    let options = &key.options;
    let uri = key.target.uri(key.credentials.is_some());
    let mut endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| Error::invalid_argument(format!("cannot dial {uri}: {e}")))?
        .tcp_nodelay(true)
        .http2_keep_alive_interval(options.keepalive_time)
        .keep_alive_timeout(options.keepalive_timeout)
        .keep_alive_while_idle(false)
        .concurrency_limit(options.max_concurrent_calls.max(1));
    if let Some(connect_timeout) = options.connect_timeout {
        endpoint = endpoint.connect_timeout(connect_timeout);
    }
    if let Some(credentials) = &key.credentials {
        endpoint = endpoint
            .tls_config(credentials.tls_config(key.target.tls_name()))
            .map_err(|e| Error::invalid_argument(format!("unusable TLS credentials: {e}")))?;
    }
    let target = key.target.clone();
    Ok(endpoint
        .connect_with_connector_lazy(tower::service_fn(move |_| Socket::connect(target.clone()))))
}
