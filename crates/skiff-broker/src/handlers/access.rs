//! Authorization as the handlers ask for it: whether this request's principal may do an
//! operation on a resource (always, when no authorizer is configured), and Kafka's
//! `authorized_operations` bit fields.

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::Uuid;

use super::RequestContext;
use crate::security::acls::Check;

/// The cluster resource's name in ACLs.
pub const CLUSTER: &str = skiff_auth::acl::CLUSTER_NAME;

/// The operations Kafka reports in `authorized_operations`, per resource type.
const TOPIC_OPERATIONS: [AclOperation; 8] = [
    AclOperation::Read,
    AclOperation::Write,
    AclOperation::Create,
    AclOperation::Delete,
    AclOperation::Alter,
    AclOperation::Describe,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
];
const GROUP_OPERATIONS: [AclOperation; 5] = [
    AclOperation::Read,
    AclOperation::Describe,
    AclOperation::Delete,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
];
const CLUSTER_OPERATIONS: [AclOperation; 7] = [
    AclOperation::Create,
    AclOperation::ClusterAction,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
    AclOperation::IdempotentWrite,
    AclOperation::Alter,
    AclOperation::Describe,
];

impl RequestContext {
    /// The instance the journal files this connection's events under: its KIP-1313 ID, else
    /// the telemetry ID it named.
    pub fn journal_instance(&self) -> Option<Uuid> {
        self.instance_id.or(self.telemetry_instance)
    }

    fn check(&self) -> Check<'_> {
        Check {
            principal: &self.principal,
            host: &self.host,
            instance_id: self.instance_id,
        }
    }

    /// Whether the request may do `operation` on the named resource; a denial is counted and
    /// logged.
    pub fn authorized(
        &self,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        match &self.broker.security.acls {
            Some(acls) => acls.authorize(&self.check(), operation, resource_type, name),
            None => true,
        }
    }

    /// Whether the request may do `operation` on the cluster.
    pub fn authorized_on_cluster(&self, operation: AclOperation) -> bool {
        self.authorized(operation, ResourceType::Cluster, CLUSTER)
    }

    /// [`Self::authorized`] without counting or logging a denial: for checks that only choose
    /// what to show (a topic list filtered to what the principal may see) or which error to give.
    pub fn allows(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        match &self.broker.security.acls {
            Some(acls) => acls.allows(&self.check(), operation, resource_type, name),
            None => true,
        }
    }

    /// [`Self::allows`] on the cluster.
    pub fn allows_on_cluster(&self, operation: AclOperation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER)
    }

    /// Whether the request may do `operation` on some resource of the type (Kafka's
    /// `authorizeByResourceType`).
    pub fn authorized_on_any(&self, operation: AclOperation, resource_type: ResourceType) -> bool {
        match &self.broker.security.acls {
            Some(acls) => acls.authorize_any(&self.check(), operation, resource_type),
            None => true,
        }
    }

    /// The cluster's `authorized_operations`, as Metadata and DescribeCluster give them: 0 to a
    /// principal that may not DESCRIBE the cluster.
    pub fn cluster_authorized_operations(&self) -> i32 {
        if self.allows_on_cluster(AclOperation::Describe) {
            self.authorized_operations(ResourceType::Cluster, CLUSTER)
        } else {
            0
        }
    }

    /// Kafka's `authorized_operations` of a resource: a bit per operation code the principal
    /// may do on it (every operation of the type when there is no authorizer).
    pub fn authorized_operations(&self, resource_type: ResourceType, name: &str) -> i32 {
        let operations: &[AclOperation] = match resource_type {
            ResourceType::Topic => &TOPIC_OPERATIONS,
            ResourceType::Group => &GROUP_OPERATIONS,
            ResourceType::Cluster => &CLUSTER_OPERATIONS,
            _ => &[],
        };
        let check = self.check();
        operations
            .iter()
            .filter(|op| match &self.broker.security.acls {
                Some(acls) => acls.allows(&check, **op, resource_type, name),
                None => true,
            })
            .fold(0, |bits, op| bits | (1 << op.code()))
    }
}
