//! Admin calls for security: SCRAM users (AlterUserScramCredentials, KIP-554: the password is
//! salted here and never sent) and ACLs (CreateAcls, DescribeAcls, DeleteAcls), in
//! `skiff_auth::acl`'s types.

use skiff_auth::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
    ResourcePattern, ResourceType,
};
use skiff_auth::scram::ScramMechanism;
use skiff_protocol::generated::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use skiff_protocol::generated::create_acls_request::AclCreation;
use skiff_protocol::generated::delete_acls_request::DeleteAclsFilter;
use skiff_protocol::generated::describe_acls_response::DescribeAclsResource;
use skiff_protocol::generated::describe_user_scram_credentials_request::UserName;
use skiff_protocol::generated::{
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
};
use skiff_protocol::{ByteString, error_codes};

use crate::admin::Admin;
use crate::error::{Error, Result};

/// The salt length of the credentials [`Admin::set_scram_credential`] makes (Kafka's client
/// uses 32 random bytes too).
const SALT_LEN: usize = 32;

/// A user and the SCRAM credentials the broker has for it: (mechanism, iterations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUser {
    pub name: String,
    pub credentials: Vec<(ScramMechanism, i32)>,
}

impl Admin {
    /// Sets (or replaces) `user`'s credential for `mechanism`: the password is salted here with a
    /// random salt and `iterations` rounds, and only the salted password goes to the broker.
    pub async fn set_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        password: &[u8],
        iterations: u32,
    ) -> Result<()> {
        let mut salt = [0u8; SALT_LEN];
        getrandom::fill(&mut salt)
            .map_err(|e| Error::Config(format!("no randomness for a SCRAM salt: {e}")))?;
        let upsertion = scram_upsertion(user, mechanism, password, &salt, iterations)?;
        self.alter_scram_credentials(AlterUserScramCredentialsRequest {
            upsertions: vec![upsertion],
            ..Default::default()
        })
        .await
    }

    /// Deletes `user`'s credential for `mechanism` (the broker's RESOURCE_NOT_FOUND when it has
    /// none).
    pub async fn delete_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<()> {
        self.alter_scram_credentials(AlterUserScramCredentialsRequest {
            deletions: vec![ScramCredentialDeletion {
                name: user.into(),
                mechanism: mechanism.code(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
    }

    async fn alter_scram_credentials(
        &self,
        request: AlterUserScramCredentialsRequest,
    ) -> Result<()> {
        let r = self.client().request_any(|_| request).await?;
        match r
            .results
            .into_iter()
            .find(|u| u.error_code != error_codes::NONE)
        {
            Some(failed) => Err(Error::broker_for(
                "AlterUserScramCredentials",
                failed.error_code,
                format!("user {}", failed.user),
                failed.error_message.map(|m| m.to_string()),
            )),
            None => Ok(()),
        }
    }

    /// The SCRAM users the broker has, sorted by name: every one (`None`), or those named (an
    /// unknown one is the broker's RESOURCE_NOT_FOUND).
    pub async fn describe_scram_users(&self, users: Option<&[&str]>) -> Result<Vec<ScramUser>> {
        let request = DescribeUserScramCredentialsRequest {
            users: users.map(|names| {
                names
                    .iter()
                    .map(|name| UserName {
                        name: (*name).into(),
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        };
        let r = self.client().request_any(|_| request).await?;
        if r.error_code != error_codes::NONE {
            return Err(Error::broker(
                "DescribeUserScramCredentials",
                r.error_code,
                r.error_message.map(|m| m.to_string()),
            ));
        }
        let mut out = Vec::new();
        for user in r.results {
            if user.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "DescribeUserScramCredentials",
                    user.error_code,
                    format!("user {}", user.user),
                    user.error_message.map(|m| m.to_string()),
                ));
            }
            let credentials = user
                .credential_infos
                .iter()
                .filter_map(|c| Some((ScramMechanism::from_code(c.mechanism)?, c.iterations)))
                .collect();
            out.push(ScramUser {
                name: user.user.to_string(),
                credentials,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Creates ACLs (CreateAcls); the first one the broker refuses is the error.
    pub async fn create_acls(&self, bindings: &[AclBinding]) -> Result<()> {
        let request = CreateAclsRequest {
            creations: bindings.iter().map(acl_creation).collect(),
            ..Default::default()
        };
        let r = self.client().request_any(|_| request).await?;
        for (result, binding) in r.results.into_iter().zip(bindings) {
            if result.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "CreateAcls",
                    result.error_code,
                    describe_binding(binding),
                    result.error_message.map(|m| m.to_string()),
                ));
            }
        }
        Ok(())
    }

    /// The ACLs `filter` selects (DescribeAcls).
    pub async fn describe_acls(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let request = describe_acls_request(filter);
        let r = self.client().request_any(|_| request).await?;
        if r.error_code != error_codes::NONE {
            return Err(Error::broker(
                "DescribeAcls",
                r.error_code,
                r.error_message.map(|m| m.to_string()),
            ));
        }
        Ok(r.resources.iter().flat_map(resource_bindings).collect())
    }

    /// Deletes the ACLs each filter selects (DeleteAcls); returns those deleted.
    pub async fn delete_acls(&self, filters: &[AclBindingFilter]) -> Result<Vec<AclBinding>> {
        let request = DeleteAclsRequest {
            filters: filters.iter().map(delete_acls_filter).collect(),
            ..Default::default()
        };
        let r = self.client().request_any(|_| request).await?;
        let mut deleted = Vec::new();
        for result in r.filter_results {
            if result.error_code != error_codes::NONE {
                return Err(Error::broker(
                    "DeleteAcls",
                    result.error_code,
                    result.error_message.map(|m| m.to_string()),
                ));
            }
            for acl in result.matching_acls {
                let binding = AclBinding::new(
                    ResourcePattern::new(
                        ResourceType::from_code(acl.resource_type),
                        acl.resource_name.to_string(),
                        PatternType::from_code(acl.pattern_type),
                    ),
                    AccessControlEntry::new(
                        acl.principal.to_string(),
                        acl.host.to_string(),
                        AclOperation::from_code(acl.operation),
                        AclPermissionType::from_code(acl.permission_type),
                    ),
                );
                if acl.error_code != error_codes::NONE {
                    return Err(Error::broker_for(
                        "DeleteAcls",
                        acl.error_code,
                        describe_binding(&binding),
                        acl.error_message.map(|m| m.to_string()),
                    ));
                }
                deleted.push(binding);
            }
        }
        Ok(deleted)
    }
}

/// One binding in words for error messages: `ALLOW User:alice READ from * on TOPIC orders
/// (LITERAL)`.
fn describe_binding(binding: &AclBinding) -> String {
    let (pattern, entry) = (&binding.pattern, &binding.entry);
    format!(
        "{} {} {} from {} on {} {} ({})",
        entry.permission,
        entry.principal,
        entry.operation,
        entry.host,
        pattern.resource_type,
        pattern.name,
        pattern.pattern_type
    )
}

/// The upsertion for `password` salted with `salt` (refused when `iterations` is outside what
/// Kafka accepts).
fn scram_upsertion(
    user: &str,
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Result<ScramCredentialUpsertion> {
    let salted = skiff_auth::scram::salted_password(mechanism, password, salt, iterations)
        .map_err(|e| Error::Config(e.to_string()))?;
    Ok(ScramCredentialUpsertion {
        name: user.into(),
        mechanism: mechanism.code(),
        iterations: i32::try_from(iterations).map_err(|e| Error::Config(e.to_string()))?,
        salt: salt.to_vec().into(),
        salted_password: salted.into(),
        ..Default::default()
    })
}

fn acl_creation(binding: &AclBinding) -> AclCreation {
    let (pattern, entry) = (&binding.pattern, &binding.entry);
    AclCreation {
        resource_type: pattern.resource_type.code(),
        resource_name: pattern.name.as_str().into(),
        resource_pattern_type: pattern.pattern_type.code(),
        principal: entry.principal.as_str().into(),
        host: entry.host.as_str().into(),
        operation: entry.operation.code(),
        permission_type: entry.permission.code(),
        ..Default::default()
    }
}

fn optional(text: &Option<String>) -> Option<ByteString> {
    text.as_deref().map(Into::into)
}

fn describe_acls_request(filter: &AclBindingFilter) -> DescribeAclsRequest {
    let (pattern, entry) = (&filter.pattern, &filter.entry);
    DescribeAclsRequest {
        resource_type_filter: pattern.resource_type.code(),
        resource_name_filter: optional(&pattern.name),
        pattern_type_filter: pattern.pattern_type.code(),
        principal_filter: optional(&entry.principal),
        host_filter: optional(&entry.host),
        operation: entry.operation.code(),
        permission_type: entry.permission.code(),
        ..Default::default()
    }
}

fn delete_acls_filter(filter: &AclBindingFilter) -> DeleteAclsFilter {
    let (pattern, entry) = (&filter.pattern, &filter.entry);
    DeleteAclsFilter {
        resource_type_filter: pattern.resource_type.code(),
        resource_name_filter: optional(&pattern.name),
        pattern_type_filter: pattern.pattern_type.code(),
        principal_filter: optional(&entry.principal),
        host_filter: optional(&entry.host),
        operation: entry.operation.code(),
        permission_type: entry.permission.code(),
        ..Default::default()
    }
}

/// The bindings of one DescribeAcls resource.
fn resource_bindings(resource: &DescribeAclsResource) -> impl Iterator<Item = AclBinding> + '_ {
    let pattern = ResourcePattern::new(
        ResourceType::from_code(resource.resource_type),
        resource.resource_name.to_string(),
        PatternType::from_code(resource.pattern_type),
    );
    resource.acls.iter().map(move |acl| {
        AclBinding::new(
            pattern.clone(),
            AccessControlEntry::new(
                acl.principal.to_string(),
                acl.host.to_string(),
                AclOperation::from_code(acl.operation),
                AclPermissionType::from_code(acl.permission_type),
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use skiff_auth::acl::{AccessControlEntryFilter, ResourcePatternFilter};
    use skiff_protocol::generated::describe_acls_response::AclDescription;

    use super::*;

    fn alice_reads_orders() -> AclBinding {
        AclBinding::new(
            ResourcePattern::new(ResourceType::Topic, "orders", PatternType::Prefixed),
            AccessControlEntry::new(
                "User:alice",
                "*",
                AclOperation::Read,
                AclPermissionType::Allow,
            ),
        )
    }

    #[test]
    fn a_binding_becomes_a_creation_with_kafkas_codes() {
        let creation = acl_creation(&alice_reads_orders());
        assert_eq!(
            (
                creation.resource_type,
                creation.resource_pattern_type,
                creation.operation,
                creation.permission_type
            ),
            (2, 4, 3, 3)
        );
        assert_eq!(&*creation.resource_name, "orders");
        assert_eq!(&*creation.principal, "User:alice");
        assert_eq!(&*creation.host, "*");
    }

    #[test]
    fn filters_send_absent_fields_as_null_and_any_as_its_code() {
        let filter = AclBindingFilter {
            pattern: ResourcePatternFilter {
                resource_type: ResourceType::Topic,
                name: Some("orders".into()),
                pattern_type: PatternType::Match,
            },
            entry: AccessControlEntryFilter::ANY,
        };
        let describe = describe_acls_request(&filter);
        assert_eq!(describe.resource_type_filter, 2);
        assert_eq!(describe.resource_name_filter.as_deref(), Some("orders"));
        assert_eq!(describe.pattern_type_filter, 2);
        assert_eq!(describe.principal_filter, None);
        assert_eq!(describe.host_filter, None);
        assert_eq!((describe.operation, describe.permission_type), (1, 1));
        let delete = delete_acls_filter(&AclBindingFilter::ANY);
        assert_eq!(
            (
                delete.resource_type_filter,
                delete.pattern_type_filter,
                delete.resource_name_filter
            ),
            (1, 1, None)
        );
    }

    #[test]
    fn described_resources_become_bindings() {
        let resource = DescribeAclsResource {
            resource_type: 2,
            resource_name: "orders".into(),
            pattern_type: 4,
            acls: vec![AclDescription {
                principal: "User:alice".into(),
                host: "*".into(),
                operation: 3,
                permission_type: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        let bindings: Vec<AclBinding> = resource_bindings(&resource).collect();
        assert_eq!(bindings, vec![alice_reads_orders()]);
    }

    #[test]
    fn an_upsertion_carries_the_salted_password_never_the_password() {
        let upsertion =
            scram_upsertion("alice", ScramMechanism::Sha512, b"secret", b"salt", 4096).expect("ok");
        assert_eq!((upsertion.mechanism, upsertion.iterations), (2, 4096));
        let expected =
            skiff_auth::scram::salted_password(ScramMechanism::Sha512, b"secret", b"salt", 4096)
                .expect("salted");
        assert_eq!(upsertion.salted_password.to_vec(), expected);
        assert!(
            scram_upsertion("alice", ScramMechanism::Sha512, b"secret", b"salt", 100).is_err(),
            "too few iterations"
        );
    }
}
