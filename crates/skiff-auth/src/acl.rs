//! Kafka's ACL model and authorizer: resource patterns, access control entries and the bindings
//! that pair them (with Kafka's wire codes and names), the filters that DescribeAcls and
//! DeleteAcls select them with, the checks CreateAcls applies, and [`Authorizer`], which stores
//! the bindings and decides each request as Kafka's `StandardAuthorizer` does.

use std::collections::HashSet;
use std::collections::btree_map::{self, BTreeMap};
use std::fmt;
use std::ops::Bound;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::principal::{KafkaPrincipal, PrincipalError, java_trim};

/// The resource name of literal ACLs that apply to every resource of their type.
pub const WILDCARD_RESOURCE: &str = "*";
/// The principal of ACLs that apply to every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host of ACLs that apply to every client address.
pub const WILDCARD_HOST: &str = "*";
/// The one name a CLUSTER resource has.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The resource name [`Authorizer::authorize_by_resource_type`] first asks
/// [`Authorizer::authorize`] about, as Kafka does, so that super users are allowed whatever the
/// DENY ACLs say.
const PROBE_RESOURCE_NAME: &str = "hardcode";

/// A name that is not one of an enum's Kafka names.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown {kind} `{name}`")]
pub struct UnknownName {
    /// What was being parsed, for example `resource type`.
    pub kind: &'static str,
    /// The text that named nothing.
    pub name: String,
}

/// Whether `text` is Kafka's `name` (upper snake case) in any letter case, written either with
/// its underscores or in Pascal case without them (`TRANSACTIONAL_ID`, `TransactionalId`).
fn is_name_of(text: &str, name: &str) -> bool {
    let upper = || text.bytes().map(|byte| byte.to_ascii_uppercase());
    upper().eq(name.bytes())
        || (!text.contains('_') && upper().eq(name.bytes().filter(|&byte| byte != b'_')))
}

