use std::collections::BTreeMap;
use std::fs;

use skiff_protocol::Uuid;
use tempfile::TempDir;

use super::*;
use crate::config::{
    AlterConfigOp, AlterConfigOpType, CleanupPolicy, CompressionType, ConfigSource, ConfigType,
    TimestampType,
};

fn no_static() -> BTreeMap<String, String> {
    BTreeMap::new()
}

fn statics(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn open(dir: &TempDir) -> MetadataStore {
    MetadataStore::open(dir.path(), &no_static()).expect("open")
}

fn create(store: &mut MetadataStore, name: &str, partitions: i32) -> TopicInfo {
    store
        .create_topic(&NewTopic::new(name, partitions), false)
        .expect("create")
}

fn code<T: std::fmt::Debug>(result: Result<T>) -> i16 {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(e) => e.kafka_error_code().code(),
    }
}

fn entry<'a>(entries: &'a [ConfigEntry], name: &str) -> &'a ConfigEntry {
    entries
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} not described"))
}

fn synonyms(entry: &ConfigEntry) -> Vec<(String, Option<String>, ConfigSource)> {
    entry
        .synonyms
        .iter()
        .map(|s| (s.name.clone(), s.value.clone(), s.source))
        .collect()
}

fn syn(name: &str, value: &str, source: ConfigSource) -> (String, Option<String>, ConfigSource) {
    (name.to_owned(), Some(value.to_owned()), source)
}

// ----- Topics --------------------------------------------------------------------------------

#[test]
fn create_list_delete_reopen() {
    let dir = TempDir::new().expect("tempdir");
    let (a, b) = {
        let mut store = open(&dir);
        assert_eq!(store.topics().len(), 0);
        let a = create(&mut store, "orders", 3);
        let b = create(&mut store, "audit", 1);
        let c = create(&mut store, "scratch", 2);
        assert!(!a.id.is_zero() && !b.id.is_zero() && !c.id.is_zero());
        assert!(a.id != b.id && b.id != c.id && a.id != c.id);
        let names: Vec<_> = store.topics().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["audit", "orders", "scratch"]);
        let removed = store
            .delete_topic(TopicRef::Name("scratch"))
            .expect("delete");
        assert_eq!(removed, c);
        assert!(store.topic("scratch").is_none());
        assert!(store.topic_by_id(c.id).is_none());
        (a, b)
    };
    let store = open(&dir);
    let names: Vec<_> = store.topics().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["audit", "orders"]);
    assert_eq!(store.topic("orders"), Some(&a));
    assert_eq!(store.topic_by_id(b.id), Some(&b));
    assert_eq!(store.topic_id("orders"), Some(a.id));
    assert_eq!(store.topic("orders").map(|t| t.partitions), Some(3));
}

#[test]
fn a_deleted_topic_leaves_a_tombstone_until_its_data_is_forgotten() {
    let dir = TempDir::new().expect("tempdir");
    let gone = {
        let mut store = open(&dir);
        assert!(!store.found_on_disk(), "a new store has no file yet");
        let gone = create(&mut store, "gone", 2);
        store.delete_topic(TopicRef::Id(gone.id)).expect("delete");
        // The name is free again; the tombstone keeps the old ID.
        let again = create(&mut store, "gone", 1);
        assert_ne!(again.id, gone.id);
        gone
    };
    let mut store = open(&dir);
    assert!(store.found_on_disk());
    assert_eq!(store.deleted_topic(gone.id).map(|t| t.partitions), Some(2));
    assert_eq!(store.deleted_topics().len(), 1);
    store.forget_deleted_topic(gone.id).expect("forget");
    store
        .forget_deleted_topic(gone.id)
        .expect("forgetting twice is fine");
    drop(store);
    let store = open(&dir);
    assert!(store.deleted_topic(gone.id).is_none());
    assert_eq!(store.topic("gone").map(|t| t.partitions), Some(1));
}

