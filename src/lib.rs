//! libwool: a Rust worker, client and C ABI for the Wool distributed runtime.
//!
//! - [`worker`]: be a Wool worker — serve `dispatch`, `stop` and `idle`, run Rust routines, and
//!   report continuous idle seconds; health, reflection, metrics, certificates reloaded from
//!   files.
//! - [`connection`]: [`WorkerConnection`], the direct single-worker client (Wool's
//!   `WorkerConnection`): idle, stop, dispatch over pooled channels, plaintext or TLS
//!   ([`WorkerCredentials`], fixed or reloaded from files), [`Error`] sorted into [`ErrorKind`]s.
//! - [`fleet`]: the fleet job: discover a pool's workers by namespace, sweep their idle time,
//!   retire the idle ones by policy (what `woolctl` runs).
//! - [`scaler`]: a KEDA external scaler over the fleet layer (what `wool-scaler` serves), so
//!   Kubernetes scales a fleet, to zero included, on its workers' idle time.
//! - `ffi` (feature `capi`): the C ABI (`include/wool.h`).
//! - [`Grace`]: how long a stop lets in-flight work run.
//!
//! The generated protobuf types and gRPC stubs are internal: a program does all of the above
//! through these types, which own the channel, credential and error handling.
//!
//! # Be a worker
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

pub mod connection;
pub mod fleet;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod grace;
/// Fork-aware process-wide state, shared with the C ABI's runtime (`libwool-capi`); not a
/// stable API.
#[doc(hidden)]
pub mod process;
#[cfg(feature = "protocol")]
pub mod protocol;
#[cfg(not(feature = "protocol"))]
mod protocol;
#[cfg(feature = "scaler")]
pub mod scaler;
mod tls;
#[cfg(feature = "worker")]
pub mod worker;

pub use connection::{Error, ErrorKind, WorkerConnection, WorkerCredentials};
pub use grace::Grace;