/// Defines one of Kafka's ACL enums: its `i8` wire codes, its names (`Display`, `FromStr`, and
/// serde for persistence), and `Unknown` for codes this version does not know.
macro_rules! kafka_enum {
    (
        $(#[$doc:meta])*
        $name:ident ($kind:literal) {
            $($(#[$variant_doc:meta])* $variant:ident = $code:literal, $text:literal;)+
        }
    ) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        #[repr(i8)]
        pub enum $name {
            $($(#[$variant_doc])* $variant = $code,)+
        }

        impl $name {
            /// Every value, in code order.
            pub const VALUES: &[Self] = &[$(Self::$variant),+];

            /// The wire code.
            pub const fn code(self) -> i8 {
                self as i8
            }

            /// The value of a wire code: `Unknown` for a code this version does not know, as
            /// Kafka's `fromCode`.
            pub const fn from_code(code: i8) -> Self {
                match code {
                    $($code => Self::$variant,)+
                    _ => Self::Unknown,
                }
            }

            /// Kafka's name, for example `TRANSACTIONAL_ID`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        /// Parses Kafka's name in any letter case, with its underscores or in Pascal case
        /// (`TRANSACTIONAL_ID`, `transactional_id`, `TransactionalId`).
        impl FromStr for $name {
            type Err = UnknownName;

            fn from_str(text: &str) -> Result<Self, UnknownName> {
                Self::VALUES
                    .iter()
                    .copied()
                    .find(|value| is_name_of(text, value.name()))
                    .ok_or_else(|| UnknownName {
                        kind: $kind,
                        name: text.to_owned(),
                    })
            }
        }
    };
}

kafka_enum! {
    /// The kind of resource an ACL protects (Kafka's `ResourceType`).
    ResourceType("resource type") {
        /// A code this version does not know.
        Unknown = 0, "UNKNOWN";
        /// Any resource type (filters only).
        Any = 1, "ANY";
        /// A topic.
        Topic = 2, "TOPIC";
        /// A consumer group.
        Group = 3, "GROUP";
        /// The cluster, whose one name is [`CLUSTER_NAME`].
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
        /// A delegation token.
        DelegationToken = 6, "DELEGATION_TOKEN";
        /// A user (for quotas and SCRAM credentials).
        User = 7, "USER";
    }
}

kafka_enum! {
    /// How a resource pattern's name applies to resource names (Kafka's `PatternType`).
    PatternType("pattern type") {
        /// A code this version does not know.
        Unknown = 0, "UNKNOWN";
        /// Any pattern type (filters only).
        Any = 1, "ANY";
        /// Every pattern that applies to the filter's name (filters only).
        Match = 2, "MATCH";
        /// The name itself, or every name when it is [`WILDCARD_RESOURCE`].
        Literal = 3, "LITERAL";
        /// Every name that starts with the pattern's name.
        Prefixed = 4, "PREFIXED";
    }
}

kafka_enum! {
    /// What a request does to a resource (Kafka's `AclOperation`).
    AclOperation("operation") {
        /// A code this version does not know.
        Unknown = 0, "UNKNOWN";
        /// Any operation (filters only).
        Any = 1, "ANY";
        /// Every operation.
        All = 2, "ALL";
        /// Read.
        Read = 3, "READ";
        /// Write.
        Write = 4, "WRITE";
        /// Create.
        Create = 5, "CREATE";
        /// Delete.
        Delete = 6, "DELETE";
        /// Alter.
        Alter = 7, "ALTER";
        /// Describe, which READ, WRITE, DELETE and ALTER allow too.
        Describe = 8, "DESCRIBE";
        /// Cluster actions (inter-broker requests).
        ClusterAction = 9, "CLUSTER_ACTION";
        /// Describe configs, which ALTER_CONFIGS allows too.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// Alter configs.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Idempotent write.
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        /// Create delegation tokens.
        CreateTokens = 13, "CREATE_TOKENS";
        /// Describe delegation tokens.
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
}

kafka_enum! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`).
    AclPermissionType("permission type") {
        /// A code this version does not know.
        Unknown = 0, "UNKNOWN";
        /// Any permission type (filters only).
        Any = 1, "ANY";
        /// Deny, which wins over every allow.
        Deny = 2, "DENY";
        /// Allow.
        Allow = 3, "ALLOW";
    }
}

impl AclOperation {
    /// Whether an ALLOW ACL for this operation also allows `requested`, other than by being
    /// ALL or equal: READ, WRITE, DELETE and ALTER allow DESCRIBE, and ALTER_CONFIGS allows
    /// DESCRIBE_CONFIGS. A DENY ACL denies only its own operation.
    fn allows_implicitly(self, requested: Self) -> bool {
        match requested {
            Self::Describe => matches!(self, Self::Read | Self::Write | Self::Delete | Self::Alter),
            Self::DescribeConfigs => self == Self::AlterConfigs,
            _ => false,
        }
    }
}

/// The resources an ACL applies to: a type, a name and how the name applies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResourcePattern {
    /// The type of the resources.
    pub resource_type: ResourceType,
    /// The name, a prefix for PREFIXED patterns, [`WILDCARD_RESOURCE`] for every name.
    pub name: String,
    /// How the name applies.
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// A pattern.
    pub fn new(
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> Self {
        Self {
            resource_type,
            name: name.into(),
            pattern_type,
        }
    }

    /// The filter that matches exactly this pattern.
    pub fn to_filter(&self) -> ResourcePatternFilter {
        ResourcePatternFilter {
            resource_type: self.resource_type,
            name: Some(self.name.clone()),
            pattern_type: self.pattern_type,
        }
    }
}

/// Who may or may not do what from where.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AccessControlEntry {
    /// The principal as written, `type:name`, or [`WILDCARD_PRINCIPAL`].
    pub principal: String,
    /// The client's IP address as text, or [`WILDCARD_HOST`].
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// Allow or deny.
    pub permission: AclPermissionType,
}

impl AccessControlEntry {
    /// An entry.
    pub fn new(
        principal: impl Into<String>,
        host: impl Into<String>,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> Self {
        Self {
            principal: principal.into(),
            host: host.into(),
            operation,
            permission,
        }
    }

    /// The filter that matches exactly this entry.
    pub fn to_filter(&self) -> AccessControlEntryFilter {
        AccessControlEntryFilter {
            principal: Some(self.principal.clone()),
            host: Some(self.host.clone()),
            operation: self.operation,
            permission: self.permission,
        }
    }
}

/// An ACL: an entry bound to the resources of a pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    /// The resources.
    pub pattern: ResourcePattern,
    /// Who may or may not do what on them.
    pub entry: AccessControlEntry,
}

impl AclBinding {
    /// A binding.
    pub fn new(pattern: ResourcePattern, entry: AccessControlEntry) -> Self {
        Self { pattern, entry }
    }

    /// The checks Kafka applies to CreateAcls (`AclApis.handleCreateAcls`, then
    /// `AclControlManager.validateNewAcl`), with Kafka's messages: a concrete resource type,
    /// LITERAL or PREFIXED, a concrete operation, ALLOW or DENY, a non-empty name,
    /// [`CLUSTER_NAME`] for the cluster, and a `type:name` principal.
    pub fn validate(&self) -> Result<(), String> {
        let ResourcePattern {
            resource_type,
            name,
            pattern_type,
        } = &self.pattern;
        let AccessControlEntry {
            operation,
            permission,
            ..
        } = &self.entry;
        if *resource_type == ResourceType::Cluster && name != CLUSTER_NAME {
            return Err(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            ));
        }
        if name.is_empty() {
            return Err("Invalid empty resource name".to_owned());
        }
        if matches!(resource_type, ResourceType::Unknown | ResourceType::Any) {
            return Err(format!("Invalid resourceType {resource_type}"));
        }
        if !matches!(pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return Err(format!("Invalid patternType {pattern_type}"));
        }
        if matches!(operation, AclOperation::Unknown | AclOperation::Any) {
            return Err(format!("Invalid operation {operation}"));
        }
        if !matches!(
            permission,
            AclPermissionType::Allow | AclPermissionType::Deny
        ) {
            return Err(format!("Invalid permissionType {permission}"));
        }
        validate_principal(&self.entry.principal)
    }

    /// The filter that matches exactly this binding.
    pub fn to_filter(&self) -> AclBindingFilter {
        AclBindingFilter {
            pattern: self.pattern.to_filter(),
            entry: self.entry.to_filter(),
        }
    }
}

fn validate_principal(principal: &str) -> Result<(), String> {
    let reason = if !principal.contains(':') {
        "no colon is present separating the principal type from the principal name"
    } else if KafkaPrincipal::parse(principal).is_err() {
        "the principal type and the principal name must not be empty"
    } else {
        return Ok(());
    };
    Err(format!(
        "Could not parse principal from `{principal}` ({reason})"
    ))
}

/// Selects resource patterns (Kafka's `ResourcePatternFilter`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourcePatternFilter {
    /// The type, or ANY.
    pub resource_type: ResourceType,
    /// The name; `None` for any name.
    pub name: Option<String>,
    /// The pattern type; ANY for any, MATCH for every pattern that applies to `name`.
    pub pattern_type: PatternType,
}

impl ResourcePatternFilter {
    /// Matches every pattern.
    pub const ANY: Self = Self {
        resource_type: ResourceType::Any,
        name: None,
        pattern_type: PatternType::Any,
    };

    /// Whether the filter selects `pattern`. With a name and MATCH, it selects the literal
    /// pattern of that name, the literal wildcard, and the prefixed patterns the name starts
    /// with; otherwise the names must be equal.
    pub fn matches(&self, pattern: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != pattern.resource_type {
            return false;
        }
        let any_pattern_type = matches!(self.pattern_type, PatternType::Any | PatternType::Match);
        if !any_pattern_type && self.pattern_type != pattern.pattern_type {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == pattern.pattern_type {
            return *name == pattern.name;
        }
        match pattern.pattern_type {
            PatternType::Literal => *name == pattern.name || pattern.name == WILDCARD_RESOURCE,
            PatternType::Prefixed => name.starts_with(&pattern.name),
            _ => false,
        }
    }

    /// Whether the type or the pattern type is a code this version does not know.
    pub fn is_unknown(&self) -> bool {
        self.resource_type == ResourceType::Unknown || self.pattern_type == PatternType::Unknown
    }

    /// The first field that lets the filter match more than one pattern, described as Kafka
    /// does, or `None` when it can match at most one.
    pub fn find_indefinite_field(&self) -> Option<&'static str> {
        Some(match (self.resource_type, &self.name, self.pattern_type) {
            (ResourceType::Any, _, _) => "Resource type is ANY.",
            (ResourceType::Unknown, _, _) => "Resource type is UNKNOWN.",
            (_, None, _) => "Resource name is NULL.",
            (_, _, PatternType::Match) => "Resource pattern type is MATCH.",
            (_, _, PatternType::Unknown) => "Resource pattern type is UNKNOWN.",
            _ => return None,
        })
    }
}

/// Selects access control entries (Kafka's `AccessControlEntryFilter`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AccessControlEntryFilter {
    /// The principal as written; `None` for any.
    pub principal: Option<String>,
    /// The host as written; `None` for any.
    pub host: Option<String>,
    /// The operation, or ANY.
    pub operation: AclOperation,
    /// The permission type, or ANY.
    pub permission: AclPermissionType,
}

impl AccessControlEntryFilter {
    /// Matches every entry.
    pub const ANY: Self = Self {
        principal: None,
        host: None,
        operation: AclOperation::Any,
        permission: AclPermissionType::Any,
    };

    /// Whether the filter selects `entry`: each field is absent, ANY, or equal (the principal
    /// and host as written: `User:*` selects only the wildcard entries).
    pub fn matches(&self, entry: &AccessControlEntry) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|principal| *principal == entry.principal)
            && self.host.as_ref().is_none_or(|host| *host == entry.host)
            && (self.operation == AclOperation::Any || self.operation == entry.operation)
            && (self.permission == AclPermissionType::Any || self.permission == entry.permission)
    }

    /// Whether the operation or the permission type is a code this version does not know.
    pub fn is_unknown(&self) -> bool {
        self.operation == AclOperation::Unknown || self.permission == AclPermissionType::Unknown
    }

    /// The first field that lets the filter match more than one entry, described as Kafka
    /// does, or `None` when it can match at most one.
    pub fn find_indefinite_field(&self) -> Option<&'static str> {
        Some(if self.principal.is_none() {
            "Principal is NULL"
        } else if self.host.is_none() {
            "Host is NULL"
        } else {
            match (self.operation, self.permission) {
                (AclOperation::Any, _) => "Operation is ANY",
                (AclOperation::Unknown, _) => "Operation is UNKNOWN",
                (_, AclPermissionType::Any) => "Permission type is ANY",
                (_, AclPermissionType::Unknown) => "Permission type is UNKNOWN",
                _ => return None,
            }
        })
    }
}

/// Selects ACL bindings, for DescribeAcls and DeleteAcls (Kafka's `AclBindingFilter`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AclBindingFilter {
    /// Selects the pattern.
    pub pattern: ResourcePatternFilter,
    /// Selects the entry.
    pub entry: AccessControlEntryFilter,
}

impl AclBindingFilter {
    /// Matches every binding.
    pub const ANY: Self = Self {
        pattern: ResourcePatternFilter::ANY,
        entry: AccessControlEntryFilter::ANY,
    };

    /// Whether the filter selects `binding`.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.pattern.matches(&binding.pattern) && self.entry.matches(&binding.entry)
    }

    /// Whether any part is a code this version does not know.
    pub fn is_unknown(&self) -> bool {
        self.pattern.is_unknown() || self.entry.is_unknown()
    }

    /// The check Kafka applies to DescribeAcls and DeleteAcls filters
    /// (`AclControlManager.validateFilter`): no part may be UNKNOWN. ANY and absent fields are
    /// what these requests are for.
    pub fn validate(&self) -> Result<(), String> {
        if self.pattern.is_unknown() {
            return Err("Unknown patternFilter.".to_owned());
        }
        if self.entry.is_unknown() {
            return Err("Unknown entryFilter.".to_owned());
        }
        Ok(())
    }

    /// The first field that lets the filter match more than one binding, described as Kafka
    /// does (`findIndefiniteField`), or `None` when it can match at most one.
    pub fn find_indefinite_field(&self) -> Option<&'static str> {
        self.pattern
            .find_indefinite_field()
            .or_else(|| self.entry.find_indefinite_field())
    }
}

/// The authorizer's settings, Kafka's `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals allowed everything, whatever the ACLs say.
    pub super_users: Vec<KafkaPrincipal>,
    /// The decision for a resource that no ACL applies to: Kafka denies by default.
    pub allow_everyone_if_no_acl_found: bool,
}

/// Parses Kafka's `super.users`: principals separated by `;`, blanks around them ignored.
pub fn parse_super_users(config: &str) -> Result<Vec<KafkaPrincipal>, PrincipalError> {
    config
        .split(';')
        .map(java_trim)
        .filter(|principal| !principal.is_empty())
        .map(KafkaPrincipal::parse)
        .collect()
}

/// The ACLs under each name of one index, literal or prefixed.
type NameIndex = BTreeMap<String, Vec<AclBinding>>;

/// The ACLs of one resource type.
#[derive(Clone, Debug, Default)]
struct TypeAcls {
    literal: NameIndex,
    prefixed: NameIndex,
}

impl TypeAcls {
    fn is_empty(&self) -> bool {
        self.literal.is_empty() && self.prefixed.is_empty()
    }

    fn bindings(&self) -> impl Iterator<Item = &AclBinding> {
        self.literal
            .values()
            .chain(self.prefixed.values())
            .flatten()
    }

    /// The ACLs that apply to the resource `name`: literal ones of that name and of the
    /// wildcard, and prefixed ones whose name `name` starts with.
    fn applying_to<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a AclBinding> {
        let literal = self.literal.get(name).into_iter().flatten();
        let wildcard = (name != WILDCARD_RESOURCE)
            .then(|| self.literal.get(WILDCARD_RESOURCE))
            .flatten()
            .into_iter()
            .flatten();
        let prefixed = PrefixesOf::new(&self.prefixed, name).flatten();
        literal.chain(wildcard).chain(prefixed)
    }
}

/// The ACL lists of a prefix index whose names are prefixes of `name` (or `name` itself),
/// longest first. It walks the index downwards from `name`; on a name that is not a prefix it
/// jumps to the longest prefix they share, since no name in between can be one. A lookup costs
/// one tree search per such jump, at most one per character of `name`, and usually one or two.
struct PrefixesOf<'a> {
    index: &'a NameIndex,
    name: &'a str,
    candidates: btree_map::Range<'a, String, Vec<AclBinding>>,
}

impl<'a> PrefixesOf<'a> {
    fn new(index: &'a NameIndex, name: &'a str) -> Self {
        Self {
            index,
            name,
            candidates: up_to(index, name),
        }
    }
}

impl<'a> Iterator for PrefixesOf<'a> {
    type Item = &'a Vec<AclBinding>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (candidate, acls) = self.candidates.next_back()?;
            if self.name.starts_with(candidate.as_str()) {
                return Some(acls);
            }
            // Any prefix of `name` longer than the part it shares with `candidate` sorts after
            // `candidate`, so it has been seen already.
            let shared = common_prefix(self.name, candidate);
            self.candidates = up_to(self.index, shared);
        }
    }
}

/// The entries of `index` whose names sort at or before `last`.
fn up_to<'a>(index: &'a NameIndex, last: &str) -> btree_map::Range<'a, String, Vec<AclBinding>> {
    index.range::<str, _>((Bound::Unbounded, Bound::Included(last)))
}

/// The longest prefix of `name` that `other` starts with.
fn common_prefix<'a>(name: &'a str, other: &str) -> &'a str {
    let mut len = name
        .bytes()
        .zip(other.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    while !name.is_char_boundary(len) {
        len -= 1;
    }
    name.get(..len).unwrap_or_default()
}

