//! libwool: a Rust worker, client and C ABI for the Wool distributed runtime.
//!
//! - [`worker`]: be a Wool worker — serve `dispatch`, `stop` and `idle`, run Rust routines, and
//!   report continuous idle seconds.
//! - [`connection`]: [`WorkerConnection`], the direct single-worker client (Wool's
//!   `WorkerConnection`): idle, stop, dispatch over pooled channels, plaintext or TLS.
//! - [`fleet`]: the fleet job: discover a pool's workers by namespace, sweep their idle time,
//!   retire the idle ones by policy (what `woolctl` runs).
//! - [`ffi`]: the C ABI (`include/wool.h`).
//! - [`protocol`]: the generated wire types.

pub mod connection;
#[cfg(feature = "capi")]
pub mod ffi;
pub mod fleet;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod grace;
mod process;
#[cfg(feature = "protocol")]
pub mod protocol;
#[cfg(not(feature = "protocol"))]
mod protocol;
mod tls;
pub mod worker;

pub use connection::{Error, ErrorKind, WorkerConnection, WorkerCredentials};
pub use grace::Grace;
