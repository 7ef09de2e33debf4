//! The broker's shutdown signal: a `watch` channel that turns `true` once, when the broker
//! stops. Long polls, parked group answers and background tasks select on [`stopped`].

use tokio::sync::watch;

/// Resolves once `shutdown` says the broker is stopping (or its sender is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
