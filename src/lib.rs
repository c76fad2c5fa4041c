//! libwool: the Rust library of libwool, for the Wool distributed runtime — poll a worker's idle
//! time and retire it, sweep a pool, or be a Wool worker.
//!
//! With no features it is the client and the fleet:
//! - [`connection`]: [`WorkerConnection`], the direct single-worker client (Wool's
//!   `WorkerConnection`): idle, stop, dispatch over pooled channels, plaintext or TLS
//!   ([`WorkerCredentials`], fixed or reloaded from files), [`Error`] sorted into [`ErrorKind`]s.
//! - [`fleet`]: the fleet job: discover a pool's workers by namespace, sweep their idle time,
//!   retire the idle ones by policy (what `woolctl` runs).
//! - [`Grace`]: how long a stop lets in-flight work run.
//!
//! Features add the rest:
//! - `lan`: LAN discovery (DNS-SD over multicast DNS, as Wool's `LanDiscovery`).
//! - `dns`: a fleet listed by DNS name (every address a name resolves to).
//! - `worker`: the `worker` module — be a Wool worker: serve `dispatch`, `stop` and `idle`, run
//!   Rust routines, report continuous idle seconds; health, reflection, metrics, certificates
//!   reloaded from files.
//! - `scaler`: the `scaler` module, a KEDA external scaler over the fleet layer (what
//!   `wool-scaler` serves), so Kubernetes scales a fleet, to zero included, on its workers'
//!   idle time (turns on `server`, `lan` and `dns`).
//! - `server`: the `server` module, the scaffold the worker and the scaler share: accepting
//!   connections under bounds (its constants: deadlines, caps, HTTP/2 limits), TLS with
//!   credentials reloaded from files, the health and metrics side ports, [`server::ServerError`]
//!   (turned on by `worker` and by `scaler`).
//!
//! The C ABI (`include/wool.h`, libwool.so) is the `libwool-capi` package; the programs
//! `woolctl`, `wool-worker` and `wool-scaler` are packages of their own.
//!
//! The generated protobuf types and gRPC stubs are internal: a program does all of the above
//! through these types, which own the channel, credential and error handling.
//!
//! # Be a worker (feature `worker`)
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use libwool::worker::Worker;
//! use libwool::{Grace, WorkerConnection};
//!
//! let worker = Worker::builder()
//!     .listen("127.0.0.1:0".parse()?) // port 0: any free port; or "unix:/run/w.sock"
//!     .routine("double", |args: Vec<u8>| async move { Ok([args.clone(), args].concat()) })
//!     .serve()
//!     .await?;
//! let caller = WorkerConnection::new(worker.address())?;
//! let answer = caller.dispatch("double", b"ab".to_vec(), None).await?;
//! assert_eq!(answer, b"abab");
//! assert_eq!(worker.in_flight(), 0);
//! worker.stop(Grace::None).await; // as a `stop` call over the wire would
//! worker.wait().await?;
//! # Ok(()) }
//! ```
//!
//! # Poll a worker's idle time, then retire it
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let worker = libwool::worker::Worker::builder().serve().await?;
//! # let address = worker.address().to_owned();
//! use std::time::Duration;
//! use libwool::{ErrorKind, Grace, WorkerConnection};
//!
//! let connection = WorkerConnection::new(&address)?; // no I/O yet
//! let threshold = 0.0; // seconds; a real host would use minutes
//! match connection.idle(Some(Duration::from_secs(2))).await {
//!     // Idle long enough: retire it, letting in-flight work finish within 10 s.
//!     Ok(seconds) if seconds >= threshold => {
//!         let grace = Grace::Within(Duration::from_secs(10));
//!         connection.stop(grace, Some(Duration::from_secs(20))).await?;
//!     }
//!     Ok(_) => {}                                               // busy or recently busy
//!     Err(e) if e.kind() == ErrorKind::IdleUnavailable => {}    // predates `idle`: leave it
//!     Err(e) if e.kind() == ErrorKind::Transient => {}          // unreachable now: next round
//!     Err(e) => return Err(e.into()),                           // misbehaving: evict it
//! }
//! # worker.wait().await?;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
mod write_through;

pub mod connection;
pub mod fleet;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod grace;
#[doc(hidden)]
pub mod process;
#[cfg(feature = "protocol")]
pub mod protocol;
#[cfg(not(feature = "protocol"))]
mod protocol;
#[cfg(feature = "scaler")]
pub mod scaler;
#[cfg(feature = "server")]
pub mod server;
mod tls;
#[cfg(feature = "worker")]
pub mod worker;

pub use connection::{Error, ErrorKind, WorkerConnection, WorkerCredentials};
pub use grace::Grace;
