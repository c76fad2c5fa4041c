//! [`WorkerError`]: what can go wrong building or running a worker.

/// Errors of building or running a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The listen address could not be parsed (`host:port` or `unix:PATH`); the message says
    /// what is wrong with it.
    #[error("invalid listen address: {0}")]
    InvalidAddress(String),
    /// Binding the listener failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address as given.
        address: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS material could not be used.
    #[error("invalid TLS configuration: {0}")]
    Tls(String),
    /// The server-reflection service could not be built from the protocol's descriptors.
    #[error("cannot build server reflection: {0}")]
    Reflection(String),
    /// The gRPC server failed while serving.
    #[error("worker server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The server task panicked or was aborted.
    #[error("worker server task ended abnormally: {0}")]
    Join(#[from] tokio::task::JoinError),
}
