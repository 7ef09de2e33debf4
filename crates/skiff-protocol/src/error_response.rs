//! An error response for any request, shaped the way Apache Kafka's
//! `AbstractRequest.getErrorResponse` shapes it for each API.
//!
//! [`error_response`] puts the error code (and the message, where the response has a message
//! field) at the top level when the response has a top-level error at that version, and mirrors
//! the request's entities (topics, partitions, groups, resources, keys...) with the error on each
//! where Kafka does. Every field it fills is one the response carries at `version`, so the result
//! encodes at `version` and decodes back to itself. Throttle times are 0: quotas are the caller's.
//!
//! Where Kafka returns no response at all (Produce with `acks = 0`), a response is built anyway;
//! whether to send it is the caller's decision.
//!
//! [`response_error_codes`] lists the error codes a response carries, for tests and metrics.

use bytes::Bytes;

use crate::codec::ByteString;
use crate::generated::api::{Request, Response};
use crate::generated::*;

/// Kafka's principal for "no authenticated user", used by CreateDelegationToken errors.
const ANONYMOUS_PRINCIPAL_TYPE: &str = "User";
const ANONYMOUS_PRINCIPAL_NAME: &str = "ANONYMOUS";

/// The error to spread over a response.
#[derive(Debug, Clone)]
struct Failure {
    code: i16,
    message: Option<ByteString>,
}

impl Failure {
    fn message(&self) -> Option<ByteString> {
        self.message.clone()
    }
}