#[test]
fn many_topics_are_created_with_one_write() {
    let dir = TempDir::new().expect("tempdir");
    let mut store = open(&dir);
    create(&mut store, "exists", 1);
    let news = [
        NewTopic::new("a", 2),
        NewTopic::new("exists", 1),
        NewTopic::new("bad/name", 1),
        NewTopic::new("b", -1),
        NewTopic::new("a", 1),
    ];
    let results = store.create_topics(&news);
    let codes: Vec<i16> = results
        .iter()
        .map(|r| {
            r.as_ref()
                .map_or_else(|e| e.kafka_error_code().code(), |_| 0)
        })
        .collect();
    assert_eq!(codes, [0, 36, 17, 0, 36]);
    let ids: Vec<Uuid> = results.iter().flatten().map(|t| t.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|id| !id.is_zero()) && ids[0] != ids[1]);
    drop(store);
    let store = open(&dir);
    let names: Vec<_> = store.topics().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "exists"]);
    assert_eq!(store.topic("b").map(|t| t.partitions), Some(1));
}

#[test]
fn a_lost_topic_is_restored_with_its_id() {
    let dir = TempDir::new().expect("tempdir");
    let id = Uuid::random().expect("random");
    let mut store = open(&dir);
    let restored = store.restore_topic("found", id, 3).expect("restore");
    assert_eq!((restored.id, restored.partitions), (id, 3));
    assert!(
        store
            .restore_topic("found", Uuid::random().expect("random"), 1)
            .is_err()
    );
    assert!(
        store.restore_topic("other", id, 1).is_err(),
        "the ID is taken"
    );
    assert!(store.restore_topic("zero", Uuid::ZERO, 1).is_err());
    assert!(
        store
            .restore_topic("bad/name", Uuid::random().expect("random"), 1)
            .is_err()
    );
    drop(store);
    assert_eq!(
        open(&dir).topic_by_id(id).map(|t| t.name.as_str()),
        Some("found")
    );
}

#[test]
fn ids_are_stable_across_reopens_and_new_after_recreate() {
    let dir = TempDir::new().expect("tempdir");
    let id = {
        let mut store = open(&dir);
        create(&mut store, "t", 1).id
    };
    for _ in 0..3 {
        let store = open(&dir);
        assert_eq!(store.topic_id("t"), Some(id));
    }
    let mut store = open(&dir);
    store.delete_topic(TopicRef::Id(id)).expect("delete by id");
    let again = create(&mut store, "t", 1);
    assert_ne!(again.id, id);
    assert_eq!(code(store.resolve(TopicRef::Id(id))), 100);
}

#[test]
fn create_errors() {
    let dir = TempDir::new().expect("tempdir");
    let mut store = open(&dir);
    create(&mut store, "a.b", 1);
    let cases: Vec<(NewTopic, i16)> = vec![
        (NewTopic::new("a.b", 1), 36),
        (NewTopic::new("a_b", 1), 17),
        (NewTopic::new("", 1), 17),
        (NewTopic::new("..", 1), 17),
        (NewTopic::new("bad name", 1), 17),
        (NewTopic::new("x", 0), 37),
        (NewTopic::new("x", -2), 37),
        (NewTopic::new("x", MAX_PARTITIONS_PER_TOPIC + 1), 44),
        (
            NewTopic {
                replication_factor: 3,
                ..NewTopic::new("x", 1)
            },
            38,
        ),
        (
            NewTopic {
                replication_factor: 0,
                ..NewTopic::new("x", 1)
            },
            38,
        ),
        (NewTopic::new("x", 1).config("no.such.key", "1"), 40),
        (NewTopic::new("x", 1).config("log.retention.ms", "1"), 40),
        (NewTopic::new("x", 1).config("retention.ms", "soon"), 40),
        (NewTopic::new("x", 1).config("segment.bytes", "1000"), 40),
        (
            NewTopic::new("x", 1).config("remote.storage.enable", "true"),
            40,
        ),
        (
            NewTopic::new("x", 1)
                .config("min.compaction.lag.ms", "10")
                .config("max.compaction.lag.ms", "5"),
            40,
        ),
    ];
    for (new, expected) in cases {
        assert_eq!(code(store.create_topic(&new, false)), expected, "{new:?}");
    }
    assert_eq!(store.topics().len(), 1);
}

#[test]
fn create_defaults_and_validate_only() {
    let dir = TempDir::new().expect("tempdir");
    let static_cfg = statics(&[("num.partitions", "4")]);
    let mut store = MetadataStore::open(dir.path(), &static_cfg).expect("open");
    let preview = store
        .create_topic(
            &NewTopic::new("v", -1).config("retention.ms", " 100 "),
            true,
        )
        .expect("validate");
    assert_eq!(preview.id, Uuid::ZERO);
    assert_eq!(preview.partitions, 4);
    assert_eq!(
        preview.configs.get("retention.ms").map(String::as_str),
        Some("100")
    );
    assert!(store.topic("v").is_none());
    drop(store);
    let mut store = MetadataStore::open(dir.path(), &static_cfg).expect("reopen");
    assert!(store.topic("v").is_none());
    let created = create(&mut store, "v", -1);
    assert_eq!(created.partitions, 4);

    let mut two = MetadataStore::open(
        TempDir::new().expect("tempdir").path(),
        &statics(&[("default.replication.factor", "2")]),
    )
    .expect("open");
    assert_eq!(code(two.create_topic(&NewTopic::new("x", 1), false)), 38);
}

