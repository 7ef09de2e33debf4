//! OAUTHBEARER's key set: the JWKS at `sasl.oauthbearer.jwks.endpoint.url`, fetched at start,
//! again every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and when a token names a key ID the
//! set does not have (keys rotate); tokens are checked against it by `skiff-auth`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use skiff_auth::oauth::{Jwks, ValidatedToken};
use tokio::sync::{Notify, watch};

use crate::config::OauthSettings;

/// The settings and the key set in force.
pub struct OauthVerifier {
    settings: OauthSettings,
    jwks: RwLock<Option<Arc<Jwks>>>,
    /// Woken when a token's key is missing, so the keys are fetched before the next period.
    stale: Notify,
}

impl OauthVerifier {
    pub fn new(settings: OauthSettings) -> OauthVerifier {
        OauthVerifier {
            settings,
            jwks: RwLock::new(None),
            stale: Notify::new(),
        }
    }

    /// Checks a token; the error says why it is refused (never the token).
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, String> {
        let jwks = self.jwks.read().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(jwks) = jwks else {
            self.stale.notify_one();
            return Err("the JWKS has not been fetched yet".into());
        };
        self.settings
            .validator
            .validate(&jwks, token, now_ms)
            .map_err(|e| {
                if matches!(e, skiff_auth::oauth::OauthError::UnknownKey(_)) {
                    self.stale.notify_one();
                }
                e.to_string()
            })
    }

    /// Fetches the key set and puts it in force.
    pub async fn refresh(&self) -> Result<()> {
        let body = fetch(&self.settings.jwks_url).await?;
        let jwks = Jwks::parse(&body)
            .with_context(|| format!("{}: not a usable JWKS", self.settings.jwks_url))?;
        *self.jwks.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(jwks));
        Ok(())
    }

    /// Keeps the key set fresh until the broker stops: every refresh period, and soon after a
    /// token names an unknown key (at most once a second).
    pub async fn keep_fresh(&self, mut shutdown: watch::Receiver<bool>) {
        let period = Duration::from_millis(self.settings.refresh_ms);
        loop {
            match self.refresh().await {
                Ok(()) => tracing::debug!(url = %self.settings.jwks_url, "JWKS fetched"),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "fetching the JWKS failed; the keys in force stay")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = self.stale.notified() => {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = crate::shutdown::stopped(&mut shutdown) => return,
                    }
                }
                _ = crate::shutdown::stopped(&mut shutdown) => return,
            }
        }
    }
}

/// The body at a `file://` or `https://` URL (at most 1 MiB).
async fn fetch(url: &str) -> Result<Vec<u8>> {
    const MAX: u64 = 1024 * 1024;
    if let Some(path) = url.strip_prefix("file://") {
        let meta = tokio::fs::metadata(path)
            .await
            .with_context(|| format!("reading {path}"))?;
        if meta.len() > MAX {
            bail!("{path} is larger than 1 MiB");
        }
        return tokio::fs::read(path)
            .await
            .with_context(|| format!("reading {path}"));
    }
    bail!("{url}: only file:// JWKS URLs are fetched so far")
}