/// What an ACL says about a request it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Allow,
    Deny,
}

/// Who asks to do what, from where.
struct Request<'a> {
    principal: &'a KafkaPrincipal,
    host: &'a str,
    operation: AclOperation,
}

impl Request<'_> {
    /// Whether the ACL's principal is the request's or the wildcard.
    fn matches_principal(&self, acl_principal: &str) -> bool {
        acl_principal == WILDCARD_PRINCIPAL
            || acl_principal
                .split_once(':')
                .is_some_and(|(principal_type, name)| {
                    principal_type == self.principal.principal_type && name == self.principal.name
                })
    }

    fn matches_host(&self, acl_host: &str) -> bool {
        acl_host == WILDCARD_HOST || acl_host == self.host
    }

    /// Kafka's `StandardAuthorizerData.findResult`: what the entry says about this request, or
    /// `None` if it does not apply. Every permission but ALLOW denies.
    fn verdict(&self, entry: &AccessControlEntry) -> Option<Verdict> {
        let allow = entry.permission == AclPermissionType::Allow;
        let operation_applies = entry.operation == AclOperation::All
            || entry.operation == self.operation
            || (allow && entry.operation.allows_implicitly(self.operation));
        let applies = operation_applies
            && self.matches_host(&entry.host)
            && self.matches_principal(&entry.principal);
        applies.then_some(if allow { Verdict::Allow } else { Verdict::Deny })
    }

    /// The decision from the ACLs that apply to the resource: a deny wins, then an allow;
    /// if there are ACLs but none says either, deny. `None` when there are no ACLs at all.
    fn decide<'b>(&self, acls: impl Iterator<Item = &'b AclBinding>) -> Option<bool> {
        let mut any_acl = false;
        let mut allowed = false;
        for binding in acls {
            any_acl = true;
            match self.verdict(&binding.entry) {
                Some(Verdict::Deny) => return Some(false),
                Some(Verdict::Allow) => allowed = true,
                None => {}
            }
        }
        any_acl.then_some(allowed)
    }

    /// Kafka's `Authorizer.authorizeByResourceType` scan: whether an ACL allows the operation on
    /// some resource name that no DENY covers. Only ACLs for the exact operation or ALL count.
    fn allowed_on_some(&self, acls: &TypeAcls) -> bool {
        let mut denied_literal = HashSet::new();
        let mut denied_prefixes = Vec::new();
        let mut allowed_literal = Vec::new();
        let mut allowed_prefixes = Vec::new();
        let mut wildcard_allowed = false;
        for binding in acls.bindings() {
            let entry = &binding.entry;
            let applies = (entry.operation == self.operation
                || entry.operation == AclOperation::All)
                && self.matches_host(&entry.host)
                && self.matches_principal(&entry.principal);
            if !applies {
                continue;
            }
            let name = binding.pattern.name.as_str();
            let literal = binding.pattern.pattern_type == PatternType::Literal;
            let wildcard = literal && name == WILDCARD_RESOURCE;
            match entry.permission {
                AclPermissionType::Deny if wildcard => return false,
                AclPermissionType::Deny if literal => {
                    denied_literal.insert(name);
                }
                AclPermissionType::Deny => denied_prefixes.push(name),
                AclPermissionType::Allow if wildcard => wildcard_allowed = true,
                AclPermissionType::Allow if literal => allowed_literal.push(name),
                AclPermissionType::Allow => allowed_prefixes.push(name),
                _ => {}
            }
        }
        // Kafka compares the prefixes of an allowed name from one character up, so an empty
        // denied prefix covers nothing.
        let denied_by_prefix = |name: &str| {
            denied_prefixes
                .iter()
                .any(|prefix| !prefix.is_empty() && name.starts_with(prefix))
        };
        wildcard_allowed
            || allowed_literal
                .iter()
                .any(|name| !denied_literal.contains(name) && !denied_by_prefix(name))
            || allowed_prefixes.iter().any(|name| !denied_by_prefix(name))
    }
}

/// Stores ACL bindings and decides requests with Kafka's `StandardAuthorizer` semantics.
///
/// ACLs are indexed by resource type, then by name in a literal and a prefixed ordered map, so
/// a decision visits only the ACLs that apply to the resource and allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    config: AuthorizerConfig,
    acls: BTreeMap<ResourceType, TypeAcls>,
    len: usize,
}

impl Authorizer {
    /// An authorizer without ACLs.
    pub fn new(config: AuthorizerConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// The settings.
    pub fn config(&self) -> &AuthorizerConfig {
        &self.config
    }

    /// Adds a binding; `false` if it is already present, or if its pattern type is neither
    /// LITERAL nor PREFIXED (such a binding applies to no resource; [`AclBinding::validate`]
    /// rejects it).
    pub fn add(&mut self, binding: AclBinding) -> bool {
        let ResourcePattern {
            resource_type,
            name,
            pattern_type,
        } = &binding.pattern;
        let index = match pattern_type {
            PatternType::Literal => &mut self.acls.entry(*resource_type).or_default().literal,
            PatternType::Prefixed => &mut self.acls.entry(*resource_type).or_default().prefixed,
            _ => return false,
        };
        let acls = index.entry(name.clone()).or_default();
        if acls.contains(&binding) {
            return false;
        }
        acls.push(binding);
        self.len += 1;
        true
    }

    /// Removes and returns every binding the filter matches.
    pub fn remove_matching(&mut self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let mut removed = Vec::new();
        for type_acls in self.acls.values_mut() {
            for index in [&mut type_acls.literal, &mut type_acls.prefixed] {
                for acls in index.values_mut() {
                    removed.extend(acls.extract_if(.., |binding| filter.matches(binding)));
                }
                index.retain(|_, acls| !acls.is_empty());
            }
        }
        self.acls.retain(|_, type_acls| !type_acls.is_empty());
        self.len -= removed.len();
        removed
    }

    /// The bindings the filter matches.
    pub fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.bindings()
            .filter(|binding| filter.matches(binding))
            .cloned()
            .collect()
    }

    /// Every binding, by resource type, literal before prefixed, then by name.
    pub fn bindings(&self) -> impl Iterator<Item = &AclBinding> {
        self.acls.values().flat_map(TypeAcls::bindings)
    }

    /// How many bindings there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bindings.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `principal`, connecting from `host` (the client's IP address as text), may do
    /// `operation` on the resource `name` of `resource_type`.
    ///
    /// Super users may do anything. Otherwise the ACLs that apply are the literal ones for
    /// `name` and for the wildcard, and the prefixed ones `name` starts with: if there are none,
    /// `allow_everyone_if_no_acl_found` decides; a DENY for the principal (or `User:*`), the
    /// host (or `*`) and the operation (or ALL) denies; else an ALLOW for them, or for an
    /// operation that implies the requested one, allows; else the request is denied.
    pub fn authorize(
        &self,
        principal: &KafkaPrincipal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let request = Request {
            principal,
            host,
            operation,
        };
        self.acls
            .get(&resource_type)
            .and_then(|acls| request.decide(acls.applying_to(name)))
            .unwrap_or(self.config.allow_everyone_if_no_acl_found)
    }

    /// Kafka's `Authorizer.authorizeByResourceType`: whether `principal` may do `operation` on
    /// at least one resource of `resource_type`, for example WRITE on some topic, which lets a
    /// producer without IDEMPOTENT_WRITE on the cluster be idempotent.
    ///
    /// Allowed when [`Authorizer::authorize`] allows a resource named `hardcode` (super users,
    /// wildcard ACLs, no ACL found), or when an ALLOW ACL for the operation or ALL names some
    /// resource that no DENY does: a literal DENY covers its own name, a prefixed one every name
    /// it starts, and a literal wildcard DENY every name. ANY and UNKNOWN arguments, which
    /// Kafka rejects, are denied.
    pub fn authorize_by_resource_type(
        &self,
        principal: &KafkaPrincipal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if matches!(operation, AclOperation::Any | AclOperation::Unknown)
            || matches!(resource_type, ResourceType::Any | ResourceType::Unknown)
        {
            return false;
        }
        if self.authorize(
            principal,
            host,
            operation,
            resource_type,
            PROBE_RESOURCE_NAME,
        ) {
            return true;
        }
        let request = Request {
            principal,
            host,
            operation,
        };
        self.acls
            .get(&resource_type)
            .is_some_and(|acls| request.allowed_on_some(acls))
    }

    fn is_super_user(&self, principal: &KafkaPrincipal) -> bool {
        self.config.super_users.contains(principal)
    }
}

#[cfg(test)]
mod tests {
    use super::AclOperation::{
        All, Alter, AlterConfigs, Create, Delete, Describe, DescribeConfigs, Read, Write,
    };
    use super::AclPermissionType::{Allow, Deny};
    use super::PatternType::{Literal, Match, Prefixed};
    use super::ResourceType::{Cluster, Group, Topic, TransactionalId};
    use super::*;
    use proptest::prelude::*;

    const HOST1: &str = "192.168.1.1";
    const HOST2: &str = "192.168.1.2";
    const LOCAL: &str = "127.0.0.1";

    fn user(name: &str) -> KafkaPrincipal {
        KafkaPrincipal::user(name)
    }