#[test]
fn partitions_only_increase() {
    let dir = TempDir::new().expect("tempdir");
    let mut store = open(&dir);
    create(&mut store, "t", 2);
    assert_eq!(code(store.create_partitions("t", 1, false)), 37);
    assert_eq!(code(store.create_partitions("t", 2, false)), 37);
    assert_eq!(code(store.create_partitions("nope", 5, false)), 3);
    assert_eq!(
        code(store.create_partitions("t", MAX_PARTITIONS_PER_TOPIC + 1, false)),
        44
    );
    let preview = store.create_partitions("t", 9, true).expect("validate");
    assert_eq!(preview.partitions, 9);
    assert_eq!(store.topic("t").map(|t| t.partitions), Some(2));
    let id = store.topic_id("t");
    let grown = store.create_partitions("t", 5, false).expect("grow");
    assert_eq!(grown.partitions, 5);
    assert_eq!(Some(grown.id), id);
    drop(store);
    let store = open(&dir);
    assert_eq!(store.topic("t").map(|t| t.partitions), Some(5));
    assert_eq!(store.topic_id("t"), id);
}

#[test]
fn delete_errors() {
    let dir = TempDir::new().expect("tempdir");
    let mut store = open(&dir);
    assert_eq!(code(store.delete_topic(TopicRef::Name("nope"))), 3);
    assert_eq!(
        code(store.delete_topic(TopicRef::Id(Uuid::from_u128(42)))),
        100
    );
    assert_eq!(code(store.delete_topic(TopicRef::Id(Uuid::ZERO))), 100);

    let locked = TempDir::new().expect("tempdir");
    let mut store =
        MetadataStore::open(locked.path(), &statics(&[("delete.topic.enable", "false")]))
            .expect("open");
    create(&mut store, "t", 1);
    assert_eq!(code(store.delete_topic(TopicRef::Name("t"))), 73);
    assert!(store.topic("t").is_some());
}

// ----- Topic configs ---------------------------------------------------------------------------

#[test]
fn describe_defaults() {
    let dir = TempDir::new().expect("tempdir");
    let mut store = open(&dir);
    create(&mut store, "t", 1);
    let entries = store.describe_topic_configs("t").expect("describe");
    let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert_eq!(entries.len(), crate::config::topic_config_defs().len());

    let retention = entry(&entries, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("604800000"));
    assert_eq!(retention.source, ConfigSource::Default);
    assert!(retention.is_default && !retention.read_only && !retention.is_sensitive);
    assert_eq!(retention.config_type, ConfigType::Long);
    assert_eq!(
        synonyms(retention),
        [syn("log.retention.hours", "168", ConfigSource::Default)]
    );
    let policy = entry(&entries, "cleanup.policy");
    assert_eq!(policy.config_type, ConfigType::List);
    assert_eq!(
        synonyms(policy),
        [syn("log.cleanup.policy", "delete", ConfigSource::Default)]
    );
    let max = entry(&entries, "max.message.bytes");
    assert_eq!(max.value.as_deref(), Some("1048588"));
    assert_eq!(
        synonyms(max),
        [syn("message.max.bytes", "1048588", ConfigSource::Default)]
    );
    let throttled = entry(&entries, "leader.replication.throttled.replicas");
    assert_eq!(throttled.value.as_deref(), Some(""));
    assert!(throttled.synonyms.is_empty());
    assert_eq!(code(store.describe_topic_configs("nope")), 3);
}

