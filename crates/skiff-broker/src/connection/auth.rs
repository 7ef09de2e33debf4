//! A connection's authentication: the SASL exchange (SaslHandshake, SaslAuthenticate, bare
//! tokens after a v0 handshake), the principal it yields, and the instance ID binding
//! (`client.instance.id.binding`) once both the ID and the principal are known.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use skiff_protocol::generated::{SaslAuthenticateResponse, SaslHandshakeResponse};
use skiff_protocol::{Request, error_codes};

use super::{Connection, Holding, Next, Outgoing, respond};
use crate::config::InstanceBinding;
use crate::owners::Claim;
use crate::security::sasl::{Step, Verifiers};

impl Connection {
    /// SaslHandshake and SaslAuthenticate: the SASL exchange on a SASL listener; elsewhere
    /// ILLEGAL_SASL_STATE, as Kafka answers.
    pub(super) fn on_sasl(
        &mut self,
        request: Request,
        version: i16,
        correlation_id: i32,
        pending: &mut Holding<'_>,
    ) -> Next {
        let Some(sasl) = self.sasl.as_mut() else {
            let response = skiff_protocol::error_response::error_response(
                &request,
                version,
                error_codes::ILLEGAL_SASL_STATE,
                Some("this listener does not use SASL"),
            );
            respond(pending, version, correlation_id, response);
            return Next::Continue;
        };
        match request {
            Request::SaslHandshake(r) => match sasl.handshake(version, &r.mechanism) {
                Ok(error_code) => {
                    let response = SaslHandshakeResponse {
                        error_code,
                        mechanisms: sasl.mechanisms().map(Into::into).collect(),
                        ..Default::default()
                    };
                    respond(pending, version, correlation_id, response.into());
                    if error_code == error_codes::NONE {
                        Next::Continue
                    } else {
                        tracing::info!(mechanism = %r.mechanism, "SASL mechanism not enabled; closing");
                        Next::Close("SASL mechanism not enabled")
                    }
                }
                Err(reason) => Next::Close(reason),
            },
            Request::SaslAuthenticate(r) => {
                let step = self.authenticate(&r.auth_bytes, Some(version));
                let (error_code, message, bytes, session_lifetime_ms, next) = match step {
                    Step::Challenge(bytes) => (error_codes::NONE, None, bytes, 0, Next::Continue),
                    Step::Done {
                        bytes,
                        session_lifetime_ms,
                    } => (
                        error_codes::NONE,
                        None,
                        bytes,
                        session_lifetime_ms,
                        Next::Continue,
                    ),
                    Step::Failed(message) => (
                        error_codes::SASL_AUTHENTICATION_FAILED,
                        Some(message),
                        Vec::new(),
                        0,
                        Next::Close("SASL authentication failed"),
                    ),
                };
                let response = SaslAuthenticateResponse {
                    error_code,
                    error_message: message.map(Into::into),
                    auth_bytes: bytes.into(),
                    session_lifetime_ms,
                    ..Default::default()
                };
                let delay = self.failure_delay(error_code);
                pending.push_back(Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    Some(Outgoing::Response(version, correlation_id, response.into()))
                }));
                next
            }
            _ => Next::Close("not a SASL request"),
        }
    }

    /// A bare SASL token after a v0 SaslHandshake: answered with a bare token; a failure closes
    /// the connection without an answer, as Kafka does for such clients.
    pub(super) fn on_bare_token(&mut self, token: &[u8], pending: &mut Holding<'_>) -> Next {
        match self.authenticate(token, None) {
            Step::Challenge(bytes) | Step::Done { bytes, .. } => {
                pending.push_back(Box::pin(async move { Some(Outgoing::Bare(bytes)) }));
                Next::Continue
            }
            Step::Failed(_) => {
                let delay = self.failure_delay(error_codes::SASL_AUTHENTICATION_FAILED);
                pending.push_back(Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    None
                }));
                Next::Close("SASL authentication failed")
            }
        }
    }

    /// Runs one SASL token through the session; on success the connection takes the principal
    /// and the full frame size limit.
    fn authenticate(&mut self, token: &[u8], version: Option<i16>) -> Step {
        let Some(sasl) = self.sasl.as_mut() else {
            return Step::Failed("this listener does not use SASL".into());
        };
        let Some(nonce) = crate::security::nonce() else {
            return Step::Failed("the broker has no randomness for a SASL nonce".into());
        };
        let security = &self.broker.security;
        let credentials = security.credentials();
        let verifiers = Verifiers {
            credentials: &credentials,
            oauth: security.oauth.as_ref(),
            max_reauth_ms: self.broker.config.security.max_reauth_ms,
        };
        let step = sasl.authenticate(token, version, &verifiers, &nonce, crate::clock::now_ms());
        drop(credentials);
        let metrics = &self.broker.metrics;
        match &step {
            Step::Challenge(_) => {}
            Step::Done { .. } => {
                metrics.sasl_successes.fetch_add(1, Ordering::Relaxed);
                if let Some(done) = sasl.authenticated() {
                    let principal = done.principal.clone();
                    tracing::info!(%principal, mechanism = done.mechanism.name(), "SASL authenticated");
                    self.record
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .principal = Some(principal.to_string());
                    self.principal = Some(Arc::new(principal));
                    self.reader
                        .set_max_frame_size(self.broker.config.socket_request_max_bytes);
                    self.bind_instance();
                }
            }
            Step::Failed(message) => {
                metrics.sasl_failures.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%message, "SASL authentication failed; closing");
            }
        }
        step
    }

    /// Claims the connection's instance ID for its principal once both are known (the ID can be
    /// fixed before SASL authenticates): another principal's ID is flagged, or with `enforce`
    /// refused.
    pub(super) fn bind_instance(&mut self) {
        let binding = self.broker.config.security.instance_binding;
        let (Some(id), Some(principal)) = (self.identity.instance_id(), &self.principal) else {
            return;
        };
        if binding == InstanceBinding::Off || self.instance_claim.is_some() {
            return;
        }
        let claim = match self.claim_in_cluster(id, principal) {
            Some(conflict) => conflict,
            None => {
                self.broker
                    .security
                    .owners
                    .claim_instance(id, principal, crate::clock::now_ms())
            }
        };
        if let Claim::Conflict { owner } = &claim {
            tracing::warn!(
                client_instance_id = %id,
                %principal,
                %owner,
                enforce = binding == InstanceBinding::Enforce,
                "a client instance ID owned by another principal was presented"
            );
            self.record
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .instance_id_owner = Some(owner.clone());
            if binding == InstanceBinding::Enforce {
                self.refused_instance = Some(owner.clone());
            }
        }
        self.instance_claim = Some(claim);
    }

    /// Cluster mode: claims the instance ID in PostgreSQL too (another broker's connection may
    /// hold it for another principal): the conflict, or `None` to go on with the local claim.
    /// PostgreSQL unreachable: the local claim alone decides (logged).
    fn claim_in_cluster(
        &self,
        id: skiff_protocol::Uuid,
        principal: &skiff_auth::principal::KafkaPrincipal,
    ) -> Option<Claim> {
        let cluster = self.broker.cluster()?;
        let hold_ms = self.broker.config.security.instance_binding_ms;
        let owner = principal.to_string();
        let claimed = cluster
            .sync_db
            .block_on(skiff_cluster::documents::claim_instance(
                cluster.sync_db.db(),
                uuid::Uuid::from_u128(id.as_u128()),
                &owner,
                hold_ms.max(crate::cluster::INSTANCE_HOLD_MIN_MS),
            ))
            .map_err(|e| e.to_string());
        match claimed {
            Ok(None) => None,
            Ok(Some(owner)) => {
                self.broker.security.owners.conflict_elsewhere();
                Some(Claim::Conflict { owner })
            }
            Err(e) => {
                tracing::warn!(error = %e, "claiming the instance ID in the cluster failed; the local claim decides");
                None
            }
        }
    }

    /// How long a failed authentication's answer waits (`connection.failed.authentication.delay.ms`).
    fn failure_delay(&self, error_code: i16) -> std::time::Duration {
        if error_code == error_codes::SASL_AUTHENTICATION_FAILED {
            std::time::Duration::from_millis(
                self.broker.config.security.failed_authentication_delay_ms,
            )
        } else {
            std::time::Duration::ZERO
        }
    }
}
