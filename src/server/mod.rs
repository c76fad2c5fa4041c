//! The server scaffold the worker and `wool-scaler` are both built on: how they accept
//! connections, so that peers that are slow on purpose hold little for long and never stop the
//! others from being served.
//!
//! The listener is accepted from continuously, in a task of its own. Each accepted connection:
//!
//! - counts against a connection cap (by default [`default_max_connections`]; a worker's is
//!   set by `libwool::worker::WorkerBuilder::max_connections`)
//!   for its whole life;
//! - then *opens* in a task of its own: its TLS handshake when the server has one (the
//!   ClientHello must start within [`FIRST_BYTES_TIMEOUT`], the whole handshake end within
//!   [`HANDSHAKE_TIMEOUT`]), then the 24-byte HTTP/2 client preface, which must arrive within
//!   [`PREFACE_TIMEOUT`] and be exact (in plaintext it is read here first; after a TLS
//!   handshake the HTTP/2 server takes the connection at once and sends its SETTINGS, as a
//!   TLS client may wait for them, and reads the preface under the same deadline);
//! - while opening, takes one of [`OPENING_PER_PEER`] slots of its peer's address (an IPv4
//!   address, or an IPv6 /64) and one of [`OPENING_AT_ONCE`] for the server.
//!
//! A full server makes room rather than turning the newcomer away, because the newcomer is the
//! one most likely to be a real client (a client speaks as soon as it connects; a peer holding
//! connections open on purpose does not): when the cap, the address's opening slots or the
//! server's are all taken, the connection the new one displaces is closed, chosen among those
//! still opening (and, on a side port, established ones too) as the one *never heard from*,
//! oldest first, else the one *least recently heard from*. So silent connections from an
//! address, however many and however fast they are reopened, displace each other and never a
//! client that has sent its ClientHello or preface since. Connections of a main address past
//! their opening carry dispatches and are never displaced: a new connection finding the cap
//! taken by established ones only is closed at once.
//!
//! Only then is a plaintext connection handed to the HTTP/2 server (tonic's
//! `serve_with_incoming`), its preface replayed. An error from `accept` (EMFILE, say) pauses
//! accepting for [`ACCEPT_ERROR_PAUSE`], logged once per burst of errors, not once per error.
//!
//! One job per file:
//!
//! | file | job |
//! |---|---|
//! | `accept.rs` | the accept loop (`accept_connections`), the listeners, the pause after accept errors |
//! | `eviction.rs` | the eviction table: the cap, opening slots per peer and in all, which connection makes room |
//! | `handshake.rs` | what a connection does before HTTP/2 (TLS or nothing) and its deadlines, the preface read |
//! | `http2.rs` | the HTTP/2 bounds every server shares, the client preface, the refusal of a non-HTTP/2 peer |
//! | `io.rs` | the connection wrappers: reads marking a peer heard from, the preface replayed, eviction ending reads |
//! | `tls.rs` | server credentials, fixed or reloaded from files, and the TLS handshake |
//! | `health.rs` | the plaintext health side port |
//! | `metrics.rs` | the plaintext HTTP/1.1 metrics endpoint |
//! | `listen.rs` | binding a side port |
//! | `error.rs` | [`ServerError`] |

// The scaffold alone (feature `server` without `worker` or `scaler`) has its public items but no
// user of its crate-private ones, which are there for the worker and the scaler.
#![cfg_attr(
    not(any(feature = "worker", feature = "scaler")),
    allow(dead_code, unused_imports)
)]

pub(crate) mod accept;
mod error;
pub(crate) mod eviction;
pub(crate) mod handshake;
pub(crate) mod health;
mod http2;
pub(crate) mod io;
pub(crate) mod listen;
pub(crate) mod metrics;
pub(crate) mod tls;

pub use accept::ACCEPT_ERROR_PAUSE;
pub use error::ServerError;
pub use eviction::{
    default_max_connections, DEFAULT_MAX_CONNECTIONS, OPENING_AT_ONCE, OPENING_PER_PEER,
    SIDE_PORT_MAX_CONNECTIONS,
};
pub use handshake::{FIRST_BYTES_TIMEOUT, HANDSHAKE_TIMEOUT};
pub(crate) use http2::bounded_server;
pub use http2::{
    DEFAULT_KEEPALIVE, MAX_HEADER_LIST_BYTES, MAX_LOCAL_ERROR_RESETS, MAX_PENDING_ACCEPT_RESETS,
    PREFACE_TIMEOUT,
};
pub use metrics::{HEADER_READ_TIMEOUT, MAX_METRICS_CONNECTIONS};
pub use tls::{CredentialReload, ServerCredentialFiles, ServerCredentials};
