//! CreateAcls, DescribeAcls and DeleteAcls (v0-3), answered as Kafka's controller does:
//! SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER (create,
//! delete) or DESCRIBE (describe) on the cluster, INVALID_REQUEST for an ACL or filter Kafka
//! refuses. Changes are saved before the answer.

use std::collections::BTreeMap;

use skiff_auth::acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation,
    AclPermissionType, PatternType, ResourcePattern, ResourcePatternFilter, ResourceType,
};
use skiff_protocol::generated::create_acls_request::{AclCreation, CreateAclsRequest};
use skiff_protocol::generated::create_acls_response::{AclCreationResult, CreateAclsResponse};
use skiff_protocol::generated::delete_acls_request::{DeleteAclsFilter, DeleteAclsRequest};
use skiff_protocol::generated::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsResponse,
};
use skiff_protocol::generated::describe_acls_request::DescribeAclsRequest;
use skiff_protocol::generated::describe_acls_response::{
    AclDescription, DescribeAclsResource, DescribeAclsResponse,
};
use skiff_protocol::{Response, error_codes};

use super::{RequestContext, bs};

const NO_AUTHORIZER: &str = "No Authorizer is configured.";

pub fn create(ctx: &RequestContext, request: CreateAclsRequest) -> Response {
    let result = |error_code, message: Option<String>| AclCreationResult {
        error_code,
        error_message: message.map(bs),
        ..Default::default()
    };
    let Some(acls) = &ctx.broker.security.acls else {
        let results = request
            .creations
            .iter()
            .map(|_| result(error_codes::SECURITY_DISABLED, Some(NO_AUTHORIZER.into())))
            .collect();
        return CreateAclsResponse {
            results,
            ..Default::default()
        }
        .into();
    };
    let allowed = ctx.authorized_on_cluster(AclOperation::Alter);
    let checked: Vec<Result<AclBinding, (i16, String)>> = request
        .creations
        .iter()
        .map(|creation| {
            if !allowed {
                return Err((
                    error_codes::CLUSTER_AUTHORIZATION_FAILED,
                    "Cluster authorization failed.".into(),
                ));
            }
            let binding = binding(creation);
            binding
                .validate()
                .map(|()| binding)
                .map_err(|message| (error_codes::INVALID_REQUEST, message))
        })
        .collect();
    let valid: Vec<AclBinding> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let saved = if valid.is_empty() {
        Ok(())
    } else {
        acls.create(valid)
    };
    let results = checked
        .into_iter()
        .map(|checked| match (checked, &saved) {
            (Err((code, message)), _) => result(code, Some(message)),
            (Ok(_), Ok(())) => result(error_codes::NONE, None),
            (Ok(_), Err(e)) => {
                tracing::error!(error = %format!("{e:#}"), "saving ACLs failed");
                result(
                    error_codes::KAFKA_STORAGE_ERROR,
                    Some("the ACLs could not be saved".into()),
                )
            }
        })
        .collect();
    CreateAclsResponse {
        results,
        ..Default::default()
    }
    .into()
}

