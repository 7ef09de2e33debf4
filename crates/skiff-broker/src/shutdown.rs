//! The broker's shutdown signal: a `watch` channel that turns `true` once, when the broker
//! stops. Long polls, parked group answers and background tasks select on [`stopped`].

use tokio::sync::watch;

/// Resolves once `shutdown` says the broker is stopping (or its sender is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Runs `tick` every `interval` until the broker stops (a late tick is delayed, not doubled).
pub(crate) async fn every(
    interval: std::time::Duration,
    mut shutdown: watch::Receiver<bool>,
    mut tick: impl FnMut(),
) {
    let mut timer = tokio::time::interval(interval);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => tick(),
            _ = stopped(&mut shutdown) => return,
        }
    }
}
