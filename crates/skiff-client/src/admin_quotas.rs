//! Client quotas through the admin client: DescribeClientQuotas and AlterClientQuotas.

use skiff_protocol::error_codes;
use skiff_protocol::generated::alter_client_quotas_request::{EntityData, EntryData, OpData};
use skiff_protocol::generated::describe_client_quotas_request::ComponentData;
use skiff_protocol::generated::{AlterClientQuotasRequest, DescribeClientQuotasRequest};

use crate::admin::Admin;
use crate::error::{Error, Result};

/// A quota entity as (type, name) pairs: `("user", Some("alice"))`, `("client-id", None)` (the
/// default), `("client-instance-id", Some(id))`.
pub type QuotaEntity = Vec<(String, Option<String>)>;

/// One entity's quotas, as DescribeClientQuotas lists them.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientQuota {
    pub entity: QuotaEntity,
    /// Quota key and value (`producer_byte_rate`, 1048576.0).
    pub values: Vec<(String, f64)>,
}

impl Admin {
    /// Every configured quota whose entity has the given (type, name) parts (a `None` name
    /// matches the default); with `strict`, no other part.
    pub async fn describe_client_quotas(
        &self,
        filter: &[(&str, Option<&str>)],
        strict: bool,
    ) -> Result<Vec<ClientQuota>> {
        let components = filter
            .iter()
            .map(|(kind, name)| ComponentData {
                entity_type: (*kind).into(),
                match_type: if name.is_some() { 0 } else { 1 },
                r#match: name.map(Into::into),
                ..Default::default()
            })
            .collect();
        let r = self
            .client()
            .request_any(|_| DescribeClientQuotasRequest {
                components,
                strict,
                ..Default::default()
            })
            .await?;
        if r.error_code != error_codes::NONE {
            return Err(Error::broker(
                "DescribeClientQuotas",
                r.error_code,
                r.error_message.map(|m| m.to_string()),
            ));
        }
        Ok(r.entries
            .unwrap_or_default()
            .into_iter()
            .map(|e| ClientQuota {
                entity: e
                    .entity
                    .into_iter()
                    .map(|p| {
                        (
                            p.entity_type.to_string(),
                            p.entity_name.map(|n| n.to_string()),
                        )
                    })
                    .collect(),
                values: e
                    .values
                    .into_iter()
                    .map(|v| (v.key.to_string(), v.value))
                    .collect(),
            })
            .collect())
    }

    /// Sets (`Some`) or removes (`None`) quota keys of one entity.
    pub async fn alter_client_quotas(
        &self,
        entity: &[(&str, Option<&str>)],
        changes: &[(&str, Option<f64>)],
    ) -> Result<()> {
        let r = self
            .client()
            .request_any(|_| AlterClientQuotasRequest {
                entries: vec![EntryData {
                    entity: entity
                        .iter()
                        .map(|(kind, name)| EntityData {
                            entity_type: (*kind).into(),
                            entity_name: name.map(Into::into),
                            ..Default::default()
                        })
                        .collect(),
                    ops: changes
                        .iter()
                        .map(|(key, value)| OpData {
                            key: (*key).into(),
                            value: value.unwrap_or(0.0),
                            remove: value.is_none(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await?;
        match r.entries.first() {
            Some(e) if e.error_code != error_codes::NONE => Err(Error::broker(
                "AlterClientQuotas",
                e.error_code,
                e.error_message.as_ref().map(|m| m.to_string()),
            )),
            Some(_) => Ok(()),
            None => Err(Error::protocol(
                "AlterClientQuotas",
                "no entry in the response",
            )),
        }
    }
}
