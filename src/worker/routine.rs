//! Rust routines: what a worker built with this library runs for a dispatched task.
//!
//! A routine is an async function from input bytes (`Task.args`) to output bytes
//! (`result.dump`) or an error message (`exception.dump`, UTF-8). It is registered under a name,
//! which callers put in `Task.callable` (UTF-8).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The future a routine returns: output bytes, or an error message for the caller.
pub type RoutineFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send + 'static>>;

/// A routine the worker can run: input bytes in, output bytes or an error message out.
///
/// Implemented for every `Fn(Vec<u8>) -> impl Future<Output = Result<Vec<u8>, String>>`, so a
/// plain `async fn` or closure can be registered with
/// [`WorkerBuilder::routine`](crate::worker::WorkerBuilder::routine).
pub trait Routine: Send + Sync + 'static {
    /// Starts the routine on `args`. Dropping the future cancels it.
    fn call(&self, args: Vec<u8>) -> RoutineFuture;
}

impl<F, Fut> Routine for F
where
    F: Fn(Vec<u8>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<u8>, String>> + Send + 'static,
{
    fn call(&self, args: Vec<u8>) -> RoutineFuture {
        Box::pin(self(args))
    }
}

/// Routines by name. Immutable once the worker serves.
#[derive(Clone, Default)]
pub struct RoutineRegistry {
    routines: HashMap<String, Arc<dyn Routine>>,
}

impl std::fmt::Debug for RoutineRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.routines.keys().collect();
        names.sort();
        f.debug_struct("RoutineRegistry")
            .field("routines", &names)
            .finish()
    }
}

impl RoutineRegistry {
    /// Registers `routine` under `name`, replacing any routine of that name.
    pub fn insert(&mut self, name: impl Into<String>, routine: impl Routine) {
        self.routines.insert(name.into(), Arc::new(routine));
    }

    /// The routine registered as `name` (`Task.callable` decoded as UTF-8).
    pub fn get(&self, name: &[u8]) -> Option<Arc<dyn Routine>> {
        let name = std::str::from_utf8(name).ok()?;
        self.routines.get(name).cloned()
    }

    /// The built-in routines of the reference worker:
    /// `echo` (result = args) and `sleep` (args = seconds as ASCII decimal; sleeps, returns args).
    pub fn with_reference_routines(mut self) -> Self {
        self.insert("echo", echo);
        self.insert("sleep", sleep);
        self
    }
}

/// `echo`: returns its input unchanged.
pub async fn echo(args: Vec<u8>) -> Result<Vec<u8>, String> {
    Ok(args)
}

/// `sleep`: `args` is a duration in seconds as ASCII decimal (e.g. `0.5`); sleeps that long,
/// then returns `args`. A bad number is the routine's error.
pub async fn sleep(args: Vec<u8>) -> Result<Vec<u8>, String> {
    let text =
        std::str::from_utf8(&args).map_err(|_| "sleep: seconds must be ASCII".to_string())?;
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("sleep: not a number of seconds: {text:?}"))?;
    let duration = std::time::Duration::try_from_secs_f64(seconds)
        .map_err(|_| format!("sleep: seconds must be finite and >= 0, got {seconds}"))?;
    tokio::time::sleep(duration).await;
    Ok(args)
}