#[test]
fn sources_and_synonym_order() {
    let dir = TempDir::new().expect("tempdir");
    let static_cfg = statics(&[
        ("log.retention.hours", "1"),
        ("log.segment.bytes", "2097152"),
    ]);
    let mut store = MetadataStore::open(dir.path(), &static_cfg).expect("open");
    create(&mut store, "t", 1);

    // Static hours only: converted, STATIC source.
    let entries = store.describe_topic_configs("t").expect("describe");
    let retention = entry(&entries, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("3600000"));
    assert_eq!(retention.source, ConfigSource::StaticBroker);
    assert_eq!(
        synonyms(retention),
        [
            syn("log.retention.hours", "1", ConfigSource::StaticBroker),
            syn("log.retention.hours", "168", ConfigSource::Default),
        ]
    );
    assert_eq!(
        entry(&entries, "segment.bytes").value.as_deref(),
        Some("2097152")
    );

    // Dynamic cluster default beats static; dynamic per-broker beats both.
    store
        .incremental_alter_broker_configs(
            BrokerConfigScope::ClusterDefault,
            &[AlterConfigOp::set("log.retention.ms", "5000")],
            false,
        )
        .expect("alter default");
    store
        .incremental_alter_broker_configs(
            BrokerConfigScope::ThisBroker,
            &[AlterConfigOp::set("log.retention.ms", "2000")],
            false,
        )
        .expect("alter broker");
    store
        .incremental_alter_topic_configs("t", &[AlterConfigOp::set("retention.ms", "1000")], false)
        .expect("alter topic");
    let entries = store.describe_topic_configs("t").expect("describe");
    let retention = entry(&entries, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("1000"));
    assert_eq!(retention.source, ConfigSource::DynamicTopic);
    assert!(!retention.is_default);
    assert_eq!(
        synonyms(retention),
        [
            syn("retention.ms", "1000", ConfigSource::DynamicTopic),
            syn("log.retention.ms", "2000", ConfigSource::DynamicBroker),
            syn(
                "log.retention.ms",
                "5000",
                ConfigSource::DynamicDefaultBroker
            ),
            syn("log.retention.hours", "1", ConfigSource::StaticBroker),
            syn("log.retention.hours", "168", ConfigSource::Default),
        ]
    );
    assert_eq!(
        store
            .effective_topic_config("t")
            .map(|c| c.retention_ms)
            .ok(),
        Some(1000)
    );

    // Peel the layers off one by one.
    store
        .incremental_alter_topic_configs("t", &[AlterConfigOp::delete("retention.ms")], false)
        .expect("delete topic override");
    assert_eq!(
        store
            .effective_topic_config("t")
            .map(|c| c.retention_ms)
            .ok(),
        Some(2000)
    );
    store
        .incremental_alter_broker_configs(
            BrokerConfigScope::ThisBroker,
            &[AlterConfigOp::delete("log.retention.ms")],
            false,
        )
        .expect("delete broker");
    let entries = store.describe_topic_configs("t").expect("describe");
    let retention = entry(&entries, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("5000"));
    assert_eq!(retention.source, ConfigSource::DynamicDefaultBroker);
    store
        .incremental_alter_broker_configs(
            BrokerConfigScope::ClusterDefault,
            &[AlterConfigOp::delete("log.retention.ms")],
            false,
        )
        .expect("delete default");
    assert_eq!(
        store
            .effective_topic_config("t")
            .map(|c| c.retention_ms)
            .ok(),
        Some(3_600_000)
    );
}

