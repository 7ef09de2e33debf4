//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): the credential store,
//! as Kafka's controller checks and answers them. A request changes each user at most once;
//! every valid change is saved (crash-safely) before the answer. Describing needs DESCRIBE on the
//! cluster, altering ALTER.

use std::collections::{BTreeMap, BTreeSet};

use skiff_auth::acl::AclOperation;
use skiff_auth::scram::{ScramCredential, ScramMechanism};
use skiff_protocol::generated::alter_user_scram_credentials_request::{
    AlterUserScramCredentialsRequest, ScramCredentialUpsertion,
};
use skiff_protocol::generated::alter_user_scram_credentials_response::{
    AlterUserScramCredentialsResponse, AlterUserScramCredentialsResult,
};
use skiff_protocol::generated::describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest;
use skiff_protocol::generated::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResponse, DescribeUserScramCredentialsResult,
};
use skiff_protocol::{Response, error_codes};

use super::{RequestContext, bs};

pub fn describe(ctx: &RequestContext, request: DescribeUserScramCredentialsRequest) -> Response {
    if !ctx.authorized_on_cluster(AclOperation::Describe) {
        return DescribeUserScramCredentialsResponse {
            error_code: error_codes::CLUSTER_AUTHORIZATION_FAILED,
            error_message: Some(bs("Cluster authorization failed.")),
            ..Default::default()
        }
        .into();
    }
    let credentials = ctx.broker.security.credentials();
    let info = |mechanisms: Vec<(ScramMechanism, u32)>| {
        mechanisms
            .into_iter()
            .map(|(mechanism, iterations)| CredentialInfo {
                mechanism: mechanism.code(),
                iterations: i32::try_from(iterations).unwrap_or(i32::MAX),
                ..Default::default()
            })
            .collect()
    };
    let requested: Vec<String> = request
        .users
        .unwrap_or_default()
        .into_iter()
        .map(|u| u.name.to_string())
        .collect();
    let results = if requested.is_empty() {
        credentials
            .users()
            .map(|(user, mechanisms)| DescribeUserScramCredentialsResult {
                user: bs(user.to_string()),
                credential_infos: info(mechanisms),
                ..Default::default()
            })
            .collect()
    } else {
        let mut seen = BTreeSet::new();
        let duplicated: BTreeSet<&String> = requested.iter().filter(|u| !seen.insert(*u)).collect();
        let mut answered = BTreeSet::new();
        requested
            .iter()
            .filter(|user| answered.insert(*user))
            .map(|user| {
                let (error_code, message, infos) = if duplicated.contains(user) {
                    (
                        error_codes::DUPLICATE_RESOURCE,
                        Some(format!(
                            "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                        )),
                        Vec::new(),
                    )
                } else {
                    match credentials.user(user) {
                        Some(mechanisms) => (error_codes::NONE, None, info(mechanisms)),
                        None => (
                            error_codes::RESOURCE_NOT_FOUND,
                            Some(format!(
                                "Attempt to describe nonexistent SCRAM credential for user: {user}"
                            )),
                            Vec::new(),
                        ),
                    }
                };
                DescribeUserScramCredentialsResult {
                    user: bs(user.clone()),
                    error_code,
                    error_message: message.map(bs),
                    credential_infos: infos,
                    ..Default::default()
                }
            })
            .collect()
    };
    DescribeUserScramCredentialsResponse {
        results,
        ..Default::default()
    }
    .into()
}

/// One user's change, once checked.
enum Change {
    Delete(ScramMechanism),
    Upsert(ScramMechanism, ScramCredential),
}

pub fn alter(ctx: &RequestContext, request: AlterUserScramCredentialsRequest) -> Response {
    if !ctx.authorized_on_cluster(AclOperation::Alter) {
        let users: BTreeSet<String> = request
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(request.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        return AlterUserScramCredentialsResponse {
            results: users
                .into_iter()
                .map(|user| AlterUserScramCredentialsResult {
                    user: bs(user),
                    error_code: error_codes::CLUSTER_AUTHORIZATION_FAILED,
                    error_message: Some(bs("Cluster authorization failed.")),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
        .into();
    }
    let mut errors: BTreeMap<String, (i16, String)> = BTreeMap::new();
    let mut changes: BTreeMap<String, Change> = BTreeMap::new();
    let twice = || {
        (
            error_codes::DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request".to_string(),
        )
    };
    let credentials = ctx.broker.security.credentials().clone();
    for deletion in &request.deletions {
        let user = deletion.name.to_string();
        if errors.contains_key(&user) {
            continue;
        }
        if changes.remove(&user).is_some() {
            errors.insert(user, twice());
            continue;
        }
        match check_user_and_mechanism(&user, deletion.mechanism) {
            Ok(mechanism) if credentials.get(&user, mechanism).is_some() => {
                changes.insert(user, Change::Delete(mechanism));
            }
            Ok(_) => {
                errors.insert(
                    user,
                    (
                        error_codes::RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist".into(),
                    ),
                );
            }
            Err(e) => {
                errors.insert(user, e);
            }
        }
    }
    for upsertion in &request.upsertions {
        let user = upsertion.name.to_string();
        if errors.contains_key(&user) {
            continue;
        }
        if changes.remove(&user).is_some() {
            errors.insert(user, twice());
            continue;
        }
        match check_upsertion(&user, upsertion) {
            Ok((mechanism, credential)) => {
                changes.insert(user, Change::Upsert(mechanism, credential));
            }
            Err(e) => {
                errors.insert(user, e);
            }
        }
    }
    let saved = ctx.broker.security.alter_credentials(|store| {
        for (user, change) in &changes {
            match change {
                Change::Delete(mechanism) => {
                    store.remove(user, *mechanism);
                }
                Change::Upsert(mechanism, credential) => {
                    store.set(user, *mechanism, credential.clone());
                }
            }
        }
    });
    if let Err(e) = saved {
        tracing::error!(error = %format!("{e:#}"), "saving SCRAM credentials failed");
        for user in changes.into_keys() {
            errors.insert(
                user,
                (
                    error_codes::KAFKA_STORAGE_ERROR,
                    "the credentials could not be saved".into(),
                ),
            );
        }
        changes = BTreeMap::new();
    }
    let ok = changes
        .into_keys()
        .map(|user| (user, error_codes::NONE, None));
    let failed = errors
        .into_iter()
        .map(|(user, (code, message))| (user, code, Some(message)));
    AlterUserScramCredentialsResponse {
        results: ok
            .chain(failed)
            .map(
                |(user, error_code, message)| AlterUserScramCredentialsResult {
                    user: bs(user),
                    error_code,
                    error_message: message.map(bs),
                    ..Default::default()
                },
            )
            .collect(),
        ..Default::default()
    }
    .into()
}

fn check_user_and_mechanism(user: &str, mechanism: i8) -> Result<ScramMechanism, (i16, String)> {
    if user.is_empty() {
        return Err((
            error_codes::UNACCEPTABLE_CREDENTIAL,
            "Username must not be empty".into(),
        ));
    }
    ScramMechanism::from_code(mechanism).ok_or((
        error_codes::UNSUPPORTED_SASL_MECHANISM,
        "Unknown SCRAM mechanism".into(),
    ))
}

fn check_upsertion(
    user: &str,
    upsertion: &ScramCredentialUpsertion,
) -> Result<(ScramMechanism, ScramCredential), (i16, String)> {
    let mechanism = check_user_and_mechanism(user, upsertion.mechanism)?;
    let unacceptable = |message: &str| (error_codes::UNACCEPTABLE_CREDENTIAL, message.to_string());
    let iterations = u32::try_from(upsertion.iterations).unwrap_or(0);
    if iterations < ScramMechanism::MIN_ITERATIONS {
        return Err(unacceptable("Too few iterations"));
    }
    if iterations > ScramMechanism::MAX_ITERATIONS {
        return Err(unacceptable("Too many iterations"));
    }
    if upsertion.salt.is_empty() || upsertion.salted_password.is_empty() {
        return Err(unacceptable(
            "The salt and the salted password must not be empty",
        ));
    }
    let credential = ScramCredential::from_salted_password(
        mechanism,
        &upsertion.salted_password,
        &upsertion.salt,
        iterations,
    )
    .map_err(|e| unacceptable(&e.to_string()))?;
    Ok((mechanism, credential))
}