pub fn describe(ctx: &RequestContext, request: DescribeAclsRequest) -> Response {
    let error = |error_code, message: &str| {
        DescribeAclsResponse {
            error_code,
            error_message: Some(bs(message)),
            ..Default::default()
        }
        .into()
    };
    let Some(acls) = &ctx.broker.security.acls else {
        return error(error_codes::SECURITY_DISABLED, NO_AUTHORIZER);
    };
    if !ctx.authorized_on_cluster(AclOperation::Describe) {
        return error(
            error_codes::CLUSTER_AUTHORIZATION_FAILED,
            "Cluster authorization failed.",
        );
    }
    let filter = filter(
        request.resource_type_filter,
        request.resource_name_filter.as_deref(),
        request.pattern_type_filter,
        request.principal_filter.as_deref(),
        request.host_filter.as_deref(),
        request.operation,
        request.permission_type,
    );
    if let Err(message) = filter.validate() {
        return error(error_codes::INVALID_REQUEST, &message);
    }
    let mut resources: BTreeMap<ResourcePattern, Vec<AclDescription>> = BTreeMap::new();
    for binding in acls.describe(&filter) {
        resources
            .entry(binding.pattern)
            .or_default()
            .push(AclDescription {
                principal: bs(binding.entry.principal),
                host: bs(binding.entry.host),
                operation: binding.entry.operation.code(),
                permission_type: binding.entry.permission.code(),
                ..Default::default()
            });
    }
    DescribeAclsResponse {
        resources: resources
            .into_iter()
            .map(|(pattern, acls)| DescribeAclsResource {
                resource_type: pattern.resource_type.code(),
                resource_name: bs(pattern.name),
                pattern_type: pattern.pattern_type.code(),
                acls,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
    .into()
}

pub fn delete(ctx: &RequestContext, request: DeleteAclsRequest) -> Response {
    let failed = |error_code, message: &str| DeleteAclsFilterResult {
        error_code,
        error_message: Some(bs(message)),
        ..Default::default()
    };
    let Some(acls) = &ctx.broker.security.acls else {
        let filter_results = request
            .filters
            .iter()
            .map(|_| failed(error_codes::SECURITY_DISABLED, NO_AUTHORIZER))
            .collect();
        return DeleteAclsResponse {
            filter_results,
            ..Default::default()
        }
        .into();
    };
    let allowed = ctx.authorized_on_cluster(AclOperation::Alter);
    let checked: Vec<Result<AclBindingFilter, DeleteAclsFilterResult>> = request
        .filters
        .iter()
        .map(|f| {
            if !allowed {
                return Err(failed(
                    error_codes::CLUSTER_AUTHORIZATION_FAILED,
                    "Cluster authorization failed.",
                ));
            }
            let filter = delete_filter(f);
            filter
                .validate()
                .map(|()| filter)
                .map_err(|message| failed(error_codes::INVALID_REQUEST, &message))
        })
        .collect();
    let valid: Vec<AclBindingFilter> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let removed = acls.delete(&valid);
    let mut removed = match removed {
        Ok(removed) => removed.into_iter(),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "saving ACLs failed");
            let filter_results = checked
                .into_iter()
                .map(|c| {
                    c.err().unwrap_or_else(|| {
                        failed(
                            error_codes::KAFKA_STORAGE_ERROR,
                            "the ACLs could not be saved",
                        )
                    })
                })
                .collect();
            return DeleteAclsResponse {
                filter_results,
                ..Default::default()
            }
            .into();
        }
    };
    let filter_results = checked
        .into_iter()
        .map(|c| match c {
            Err(result) => result,
            Ok(_) => DeleteAclsFilterResult {
                matching_acls: removed
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(matching)
                    .collect(),
                ..Default::default()
            },
        })
        .collect();
    DeleteAclsResponse {
        filter_results,
        ..Default::default()
    }
    .into()
}

fn binding(c: &AclCreation) -> AclBinding {
    AclBinding::new(
        ResourcePattern::new(
            ResourceType::from_code(c.resource_type),
            c.resource_name.to_string(),
            PatternType::from_code(c.resource_pattern_type),
        ),
        AccessControlEntry::new(
            c.principal.to_string(),
            c.host.to_string(),
            AclOperation::from_code(c.operation),
            AclPermissionType::from_code(c.permission_type),
        ),
    )
}

fn delete_filter(f: &DeleteAclsFilter) -> AclBindingFilter {
    filter(
        f.resource_type_filter,
        f.resource_name_filter.as_deref(),
        f.pattern_type_filter,
        f.principal_filter.as_deref(),
        f.host_filter.as_deref(),
        f.operation,
        f.permission_type,
    )
}

fn filter(
    resource_type: i8,
    name: Option<&str>,
    pattern_type: i8,
    principal: Option<&str>,
    host: Option<&str>,
    operation: i8,
    permission: i8,
) -> AclBindingFilter {
    AclBindingFilter {
        pattern: ResourcePatternFilter {
            resource_type: ResourceType::from_code(resource_type),
            name: name.map(str::to_string),
            pattern_type: PatternType::from_code(pattern_type),
        },
        entry: AccessControlEntryFilter {
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: AclOperation::from_code(operation),
            permission: AclPermissionType::from_code(permission),
        },
    }
}

fn matching(binding: AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl {
        resource_type: binding.pattern.resource_type.code(),
        resource_name: bs(binding.pattern.name),
        pattern_type: binding.pattern.pattern_type.code(),
        principal: bs(binding.entry.principal),
        host: bs(binding.entry.host),
        operation: binding.entry.operation.code(),
        permission_type: binding.entry.permission.code(),
        ..Default::default()
    }
}