#[test]
fn alter_topic_configs() {
    let dir = TempDir::new().expect("tempdir");
    let mut store = open(&dir);
    create(&mut store, "t", 1);

    store
        .incremental_alter_topic_configs(
            "t",
            &[
                AlterConfigOp::set("retention.bytes", "1048576"),
                AlterConfigOp::set("message.timestamp.type", "LogAppendTime"),
                AlterConfigOp::append("cleanup.policy", "compact"),
            ],
            false,
        )
        .expect("alter");
    let topic = store.topic("t").expect("topic").clone();
    assert_eq!(
        topic.configs.get("cleanup.policy").map(String::as_str),
        Some("delete,compact")
    );
    let effective = store.effective_topic_config("t").expect("effective");
    assert_eq!(effective.retention_bytes, 1_048_576);
    assert_eq!(
        effective.message_timestamp_type,
        TimestampType::LogAppendTime
    );
    assert_eq!(
        effective.cleanup_policy,
        CleanupPolicy {
            delete: true,
            compact: true
        }
    );

    // Appending a present value changes nothing; subtracting removes it.
    store
        .incremental_alter_topic_configs(
            "t",
            &[AlterConfigOp::append("cleanup.policy", "delete")],
            false,
        )
        .expect("append again");
    store
        .incremental_alter_topic_configs(
            "t",
            &[AlterConfigOp::subtract("cleanup.policy", "delete")],
            false,
        )
        .expect("subtract");
    assert_eq!(
        store
            .topic("t")
            .and_then(|t| t.configs.get("cleanup.policy"))
            .map(String::as_str),
        Some("compact")
    );
    // Subtracting the last value would leave an empty policy.
    assert_eq!(
        code(store.incremental_alter_topic_configs(
            "t",
            &[AlterConfigOp::subtract("cleanup.policy", "compact")],
            false
        )),
        40
    );

    let before = store.topic("t").expect("topic").clone();
    let failures: Vec<(Vec<AlterConfigOp>, i16)> = vec![
        (vec![AlterConfigOp::append("retention.ms", "1")], 40),
        (vec![AlterConfigOp::subtract("segment.bytes", "1")], 40),
        (vec![AlterConfigOp::set("nope", "1")], 40),
        (vec![AlterConfigOp::delete("nope")], 40),
        (vec![AlterConfigOp::set("retention.ms", "-7")], 40),
        (
            vec![AlterConfigOp {
                name: "retention.ms".into(),
                op: AlterConfigOpType::Set,
                value: None,
            }],
            42,
        ),
        (
            vec![
                AlterConfigOp::set("retention.ms", "1"),
                AlterConfigOp::delete("retention.ms"),
            ],
            42,
        ),
        // One bad op: nothing is applied.
        (
            vec![
                AlterConfigOp::set("retention.ms", "1"),
                AlterConfigOp::set("segment.ms", "0"),
            ],
            40,
        ),
        (
            vec![
                AlterConfigOp::set("min.compaction.lag.ms", "100"),
                AlterConfigOp::set("max.compaction.lag.ms", "10"),
            ],
            40,
        ),
    ];
    for (ops, expected) in failures {
        assert_eq!(
            code(store.incremental_alter_topic_configs("t", &ops, false)),
            expected,
            "{ops:?}"
        );
    }
    assert_eq!(
        code(store.incremental_alter_topic_configs("nope", &[], false)),
        3
    );
    assert_eq!(store.topic("t"), Some(&before));

    // validate_only checks but writes nothing.
    store
        .incremental_alter_topic_configs("t", &[AlterConfigOp::set("retention.ms", "1")], true)
        .expect("validate");
    assert!(
        store
            .topic("t")
            .is_some_and(|t| !t.configs.contains_key("retention.ms"))
    );

    drop(store);
    let store = open(&dir);
    assert_eq!(store.topic("t"), Some(&before));
}

#[test]
fn append_starts_from_the_default() {
    let dir = TempDir::new().expect("tempdir");
    let mut store = open(&dir);
    create(&mut store, "t", 1);
    store
        .incremental_alter_topic_configs(
            "t",
            &[AlterConfigOp::append(
                "leader.replication.throttled.replicas",
                "0:1",
            )],
            false,
        )
        .expect("append");
    store
        .incremental_alter_topic_configs(
            "t",
            &[AlterConfigOp::append(
                "leader.replication.throttled.replicas",
                "1:1",
            )],
            false,
        )
        .expect("append");
    assert_eq!(
        store
            .topic("t")
            .and_then(|t| t.configs.get("leader.replication.throttled.replicas"))
            .map(String::as_str),
        Some("0:1,1:1")
    );
}