    fn binding(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        host: &str,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> AclBinding {
        AclBinding::new(
            ResourcePattern::new(resource_type, name, pattern_type),
            AccessControlEntry::new(principal, host, operation, permission),
        )
    }

    /// A binding written as `Type name PatternType principal host Operation Permission`, the
    /// enums by their names, for example `Topic foo Literal User:alice * Read Allow`.
    fn acl(spec: &str) -> AclBinding {
        let mut fields = spec.split_whitespace();
        let mut field = || fields.next().expect("an ACL has seven fields");
        binding(
            field().parse().unwrap(),
            field(),
            field().parse().unwrap(),
            field(),
            field(),
            field().parse().unwrap(),
            field().parse().unwrap(),
        )
    }

    fn authorizer_with(acls: impl IntoIterator<Item = AclBinding>) -> Authorizer {
        let mut authorizer = Authorizer::new(AuthorizerConfig {
            super_users: vec![user("superman")],
            allow_everyone_if_no_acl_found: false,
        });
        for binding in acls {
            assert!(authorizer.add(binding));
        }
        authorizer
    }

    /// The decisions for `principal` from `host` on each `(operation, type, name)`.
    fn decisions(
        authorizer: &Authorizer,
        principal: &str,
        host: &str,
        actions: &[(AclOperation, ResourceType, &str)],
    ) -> Vec<bool> {
        actions
            .iter()
            .map(|&(operation, resource_type, name)| {
                authorizer.authorize(&user(principal), host, operation, resource_type, name)
            })
            .collect()
    }

    // --- enums ------------------------------------------------------------------------------

    #[test]
    fn codes_round_trip() {
        assert_eq!(ResourceType::VALUES.len(), 8);
        assert_eq!(PatternType::VALUES.len(), 5);
        assert_eq!(AclOperation::VALUES.len(), 15);
        assert_eq!(AclPermissionType::VALUES.len(), 4);
        for (index, value) in AclOperation::VALUES.iter().enumerate() {
            assert_eq!(i8::try_from(index).unwrap(), value.code());
            assert_eq!(AclOperation::from_code(value.code()), *value);
        }
        assert_eq!(ResourceType::TransactionalId.code(), 5);
        assert_eq!(ResourceType::from_code(7), ResourceType::User);
        assert_eq!(PatternType::from_code(4), Prefixed);
        assert_eq!(AclOperation::from_code(12), AclOperation::IdempotentWrite);
        assert_eq!(AclPermissionType::from_code(3), Allow);
        assert_eq!(ResourceType::from_code(8), ResourceType::Unknown);
        assert_eq!(AclOperation::from_code(-1), AclOperation::Unknown);
        assert_eq!(AclOperation::from_code(15), AclOperation::Unknown);
    }

    #[test]
    fn names_parse_in_any_case_and_display_as_kafka() {
        assert_eq!("Topic".parse(), Ok(Topic));
        assert_eq!("TOPIC".parse(), Ok(Topic));
        assert_eq!("TransactionalId".parse(), Ok(TransactionalId));
        assert_eq!("transactional_id".parse(), Ok(TransactionalId));
        assert_eq!("READ".parse(), Ok(Read));
        assert_eq!(
            "IDEMPOTENT_WRITE".parse(),
            Ok(AclOperation::IdempotentWrite)
        );
        assert_eq!("IdempotentWrite".parse(), Ok(AclOperation::IdempotentWrite));
        assert_eq!("Prefixed".parse(), Ok(Prefixed));
        assert_eq!("deny".parse(), Ok(Deny));
        assert_eq!(TransactionalId.to_string(), "TRANSACTIONAL_ID");
        assert_eq!(
            AclOperation::DescribeConfigs.to_string(),
            "DESCRIBE_CONFIGS"
        );
        assert_eq!(
            "Transactional_Id_".parse::<ResourceType>(),
            Err(UnknownName {
                kind: "resource type",
                name: "Transactional_Id_".to_owned()
            })
        );
        assert!("TRANSACTIONAL-ID".parse::<ResourceType>().is_err());
        assert!("".parse::<AclOperation>().is_err());
    }

    #[test]
    fn serde_uses_the_names() {
        for value in AclOperation::VALUES {
            let json = serde_json::to_string(value).unwrap();
            assert_eq!(json, format!("\"{}\"", value.name()));
            assert_eq!(serde_json::from_str::<AclOperation>(&json).unwrap(), *value);
        }
        for value in ResourceType::VALUES {
            assert_eq!(
                serde_json::to_string(value).unwrap(),
                format!("\"{value}\"")
            );
        }
        let binding = acl("Topic foo Prefixed User:alice * Read Allow");
        let json = serde_json::to_string(&binding).unwrap();
        assert!(json.contains(r#""resource_type":"TOPIC""#), "{json}");
        assert_eq!(serde_json::from_str::<AclBinding>(&json).unwrap(), binding);
    }

    // --- validation -------------------------------------------------------------------------

    #[test]
    fn validate_accepts_concrete_bindings() {
        for binding in [
            acl("Topic foo Literal User:alice * Read Allow"),
            acl("Group g- Prefixed User:* 192.168.1.1 All Deny"),
            acl("Cluster kafka-cluster Literal Group:ops * ClusterAction Allow"),
            acl("Topic * Literal User:CN=a,O=b * Write Allow"),
        ] {
            assert_eq!(binding.validate(), Ok(()), "{binding:?}");
        }
    }

    #[test]
    fn validate_rejects_as_kafka() {
        let cases = [
            (
                acl("Cluster my-cluster Literal User:alice * Read Allow"),
                "The only valid name for the CLUSTER resource is kafka-cluster",
            ),
            (
                binding(Topic, "", Literal, "User:alice", "*", Read, Allow),
                "Invalid empty resource name",
            ),
            (
                acl("Any foo Literal User:alice * Read Allow"),
                "Invalid resourceType ANY",
            ),
            (
                acl("Unknown foo Literal User:alice * Read Allow"),
                "Invalid resourceType UNKNOWN",
            ),
            (
                acl("Topic foo Match User:alice * Read Allow"),
                "Invalid patternType MATCH",
            ),
            (
                acl("Topic foo Any User:alice * Read Allow"),
                "Invalid patternType ANY",
            ),
            (
                acl("Topic foo Unknown User:alice * Read Allow"),
                "Invalid patternType UNKNOWN",
            ),
            (
                acl("Topic foo Literal User:alice * Any Allow"),
                "Invalid operation ANY",
            ),
            (
                acl("Topic foo Literal User:alice * Unknown Allow"),
                "Invalid operation UNKNOWN",
            ),
            (
                acl("Topic foo Literal User:alice * Read Any"),
                "Invalid permissionType ANY",
            ),
            (
                acl("Topic foo Literal alice * Read Allow"),
                "Could not parse principal from `alice` (no colon is present separating the \
                 principal type from the principal name)",
            ),
            (
                acl("Topic foo Literal User: * Read Allow"),
                "Could not parse principal from `User:` (the principal type and the principal \
                 name must not be empty)",
            ),
        ];
        for (binding, message) in cases {
            assert_eq!(binding.validate(), Err(message.to_owned()), "{binding:?}");
        }
    }

    #[test]
    fn filter_validate_rejects_unknown_parts_only() {
        assert_eq!(AclBindingFilter::ANY.validate(), Ok(()));
        let mut filter = AclBindingFilter::ANY;
        filter.pattern.resource_type = ResourceType::Unknown;
        assert_eq!(filter.validate(), Err("Unknown patternFilter.".to_owned()));
        let mut filter = AclBindingFilter::ANY;
        filter.pattern.pattern_type = PatternType::Unknown;
        assert_eq!(filter.validate(), Err("Unknown patternFilter.".to_owned()));
        let mut filter = AclBindingFilter::ANY;
        filter.entry.operation = AclOperation::Unknown;
        assert_eq!(filter.validate(), Err("Unknown entryFilter.".to_owned()));
        let mut filter = AclBindingFilter::ANY;
        filter.entry.permission = AclPermissionType::Unknown;
        assert_eq!(filter.validate(), Err("Unknown entryFilter.".to_owned()));
    }

    // --- filters (Kafka's AclBindingTest and ResourcePatternFilterTest) ---------------------

    fn pattern_filter(
        resource_type: ResourceType,
        name: Option<&str>,
        pattern_type: PatternType,
    ) -> ResourcePatternFilter {
        ResourcePatternFilter {
            resource_type,
            name: name.map(str::to_owned),
            pattern_type,
        }
    }

    fn entry_filter(principal: Option<&str>, permission: AclPermissionType) -> AclBindingFilter {
        AclBindingFilter {
            pattern: ResourcePatternFilter::ANY,
            entry: AccessControlEntryFilter {
                principal: principal.map(str::to_owned),
                host: None,
                operation: AclOperation::Any,
                permission,
            },
        }
    }

    #[test]
    fn binding_filter_matching() {
        let acl1 = binding(Topic, "mytopic", Literal, "User:ANONYMOUS", "", All, Allow);
        let acl2 = binding(Topic, "mytopic", Literal, "User:*", "", Read, Allow);
        let acl3 = acl("Topic mytopic2 Literal User:ANONYMOUS 127.0.0.1 Read Deny");
        let unknown = acl("Topic mytopic2 Literal User:ANONYMOUS 127.0.0.1 Unknown Deny");
        let any_anonymous = entry_filter(Some("User:ANONYMOUS"), AclPermissionType::Any);
        let any_deny = entry_filter(None, Deny);
        let any_mytopic = AclBindingFilter {
            pattern: pattern_filter(Topic, Some("mytopic"), Literal),
            entry: AccessControlEntryFilter::ANY,
        };
        for binding in [&acl1, &acl2, &acl3] {
            assert!(AclBindingFilter::ANY.matches(binding));
        }
        assert!(any_anonymous.matches(&acl1));
        assert!(!any_anonymous.matches(&acl2));
        assert!(any_anonymous.matches(&acl3));
        assert!(!any_deny.matches(&acl1));
        assert!(!any_deny.matches(&acl2));
        assert!(any_deny.matches(&acl3));
        assert!(any_mytopic.matches(&acl1));
        assert!(any_mytopic.matches(&acl2));
        assert!(!any_mytopic.matches(&acl3));
        assert!(any_anonymous.matches(&unknown));
        assert!(any_deny.matches(&unknown));
        assert!(!any_mytopic.matches(&unknown));
        assert!(!any_anonymous.is_unknown() && !any_deny.is_unknown() && !any_mytopic.is_unknown());
        assert!(unknown.to_filter().is_unknown());
    }

    #[test]
    fn find_indefinite_field() {
        let concrete = binding(Topic, "mytopic", Literal, "User:ANONYMOUS", "", All, Allow);
        assert_eq!(concrete.to_filter().find_indefinite_field(), None);
        assert_eq!(
            entry_filter(Some("User:ANONYMOUS"), AclPermissionType::Any).find_indefinite_field(),
            Some("Resource type is ANY.")
        );
        let mut filter = concrete.to_filter();
        filter.pattern.name = None;
        assert_eq!(
            filter.find_indefinite_field(),
            Some("Resource name is NULL.")
        );
        let mut filter = concrete.to_filter();
        filter.pattern.pattern_type = Match;
        assert_eq!(
            filter.find_indefinite_field(),
            Some("Resource pattern type is MATCH.")
        );
        let mut filter = concrete.to_filter();
        filter.entry.host = None;
        assert_eq!(filter.find_indefinite_field(), Some("Host is NULL"));
        let mut filter = concrete.to_filter();
        filter.entry.permission = AclPermissionType::Any;
        assert_eq!(
            filter.find_indefinite_field(),
            Some("Permission type is ANY")
        );
    }

    #[test]
    fn resource_pattern_filter_matching() {
        let literal = |name| ResourcePattern::new(Topic, name, Literal);
        let prefixed = |name| ResourcePattern::new(Topic, name, Prefixed);
        let cases = [
            (
                pattern_filter(Topic, Some("Name"), Literal),
                ResourcePattern::new(Group, "Name", Literal),
                false,
            ),
            (
                pattern_filter(Topic, Some("Different"), Prefixed),
                prefixed("Name"),
                false,
            ),
            (
                pattern_filter(Topic, Some("NAME"), Literal),
                literal("Name"),
                false,
            ),
            (
                pattern_filter(Topic, Some("Name"), Literal),
                prefixed("Name"),
                false,
            ),
            (
                pattern_filter(ResourceType::Any, Some("Name"), Prefixed),
                prefixed("Name"),
                true,
            ),
            (
                pattern_filter(Topic, None, Prefixed),
                prefixed("Name"),
                true,
            ),
            (
                pattern_filter(Topic, None, PatternType::Any),
                prefixed("Name"),
                true,
            ),
            (pattern_filter(Topic, None, Match), prefixed("Name"), true),
            (
                pattern_filter(Topic, Some("Name"), Literal),
                literal("Name"),
                true,
            ),
            (
                pattern_filter(Topic, Some("Name"), Match),
                literal("Name"),
                true,
            ),
            (
                pattern_filter(Topic, Some("Name"), PatternType::Any),
                literal("Name"),
                true,
            ),
            (
                pattern_filter(Topic, Some("*"), Literal),
                literal("*"),
                true,
            ),
            (
                pattern_filter(Topic, Some("Name"), Literal),
                literal("*"),
                false,
            ),
            (
                pattern_filter(Topic, Some("*"), Literal),
                literal("Name"),
                false,
            ),
            (
                pattern_filter(Topic, Some("Name"), PatternType::Any),
                literal("*"),
                false,
            ),
            (
                pattern_filter(Topic, Some("Name"), Match),
                literal("*"),
                true,
            ),
            (
                pattern_filter(Topic, Some("Name"), Prefixed),
                prefixed("Name"),
                true,
            ),
            (
                pattern_filter(Topic, Some("Name"), Prefixed),
                prefixed("Name-something"),
                false,
            ),
            (
                pattern_filter(Topic, Some("Name-something"), Prefixed),
                prefixed("Name"),
                false,
            ),
            (
                pattern_filter(Topic, Some("Name-something"), PatternType::Any),
                prefixed("Name"),
                false,
            ),
            (
                pattern_filter(Topic, Some("Name-something"), Match),
                prefixed("Name"),
                true,
            ),
            (
                pattern_filter(Topic, Some("Name"), Match),
                prefixed("Name-something"),
                false,
            ),
            (
                pattern_filter(Topic, None, PatternType::Unknown),
                literal("Name"),
                false,
            ),
        ];
        for (filter, pattern, expected) in cases {
            assert_eq!(
                filter.matches(&pattern),
                expected,
                "{filter:?} on {pattern:?}"
            );
        }
        assert!(pattern_filter(ResourceType::Unknown, None, Literal).is_unknown());
        assert!(pattern_filter(Group, None, PatternType::Unknown).is_unknown());
    }

    // --- authorize (Kafka's StandardAuthorizerTest and AuthorizerTest) ----------------------

    #[test]
    fn super_users_config() {
        assert_eq!(parse_super_users(""), Ok(vec![]));
        assert_eq!(parse_super_users(" "), Ok(vec![]));
        assert_eq!(
            parse_super_users("User:bob;User:alice "),
            Ok(vec![user("bob"), user("alice")])
        );
        assert_eq!(
            parse_super_users(";  User:bob  ;  User:alice "),
            Ok(vec![user("bob"), user("alice")])
        );
        assert_eq!(
            parse_super_users("User:admin;User:CN=ops,O=acme"),
            Ok(vec![user("admin"), user("CN=ops,O=acme")])
        );
        assert_eq!(
            parse_super_users("bob;:alice").unwrap_err().to_string(),
            "expected a string in format principalType:principalName but got bob"
        );
    }

    #[test]
    fn allow_everyone_if_no_acl_found() {
        for allow_everyone in [true, false] {
            let mut authorizer = Authorizer::new(AuthorizerConfig {
                super_users: vec![user("alice"), user("chris")],
                allow_everyone_if_no_acl_found: allow_everyone,
            });
            authorizer.add(acl("Topic topic1 Literal User:Alice * Read Allow"));
            let bob = user("Bob");
            assert!(!authorizer.authorize(&bob, LOCAL, Read, Topic, "topic1"));
            assert_eq!(
                authorizer.authorize(&bob, LOCAL, Read, Topic, "topic2"),
                allow_everyone
            );
            assert_eq!(
                authorizer.authorize(&bob, LOCAL, Read, Group, "any"),
                allow_everyone
            );
        }
    }

    fn foo_acl(operation: AclOperation, permission: AclPermissionType) -> AclBinding {
        binding(
            Topic, "foo_", Prefixed, "User:bob", "*", operation, permission,
        )
    }

    fn bar_acl(operation: AclOperation, permission: AclPermissionType) -> AclBinding {
        binding(
            Group,
            "bar",
            Literal,
            WILDCARD_PRINCIPAL,
            "*",
            operation,
            permission,
        )
    }

    #[test]
    fn allow_implies_describe_but_deny_does_not() {
        let allowed = |binding: AclBinding, operation| {
            authorizer_with([binding]).authorize(&user("bob"), LOCAL, operation, Topic, "foo_bar")
        };
        for operation in [Describe, Read, Write, Delete, Alter] {
            assert!(allowed(foo_acl(operation, Allow), Describe), "{operation}");
        }
        assert!(!allowed(foo_acl(Create, Allow), Describe));
        for operation in [DescribeConfigs, AlterConfigs] {
            assert!(
                allowed(foo_acl(operation, Allow), DescribeConfigs),
                "{operation}"
            );
        }
        // A DENY for READ leaves DESCRIBE to the allow for ALL.
        for operation in [Read, Write, Delete, Alter, AlterConfigs] {
            let authorizer = authorizer_with([foo_acl(operation, Deny), foo_acl(All, Allow)]);
            let bob = user("bob");
            assert!(authorizer.authorize(&bob, LOCAL, Describe, Topic, "foo_bar"));
            assert!(authorizer.authorize(&bob, LOCAL, DescribeConfigs, Topic, "foo_bar"));
            assert!(!authorizer.authorize(&bob, LOCAL, operation, Topic, "foo_bar"));
        }
    }

    fn concrete_operations() -> impl Iterator<Item = AclOperation> {
        AclOperation::VALUES
            .iter()
            .copied()
            .filter(|operation| !matches!(operation, AclOperation::Any | AclOperation::Unknown))
    }

    #[test]
    fn acl_inheritance() {
        let implied_by_allow = [
            (All, concrete_operations().collect::<Vec<_>>()),
            (Read, vec![Read, Describe]),
            (Write, vec![Write, Describe]),
            (Delete, vec![Delete, Describe]),
            (Alter, vec![Alter, Describe]),
            (AlterConfigs, vec![AlterConfigs, DescribeConfigs]),
        ];
        for (parent, allowed) in implied_by_allow {
            let authorizer = authorizer_with([binding(
                Cluster,
                CLUSTER_NAME,
                Literal,
                "User:alice",
                "*",
                parent,
                Allow,
            )]);
            for operation in concrete_operations() {
                let decision =
                    authorizer.authorize(&user("alice"), HOST1, operation, Cluster, CLUSTER_NAME);
                assert_eq!(
                    decision,
                    allowed.contains(&operation),
                    "ALLOW {parent} for {operation}"
                );
            }
        }
        for parent in [All, Describe, DescribeConfigs] {
            let authorizer = authorizer_with([
                binding(
                    Cluster,
                    CLUSTER_NAME,
                    Literal,
                    "User:alice",
                    "*",
                    parent,
                    Deny,
                ),
                acl("Cluster kafka-cluster Literal User:alice * All Allow"),
            ]);
            for operation in concrete_operations() {
                let decision =
                    authorizer.authorize(&user("alice"), HOST1, operation, Cluster, CLUSTER_NAME);
                let denied = parent == All || operation == parent;
                assert_eq!(decision, !denied, "DENY {parent} for {operation}");
            }
        }
    }

    #[test]
    fn principal_matching() {
        let authorizer = authorizer_with([
            foo_acl(Read, Allow),
            bar_acl(Read, Deny),
            bar_acl(All, Allow),
        ]);
        assert!(authorizer.authorize(&user("bob"), LOCAL, Read, Topic, "foo_bar"));
        assert!(!authorizer.authorize(&user("alice"), LOCAL, Read, Topic, "foo_bar"));
        // The wildcard principal applies to everyone, other types included.
        assert!(!authorizer.authorize(&user("alice"), LOCAL, Read, Group, "bar"));
        let ops = KafkaPrincipal::parse("Group:ops").unwrap();
        assert!(authorizer.authorize(&ops, LOCAL, Write, Group, "bar"));
        // A principal type must match too.
        assert!(!authorizer.authorize(
            &KafkaPrincipal::parse("Group:bob").unwrap(),
            LOCAL,
            Read,
            Topic,
            "foo_bar"
        ));
    }

    #[test]
    fn list_and_remove() {
        let foo = [foo_acl(Read, Allow), foo_acl(Write, Allow)];
        let bar = [bar_acl(DescribeConfigs, Deny), bar_acl(AlterConfigs, Deny)];
        let mut authorizer = authorizer_with(foo.iter().chain(&bar).cloned());
        assert_eq!(authorizer.len(), 4);
        assert_eq!(
            authorizer.describe(&AclBindingFilter::ANY),
            [foo.clone(), bar.clone()].concat()
        );
        assert!(!authorizer.add(foo[0].clone()), "already present");
        assert_eq!(
            authorizer.remove_matching(&foo[1].to_filter()),
            vec![foo[1].clone()]
        );
        assert_eq!(authorizer.len(), 3);
        assert_eq!(
            authorizer.bindings().cloned().collect::<Vec<_>>(),
            vec![foo[0].clone(), bar[0].clone(), bar[1].clone()]
        );
        let topics = AclBindingFilter {
            pattern: pattern_filter(Topic, None, PatternType::Any),
            entry: AccessControlEntryFilter::ANY,
        };
        assert_eq!(authorizer.describe(&topics), vec![foo[0].clone()]);
        assert_eq!(authorizer.remove_matching(&AclBindingFilter::ANY).len(), 3);
        assert!(authorizer.is_empty());
        assert_eq!(authorizer.bindings().count(), 0);
    }

    #[test]
    fn add_rejects_patterns_that_apply_to_nothing() {
        let mut authorizer = Authorizer::default();
        for pattern_type in [Match, PatternType::Any, PatternType::Unknown] {
            assert!(!authorizer.add(binding(
                Topic,
                "foo",
                pattern_type,
                "User:a",
                "*",
                Read,
                Allow
            )));
        }
        assert!(authorizer.is_empty());
        assert_eq!(authorizer.bindings().count(), 0);
    }

    #[test]
    fn simple_authorizations() {
        let authorizer = authorizer_with([
            foo_acl(Read, Allow),
            foo_acl(Write, Allow),
            bar_acl(DescribeConfigs, Allow),
            bar_acl(AlterConfigs, Allow),
        ]);
        assert!(authorizer.authorize(&user("bob"), LOCAL, Read, Topic, "foo_"));
        assert!(authorizer.authorize(&user("fred"), LOCAL, AlterConfigs, Group, "bar"));
    }

    #[test]
    fn deny_precedence_with_operation_all() {
        let authorizer = authorizer_with([
            acl("Topic foo Literal User:alice * All Deny"),
            acl("Topic foo Prefixed User:alice * Read Allow"),
            acl("Topic foo Literal User:* * All Deny"),
            acl("Topic foo Prefixed User:* * Describe Allow"),
        ]);
        let alice = [
            (Write, Topic, "foo"),
            (Read, Topic, "foo"),
            (Describe, Topic, "foo"),
            (Read, Topic, "foobar"),
        ];
        assert_eq!(
            decisions(&authorizer, "alice", LOCAL, &alice),
            [false, false, false, true]
        );
        let bob = [
            (Describe, Topic, "foo"),
            (Read, Topic, "foo"),
            (Write, Topic, "foo"),
            (Describe, Topic, "foobaz"),
            (Read, Topic, "foobaz"),
        ];
        assert_eq!(
            decisions(&authorizer, "bob", LOCAL, &bob),
            [false, false, false, true, false]
        );
    }

    #[test]
    fn topic_acl_with_operation_all() {
        let authorizer = authorizer_with([
            acl("Topic foo Literal User:* * All Allow"),
            acl("Topic bar Prefixed User:alice * All Allow"),
            acl("Topic baz Literal User:bob * All Allow"),
        ]);
        let alice = [
            (Write, Topic, "foo"),
            (DescribeConfigs, Topic, "bar"),
            (Describe, Topic, "baz"),
        ];
        assert_eq!(
            decisions(&authorizer, "alice", LOCAL, &alice),
            [true, true, false]
        );
        let bob = [
            (Write, Topic, "foo"),
            (Read, Topic, "bar"),
            (Describe, Topic, "baz"),
        ];
        assert_eq!(
            decisions(&authorizer, "bob", LOCAL, &bob),
            [true, false, true]
        );
        let malory = [
            (Describe, Topic, "foo"),
            (Write, Topic, "bar"),
            (Read, Topic, "baz"),
        ];
        assert_eq!(
            decisions(&authorizer, "malory", LOCAL, &malory),
            [true, false, false]
        );
    }

    #[test]
    fn host_matching() {
        let authorizer = authorizer_with([
            acl("Topic foo Literal User:alice 192.168.1.1 Read Deny"),
            acl("Topic foo Literal User:alice * Read Allow"),
            acl("Topic bar Literal User:bob 192.168.1.2 Read Allow"),
            acl("Topic bar Literal User:* 127.0.0.1 Describe Allow"),
        ]);
        let actions = [
            (Read, Topic, "foo"),
            (Read, Topic, "bar"),
            (Describe, Topic, "bar"),
        ];
        let cases = [
            ("alice", LOCAL, [true, false, true]),
            ("alice", HOST1, [false, false, false]),
            ("alice", HOST2, [true, false, false]),
            ("bob", LOCAL, [false, false, true]),
            ("bob", HOST1, [false, false, false]),
            ("bob", HOST2, [false, true, true]),
        ];
        for (principal, host, expected) in cases {
            assert_eq!(
                decisions(&authorizer, principal, host, &actions),
                expected,
                "{principal}@{host}"
            );
        }
    }

    fn many_acls() -> Vec<AclBinding> {
        vec![
            acl("Topic green2 Literal User:* * Read Allow"),
            acl("Topic green Prefixed User:bob * Read Allow"),
            acl("Topic betamax4 Literal User:bob * Read Allow"),
            acl("Topic betamax Literal User:bob * Read Allow"),
            acl("Topic beta Prefixed User:* * Read Allow"),
            acl("Topic alpha Prefixed User:* * Read Allow"),
            acl("Topic alp Prefixed User:bob * Read Deny"),
            acl("Group * Literal User:bob * Write Allow"),
            acl("Group wheel Literal User:* * Write Deny"),
        ]
    }

    #[test]
    fn authorization_with_many_acls() {
        let authorizer = authorizer_with(many_acls());
        let actions = [
            (Read, Topic, "green1"),
            (Write, Group, "wheel"),
            (Read, Topic, "alpha"),
            (Write, Group, "arbitrary"),
            (Read, Topic, "ala"),
            (Read, Topic, "betamax4"),
            (Read, Topic, "betamax5"),
            (Read, Topic, "green2"),
        ];
        assert_eq!(
            decisions(&authorizer, "bob", LOCAL, &actions),
            [true, false, false, true, false, true, true, true]
        );
        assert_eq!(
            decisions(&authorizer, "alice", LOCAL, &actions),
            [false, false, true, false, false, true, true, true]
        );
        // Super users need no ACL, and no DENY stops them.
        assert_eq!(
            decisions(&authorizer, "superman", LOCAL, &actions),
            [true; 8]
        );
    }

    #[test]
    fn prefix_acls() {
        let authorizer = authorizer_with([
            acl("Topic fooa Prefixed User:alice * All Allow"),
            acl("Topic foobar Literal User:bob * All Allow"),
            acl("Topic f Prefixed User:bob * All Allow"),
        ]);
        let bob = [
            (Write, Topic, "foobarr"),
            (Read, Topic, "goobar"),
            (Read, Topic, "fooa"),
        ];
        assert_eq!(
            decisions(&authorizer, "bob", LOCAL, &bob),
            [true, false, true]
        );
        let alice = [
            (Describe, Topic, "fooa"),
            (Write, Topic, "bar"),
            (Read, Topic, "baz"),
        ];
        assert_eq!(
            decisions(&authorizer, "alice", LOCAL, &alice),
            [true, false, false]
        );
    }

    #[test]
    fn prefixed_acl_applies_among_many_unrelated_prefixes() {
        let deny_read = |name: &str, pattern_type| {
            binding(Topic, name, pattern_type, "User:*", "*", Read, Deny)
        };
        let mut acls: Vec<AclBinding> = [
            "a_other",
            "foo-1",
            "foo-2-zzz",
            "fooo-3",
            "fo-4",
            "fop-5",
            "fon-6",
            "fon-",
            "z_other",
        ]
        .into_iter()
        .map(|name| deny_read(name, Prefixed))
        .collect();
        acls.extend([deny_read("a_other", Literal), deny_read("z_other", Literal)]);
        acls.push(acl("Topic foo Prefixed User:* * Read Allow"));
        let authorizer = authorizer_with(acls);
        assert!(authorizer.authorize(&user("alice"), HOST1, Read, Topic, "foo-0123"));
        assert!(!authorizer.authorize(&user("alice"), HOST1, Read, Topic, "foo-2-zzz9"));
        assert!(!authorizer.authorize(&user("alice"), HOST1, Read, Topic, "fon-x"));
    }

    #[test]
    fn single_character_resource_acls() {
        let allow_read = |name: &str, pattern_type| {
            binding(Topic, name, pattern_type, "User:*", "*", Read, Allow)
        };
        let mut authorizer = authorizer_with([allow_read("f", Literal)]);
        assert!(authorizer.authorize(&user("alice"), HOST1, Read, Topic, "f"));
        assert!(!authorizer.authorize(&user("alice"), HOST1, Read, Topic, "foo"));
        authorizer.add(allow_read("_", Prefixed));
        assert!(authorizer.authorize(&user("alice"), HOST1, Read, Topic, "_foo"));
        assert!(authorizer.authorize(&user("alice"), HOST1, Read, Topic, "_"));
        assert!(!authorizer.authorize(&user("alice"), HOST1, Read, Topic, "foo_"));
    }

    #[test]
    fn topic_acl() {
        let authorizer = authorizer_with([
            acl("Topic t Literal User:alice 192.168.1.1 Read Allow"),
            acl("Topic t Literal User:alice 192.168.1.2 Read Allow"),
            acl("Topic t Literal User:alice 192.168.1.1 Read Deny"),
            acl("Topic t Literal User:alice 192.168.1.1 Write Allow"),
            acl("Topic t Literal User:alice * Describe Allow"),
            acl("Topic t Literal User:rob * Read Allow"),
            acl("Topic t Literal User:batman * Write Allow"),
        ]);
        let actions = [
            (Read, Topic, "t"),
            (Write, Topic, "t"),
            (Describe, Topic, "t"),
            (Alter, Topic, "t"),
        ];
        assert_eq!(
            decisions(&authorizer, "alice", HOST1, &actions),
            [false, true, true, false]
        );
        assert_eq!(
            decisions(&authorizer, "alice", HOST2, &actions),
            [true, false, true, false]
        );
        assert_eq!(
            decisions(&authorizer, "rob", HOST1, &actions),
            [true, false, true, false]
        );
        assert_eq!(
            decisions(&authorizer, "batman", HOST1, &actions),
            [false, true, true, false]
        );
    }

    #[test]
    fn deny_takes_precedence_and_allow_all() {
        let mut authorizer = authorizer_with([acl("Topic t Literal User:* * All Allow")]);
        assert!(authorizer.authorize(&user("random"), HOST1, Read, Topic, "t"));
        authorizer.add(acl("Topic t Literal User:alice 192.168.1.1 All Deny"));
        assert!(!authorizer.authorize(&user("alice"), HOST1, Read, Topic, "t"));
        assert!(authorizer.authorize(&user("alice"), HOST2, Read, Topic, "t"));
    }

    #[test]
    fn super_users_pass_every_deny() {
        let authorizer = authorizer_with([acl("Topic t Literal User:* * All Deny")]);
        assert!(authorizer.authorize(&user("superman"), HOST1, Read, Topic, "t"));
        assert!(!authorizer.authorize(&user("clark"), HOST1, Read, Topic, "t"));
        // A super user is compared by type and name.
        let group = KafkaPrincipal::parse("Group:superman").unwrap();
        assert!(!authorizer.authorize(&group, HOST1, Read, Topic, "t"));
    }

    #[test]
    fn wildcard_resource_acls() {
        let mut authorizer = authorizer_with([]);
        let alice = user("alice");
        assert!(
            !authorizer.authorize(&alice, HOST1, Read, Topic, "t"),
            "no ACL: deny"
        );
        authorizer.add(acl("Topic * Literal User:alice 192.168.1.1 Read Allow"));
        assert!(authorizer.authorize(&alice, HOST1, Read, Topic, "t"));
        authorizer.add(acl("Topic t Literal User:alice 192.168.1.1 Write Allow"));
        authorizer.add(acl("Topic * Literal User:alice 192.168.1.1 Write Deny"));
        assert!(!authorizer.authorize(&alice, HOST1, Write, Topic, "t"));
        // The wildcard is also a resource name of its own.
        assert!(authorizer.authorize(&alice, HOST1, Read, Topic, "*"));
    }

    #[test]
    fn empty_resource_name() {
        let mut authorizer = authorizer_with([]);
        assert!(!authorizer.authorize(&user("alice"), HOST1, Read, Group, ""));
        authorizer.add(acl("Group * Literal User:* * Read Allow"));
        assert!(authorizer.authorize(&user("alice"), HOST1, Read, Group, ""));
    }

    #[test]
    fn describe_and_delete_with_filters() {
        let acl1 = acl("Topic foo-1 Literal User:alice * Read Allow");
        let acl2 = acl("Topic foo-1 Literal User:alice 192.168.0.1 Write Allow");
        let acl3 = acl("Topic bar-1 Literal User:alice * Describe Allow");
        let acl4 = acl("Topic bar- Prefixed User:* * Read Allow");
        let mut authorizer =
            authorizer_with([acl1.clone(), acl2.clone(), acl3.clone(), acl4.clone()]);
        let of = |pattern: &AclBinding| AclBindingFilter {
            pattern: pattern.pattern.to_filter(),
            entry: AccessControlEntryFilter::ANY,
        };
        assert_eq!(
            authorizer.describe(&of(&acl1)),
            vec![acl1.clone(), acl2.clone()]
        );
        assert_eq!(authorizer.describe(&of(&acl4)), vec![acl4.clone()]);
        let matching = AclBindingFilter {
            pattern: pattern_filter(ResourceType::Any, Some("bar-1"), Match),
            entry: AccessControlEntryFilter::ANY,
        };
        assert_eq!(
            authorizer.describe(&matching),
            vec![acl3.clone(), acl4.clone()]
        );
        let by_principal = |principal: &str| entry_filter(Some(principal), AclPermissionType::Any);
        assert_eq!(authorizer.describe(&by_principal("User:alice")).len(), 3);
        assert_eq!(
            authorizer.describe(&by_principal(WILDCARD_PRINCIPAL)),
            vec![acl4.clone()]
        );

        assert_eq!(authorizer.remove_matching(&matching), vec![acl3, acl4]);
        assert_eq!(authorizer.remove_matching(&acl1.to_filter()), vec![acl1]);
        let baz = AclBindingFilter {
            pattern: pattern_filter(Topic, Some("baz"), PatternType::Any),
            entry: AccessControlEntryFilter::ANY,
        };
        assert_eq!(authorizer.remove_matching(&baz), vec![]);
        assert_eq!(
            authorizer.bindings().cloned().collect::<Vec<_>>(),
            vec![acl2]
        );
    }

    #[test]
    fn patterns_of_one_name_are_kept_apart() {
        let read = AccessControlEntry::new(WILDCARD_PRINCIPAL, "*", Read, Allow);
        let write = AccessControlEntry::new(WILDCARD_PRINCIPAL, "*", Write, Allow);
        let literal = ResourcePattern::new(Topic, "foo", Literal);
        let wildcard = ResourcePattern::new(Topic, "*", Literal);
        let prefixed = ResourcePattern::new(Topic, "foo", Prefixed);
        let mut authorizer = Authorizer::default();
        for pattern in [&literal, &wildcard, &prefixed] {
            authorizer.add(AclBinding::new(pattern.clone(), read.clone()));
        }
        authorizer.add(AclBinding::new(prefixed.clone(), write.clone()));
        let entries = |pattern: &ResourcePattern| {
            let filter = AclBindingFilter {
                pattern: pattern.to_filter(),
                entry: AccessControlEntryFilter::ANY,
            };
            authorizer
                .describe(&filter)
                .into_iter()
                .map(|binding| binding.entry)
                .collect::<Vec<_>>()
        };
        assert_eq!(entries(&literal), vec![read.clone()]);
        assert_eq!(entries(&wildcard), vec![read.clone()]);
        assert_eq!(entries(&prefixed), vec![read, write]);
    }

    // --- authorize_by_resource_type (Kafka's AuthorizerTest) -------------------------------

    fn by_type(
        authorizer: &Authorizer,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        authorizer.authorize_by_resource_type(&user(principal), host, operation, resource_type)
    }

    #[test]
    fn by_resource_type_add_and_remove() {
        let mut authorizer = authorizer_with([]);
        let deny = acl("Topic sb1 Literal User:user1 192.168.1.1 Read Deny");
        let allow = acl("Topic sb1 Literal User:user1 192.168.1.1 Read Allow");
        for _ in 0..3 {
            assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
            authorizer.add(allow.clone());
            assert!(by_type(&authorizer, "user1", HOST1, Read, Topic));
            authorizer.add(deny.clone());
            assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
            authorizer.remove_matching(&deny.to_filter());
            assert!(by_type(&authorizer, "user1", HOST1, Read, Topic));
            authorizer.remove_matching(&allow.to_filter());
        }
    }

    #[test]
    fn by_resource_type_unrelated_deny_does_not_dominate_allow() {
        let authorizer = authorizer_with([
            acl("Topic sb1 Literal User:user1 192.168.1.1 Read Deny"),
            acl("Topic sb1 Literal User:user2 192.168.1.1 Read Deny"),
            acl("Topic sb1 Literal User:user1 192.168.1.2 Write Deny"),
            acl("Topic sb1 Literal User:user2 192.168.1.2 Read Deny"),
            acl("Topic sb1 Literal User:user1 192.168.1.2 Read Allow"),
            acl("Topic sb2 Literal User:user1 192.168.1.2 Read Deny"),
            acl("Group s Prefixed User:user1 192.168.1.2 Read Deny"),
        ]);
        for resource_type in [Topic, Group, TransactionalId, Cluster] {
            assert!(
                !by_type(&authorizer, "user1", HOST1, Read, resource_type),
                "{resource_type}"
            );
        }
        assert!(by_type(&authorizer, "user1", HOST2, Read, Topic));
    }

    #[test]
    fn by_resource_type_deny_takes_precedence() {
        let mut authorizer =
            authorizer_with([acl("Topic sb1 Literal User:user1 192.168.1.1 Write Allow")]);
        assert!(by_type(&authorizer, "user1", HOST1, Write, Topic));
        authorizer.add(acl("Topic sb1 Literal User:user1 192.168.1.1 Write Deny"));
        assert!(!by_type(&authorizer, "user1", HOST1, Write, Topic));
    }

    #[test]
    fn by_resource_type_prefixed_deny_dominates() {
        let ace = |name: &str, permission| {
            binding(Group, name, Prefixed, "User:user1", HOST1, Read, permission)
        };
        let mut authorizer = authorizer_with([ace("abcde", Allow)]);
        assert!(by_type(&authorizer, "user1", HOST1, Read, Group));
        authorizer.add(ace("abcd", Deny));
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Group));
        authorizer.add(ace("abc", Allow));
        assert!(by_type(&authorizer, "user1", HOST1, Read, Group));
        authorizer.add(ace("a", Deny));
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Group));
        authorizer.add(ace("ab", Allow));
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Group));
    }

    #[test]
    fn by_resource_type_literal_deny_dominates_only_its_name() {
        let ace = |name: &str, pattern_type, permission| {
            binding(
                Topic,
                name,
                pattern_type,
                "User:user1",
                HOST1,
                Write,
                permission,
            )
        };
        let mut authorizer = authorizer_with([ace("t", Literal, Allow), ace("t", Literal, Deny)]);
        assert!(!by_type(&authorizer, "user1", HOST1, Write, Topic));
        // A literal DENY on a name does not cover the names a prefixed ALLOW of it covers.
        authorizer.add(ace("t", Prefixed, Allow));
        assert!(by_type(&authorizer, "user1", HOST1, Write, Topic));
    }

    #[test]
    fn by_resource_type_wildcard_deny_dominates() {
        let ace = |name: &str, pattern_type, permission| {
            binding(
                Group,
                name,
                pattern_type,
                "User:user1",
                HOST1,
                Write,
                permission,
            )
        };
        let mut authorizer = authorizer_with([ace("hello", Prefixed, Allow)]);
        assert!(by_type(&authorizer, "user1", HOST1, Write, Group));
        authorizer.add(ace("*", Literal, Deny));
        assert!(!by_type(&authorizer, "user1", HOST1, Write, Group));
        authorizer.add(ace("*", Literal, Allow));
        assert!(!by_type(&authorizer, "user1", HOST1, Write, Group));
        authorizer.add(ace("aloha", Literal, Allow));
        assert!(!by_type(&authorizer, "user1", HOST1, Write, Group));
    }

    #[test]
    fn by_resource_type_with_operation_all() {
        let ace = |operation, permission| {
            binding(
                Topic,
                "sb1",
                Literal,
                "User:user1",
                HOST1,
                operation,
                permission,
            )
        };
        let mut authorizer = authorizer_with([]);
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
        authorizer.add(ace(Write, Deny));
        authorizer.add(ace(All, Allow));
        assert!(by_type(&authorizer, "user1", HOST1, Read, Topic));
        authorizer.add(ace(All, Deny));
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
    }

    #[test]
    fn by_resource_type_with_wildcard_host() {
        let ace = |name: &str, host: &str, permission| {
            binding(Topic, name, Literal, "User:user1", host, Read, permission)
        };
        let mut authorizer = authorizer_with([]);
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
        authorizer.add(ace("sb1", HOST1, Allow));
        assert!(by_type(&authorizer, "user1", HOST1, Read, Topic));
        authorizer.add(ace("sb1", "*", Deny));
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
        authorizer.add(ace("sb2", HOST1, Deny));
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
        assert!(!by_type(&authorizer, "user1", HOST2, Read, Topic));
        authorizer.add(ace("sb2", "*", Allow));
        assert!(by_type(&authorizer, "user1", HOST2, Read, Topic));
        authorizer.add(ace("sb2", "*", Deny));
        assert!(!by_type(&authorizer, "user1", HOST2, Read, Topic));
    }

    #[test]
    fn by_resource_type_with_wildcard_principal() {
        let ace = |name: &str, principal: &str, permission| {
            binding(Topic, name, Literal, principal, HOST1, Read, permission)
        };
        let mut authorizer = authorizer_with([]);
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
        authorizer.add(ace("sb1", "User:user1", Allow));
        assert!(by_type(&authorizer, "user1", HOST1, Read, Topic));
        authorizer.add(ace("sb1", WILDCARD_PRINCIPAL, Deny));
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
        authorizer.add(ace("sb2", "User:user1", Deny));
        assert!(!by_type(&authorizer, "user1", HOST1, Read, Topic));
        assert!(!by_type(&authorizer, "user2", HOST1, Read, Topic));
        authorizer.add(ace("sb2", WILDCARD_PRINCIPAL, Allow));
        assert!(by_type(&authorizer, "user2", HOST1, Read, Topic));
        authorizer.add(ace("sb2", WILDCARD_PRINCIPAL, Deny));
        assert!(!by_type(&authorizer, "user2", HOST1, Read, Topic));
    }

    #[test]
    fn by_resource_type_super_user_and_no_acl_found() {
        let deny_all = |resource_type| {
            binding(
                resource_type,
                "*",
                Literal,
                WILDCARD_PRINCIPAL,
                "*",
                All,
                Deny,
            )
        };
        let authorizer = authorizer_with([Topic, Cluster, Group, TransactionalId].map(deny_all));
        for resource_type in [Topic, Cluster, Group, TransactionalId] {
            assert!(by_type(&authorizer, "superman", HOST1, Read, resource_type));
            assert!(!by_type(&authorizer, "alice", HOST1, Read, resource_type));
        }
        let open = Authorizer::new(AuthorizerConfig {
            super_users: vec![],
            allow_everyone_if_no_acl_found: true,
        });
        assert!(by_type(&open, "alice", HOST1, Read, Topic));
        assert!(by_type(&open, "alice", HOST1, Write, Topic));
        assert!(!by_type(&open, "alice", HOST1, AclOperation::Any, Topic));
        assert!(!by_type(&open, "alice", HOST1, Read, ResourceType::Any));
    }

    #[test]
    fn by_resource_type_idempotent_write_fallback() {
        let authorizer =
            authorizer_with([acl("Topic orders- Prefixed User:producer * Write Allow")]);
        assert!(!authorizer.authorize(
            &user("producer"),
            HOST1,
            AclOperation::IdempotentWrite,
            Cluster,
            CLUSTER_NAME
        ));
        assert!(by_type(&authorizer, "producer", HOST1, Write, Topic));
        assert!(!by_type(&authorizer, "consumer", HOST1, Write, Topic));
        // Only ACLs for the operation itself or ALL count.
        assert!(!by_type(&authorizer, "producer", HOST1, Read, Topic));
    }

    #[test]
    fn common_prefix_respects_char_boundaries() {
        assert_eq!(common_prefix("topic-12", "topic-2"), "topic-");
        assert_eq!(common_prefix("abc", "abcdef"), "abc");
        assert_eq!(common_prefix("abc", ""), "");
        // "é" (c3 a9) and "è" (c3 a8) share their first byte only.
        assert_eq!(common_prefix("xé", "xè"), "x");
    }

    // --- properties ---------------------------------------------------------------------------

    /// Kafka's decision computed the slow way: scan every binding.
    fn reference_authorize(
        bindings: &[AclBinding],
        config: &AuthorizerConfig,
        principal: &KafkaPrincipal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if config.super_users.contains(principal) {
            return true;
        }
        let request = Request {
            principal,
            host,
            operation,
        };
        let applying = bindings.iter().filter(|binding| {
            let pattern = &binding.pattern;
            pattern.resource_type == resource_type
                && match pattern.pattern_type {
                    Literal => pattern.name == name || pattern.name == WILDCARD_RESOURCE,
                    Prefixed => name.starts_with(&pattern.name),
                    _ => false,
                }
        });
        request
            .decide(applying)
            .unwrap_or(config.allow_everyone_if_no_acl_found)
    }

    fn arbitrary_binding() -> impl Strategy<Value = AclBinding> {
        (
            prop::sample::select(vec![Topic, Group]),
            "[ab*é]{0,4}",
            prop::sample::select(vec![Literal, Prefixed]),
            prop::sample::select(vec![
                "User:alice",
                "User:bob",
                WILDCARD_PRINCIPAL,
                "Group:alice",
            ]),
            prop::sample::select(vec![HOST1, "*"]),
            prop::sample::select(vec![All, Read, Write, Describe]),
            prop::sample::select(vec![Allow, Deny]),
        )
            .prop_map(
                |(resource_type, name, pattern_type, principal, host, operation, permission)| {
                    binding(
                        resource_type,
                        &name,
                        pattern_type,
                        principal,
                        host,
                        operation,
                        permission,
                    )
                },
            )
    }

    proptest! {
        #[test]
        fn indexed_authorize_agrees_with_a_full_scan(
            bindings in prop::collection::vec(arbitrary_binding(), 0..24),
            allow_everyone in any::<bool>(),
            name in "[ab*é]{0,5}",
            principal in prop::sample::select(vec!["alice", "bob", "carol"]),
            host in prop::sample::select(vec![HOST1, HOST2]),
            operation in prop::sample::select(vec![Read, Write, Describe, Create]),
            resource_type in prop::sample::select(vec![Topic, Group]),
        ) {
            let config = AuthorizerConfig { super_users: vec![], allow_everyone_if_no_acl_found: allow_everyone };
            let mut authorizer = Authorizer::new(config.clone());
            let mut unique = Vec::new();
            for binding in bindings {
                if authorizer.add(binding.clone()) {
                    unique.push(binding);
                }
            }
            prop_assert_eq!(authorizer.len(), unique.len());
            let principal = user(principal);
            prop_assert_eq!(
                authorizer.authorize(&principal, host, operation, resource_type, &name),
                reference_authorize(&unique, &config, &principal, host, operation, resource_type, &name)
            );
        }

        #[test]
        fn enum_parsing_never_panics(text in ".*", code in any::<i8>()) {
            if let Ok(operation) = text.parse::<AclOperation>() {
                prop_assert!(is_name_of(&text, operation.name()));
            }
            let _ = text.parse::<ResourceType>();
            let _ = text.parse::<PatternType>();
            let _ = text.parse::<AclPermissionType>();
            let operation = AclOperation::from_code(code);
            prop_assert!(operation.code() == code || operation == AclOperation::Unknown);
        }

        #[test]
        fn super_users_parsing_never_panics(text in ".*") {
            let _ = parse_super_users(&text);
        }

        #[test]
        fn validate_never_panics(binding in arbitrary_binding(), principal in ".*") {
            let mut binding = binding;
            binding.entry.principal = principal;
            let _ = binding.validate();
        }
    }
}
