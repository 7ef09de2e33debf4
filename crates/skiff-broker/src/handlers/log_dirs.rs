//! DescribeLogDirs: the data directory, the size of each partition in it, and the space of its
//! file system.
//!
//! Kafka takes a whole log directory offline when a write in it fails; Skiff takes only the
//! partition the fault hit (a failed fdatasync or segment write). Such a partition is answered as a log
//! directory of its own, its partition directory, with KAFKA_STORAGE_ERROR (and the partition
//! named in it), so tools that list offline log directories show what failed; the data
//! directory's entry lists the partitions that still serve.

use std::collections::BTreeMap;
use std::path::Path;

use skiff_protocol::generated::describe_log_dirs_request::DescribeLogDirsRequest;
use skiff_protocol::generated::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResponse, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use skiff_protocol::{Response, error_codes};

use super::{RequestContext, bs};
use crate::partition::{Partition, Topic};
use crate::state::Broker;

pub fn handle(ctx: &RequestContext, request: DescribeLogDirsRequest) -> Response {
    // Kafka answers a principal that may not DESCRIBE the cluster with no directories (and, from
    // v3, CLUSTER_AUTHORIZATION_FAILED).
    if !ctx.authorized_on_cluster(skiff_auth::acl::AclOperation::Describe) {
        return Response::DescribeLogDirs(DescribeLogDirsResponse {
            error_code: error_codes::CLUSTER_AUTHORIZATION_FAILED,
            ..Default::default()
        });
    }
    let broker = &ctx.broker;
    let data_dir = broker.config.data_dir.as_path();
    let data_dir = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    let mut online: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    let mut results = Vec::new();
    for (topic, partition) in wanted(broker, request.topics.as_deref()) {
        let size = i64::try_from(partition.size_in_bytes()).unwrap_or(i64::MAX);
        let described = DescribeLogDirsPartition {
            partition_index: partition.index,
            partition_size: size,
            // A leader's log is never behind itself (Kafka: max(high watermark - end, 0)).
            offset_lag: 0,
            is_future_key: false,
            ..Default::default()
        };
        if partition.is_offline() {
            let dir = data_dir.join(crate::partition_dirs::dir_name(
                &topic.info.name,
                partition.index,
            ));
            results.push(DescribeLogDirsResult {
                error_code: error_codes::KAFKA_STORAGE_ERROR,
                log_dir: bs(dir.display().to_string()),
                topics: vec![DescribeLogDirsTopic {
                    name: bs(topic.info.name.clone()),
                    partitions: vec![described],
                    ..Default::default()
                }],
                ..Default::default()
            });
        } else {
            online
                .entry(topic.info.name.clone())
                .or_default()
                .push(described);
        }
    }
    let (total_bytes, usable_bytes) = space(&data_dir);
    results.insert(
        0,
        DescribeLogDirsResult {
            error_code: error_codes::NONE,
            log_dir: bs(data_dir.display().to_string()),
            topics: online
                .into_iter()
                .map(|(name, partitions)| DescribeLogDirsTopic {
                    name: bs(name),
                    partitions,
                    ..Default::default()
                })
                .collect(),
            total_bytes,
            usable_bytes,
            ..Default::default()
        },
    );
    Response::DescribeLogDirs(DescribeLogDirsResponse {
        error_code: error_codes::NONE,
        results,
        ..Default::default()
    })
}

/// The partitions asked for: all of every topic when `topics` is null, else those listed that
/// exist (Kafka leaves out what the broker does not host, without an error).
fn wanted(
    broker: &Broker,
    topics: Option<&[skiff_protocol::generated::describe_log_dirs_request::DescribableLogDirTopic]>,
) -> Vec<(std::sync::Arc<Topic>, std::sync::Arc<Partition>)> {
    let mut out = Vec::new();
    match topics {
        None => {
            for topic in broker.all_topics() {
                for partition in &topic.partitions {
                    out.push((topic.clone(), partition.clone()));
                }
            }
        }
        Some(asked) => {
            let mut seen = std::collections::HashSet::new();
            for entry in asked {
                let Some(topic) = broker.topic_by_name(&entry.topic) else {
                    continue;
                };
                let mut indexes = entry.partitions.clone();
                indexes.sort_unstable();
                indexes.dedup();
                for index in indexes {
                    let found = usize::try_from(index)
                        .ok()
                        .and_then(|i| topic.partitions.get(i));
                    if let Some(partition) = found
                        && seen.insert((topic.info.id, index))
                    {
                        out.push((topic.clone(), partition.clone()));
                    }
                }
            }
        }
    }
    out
}

/// The total and usable bytes of the file system holding `dir` (-1 each when unknown).
fn space(dir: &Path) -> (i64, i64) {
    match rustix::fs::statvfs(dir) {
        Ok(s) => {
            let bytes = |blocks: u64| {
                i64::try_from(u128::from(blocks) * u128::from(s.f_frsize)).unwrap_or(i64::MAX)
            };
            (bytes(s.f_blocks), bytes(s.f_bavail))
        }
        Err(_) => (-1, -1),
    }
}