#[test]
fn effective_config_resolution() {
    let dir = TempDir::new().expect("tempdir");
    let static_cfg = statics(&[
        ("log.roll.hours", "2"),
        ("message.max.bytes", "2000000"),
        ("log.cleanup.policy", "compact"),
        ("compression.type", "zstd"),
        ("log.flush.scheduler.interval.ms", "3000"),
    ]);
    let mut store = MetadataStore::open(dir.path(), &static_cfg).expect("open");
    create(&mut store, "plain", 1);
    store
        .create_topic(
            &NewTopic::new("custom", 1)
                .config("segment.ms", "60000")
                .config("max.message.bytes", "100")
                .config("flush.ms", "10"),
            false,
        )
        .expect("create");

    let defaults = store.default_topic_config().expect("defaults");
    let plain = store.effective_topic_config("plain").expect("plain");
    assert_eq!(plain, defaults);
    assert_eq!(plain.segment_ms, 7_200_000);
    assert_eq!(plain.max_message_bytes, 2_000_000);
    assert_eq!(
        plain.cleanup_policy,
        CleanupPolicy {
            delete: false,
            compact: true
        }
    );
    assert_eq!(plain.compression_type, CompressionType::Zstd);
    assert_eq!(plain.flush_ms, 3000);
    assert_eq!(plain.retention_ms, 604_800_000);
    assert_eq!(plain.retention_bytes, -1);
    assert_eq!(plain.segment_bytes, 1 << 30);
    assert_eq!(plain.flush_messages, i64::MAX);
    assert_eq!(plain.min_insync_replicas, 1);
    assert_eq!(plain.message_timestamp_type, TimestampType::CreateTime);

    let custom = store.effective_topic_config("custom").expect("custom");
    assert_eq!(custom.segment_ms, 60_000);
    assert_eq!(custom.max_message_bytes, 100);
    assert_eq!(custom.flush_ms, 10);

    // log.flush.interval.ms outranks log.flush.scheduler.interval.ms.
    store
        .incremental_alter_broker_configs(
            BrokerConfigScope::ThisBroker,
            &[AlterConfigOp::set("log.flush.interval.ms", "500")],
            false,
        )
        .expect("alter");
    assert_eq!(
        store
            .effective_topic_config("plain")
            .map(|c| c.flush_ms)
            .ok(),
        Some(500)
    );
    let entries = store.describe_topic_configs("plain").expect("describe");
    assert_eq!(
        synonyms(entry(&entries, "flush.ms")),
        [
            syn("log.flush.interval.ms", "500", ConfigSource::DynamicBroker),
            syn(
                "log.flush.scheduler.interval.ms",
                "3000",
                ConfigSource::StaticBroker
            ),
            syn(
                "log.flush.scheduler.interval.ms",
                "9223372036854775807",
                ConfigSource::Default
            ),
        ]
    );
    assert_eq!(code(store.effective_topic_config("nope")), 3);
}

#[test]
fn preview_topic_configs_validates() {
    let dir = TempDir::new().expect("tempdir");
    let store = open(&dir);
    let entries = store
        .preview_topic_configs(&statics(&[("retention.ms", "10")]))
        .expect("preview");
    assert_eq!(
        entry(&entries, "retention.ms").source,
        ConfigSource::DynamicTopic
    );
    assert_eq!(
        code(store.preview_topic_configs(&statics(&[("x", "1")]))),
        40
    );
}

// ----- Broker configs ---------------------------------------------------------------------------

