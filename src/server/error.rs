//! [`ServerError`]: what can go wrong building or running one of this crate's servers — a
//! worker or a scaler. Both are built on one scaffold (acceptor, TLS, health side port, metrics
//! endpoint, binding), so one error type says what failed in either.

/// Errors of building or running a server: a worker
/// (`libwool::worker::WorkerError`) or a scaler (`libwool::scaler::ScalerError`,
/// the same type).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listen address could not be parsed (`host:port` or `unix:PATH`); the message says
    /// what is wrong with it.
    #[error("invalid listen address: {0}")]
    InvalidAddress(String),
    /// Binding a listener (the main port or a side port) failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address as given.
        address: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS material could not be used (the message says why, naming the files).
    #[error("invalid TLS configuration: {0}")]
    Tls(String),
    /// The server-reflection service could not be built from the protocol's descriptors.
    #[error("cannot build server reflection: {0}")]
    Reflection(String),
    /// The gRPC server failed while serving.
    #[error("server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The server task panicked or was aborted.
    #[error("server task ended abnormally: {0}")]
    Join(#[from] tokio::task::JoinError),
}
