//! The table of request versions Skiff serves: exactly what ApiVersions advertises. Connections
//! check it before decoding a request; handlers never see an unsupported version.

use skiff_protocol::ApiKey;

/// The request versions Skiff serves per API: exactly what ApiVersions advertises (less the
/// telemetry APIs when `telemetry.enable = false` and the share group APIs unless
/// `group.share.enable = true`, see `Broker::serves`). An API not listed here
/// is not advertised, and a request for it gets UNSUPPORTED_VERSION.
pub fn supported_versions(api_key: ApiKey) -> Option<(i16, i16)> {
    Some(match api_key {
        ApiKey::Produce => (3, 12),
        ApiKey::Fetch => (4, 17),
        ApiKey::ListOffsets => (1, 10),
        ApiKey::OffsetForLeaderEpoch => (2, 4),
        ApiKey::Metadata => (0, 13),
        ApiKey::DescribeTopicPartitions => (0, 0),
        ApiKey::OffsetCommit => (2, 10),
        ApiKey::OffsetFetch => (1, 10),
        ApiKey::FindCoordinator => (0, 6),
        ApiKey::JoinGroup => (0, 9),
        ApiKey::Heartbeat => (0, 4),
        ApiKey::LeaveGroup => (0, 5),
        ApiKey::SyncGroup => (0, 5),
        ApiKey::DescribeGroups => (0, 6),
        ApiKey::ListGroups => (0, 5),
        ApiKey::DeleteGroups => (0, 2),
        ApiKey::OffsetDelete => (0, 0),
        ApiKey::ConsumerGroupHeartbeat => (0, 1),
        ApiKey::ConsumerGroupDescribe => (0, 1),
        ApiKey::ShareGroupHeartbeat => (1, 1),
        ApiKey::ShareGroupDescribe => (1, 1),
        ApiKey::ShareFetch => (1, 2),
        ApiKey::ShareAcknowledge => (1, 2),
        ApiKey::DescribeShareGroupOffsets => (0, 1),
        ApiKey::AlterShareGroupOffsets => (0, 0),
        ApiKey::DeleteShareGroupOffsets => (0, 0),
        ApiKey::GetTelemetrySubscriptions => (0, 0),
        ApiKey::PushTelemetry => (0, 0),
        ApiKey::ListConfigResources => (0, 1),
        ApiKey::ApiVersions => (0, 4),
        ApiKey::CreateTopics => (2, 7),
        ApiKey::DeleteTopics => (1, 6),
        ApiKey::DeleteRecords => (0, 2),
        ApiKey::InitProducerId => (0, 5),
        ApiKey::DescribeConfigs => (1, 4),
        ApiKey::CreatePartitions => (0, 3),
        ApiKey::AlterConfigs => (0, 2),
        ApiKey::IncrementalAlterConfigs => (0, 1),
        ApiKey::DescribeCluster => (0, 2),
        ApiKey::DescribeLogDirs => (1, 4),
        ApiKey::AddPartitionsToTxn => (0, 3),
        ApiKey::AddOffsetsToTxn => (0, 3),
        ApiKey::EndTxn => (0, 3),
        ApiKey::TxnOffsetCommit => (0, 3),
        ApiKey::DescribeProducers => (0, 0),
        ApiKey::DescribeTransactions => (0, 0),
        ApiKey::ListTransactions => (0, 1),
        ApiKey::SaslHandshake => (0, 1),
        ApiKey::SaslAuthenticate => (0, 2),
        ApiKey::DescribeUserScramCredentials => (0, 0),
        ApiKey::AlterUserScramCredentials => (0, 0),
        ApiKey::CreateAcls => (0, 3),
        ApiKey::DescribeAcls => (0, 3),
        ApiKey::DeleteAcls => (0, 3),
        _ => return None,
    })
}