#[test]
fn broker_configs_describe_alter_persist() {
    let dir = TempDir::new().expect("tempdir");
    let static_cfg = statics(&[("log.retention.hours", "24"), ("num.partitions", "2")]);
    {
        let mut store = MetadataStore::open(dir.path(), &static_cfg).expect("open");
        let entries = store.describe_broker_configs(BrokerConfigScope::ThisBroker);
        assert_eq!(entries.len(), crate::config::broker_config_defs().len());
        let hours = entry(&entries, "log.retention.hours");
        assert!(hours.read_only);
        assert_eq!(hours.value.as_deref(), Some("24"));
        assert_eq!(hours.source, ConfigSource::StaticBroker);
        assert_eq!(
            synonyms(hours),
            [
                syn("log.retention.hours", "24", ConfigSource::StaticBroker),
                syn("log.retention.hours", "168", ConfigSource::Default),
            ]
        );
        let ms = entry(&entries, "log.retention.ms");
        assert!(!ms.read_only);
        assert_eq!(ms.value, None);
        assert_eq!(ms.source, ConfigSource::Default);
        assert!(ms.synonyms.is_empty());
        assert_eq!(
            entry(&entries, "num.partitions").value.as_deref(),
            Some("2")
        );
        assert!(entry(&entries, "num.partitions").read_only);

        // Read-only and unknown keys are refused.
        for ops in [
            vec![AlterConfigOp::set("log.retention.hours", "1")],
            vec![AlterConfigOp::set("num.partitions", "3")],
            vec![AlterConfigOp::set("no.such.key", "1")],
            vec![AlterConfigOp::set("retention.ms", "1")],
            vec![AlterConfigOp::set("log.segment.bytes", "12")],
        ] {
            assert_eq!(
                code(store.incremental_alter_broker_configs(
                    BrokerConfigScope::ThisBroker,
                    &ops,
                    false
                )),
                40,
                "{ops:?}"
            );
        }
        // Broker-level values must keep the topic defaults consistent.
        assert_eq!(
            code(store.incremental_alter_broker_configs(
                BrokerConfigScope::ThisBroker,
                &[
                    AlterConfigOp::set("log.cleaner.min.compaction.lag.ms", "100"),
                    AlterConfigOp::set("log.cleaner.max.compaction.lag.ms", "10"),
                ],
                false
            )),
            40
        );
        store
            .incremental_alter_broker_configs(
                BrokerConfigScope::ThisBroker,
                &[AlterConfigOp::set("log.retention.ms", "60000")],
                true,
            )
            .expect("validate only");
        assert_eq!(store.broker_value("log.retention.ms"), None);

        store
            .incremental_alter_broker_configs(
                BrokerConfigScope::ThisBroker,
                &[AlterConfigOp::set("log.retention.ms", "60000")],
                false,
            )
            .expect("alter");
        store
            .incremental_alter_broker_configs(
                BrokerConfigScope::ClusterDefault,
                &[
                    AlterConfigOp::set("log.retention.ms", "70000"),
                    AlterConfigOp::append("log.cleanup.policy", "compact"),
                ],
                false,
            )
            .expect("alter default");
    }
    let store = MetadataStore::open(dir.path(), &static_cfg).expect("reopen");
    assert_eq!(
        store.broker_value("log.retention.ms").as_deref(),
        Some("60000")
    );
    assert_eq!(
        store.default_topic_config().map(|c| c.retention_ms).ok(),
        Some(60000)
    );

    let entries = store.describe_broker_configs(BrokerConfigScope::ThisBroker);
    let ms = entry(&entries, "log.retention.ms");
    assert_eq!(ms.value.as_deref(), Some("60000"));
    assert_eq!(ms.source, ConfigSource::DynamicBroker);
    assert_eq!(
        synonyms(ms),
        [
            syn("log.retention.ms", "60000", ConfigSource::DynamicBroker),
            syn(
                "log.retention.ms",
                "70000",
                ConfigSource::DynamicDefaultBroker
            ),
            syn("log.retention.hours", "24", ConfigSource::StaticBroker),
            syn("log.retention.hours", "168", ConfigSource::Default),
        ]
    );

    let defaults = store.describe_broker_configs(BrokerConfigScope::ClusterDefault);
    let names: Vec<_> = defaults.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["log.cleanup.policy", "log.retention.ms"]);
    assert_eq!(
        entry(&defaults, "log.cleanup.policy").value.as_deref(),
        Some("delete,compact")
    );
    let ms = entry(&defaults, "log.retention.ms");
    assert_eq!(ms.source, ConfigSource::DynamicDefaultBroker);
    assert_eq!(
        synonyms(ms),
        [syn(
            "log.retention.ms",
            "70000",
            ConfigSource::DynamicDefaultBroker
        )]
    );
}

#[test]
fn static_configs_are_validated() {
    let dir = TempDir::new().expect("tempdir");
    for bad in [
        statics(&[("no.such.key", "1")]),
        statics(&[("num.partitions", "0")]),
        statics(&[("log.cleanup.policy", "shred")]),
        statics(&[("retention.ms", "1")]),
    ] {
        let result = MetadataStore::open(dir.path(), &bad);
        assert!(
            matches!(result, Err(MetaError::InvalidStaticConfig(_))),
            "{bad:?}: {result:?}"
        );
    }
}

// ----- Durability -------------------------------------------------------------------------------

fn committed_dir() -> (TempDir, TopicInfo) {
    let dir = TempDir::new().expect("tempdir");
    let mut store = open(&dir);
    let topic = create(&mut store, "kept", 2);
    drop(store);
    (dir, topic)
}

#[test]
fn corrupt_files_are_clear_errors() {
    let (dir, _) = committed_dir();
    let path = dir.path().join(METADATA_FILE);
    let good = fs::read(&path).expect("read");

    let mut flipped = good.clone();
    if let Some(last) = flipped.last_mut() {
        *last ^= 0x20;
    }
    let mut wrong_magic = good.clone();
    wrong_magic[0] = b'X';
    let variants: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("header only", good[..persist::HEADER_LEN].to_vec()),
        ("truncated", good[..good.len() - 3].to_vec()),
        ("bit flip", flipped),
        ("wrong magic", wrong_magic),
        ("garbage", vec![0xff; 100]),
    ];
    for (what, bytes) in variants {
        fs::write(&path, &bytes).expect("write");
        let result = MetadataStore::open(dir.path(), &no_static());
        assert!(
            matches!(result, Err(MetaError::Corrupt { .. })),
            "{what}: {result:?}"
        );
    }
    let mut future = good.clone();
    future[8] = 2;
    fs::write(&path, &future).expect("write");
    assert!(matches!(
        MetadataStore::open(dir.path(), &no_static()),
        Err(MetaError::UnsupportedVersion { found: 2, .. })
    ));
    fs::write(&path, &good).expect("restore");
    assert!(MetadataStore::open(dir.path(), &no_static()).is_ok());
}