/// A response to `request` (decoded at `version`) that reports `error_code` everywhere Kafka's
/// `getErrorResponse` for that API reports it, with `message` in the error-message fields the
/// response has at `version`.
pub fn error_response(
    request: &Request,
    version: i16,
    error_code: i16,
    message: Option<&str>,
) -> Response {
    let e = Failure {
        code: error_code,
        message: message.map(|m| ByteString::from(m.to_owned())),
    };
    let v = version;
    match request {
        // Data plane.
        Request::Produce(r) => Response::Produce(produce(r, v, &e)),
        Request::Fetch(r) => Response::Fetch(fetch(r, v, &e)),
        Request::ListOffsets(r) => Response::ListOffsets(list_offsets(r, &e)),
        Request::Metadata(r) => Response::Metadata(metadata(r, v, &e)),
        Request::OffsetForLeaderEpoch(r) => {
            Response::OffsetForLeaderEpoch(offset_for_leader_epoch(r, &e))
        }
        Request::DeleteRecords(r) => Response::DeleteRecords(delete_records(r, &e)),
        Request::DescribeProducers(r) => Response::DescribeProducers(describe_producers(r, &e)),
        Request::DescribeTopicPartitions(r) => {
            Response::DescribeTopicPartitions(describe_topic_partitions(r, &e))
        }

        // Classic consumer groups and offsets.
        Request::OffsetCommit(r) => Response::OffsetCommit(offset_commit(r, &e)),
        Request::OffsetFetch(r) => Response::OffsetFetch(offset_fetch(r, v, &e)),
        Request::OffsetDelete(_) => {
            Response::OffsetDelete(offset_delete_response::OffsetDeleteResponse {
                error_code: e.code,
                ..Default::default()
            })
        }
        Request::FindCoordinator(r) => Response::FindCoordinator(find_coordinator(r, v, &e)),
        Request::JoinGroup(_) => Response::JoinGroup(join_group(v, &e)),
        Request::Heartbeat(_) => Response::Heartbeat(HeartbeatResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::LeaveGroup(r) => Response::LeaveGroup(leave_group(r, &e)),
        Request::SyncGroup(_) => Response::SyncGroup(SyncGroupResponse {
            error_code: e.code,
            assignment: Bytes::new(),
            ..Default::default()
        }),
        Request::DescribeGroups(r) => Response::DescribeGroups(describe_groups(r, v, &e)),
        Request::ListGroups(_) => Response::ListGroups(ListGroupsResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::DeleteGroups(r) => Response::DeleteGroups(delete_groups(r, &e)),

        // Consumer, share and streams groups (KIP-848, KIP-932, KIP-1071).
        Request::ConsumerGroupHeartbeat(_) => {
            Response::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse {
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
        }
        Request::ConsumerGroupDescribe(r) => {
            Response::ConsumerGroupDescribe(consumer_group_describe(r, &e))
        }
        Request::ShareGroupHeartbeat(_) => {
            Response::ShareGroupHeartbeat(ShareGroupHeartbeatResponse {
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
        }
        Request::ShareGroupDescribe(r) => Response::ShareGroupDescribe(share_group_describe(r, &e)),
        Request::StreamsGroupHeartbeat(_) => {
            Response::StreamsGroupHeartbeat(StreamsGroupHeartbeatResponse {
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
        }
        Request::StreamsGroupDescribe(r) => {
            Response::StreamsGroupDescribe(streams_group_describe(r, &e))
        }
        Request::ShareFetch(_) => Response::ShareFetch(ShareFetchResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),
        Request::ShareAcknowledge(_) => Response::ShareAcknowledge(ShareAcknowledgeResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),
        Request::DescribeShareGroupOffsets(r) => {
            Response::DescribeShareGroupOffsets(describe_share_group_offsets(r, &e))
        }
        Request::AlterShareGroupOffsets(r) => {
            Response::AlterShareGroupOffsets(alter_share_group_offsets(r, &e))
        }
        Request::DeleteShareGroupOffsets(r) => {
            Response::DeleteShareGroupOffsets(delete_share_group_offsets(r, &e))
        }
        Request::InitializeShareGroupState(r) => {
            Response::InitializeShareGroupState(initialize_share_group_state(r, &e))
        }
        Request::ReadShareGroupState(r) => {
            Response::ReadShareGroupState(read_share_group_state(r, &e))
        }
        Request::WriteShareGroupState(r) => {
            Response::WriteShareGroupState(write_share_group_state(r, &e))
        }
        Request::DeleteShareGroupState(r) => {
            Response::DeleteShareGroupState(delete_share_group_state(r, &e))
        }
        Request::ReadShareGroupStateSummary(r) => {
            Response::ReadShareGroupStateSummary(read_share_group_state_summary(r, &e))
        }

        // Connection setup and authentication.
        Request::ApiVersions(_) => Response::ApiVersions(ApiVersionsResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::SaslHandshake(_) => Response::SaslHandshake(SaslHandshakeResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::SaslAuthenticate(_) => Response::SaslAuthenticate(SaslAuthenticateResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),

        // Transactions and producer IDs.
        Request::InitProducerId(_) => Response::InitProducerId(InitProducerIdResponse {
            error_code: e.code,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        }),
        Request::AddPartitionsToTxn(r) => {
            Response::AddPartitionsToTxn(add_partitions_to_txn(r, v, &e))
        }
        Request::AddOffsetsToTxn(_) => Response::AddOffsetsToTxn(AddOffsetsToTxnResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::EndTxn(_) => Response::EndTxn(EndTxnResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::WriteTxnMarkers(r) => Response::WriteTxnMarkers(write_txn_markers(r, &e)),
        Request::TxnOffsetCommit(r) => Response::TxnOffsetCommit(txn_offset_commit(r, &e)),
        Request::DescribeTransactions(r) => {
            Response::DescribeTransactions(describe_transactions(r, &e))
        }
        Request::ListTransactions(_) => Response::ListTransactions(ListTransactionsResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::AllocateProducerIds(_) => {
            Response::AllocateProducerIds(AllocateProducerIdsResponse {
                error_code: e.code,
                ..Default::default()
            })
        }

        // Topics, partitions and configs.
        Request::CreateTopics(r) => Response::CreateTopics(create_topics(r, &e)),
        Request::DeleteTopics(r) => Response::DeleteTopics(delete_topics(r, v, &e)),
        Request::CreatePartitions(r) => Response::CreatePartitions(create_partitions(r, &e)),
        Request::DescribeConfigs(r) => Response::DescribeConfigs(describe_configs(r, &e)),
        Request::AlterConfigs(r) => Response::AlterConfigs(alter_configs(r, &e)),
        Request::IncrementalAlterConfigs(r) => {
            Response::IncrementalAlterConfigs(incremental_alter_configs(r, &e))
        }
        Request::ListConfigResources(_) => {
            Response::ListConfigResources(ListConfigResourcesResponse {
                error_code: e.code,
                ..Default::default()
            })
        }
        Request::ElectLeaders(r) => Response::ElectLeaders(elect_leaders(r, v, &e)),
        Request::AlterPartitionReassignments(r) => {
            Response::AlterPartitionReassignments(alter_partition_reassignments(r, &e))
        }
        Request::ListPartitionReassignments(r) => {
            Response::ListPartitionReassignments(list_partition_reassignments(r, &e))
        }
        Request::AlterReplicaLogDirs(r) => {
            Response::AlterReplicaLogDirs(alter_replica_log_dirs(r, &e))
        }
        Request::DescribeLogDirs(_) => Response::DescribeLogDirs(DescribeLogDirsResponse {
            // Top-level since v3; older versions have nowhere to put it (nor does Kafka).
            error_code: if v >= 3 { e.code } else { 0 },
            ..Default::default()
        }),
        Request::DescribeCluster(_) => Response::DescribeCluster(DescribeClusterResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),

        // ACLs, quotas, SCRAM and delegation tokens.
        Request::DescribeAcls(_) => Response::DescribeAcls(DescribeAclsResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),
        Request::CreateAcls(r) => Response::CreateAcls(create_acls(r, &e)),
        Request::DeleteAcls(r) => Response::DeleteAcls(delete_acls(r, &e)),
        Request::DescribeClientQuotas(_) => {
            Response::DescribeClientQuotas(DescribeClientQuotasResponse {
                error_code: e.code,
                error_message: e.message(),
                entries: None,
                ..Default::default()
            })
        }
        Request::AlterClientQuotas(r) => Response::AlterClientQuotas(alter_client_quotas(r, &e)),
        Request::DescribeUserScramCredentials(r) => {
            Response::DescribeUserScramCredentials(describe_user_scram_credentials(r, &e))
        }
        Request::AlterUserScramCredentials(r) => {
            Response::AlterUserScramCredentials(alter_user_scram_credentials(r, &e))
        }
        Request::CreateDelegationToken(_) => {
            Response::CreateDelegationToken(create_delegation_token(v, &e))
        }
        Request::RenewDelegationToken(_) => {
            Response::RenewDelegationToken(RenewDelegationTokenResponse {
                error_code: e.code,
                ..Default::default()
            })
        }
        Request::ExpireDelegationToken(_) => {
            Response::ExpireDelegationToken(ExpireDelegationTokenResponse {
                error_code: e.code,
                ..Default::default()
            })
        }
        Request::DescribeDelegationToken(_) => {
            Response::DescribeDelegationToken(DescribeDelegationTokenResponse {
                error_code: e.code,
                ..Default::default()
            })
        }

        // Client telemetry (KIP-714).
        Request::GetTelemetrySubscriptions(_) => {
            Response::GetTelemetrySubscriptions(GetTelemetrySubscriptionsResponse {
                error_code: e.code,
                ..Default::default()
            })
        }
        Request::PushTelemetry(_) => Response::PushTelemetry(PushTelemetryResponse {
            error_code: e.code,
            ..Default::default()
        }),

        // Inter-broker, controller and KRaft APIs: a top-level error, as Kafka.
        Request::Vote(_) => Response::Vote(VoteResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::BeginQuorumEpoch(_) => Response::BeginQuorumEpoch(BeginQuorumEpochResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::EndQuorumEpoch(_) => Response::EndQuorumEpoch(EndQuorumEpochResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::DescribeQuorum(_) => {
            let mut response = DescribeQuorumResponse {
                error_code: e.code,
                ..Default::default()
            };
            if v >= 2 {
                response.error_message = e.message();
            }
            Response::DescribeQuorum(response)
        }
        Request::FetchSnapshot(_) => Response::FetchSnapshot(FetchSnapshotResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::AddRaftVoter(_) => Response::AddRaftVoter(AddRaftVoterResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),
        Request::RemoveRaftVoter(_) => Response::RemoveRaftVoter(RemoveRaftVoterResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),
        Request::UpdateRaftVoter(_) => Response::UpdateRaftVoter(UpdateRaftVoterResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::AlterPartition(_) => Response::AlterPartition(AlterPartitionResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::UpdateFeatures(_) => Response::UpdateFeatures(UpdateFeaturesResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),
        Request::Envelope(_) => Response::Envelope(EnvelopeResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::BrokerRegistration(_) => {
            Response::BrokerRegistration(BrokerRegistrationResponse {
                error_code: e.code,
                ..Default::default()
            })
        }
        Request::BrokerHeartbeat(_) => Response::BrokerHeartbeat(BrokerHeartbeatResponse {
            error_code: e.code,
            ..Default::default()
        }),
        Request::UnregisterBroker(_) => Response::UnregisterBroker(UnregisterBrokerResponse {
            error_code: e.code,
            error_message: e.message(),
            ..Default::default()
        }),
        Request::ControllerRegistration(_) => {
            Response::ControllerRegistration(ControllerRegistrationResponse {
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
        }
        Request::AssignReplicasToDirs(_) => {
            Response::AssignReplicasToDirs(AssignReplicasToDirsResponse {
                error_code: e.code,
                ..Default::default()
            })
        }

        // Removed from the protocol (no version is valid): the empty response.
        Request::LeaderAndIsr(_) => Response::LeaderAndIsr(LeaderAndIsrResponse::default()),
        Request::StopReplica(_) => Response::StopReplica(StopReplicaResponse::default()),
        Request::UpdateMetadata(_) => Response::UpdateMetadata(UpdateMetadataResponse::default()),
        Request::ControlledShutdown(_) => {
            Response::ControlledShutdown(ControlledShutdownResponse::default())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Data plane
// ---------------------------------------------------------------------------------------------

fn produce(r: &ProduceRequest, version: i16, e: &Failure) -> ProduceResponse {
    let error_message = if version >= 8 { e.message() } else { None };
    use produce_response::{PartitionProduceResponse, TopicProduceResponse};
    ProduceResponse {
        responses: r
            .topic_data
            .iter()
            .map(|topic| TopicProduceResponse {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
                partition_responses: topic
                    .partition_data
                    .iter()
                    .map(|p| PartitionProduceResponse {
                        index: p.index,
                        error_code: e.code,
                        base_offset: -1,
                        log_append_time_ms: -1,
                        log_start_offset: -1,
                        error_message: error_message.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Before v13 every requested partition carries the error as well as the top level (old
/// clients read only the partitions); from v13 Kafka sends the top-level error alone.
fn fetch(r: &FetchRequest, version: i16, e: &Failure) -> FetchResponse {
    use fetch_response::{FetchableTopicResponse, PartitionData};
    let responses = if version < 13 {
        r.topics
            .iter()
            .map(|topic| FetchableTopicResponse {
                topic: topic.topic.clone(),
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| PartitionData {
                        partition_index: p.partition,
                        error_code: e.code,
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                        aborted_transactions: None,
                        preferred_read_replica: -1,
                        records: Some(Bytes::new()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut response = FetchResponse {
        responses,
        ..Default::default()
    };
    // The top-level error and the session exist from v7; Kafka echoes the request's session.
    if version >= 7 {
        response.error_code = e.code;
        response.session_id = r.session_id;
    }
    response
}

fn list_offsets(r: &ListOffsetsRequest, e: &Failure) -> ListOffsetsResponse {
    use list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
    ListOffsetsResponse {
        topics: r
            .topics
            .iter()
            .map(|topic| ListOffsetsTopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| ListOffsetsPartitionResponse {
                        partition_index: p.partition_index,
                        error_code: e.code,
                        timestamp: -1,
                        offset: -1,
                        leader_epoch: -1,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Each requested topic with the error and no partitions; a null topic name becomes "" as in
/// Kafka. A request for all topics gets no topics. v13+ also has the top-level error.
fn metadata(r: &MetadataRequest, version: i16, e: &Failure) -> MetadataResponse {
    use metadata_response::MetadataResponseTopic;
    MetadataResponse {
        topics: r
            .topics
            .iter()
            .flatten()
            .map(|topic| MetadataResponseTopic {
                error_code: e.code,
                name: Some(topic.name.clone().unwrap_or_default()),
                topic_id: topic.topic_id,
                is_internal: false,
                partitions: Vec::new(),
                ..Default::default()
            })
            .collect(),
        error_code: if version >= 13 { e.code } else { 0 },
        ..Default::default()
    }
}

fn offset_for_leader_epoch(
    r: &OffsetForLeaderEpochRequest,
    e: &Failure,
) -> OffsetForLeaderEpochResponse {
    use offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
    OffsetForLeaderEpochResponse {
        topics: r
            .topics
            .iter()
            .map(|topic| OffsetForLeaderTopicResult {
                topic: topic.topic.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| EpochEndOffset {
                        error_code: e.code,
                        partition: p.partition,
                        leader_epoch: -1,
                        end_offset: -1,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn delete_records(r: &DeleteRecordsRequest, e: &Failure) -> DeleteRecordsResponse {
    use delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
    DeleteRecordsResponse {
        topics: r
            .topics
            .iter()
            .map(|topic| DeleteRecordsTopicResult {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| DeleteRecordsPartitionResult {
                        partition_index: p.partition_index,
                        low_watermark: -1,
                        error_code: e.code,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn describe_producers(r: &DescribeProducersRequest, e: &Failure) -> DescribeProducersResponse {
    use describe_producers_response::{PartitionResponse, TopicResponse};
    DescribeProducersResponse {
        topics: r
            .topics
            .iter()
            .map(|topic| TopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partition_indexes
                    .iter()
                    .map(|&partition_index| PartitionResponse {
                        partition_index,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn describe_topic_partitions(
    r: &DescribeTopicPartitionsRequest,
    e: &Failure,
) -> DescribeTopicPartitionsResponse {
    use describe_topic_partitions_response::DescribeTopicPartitionsResponseTopic;
    DescribeTopicPartitionsResponse {
        topics: r
            .topics
            .iter()
            .map(|topic| DescribeTopicPartitionsResponseTopic {
                error_code: e.code,
                name: Some(topic.name.clone()),
                is_internal: false,
                partitions: Vec::new(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Classic groups and offsets
// ---------------------------------------------------------------------------------------------

fn offset_commit(r: &OffsetCommitRequest, e: &Failure) -> OffsetCommitResponse {
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    OffsetCommitResponse {
        topics: r
            .topics
            .iter()
            .map(|topic| OffsetCommitResponseTopic {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| OffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: e.code,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// v1: the error on every requested partition (no top-level field yet); v2-v7: top level only;
/// v8+: on each requested group.
fn offset_fetch(r: &OffsetFetchRequest, version: i16, e: &Failure) -> OffsetFetchResponse {
    use offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
    };
    if version < 2 {
        OffsetFetchResponse {
            topics: r
                .topics
                .iter()
                .flatten()
                .map(|topic| OffsetFetchResponseTopic {
                    name: topic.name.clone(),
                    partitions: topic
                        .partition_indexes
                        .iter()
                        .map(|&partition_index| OffsetFetchResponsePartition {
                            partition_index,
                            committed_offset: -1,
                            committed_leader_epoch: -1,
                            metadata: Some(ByteString::from_static("")),
                            error_code: e.code,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    } else if version < 8 {
        OffsetFetchResponse {
            error_code: e.code,
            ..Default::default()
        }
    } else {
        OffsetFetchResponse {
            groups: r
                .groups
                .iter()
                .map(|group| OffsetFetchResponseGroup {
                    group_id: group.group_id.clone(),
                    error_code: e.code,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// v0-v3: one coordinator at the top level (Kafka's "no node": id -1, host "", port -1);
/// v4+: one entry per requested key.
fn find_coordinator(
    r: &FindCoordinatorRequest,
    version: i16,
    e: &Failure,
) -> FindCoordinatorResponse {
    use find_coordinator_response::Coordinator;
    if version < 4 {
        let mut response = FindCoordinatorResponse {
            error_code: e.code,
            node_id: -1,
            host: ByteString::from_static(""),
            port: -1,
            ..Default::default()
        };
        if version >= 1 {
            response.error_message = e.message();
        }
        response
    } else {
        FindCoordinatorResponse {
            coordinators: r
                .coordinator_keys
                .iter()
                .map(|key| Coordinator {
                    key: key.clone(),
                    node_id: -1,
                    host: ByteString::from_static(""),
                    port: -1,
                    error_code: e.code,
                    error_message: e.message(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }
}

fn join_group(version: i16, e: &Failure) -> JoinGroupResponse {
    JoinGroupResponse {
        error_code: e.code,
        generation_id: -1,
        // Nullable from v7, where Kafka sends null; "" before.
        protocol_name: if version >= 7 {
            None
        } else {
            Some(ByteString::from_static(""))
        },
        leader: ByteString::from_static(""),
        member_id: ByteString::from_static(""),
        members: Vec::new(),
        ..Default::default()
    }
}

/// The top-level error, and from v3 the error on each departing member too.
fn leave_group(r: &LeaveGroupRequest, e: &Failure) -> LeaveGroupResponse {
    use leave_group_response::MemberResponse;
    LeaveGroupResponse {
        error_code: e.code,
        members: r
            .members
            .iter()
            .map(|m| MemberResponse {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                error_code: e.code,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn describe_groups(r: &DescribeGroupsRequest, version: i16, e: &Failure) -> DescribeGroupsResponse {
    let error_message = if version >= 6 { e.message() } else { None };
    use describe_groups_response::DescribedGroup;
    DescribeGroupsResponse {
        groups: r
            .groups
            .iter()
            .map(|group_id| DescribedGroup {
                error_code: e.code,
                error_message: error_message.clone(),
                group_id: group_id.clone(),
                group_state: ByteString::from_static(""),
                protocol_type: ByteString::from_static(""),
                protocol_data: ByteString::from_static(""),
                members: Vec::new(),
                authorized_operations: i32::MIN,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn delete_groups(r: &DeleteGroupsRequest, e: &Failure) -> DeleteGroupsResponse {
    use delete_groups_response::DeletableGroupResult;
    DeleteGroupsResponse {
        results: r
            .groups_names
            .iter()
            .map(|group_id| DeletableGroupResult {
                group_id: group_id.clone(),
                error_code: e.code,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Consumer, share and streams groups
// ---------------------------------------------------------------------------------------------

fn consumer_group_describe(
    r: &ConsumerGroupDescribeRequest,
    e: &Failure,
) -> ConsumerGroupDescribeResponse {
    use consumer_group_describe_response::DescribedGroup;
    ConsumerGroupDescribeResponse {
        groups: r
            .group_ids
            .iter()
            .map(|group_id| DescribedGroup {
                error_code: e.code,
                error_message: e.message(),
                group_id: group_id.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn share_group_describe(r: &ShareGroupDescribeRequest, e: &Failure) -> ShareGroupDescribeResponse {
    use share_group_describe_response::DescribedGroup;
    ShareGroupDescribeResponse {
        groups: r
            .group_ids
            .iter()
            .map(|group_id| DescribedGroup {
                error_code: e.code,
                error_message: e.message(),
                group_id: group_id.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn streams_group_describe(
    r: &StreamsGroupDescribeRequest,
    e: &Failure,
) -> StreamsGroupDescribeResponse {
    use streams_group_describe_response::DescribedGroup;
    StreamsGroupDescribeResponse {
        groups: r
            .group_ids
            .iter()
            .map(|group_id| DescribedGroup {
                error_code: e.code,
                error_message: e.message(),
                group_id: group_id.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn describe_share_group_offsets(
    r: &DescribeShareGroupOffsetsRequest,
    e: &Failure,
) -> DescribeShareGroupOffsetsResponse {
    use describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup;
    DescribeShareGroupOffsetsResponse {
        groups: r
            .groups
            .iter()
            .map(|group| DescribeShareGroupOffsetsResponseGroup {
                group_id: group.group_id.clone(),
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn alter_share_group_offsets(
    r: &AlterShareGroupOffsetsRequest,
    e: &Failure,
) -> AlterShareGroupOffsetsResponse {
    use alter_share_group_offsets_response::{
        AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
    };
    AlterShareGroupOffsetsResponse {
        error_code: e.code,
        error_message: e.message(),
        responses: r
            .topics
            .iter()
            .map(|topic| AlterShareGroupOffsetsResponseTopic {
                topic_name: topic.topic_name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| AlterShareGroupOffsetsResponsePartition {
                        partition_index: p.partition_index,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn delete_share_group_offsets(
    r: &DeleteShareGroupOffsetsRequest,
    e: &Failure,
) -> DeleteShareGroupOffsetsResponse {
    use delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
    DeleteShareGroupOffsetsResponse {
        error_code: e.code,
        error_message: e.message(),
        responses: r
            .topics
            .iter()
            .map(|topic| DeleteShareGroupOffsetsResponseTopic {
                topic_name: topic.topic_name.clone(),
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn initialize_share_group_state(
    r: &InitializeShareGroupStateRequest,
    e: &Failure,
) -> InitializeShareGroupStateResponse {
    use initialize_share_group_state_response::{InitializeStateResult, PartitionResult};
    InitializeShareGroupStateResponse {
        results: r
            .topics
            .iter()
            .map(|topic| InitializeStateResult {
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| PartitionResult {
                        partition: p.partition,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn read_share_group_state(
    r: &ReadShareGroupStateRequest,
    e: &Failure,
) -> ReadShareGroupStateResponse {
    use read_share_group_state_response::{PartitionResult, ReadStateResult};
    ReadShareGroupStateResponse {
        results: r
            .topics
            .iter()
            .map(|topic| ReadStateResult {
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| PartitionResult {
                        partition: p.partition,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn write_share_group_state(
    r: &WriteShareGroupStateRequest,
    e: &Failure,
) -> WriteShareGroupStateResponse {
    use write_share_group_state_response::{PartitionResult, WriteStateResult};
    WriteShareGroupStateResponse {
        results: r
            .topics
            .iter()
            .map(|topic| WriteStateResult {
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| PartitionResult {
                        partition: p.partition,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn delete_share_group_state(
    r: &DeleteShareGroupStateRequest,
    e: &Failure,
) -> DeleteShareGroupStateResponse {
    use delete_share_group_state_response::{DeleteStateResult, PartitionResult};
    DeleteShareGroupStateResponse {
        results: r
            .topics
            .iter()
            .map(|topic| DeleteStateResult {
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| PartitionResult {
                        partition: p.partition,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn read_share_group_state_summary(
    r: &ReadShareGroupStateSummaryRequest,
    e: &Failure,
) -> ReadShareGroupStateSummaryResponse {
    use read_share_group_state_summary_response::{PartitionResult, ReadStateSummaryResult};
    ReadShareGroupStateSummaryResponse {
        results: r
            .topics
            .iter()
            .map(|topic| ReadStateSummaryResult {
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| PartitionResult {
                        partition: p.partition,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Transactions
// ---------------------------------------------------------------------------------------------

/// v0-v3: the error on every requested partition; v4+ (batched, broker-to-broker capable):
/// the top-level error only, as Kafka.
fn add_partitions_to_txn(
    r: &AddPartitionsToTxnRequest,
    version: i16,
    e: &Failure,
) -> AddPartitionsToTxnResponse {
    use add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    if version < 4 {
        AddPartitionsToTxnResponse {
            results_by_topic_v3_and_below: r
                .v3_and_below_topics
                .iter()
                .map(|topic| AddPartitionsToTxnTopicResult {
                    name: topic.name.clone(),
                    results_by_partition: topic
                        .partitions
                        .iter()
                        .map(|&partition_index| AddPartitionsToTxnPartitionResult {
                            partition_index,
                            partition_error_code: e.code,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    } else {
        AddPartitionsToTxnResponse {
            error_code: e.code,
            ..Default::default()
        }
    }
}

fn write_txn_markers(r: &WriteTxnMarkersRequest, e: &Failure) -> WriteTxnMarkersResponse {
    use write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    WriteTxnMarkersResponse {
        markers: r
            .markers
            .iter()
            .map(|marker| WritableTxnMarkerResult {
                producer_id: marker.producer_id,
                topics: marker
                    .topics
                    .iter()
                    .map(|topic| WritableTxnMarkerTopicResult {
                        name: topic.name.clone(),
                        partitions: topic
                            .partition_indexes
                            .iter()
                            .map(|&partition_index| WritableTxnMarkerPartitionResult {
                                partition_index,
                                error_code: e.code,
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn txn_offset_commit(r: &TxnOffsetCommitRequest, e: &Failure) -> TxnOffsetCommitResponse {
    use txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };
    TxnOffsetCommitResponse {
        topics: r
            .topics
            .iter()
            .map(|topic| TxnOffsetCommitResponseTopic {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| TxnOffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: e.code,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn describe_transactions(
    r: &DescribeTransactionsRequest,
    e: &Failure,
) -> DescribeTransactionsResponse {
    use describe_transactions_response::TransactionState;
    DescribeTransactionsResponse {
        transaction_states: r
            .transactional_ids
            .iter()
            .map(|id| TransactionState {
                error_code: e.code,
                transactional_id: id.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Topics, partitions and configs
// ---------------------------------------------------------------------------------------------

fn create_topics(r: &CreateTopicsRequest, e: &Failure) -> CreateTopicsResponse {
    use create_topics_response::CreatableTopicResult;
    CreateTopicsResponse {
        topics: r
            .topics
            .iter()
            .map(|topic| CreatableTopicResult {
                name: topic.name.clone(),
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// v0-v5 name the topics; v6 names them or gives their IDs (a null name stays null).
fn delete_topics(r: &DeleteTopicsRequest, version: i16, e: &Failure) -> DeleteTopicsResponse {
    use delete_topics_response::DeletableTopicResult;
    let error_message = if version >= 5 { e.message() } else { None };
    let result = |name: Option<ByteString>, topic_id| DeletableTopicResult {
        name,
        topic_id,
        error_code: e.code,
        error_message: error_message.clone(),
        ..Default::default()
    };
    let responses = if version < 6 {
        r.topic_names
            .iter()
            .map(|name| result(Some(name.clone()), crate::uuid::Uuid::default()))
            .collect()
    } else {
        r.topics
            .iter()
            .map(|topic| result(topic.name.clone(), topic.topic_id))
            .collect()
    };
    DeleteTopicsResponse {
        responses,
        ..Default::default()
    }
}

fn create_partitions(r: &CreatePartitionsRequest, e: &Failure) -> CreatePartitionsResponse {
    use create_partitions_response::CreatePartitionsTopicResult;
    CreatePartitionsResponse {
        results: r
            .topics
            .iter()
            .map(|topic| CreatePartitionsTopicResult {
                name: topic.name.clone(),
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn describe_configs(r: &DescribeConfigsRequest, e: &Failure) -> DescribeConfigsResponse {
    use describe_configs_response::DescribeConfigsResult;
    DescribeConfigsResponse {
        results: r
            .resources
            .iter()
            .map(|resource| DescribeConfigsResult {
                error_code: e.code,
                error_message: e.message(),
                resource_type: resource.resource_type,
                resource_name: resource.resource_name.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn alter_configs(r: &AlterConfigsRequest, e: &Failure) -> AlterConfigsResponse {
    use alter_configs_response::AlterConfigsResourceResponse;
    AlterConfigsResponse {
        responses: r
            .resources
            .iter()
            .map(|resource| AlterConfigsResourceResponse {
                error_code: e.code,
                error_message: e.message(),
                resource_type: resource.resource_type,
                resource_name: resource.resource_name.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn incremental_alter_configs(
    r: &IncrementalAlterConfigsRequest,
    e: &Failure,
) -> IncrementalAlterConfigsResponse {
    use incremental_alter_configs_response::AlterConfigsResourceResponse;
    IncrementalAlterConfigsResponse {
        responses: r
            .resources
            .iter()
            .map(|resource| AlterConfigsResourceResponse {
                error_code: e.code,
                error_message: e.message(),
                resource_type: resource.resource_type,
                resource_name: resource.resource_name.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The error on every named partition (none when the request asks for all), and from v1 at the
/// top level too.
fn elect_leaders(r: &ElectLeadersRequest, version: i16, e: &Failure) -> ElectLeadersResponse {
    use elect_leaders_response::{PartitionResult, ReplicaElectionResult};
    ElectLeadersResponse {
        error_code: if version >= 1 { e.code } else { 0 },
        replica_election_results: r
            .topic_partitions
            .iter()
            .flatten()
            .map(|topic| ReplicaElectionResult {
                topic: topic.topic.clone(),
                partition_result: topic
                    .partitions
                    .iter()
                    .map(|&partition_id| PartitionResult {
                        partition_id,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn alter_partition_reassignments(
    r: &AlterPartitionReassignmentsRequest,
    e: &Failure,
) -> AlterPartitionReassignmentsResponse {
    use alter_partition_reassignments_response::{
        ReassignablePartitionResponse, ReassignableTopicResponse,
    };
    AlterPartitionReassignmentsResponse {
        error_code: e.code,
        error_message: e.message(),
        responses: r
            .topics
            .iter()
            .map(|topic| ReassignableTopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| ReassignablePartitionResponse {
                        partition_index: p.partition_index,
                        error_code: e.code,
                        error_message: e.message(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The top-level error, with the requested partitions echoed (they have no error field).
fn list_partition_reassignments(
    r: &ListPartitionReassignmentsRequest,
    e: &Failure,
) -> ListPartitionReassignmentsResponse {
    use list_partition_reassignments_response::{
        OngoingPartitionReassignment, OngoingTopicReassignment,
    };
    ListPartitionReassignmentsResponse {
        error_code: e.code,
        error_message: e.message(),
        topics: r
            .topics
            .iter()
            .flatten()
            .map(|topic| OngoingTopicReassignment {
                name: topic.name.clone(),
                partitions: topic
                    .partition_indexes
                    .iter()
                    .map(|&partition_index| OngoingPartitionReassignment {
                        partition_index,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// One result per topic of each requested log dir, as Kafka flattens them.
fn alter_replica_log_dirs(
    r: &AlterReplicaLogDirsRequest,
    e: &Failure,
) -> AlterReplicaLogDirsResponse {
    use alter_replica_log_dirs_response::{
        AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
    };
    AlterReplicaLogDirsResponse {
        results: r
            .dirs
            .iter()
            .flat_map(|dir| dir.topics.iter())
            .map(|topic| AlterReplicaLogDirTopicResult {
                topic_name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|&partition_index| AlterReplicaLogDirPartitionResult {
                        partition_index,
                        error_code: e.code,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// ACLs, quotas, SCRAM and delegation tokens
// ---------------------------------------------------------------------------------------------

fn create_acls(r: &CreateAclsRequest, e: &Failure) -> CreateAclsResponse {
    use create_acls_response::AclCreationResult;
    CreateAclsResponse {
        results: r
            .creations
            .iter()
            .map(|_| AclCreationResult {
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn delete_acls(r: &DeleteAclsRequest, e: &Failure) -> DeleteAclsResponse {
    use delete_acls_response::DeleteAclsFilterResult;
    DeleteAclsResponse {
        filter_results: r
            .filters
            .iter()
            .map(|_| DeleteAclsFilterResult {
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn alter_client_quotas(r: &AlterClientQuotasRequest, e: &Failure) -> AlterClientQuotasResponse {
    use alter_client_quotas_response::{EntityData, EntryData};
    AlterClientQuotasResponse {
        entries: r
            .entries
            .iter()
            .map(|entry| EntryData {
                error_code: e.code,
                error_message: e.message(),
                entity: entry
                    .entity
                    .iter()
                    .map(|entity| EntityData {
                        entity_type: entity.entity_type.clone(),
                        entity_name: entity.entity_name.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The top-level error, and one result per requested user (Kafka leaves the user name empty;
/// it is filled here so clients can match results to users).
fn describe_user_scram_credentials(
    r: &DescribeUserScramCredentialsRequest,
    e: &Failure,
) -> DescribeUserScramCredentialsResponse {
    use describe_user_scram_credentials_response::DescribeUserScramCredentialsResult;
    DescribeUserScramCredentialsResponse {
        error_code: e.code,
        error_message: e.message(),
        results: r
            .users
            .iter()
            .flatten()
            .map(|user| DescribeUserScramCredentialsResult {
                user: user.name.clone(),
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// One result per distinct user named by a deletion or an upsertion, sorted by name.
fn alter_user_scram_credentials(
    r: &AlterUserScramCredentialsRequest,
    e: &Failure,
) -> AlterUserScramCredentialsResponse {
    use alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
    let mut users: Vec<&ByteString> = r
        .deletions
        .iter()
        .map(|d| &d.name)
        .chain(r.upsertions.iter().map(|u| &u.name))
        .collect();
    users.sort();
    users.dedup();
    AlterUserScramCredentialsResponse {
        results: users
            .into_iter()
            .map(|user| AlterUserScramCredentialsResult {
                user: user.clone(),
                error_code: e.code,
                error_message: e.message(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Kafka answers as the anonymous principal, with no token and timestamps of -1.
fn create_delegation_token(version: i16, e: &Failure) -> CreateDelegationTokenResponse {
    let (requester_type, requester_name) = if version >= 3 {
        (ANONYMOUS_PRINCIPAL_TYPE, ANONYMOUS_PRINCIPAL_NAME)
    } else {
        ("", "")
    };
    CreateDelegationTokenResponse {
        error_code: e.code,
        principal_type: ByteString::from_static(ANONYMOUS_PRINCIPAL_TYPE),
        principal_name: ByteString::from_static(ANONYMOUS_PRINCIPAL_NAME),
        token_requester_principal_type: ByteString::from_static(requester_type),
        token_requester_principal_name: ByteString::from_static(requester_name),
        issue_timestamp_ms: -1,
        expiry_timestamp_ms: -1,
        max_timestamp_ms: -1,
        token_id: ByteString::from_static(""),
        hmac: Bytes::new(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the error codes back
// ---------------------------------------------------------------------------------------------

/// Every error code `response` carries, top level first, then entity by entity in order.
///
/// Top-level codes that only some versions of a response have (Fetch from v7, Metadata from
/// v13, FindCoordinator before v4, OffsetFetch v2-v7, AddPartitionsToTxn from v4,
/// DescribeLogDirs from v3, ElectLeaders from v1), and the optional tagged CreateTopics
/// `topic_config_error_code`, are listed only when non-zero: without the version, a zero there
/// cannot be told from "absent at this version". Every other error field is listed whatever its
/// value, so a field left at 0 shows up.
pub fn response_error_codes(response: &Response) -> Vec<i16> {
    let mut out = Vec::new();
    collect_codes(response, &mut out);
    out
}

/// A code that is only meaningful when set (absent in some versions).
fn if_set(out: &mut Vec<i16>, code: i16) {
    if code != 0 {
        out.push(code);
    }
}

fn collect_codes(response: &Response, out: &mut Vec<i16>) {
    match response {
        Response::Produce(r) => {
            for t in &r.responses {
                out.extend(t.partition_responses.iter().map(|p| p.error_code));
            }
        }
        Response::Fetch(r) => {
            if_set(out, r.error_code);
            for t in &r.responses {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::ListOffsets(r) => {
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::Metadata(r) => {
            if_set(out, r.error_code);
            for t in &r.topics {
                out.push(t.error_code);
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::LeaderAndIsr(_)
        | Response::StopReplica(_)
        | Response::UpdateMetadata(_)
        | Response::ControlledShutdown(_) => {}
        Response::OffsetCommit(r) => {
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::OffsetFetch(r) => {
            if_set(out, r.error_code);
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
            for g in &r.groups {
                out.push(g.error_code);
                for t in &g.topics {
                    out.extend(t.partitions.iter().map(|p| p.error_code));
                }
            }
        }
        Response::FindCoordinator(r) => {
            // Top level before v4, per coordinator from v4: whichever is in use.
            if r.coordinators.is_empty() {
                if_set(out, r.error_code);
            }
            out.extend(r.coordinators.iter().map(|c| c.error_code));
        }
        Response::JoinGroup(r) => out.push(r.error_code),
        Response::Heartbeat(r) => out.push(r.error_code),
        Response::LeaveGroup(r) => {
            out.push(r.error_code);
            out.extend(r.members.iter().map(|m| m.error_code));
        }
        Response::SyncGroup(r) => out.push(r.error_code),
        Response::DescribeGroups(r) => out.extend(r.groups.iter().map(|g| g.error_code)),
        Response::ListGroups(r) => out.push(r.error_code),
        Response::SaslHandshake(r) => out.push(r.error_code),
        Response::ApiVersions(r) => out.push(r.error_code),
        Response::CreateTopics(r) => {
            for t in &r.topics {
                out.push(t.error_code);
                if_set(out, t.topic_config_error_code);
            }
        }
        Response::DeleteTopics(r) => out.extend(r.responses.iter().map(|t| t.error_code)),
        Response::DeleteRecords(r) => {
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::InitProducerId(r) => out.push(r.error_code),
        Response::OffsetForLeaderEpoch(r) => {
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::AddPartitionsToTxn(r) => {
            if_set(out, r.error_code);
            for txn in &r.results_by_transaction {
                for t in &txn.topic_results {
                    out.extend(
                        t.results_by_partition
                            .iter()
                            .map(|p| p.partition_error_code),
                    );
                }
            }
            for t in &r.results_by_topic_v3_and_below {
                out.extend(
                    t.results_by_partition
                        .iter()
                        .map(|p| p.partition_error_code),
                );
            }
        }
        Response::AddOffsetsToTxn(r) => out.push(r.error_code),
        Response::EndTxn(r) => out.push(r.error_code),
        Response::WriteTxnMarkers(r) => {
            for m in &r.markers {
                for t in &m.topics {
                    out.extend(t.partitions.iter().map(|p| p.error_code));
                }
            }
        }
        Response::TxnOffsetCommit(r) => {
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::DescribeAcls(r) => out.push(r.error_code),
        Response::CreateAcls(r) => out.extend(r.results.iter().map(|x| x.error_code)),
        Response::DeleteAcls(r) => {
            for f in &r.filter_results {
                out.push(f.error_code);
                out.extend(f.matching_acls.iter().map(|a| a.error_code));
            }
        }
        Response::DescribeConfigs(r) => out.extend(r.results.iter().map(|x| x.error_code)),
        Response::AlterConfigs(r) => out.extend(r.responses.iter().map(|x| x.error_code)),
        Response::AlterReplicaLogDirs(r) => {
            for t in &r.results {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::DescribeLogDirs(r) => {
            if_set(out, r.error_code);
            out.extend(r.results.iter().map(|x| x.error_code));
        }
        Response::SaslAuthenticate(r) => out.push(r.error_code),
        Response::CreatePartitions(r) => out.extend(r.results.iter().map(|x| x.error_code)),
        Response::CreateDelegationToken(r) => out.push(r.error_code),
        Response::RenewDelegationToken(r) => out.push(r.error_code),
        Response::ExpireDelegationToken(r) => out.push(r.error_code),
        Response::DescribeDelegationToken(r) => out.push(r.error_code),
        Response::DeleteGroups(r) => out.extend(r.results.iter().map(|x| x.error_code)),
        Response::ElectLeaders(r) => {
            if_set(out, r.error_code);
            for t in &r.replica_election_results {
                out.extend(t.partition_result.iter().map(|p| p.error_code));
            }
        }
        Response::IncrementalAlterConfigs(r) => {
            out.extend(r.responses.iter().map(|x| x.error_code))
        }
        Response::AlterPartitionReassignments(r) => {
            out.push(r.error_code);
            for t in &r.responses {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::ListPartitionReassignments(r) => out.push(r.error_code),
        Response::OffsetDelete(r) => {
            out.push(r.error_code);
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::DescribeClientQuotas(r) => out.push(r.error_code),
        Response::AlterClientQuotas(r) => out.extend(r.entries.iter().map(|x| x.error_code)),
        Response::DescribeUserScramCredentials(r) => {
            out.push(r.error_code);
            out.extend(r.results.iter().map(|x| x.error_code));
        }
        Response::AlterUserScramCredentials(r) => {
            out.extend(r.results.iter().map(|x| x.error_code))
        }
        Response::Vote(r) => {
            out.push(r.error_code);
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::BeginQuorumEpoch(r) => {
            out.push(r.error_code);
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::EndQuorumEpoch(r) => {
            out.push(r.error_code);
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::DescribeQuorum(r) => {
            out.push(r.error_code);
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::AlterPartition(r) => {
            out.push(r.error_code);
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::UpdateFeatures(r) => {
            out.push(r.error_code);
            out.extend(r.results.iter().map(|x| x.error_code));
        }
        Response::Envelope(r) => out.push(r.error_code),
        Response::FetchSnapshot(r) => {
            out.push(r.error_code);
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::DescribeCluster(r) => out.push(r.error_code),
        Response::DescribeProducers(r) => {
            for t in &r.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::BrokerRegistration(r) => out.push(r.error_code),
        Response::BrokerHeartbeat(r) => out.push(r.error_code),
        Response::UnregisterBroker(r) => out.push(r.error_code),
        Response::DescribeTransactions(r) => {
            out.extend(r.transaction_states.iter().map(|x| x.error_code))
        }
        Response::ListTransactions(r) => out.push(r.error_code),
        Response::AllocateProducerIds(r) => out.push(r.error_code),
        Response::ConsumerGroupHeartbeat(r) => out.push(r.error_code),
        Response::ConsumerGroupDescribe(r) => out.extend(r.groups.iter().map(|g| g.error_code)),
        Response::ControllerRegistration(r) => out.push(r.error_code),
        Response::GetTelemetrySubscriptions(r) => out.push(r.error_code),
        Response::PushTelemetry(r) => out.push(r.error_code),
        Response::AssignReplicasToDirs(r) => {
            out.push(r.error_code);
            for d in &r.directories {
                for t in &d.topics {
                    out.extend(t.partitions.iter().map(|p| p.error_code));
                }
            }
        }
        Response::ListConfigResources(r) => out.push(r.error_code),
        Response::DescribeTopicPartitions(r) => {
            for t in &r.topics {
                out.push(t.error_code);
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::ShareGroupHeartbeat(r) => out.push(r.error_code),
        Response::ShareGroupDescribe(r) => out.extend(r.groups.iter().map(|g| g.error_code)),
        Response::ShareFetch(r) => {
            out.push(r.error_code);
            for t in &r.responses {
                for p in &t.partitions {
                    out.push(p.error_code);
                    out.push(p.acknowledge_error_code);
                }
            }
        }
        Response::ShareAcknowledge(r) => {
            out.push(r.error_code);
            for t in &r.responses {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::AddRaftVoter(r) => out.push(r.error_code),
        Response::RemoveRaftVoter(r) => out.push(r.error_code),
        Response::UpdateRaftVoter(r) => out.push(r.error_code),
        Response::InitializeShareGroupState(r) => {
            for t in &r.results {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::ReadShareGroupState(r) => {
            for t in &r.results {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::WriteShareGroupState(r) => {
            for t in &r.results {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::DeleteShareGroupState(r) => {
            for t in &r.results {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::ReadShareGroupStateSummary(r) => {
            for t in &r.results {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::StreamsGroupHeartbeat(r) => out.push(r.error_code),
        Response::StreamsGroupDescribe(r) => out.extend(r.groups.iter().map(|g| g.error_code)),
        Response::DescribeShareGroupOffsets(r) => {
            for g in &r.groups {
                out.push(g.error_code);
                for t in &g.topics {
                    out.extend(t.partitions.iter().map(|p| p.error_code));
                }
            }
        }
        Response::AlterShareGroupOffsets(r) => {
            out.push(r.error_code);
            for t in &r.responses {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::DeleteShareGroupOffsets(r) => {
            out.push(r.error_code);
            out.extend(r.responses.iter().map(|t| t.error_code));
        }
    }
}