#[test]
fn well_framed_but_inconsistent_snapshots_are_rejected() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join(METADATA_FILE);
    let id = Uuid::from_u128(0x1234).to_string();
    let snapshots = [
        "not json".to_owned(),
        r#"{"topics":[{"name":"bad name","id":"ID","partitions":1}]}"#.replace("ID", &id),
        r#"{"topics":[{"name":"t","id":"AAAAAAAAAAAAAAAAAAAAAA","partitions":1}]}"#.to_owned(),
        r#"{"topics":[{"name":"t","id":"short","partitions":1}]}"#.to_owned(),
        r#"{"topics":[{"name":"t","id":"ID","partitions":0}]}"#.replace("ID", &id),
        r#"{"topics":[{"name":"t","id":"ID","partitions":1},{"name":"u","id":"ID","partitions":1}]}"#
            .replace("ID", &id),
        r#"{"topics":[{"name":"t","id":"ID","partitions":1,"configs":{"bogus":"1"}}]}"#
            .replace("ID", &id),
        r#"{"topics":[],"broker_configs":{"log.retention.ms":"x"}}"#.to_owned(),
    ];
    for snapshot in snapshots {
        fs::write(&path, persist::encode(snapshot.as_bytes())).expect("write");
        let result = MetadataStore::open(dir.path(), &no_static());
        assert!(
            matches!(result, Err(MetaError::Corrupt { .. })),
            "{snapshot}: {result:?}"
        );
    }
}

#[test]
fn crash_leftover_temp_files_are_ignored() {
    let (dir, topic) = committed_dir();
    let path = dir.path().join(METADATA_FILE);
    let temp = persist::temp_path(&path);
    let good = fs::read(&path).expect("read");

    // A crash before the rename leaves a partial or complete temp file; neither is committed.
    let leftovers = [
        Vec::new(),
        good[..good.len() / 2].to_vec(),
        vec![0xAB; 10],
        persist::encode(br#"{"topics":[]}"#),
    ];
    for leftover in leftovers {
        fs::write(&temp, &leftover).expect("write temp");
        let store = open(&dir);
        assert_eq!(store.topic("kept"), Some(&topic));
        assert_eq!(store.topics().len(), 1);
        assert!(!temp.exists(), "stale temp file removed");
    }
}

#[test]
fn a_failed_write_changes_nothing() {
    let (dir, topic) = committed_dir();
    let path = dir.path().join(METADATA_FILE);
    let mut store = open(&dir);
    // A directory where the temp file must go makes the write fail.
    fs::create_dir(persist::temp_path(&path)).expect("mkdir");
    let result = store.create_topic(&NewTopic::new("new", 1), false);
    assert!(matches!(result, Err(MetaError::Io { .. })), "{result:?}");
    // KAFKA_STORAGE_ERROR, with a message saying what failed.
    let error = result.err();
    assert_eq!(
        error.as_ref().map(|e| e.kafka_error_code().code()),
        Some(56)
    );
    let message = error.and_then(|e| e.client_message()).unwrap_or_default();
    assert!(
        message.starts_with("storage error while creating"),
        "{message}"
    );
    assert!(store.topic("new").is_none());
    assert!(store.delete_topic(TopicRef::Name("kept")).is_err());
    assert_eq!(store.topic("kept"), Some(&topic));
    fs::remove_dir(persist::temp_path(&path)).expect("rmdir");
    create(&mut store, "new", 1);
    drop(store);
    let store = open(&dir);
    assert_eq!(store.topics().len(), 2);
}

#[test]
fn the_directory_is_locked() {
    let dir = TempDir::new().expect("tempdir");
    let store = open(&dir);
    let second = MetadataStore::open(dir.path(), &no_static());
    assert!(matches!(second, Err(MetaError::Locked(_))), "{second:?}");
    drop(store);
    assert!(MetadataStore::open(dir.path(), &no_static()).is_ok());
}
