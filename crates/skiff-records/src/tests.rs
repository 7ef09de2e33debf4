//! Tests across the batch, record and builder modules, including a hand-laid batch checked
//! against Kafka's layout and an independent encoder (the `kafka-protocol` crate).

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use crate::*;

/// Lays out one single-record batch field by field, as `DefaultRecordBatch` documents it.
fn hand_made_batch() -> Vec<u8> {
    // Record: key "k", value "value", one header ("h", "v").
    let record_body: Vec<u8> = [
        &[0x00][..],   // attributes
        &[0x00],       // timestamp delta 0
        &[0x00],       // offset delta 0
        &[0x02, b'k'], // key length 1, key
        &[0x0a],       // value length 5
        b"value",
        &[0x02],       // one header
        &[0x02, b'h'], // header key
        &[0x02, b'v'], // header value
    ]
    .concat();
    let mut records = vec![(record_body.len() as u8) << 1];
    records.extend_from_slice(&record_body);

    let mut crc_covered = Vec::new();
    crc_covered.extend_from_slice(&0x0010_i16.to_be_bytes()); // attributes: transactional
    crc_covered.extend_from_slice(&0_i32.to_be_bytes()); // last offset delta
    crc_covered.extend_from_slice(&1_000_i64.to_be_bytes()); // base timestamp
    crc_covered.extend_from_slice(&1_000_i64.to_be_bytes()); // max timestamp
    crc_covered.extend_from_slice(&42_i64.to_be_bytes()); // producer id
    crc_covered.extend_from_slice(&3_i16.to_be_bytes()); // producer epoch
    crc_covered.extend_from_slice(&7_i32.to_be_bytes()); // base sequence
    crc_covered.extend_from_slice(&1_i32.to_be_bytes()); // record count
    crc_covered.extend_from_slice(&records);

    let mut batch = Vec::new();
    batch.extend_from_slice(&100_i64.to_be_bytes()); // base offset
    let batch_length = 4 + 1 + 4 + crc_covered.len();
    batch.extend_from_slice(&(batch_length as i32).to_be_bytes());
    batch.extend_from_slice(&5_i32.to_be_bytes()); // partition leader epoch
    batch.push(2); // magic
    batch.extend_from_slice(&crc32c::crc32c(&crc_covered).to_be_bytes());
    batch.extend_from_slice(&crc_covered);
    batch
}

#[test]
fn hand_made_batch_parses_with_every_field() {
    let bytes = Bytes::from(hand_made_batch());
    let batch = RecordBatch::parse(bytes.clone()).unwrap();
    assert_eq!(batch.base_offset(), 100);
    assert_eq!(batch.batch_length() as usize, bytes.len() - LOG_OVERHEAD);
    assert_eq!(batch.partition_leader_epoch(), 5);
    assert_eq!(batch.magic(), 2);
    assert_eq!(batch.compression(), Compression::None);
    assert_eq!(batch.timestamp_type(), TimestampType::CreateTime);
    assert!(batch.is_transactional());
    assert!(!batch.is_control());
    assert_eq!(batch.producer_id(), 42);
    assert_eq!(batch.producer_epoch(), 3);
    assert_eq!(batch.base_sequence(), 7);
    assert_eq!(batch.record_count(), 1);
    assert_eq!(batch.last_offset(), 100);
    assert_eq!(batch.next_offset(), 101);
    let records: Vec<Record> = batch.records().unwrap().collect::<Result<_>>().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].offset, 100);
    assert_eq!(records[0].timestamp, 1_000);
    assert_eq!(records[0].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(records[0].value.as_deref(), Some(&b"value"[..]));
    let headers: Vec<Header> = records[0].headers.iter().collect();
    assert_eq!(headers.len(), 1);
    assert_eq!(&headers[0].key[..], b"h");
    assert_eq!(headers[0].value.as_deref(), Some(&b"v"[..]));
}

#[test]
fn unchecked_prefix_is_what_the_in_place_rewrite_writes() {
    let mut rewritten = hand_made_batch();
    let mut batch = RecordBatchMut::new(&mut rewritten).unwrap();
    batch.set_base_offset(123_456_789);
    batch.set_partition_leader_epoch(77);
    let header = *batch.header();
    let prefix = header.unchecked_prefix();
    assert_eq!(prefix[..], rewritten[..UNCHECKED_PREFIX_LEN]);
    // Prefix + the untouched rest of the original = the rewritten batch, still valid.
    let original = hand_made_batch();
    let spliced = [&prefix[..], &original[UNCHECKED_PREFIX_LEN..]].concat();
    assert_eq!(spliced, rewritten);
    assert_eq!(
        RecordBatch::parse(Bytes::from(spliced))
            .unwrap()
            .base_offset(),
        123_456_789
    );
}

#[test]
fn builder_matches_hand_made_layout() {
    let mut builder = RecordBatchBuilder::new()
        .base_offset(100)
        .partition_leader_epoch(5)
        .producer(42, 3, 7)
        .transactional(true);
    builder
        .append(1_000, Some(b"k"), Some(b"value"), &[(b"h", Some(b"v"))])
        .unwrap();
    let batch = builder.build().unwrap();
    assert_eq!(&batch.as_bytes()[..], &hand_made_batch()[..]);
}

#[test]
fn agrees_with_kafka_protocol_crate_both_ways() {
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records as kp;

    let mut headers = kafka_protocol::indexmap::IndexMap::new();
    headers.insert(
        StrBytes::from_static_str("trace"),
        Some(Bytes::from_static(b"abc")),
    );
    headers.insert(StrBytes::from_static_str("none"), None);
    let theirs: Vec<kp::Record> = (0..3)
        .map(|i| kp::Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 9,
            producer_id: 77,
            producer_epoch: 1,
            timestamp_type: kp::TimestampType::Creation,
            offset: 500 + i,
            sequence: 10 + i as i32,
            timestamp: 2_000 + i * 10,
            key: (i != 1).then(|| Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(vec![i as u8; 100])),
            headers: headers.clone(),
        })
        .collect();
    let mut encoded = BytesMut::new();
    kp::RecordBatchEncoder::encode(
        &mut encoded,
        &theirs,
        &kp::RecordEncodeOptions {
            version: 2,
            compression: kp::Compression::None,
        },
    )
    .unwrap();

    let batch = RecordBatch::parse(encoded.freeze()).unwrap();
    assert_eq!(batch.base_offset(), 500);
    assert_eq!(batch.last_offset(), 502);
    assert_eq!(batch.producer_id(), 77);
    assert_eq!(batch.base_sequence(), 10);
    assert_eq!(batch.max_timestamp(), 2_020);
    let ours: Vec<Record> = batch.records().unwrap().collect::<Result<_>>().unwrap();
    for (mine, theirs) in ours.iter().zip(&theirs) {
        assert_eq!(mine.offset, theirs.offset);
        assert_eq!(mine.timestamp, theirs.timestamp);
        assert_eq!(mine.key, theirs.key);
        assert_eq!(mine.value, theirs.value);
        assert_eq!(mine.headers.len(), 2);
    }

    let mut builder = RecordBatchBuilder::new()
        .base_offset(500)
        .producer(77, 1, 10);
    for record in &theirs {
        let headers: Vec<(&[u8], Option<&[u8]>)> = record
            .headers
            .iter()
            .map(|(key, value)| (key.as_bytes(), value.as_deref()))
            .collect();
        builder
            .append(
                record.timestamp,
                record.key.as_deref(),
                record.value.as_deref(),
                &headers,
            )
            .unwrap();
    }
    let mine = builder.build().unwrap().into_bytes();
    let decoded = kp::RecordBatchDecoder::decode(&mut mine.clone()).unwrap();
    assert_eq!(decoded.records.len(), 3);
    for (decoded, original) in decoded.records.iter().zip(&theirs) {
        assert_eq!(decoded.offset, original.offset);
        assert_eq!(decoded.timestamp, original.timestamp);
        assert_eq!(decoded.key, original.key);
        assert_eq!(decoded.value, original.value);
        assert_eq!(decoded.headers, original.headers);
        assert_eq!(decoded.sequence, original.sequence);
    }
}

fn sample_batch(records: usize) -> Bytes {
    let mut builder = RecordBatchBuilder::new();
    for i in 0..records {
        builder
            .append(
                1_000 + i as i64,
                None,
                Some(format!("v{i}").as_bytes()),
                &[],
            )
            .unwrap();
    }
    builder.build().unwrap().into_bytes()
}

#[test]
fn record_set_splits_and_reports_partial_tail() {
    let one = sample_batch(2);
    let two = sample_batch(3);
    let mut set = BytesMut::new();
    set.extend_from_slice(&one);
    set.extend_from_slice(&two);
    let whole = set.clone().freeze();
    assert_eq!(
        RecordBatches::parse_produce(whole.clone()).unwrap().len(),
        2
    );

    for cut in 1..two.len() {
        let partial = whole.slice(..one.len() + cut);
        let err = RecordBatches::parse_produce(partial.clone()).unwrap_err();
        assert!(
            matches!(err, RecordsError::PartialBatch { .. }),
            "cut {cut}: {err}"
        );
        let (batches, tail) = RecordBatches::parse_fetch(partial).unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!(tail.unwrap().len(), cut);
    }
    let (batches, tail) = RecordBatches::parse_fetch(whole).unwrap();
    assert_eq!((batches.len(), tail), (2, None));
    assert_eq!(
        RecordBatches::parse_produce(Bytes::new()),
        Err(RecordsError::Empty)
    );
}

#[test]
fn corruption_is_detected() {
    let good = sample_batch(3).to_vec();
    // Flip a bit inside the CRC range.
    let mut bad = good.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(matches!(
        RecordBatch::parse(bad.into()),
        Err(RecordsError::CrcMismatch { .. })
    ));
    // Legacy magic.
    let mut legacy = good.clone();
    legacy[16] = 1;
    assert_eq!(
        RecordBatch::parse(legacy.into()),
        Err(RecordsError::UnsupportedMagic { magic: 1 })
    );
    // Length below the header size.
    let mut short = good.clone();
    short[8..12].copy_from_slice(&10_i32.to_be_bytes());
    assert_eq!(
        RecordBatch::parse(short.into()),
        Err(RecordsError::InvalidBatchLength { length: 10 })
    );
    // Negative length.
    let mut negative = good.clone();
    negative[8..12].copy_from_slice(&(-5_i32).to_be_bytes());
    assert!(matches!(
        RecordBatch::parse(negative.into()),
        Err(RecordsError::InvalidBatchLength { length: -5 })
    ));
    // Huge length must not allocate: it is just a partial batch.
    let mut huge = good;
    huge[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    assert!(matches!(
        RecordBatch::parse(huge.into()),
        Err(RecordsError::PartialBatch { .. })
    ));
}

/// Re-signs a mutated batch so the checks after the CRC are reached.
fn resign(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

#[test]
fn header_inconsistencies_are_rejected() {
    let good = sample_batch(3).to_vec();
    let cases: [(usize, &[u8]); 4] = [
        (57, &(-1_i32).to_be_bytes()),  // negative count
        (23, &(-1_i32).to_be_bytes()),  // negative last offset delta
        (23, &0_i32.to_be_bytes()),     // delta smaller than count - 1
        (57, &1_000_i32.to_be_bytes()), // count larger than payload
    ];
    for (at, value) in cases {
        let mut bad = good.clone();
        bad[at..at + value.len()].copy_from_slice(value);
        resign(&mut bad);
        assert!(
            matches!(
                RecordBatch::parse(bad.into()),
                Err(RecordsError::InvalidBatch(_))
            ),
            "field at {at}"
        );
    }
    let mut codec = good.clone();
    codec[22] |= 0x07;
    resign(&mut codec);
    assert_eq!(
        RecordBatch::parse(codec.into()),
        Err(RecordsError::UnknownCompression(7))
    );
    // Compaction-style gap: 3 records spread over 5 offsets is a valid batch but not a produce.
    let mut gapped = good;
    gapped[23..27].copy_from_slice(&4_i32.to_be_bytes());
    resign(&mut gapped);
    let batch = RecordBatch::parse(gapped.into()).unwrap();
    assert!(batch.validate_for_produce().is_err());
}

#[test]
fn record_level_corruption_fails_iteration_only() {
    let mut bytes = sample_batch(2).to_vec();
    // Claim 3 records while only 2 are encoded but the payload could hold 3 minimal ones.
    let pad = [0u8; 7];
    bytes.extend_from_slice(&pad);
    let length = (bytes.len() - LOG_OVERHEAD) as i32;
    bytes[8..12].copy_from_slice(&length.to_be_bytes());
    resign(&mut bytes);
    let batch = RecordBatch::parse(bytes.into()).unwrap();
    let results: Vec<Result<Record>> = batch.records().unwrap().collect();
    assert_eq!(results.len(), 3);
    assert!(results[..2].iter().all(Result::is_ok));
    assert!(results[2].is_err());
}

#[test]
fn in_place_rewrites_keep_batch_valid() {
    let mut bytes = sample_batch(4).to_vec();
    let mut batch = RecordBatchMut::new(&mut bytes).unwrap();
    batch.set_base_offset(1_000);
    batch.set_partition_leader_epoch(12);
    batch.set_log_append_time(99_999);
    let parsed = RecordBatch::parse(bytes.into()).unwrap();
    assert_eq!(parsed.base_offset(), 1_000);
    assert_eq!(parsed.last_offset(), 1_003);
    assert_eq!(parsed.partition_leader_epoch(), 12);
    assert_eq!(parsed.timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!(parsed.max_timestamp(), 99_999);
    for (i, record) in parsed.records().unwrap().enumerate() {
        let record = record.unwrap();
        assert_eq!(record.offset, 1_000 + i as i64);
        assert_eq!(record.timestamp, 99_999);
    }
}

#[test]
fn split_all_walks_every_batch() {
    let mut set = sample_batch(1).to_vec();
    set.extend_from_slice(&sample_batch(2));
    let mut next = 10;
    for batch in RecordBatchMut::split_all(&mut set) {
        let mut batch = batch.unwrap();
        batch.set_base_offset(next);
        next = batch.header().next_offset();
    }
    assert_eq!(next, 13);
    let offsets: Vec<i64> = RecordBatches::new(set.into())
        .map(|batch| batch.unwrap().base_offset())
        .collect();
    assert_eq!(offsets, [10, 11]);

    let mut partial = sample_batch(1).to_vec();
    partial.pop();
    let results: Vec<_> = RecordBatchMut::split_all(&mut partial).collect();
    assert!(matches!(
        results[..],
        [Err(RecordsError::PartialBatch { .. })]
    ));
}

#[test]
fn compressed_batches_report_a_typed_error() {
    let mut bytes = sample_batch(1).to_vec();
    bytes[22] |= 0x01; // gzip
    resign(&mut bytes);
    let batch = RecordBatch::parse(bytes.into()).unwrap();
    assert_eq!(batch.compression(), Compression::Gzip);
    assert_eq!(
        batch.records().unwrap_err(),
        RecordsError::CompressedBatch(Compression::Gzip)
    );
}

type Input = (
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
);

fn record_input() -> impl Strategy<Value = Input> {
    (
        any::<i64>().prop_map(|ts| ts >> 2),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
        proptest::collection::vec(
            (
                "[a-z\u{e9}]{0,8}",
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
            ),
            0..4,
        ),
    )
}

proptest! {
    #[test]
    fn builder_round_trips(
        base_offset in 0..i64::MAX / 2,
        producer in (any::<i64>(), any::<i16>(), any::<i32>()),
        inputs in proptest::collection::vec(record_input(), 1..20),
    ) {
        let mut builder = RecordBatchBuilder::new()
            .base_offset(base_offset)
            .producer(producer.0, producer.1, producer.2);
        for (ts, key, value, headers) in &inputs {
            let headers: Vec<(&[u8], Option<&[u8]>)> = headers
                .iter()
                .map(|(k, v)| (k.as_bytes(), v.as_deref()))
                .collect();
            builder.append(*ts, key.as_deref(), value.as_deref(), &headers).unwrap();
        }
        let batch = RecordBatch::parse(builder.build().unwrap().into_bytes()).unwrap();
        prop_assert_eq!(batch.record_count() as usize, inputs.len());
        prop_assert_eq!(batch.last_offset(), base_offset + inputs.len() as i64 - 1);
        prop_assert_eq!(batch.max_timestamp(), inputs.iter().map(|i| i.0).max().unwrap());
        prop_assert_eq!(batch.producer_id(), producer.0);
        let records: Vec<Record> = batch.records().unwrap().collect::<Result<_>>().unwrap();
        prop_assert_eq!(records.len(), inputs.len());
        for (i, (record, (ts, key, value, headers))) in records.iter().zip(&inputs).enumerate() {
            prop_assert_eq!(record.offset, base_offset + i as i64);
            prop_assert_eq!(record.timestamp, *ts);
            prop_assert_eq!(record.key.as_deref(), key.as_deref());
            prop_assert_eq!(record.value.as_deref(), value.as_deref());
            let decoded: Vec<(Vec<u8>, Option<Vec<u8>>)> = record
                .headers
                .iter()
                .map(|h| (h.key.to_vec(), h.value.map(|v| v.to_vec())))
                .collect();
            let expected: Vec<(Vec<u8>, Option<Vec<u8>>)> = headers
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
                .collect();
            prop_assert_eq!(decoded, expected);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        exercise(bytes);
    }

    #[test]
    fn mutated_batches_never_panic(
        mutations in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        keep_crc in any::<bool>(),
    ) {
        let mut bytes = sample_batch(3).to_vec();
        bytes.extend_from_slice(&sample_batch(2));
        for (index, value) in mutations {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        if keep_crc {
            // Re-sign the first batch so mutations reach the record decoder.
            let first = (i32::from_be_bytes(bytes[8..12].try_into().unwrap()).max(0) as usize + 12)
                .min(bytes.len());
            if first > 21 {
                let crc = crc32c::crc32c(&bytes[21..first]);
                bytes[17..21].copy_from_slice(&crc.to_be_bytes());
            }
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        exercise(bytes);
    }
}

fn exercise(bytes: Vec<u8>) {
    let mut copy = bytes.clone();
    for batch in RecordBatchMut::split_all(&mut copy).flatten() {
        let _ = batch.header().next_offset();
    }
    let _ = RecordBatches::parse_fetch(Bytes::from(bytes.clone()));
    for batch in RecordBatches::new(Bytes::from(bytes)).flatten() {
        if let Ok(records) = batch.decompressed_records(1 << 20) {
            for record in records.flatten() {
                let _ = record.headers.iter().count();
            }
        }
    }
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fn compressible_batch(codec: Compression, records: usize, value_len: usize) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new()
        .base_offset(1_000)
        .producer(5, 2, 40)
        .compression(codec);
    for i in 0..records {
        let key = format!("key-{i}");
        let value = vec![(i % 7) as u8; value_len];
        builder
            .append(
                10_000 + i as i64,
                Some(key.as_bytes()),
                Some(&value),
                &[(b"h", Some(b"v"))],
            )
            .unwrap();
    }
    builder.build().unwrap()
}

#[test]
fn every_codec_round_trips_through_the_builder() {
    for codec in CODECS {
        let batch = compressible_batch(codec, 500, 300);
        let reparsed = RecordBatch::parse(batch.as_bytes().clone()).unwrap();
        assert_eq!(reparsed.compression(), codec);
        assert_eq!(reparsed.attributes() & 0x07, codec.code());
        assert_eq!(reparsed.record_count(), 500);
        if codec != Compression::None {
            assert!(
                reparsed.size_in_bytes() < 500 * 300 / 4,
                "{codec:?} did not compress: {}",
                reparsed.size_in_bytes()
            );
            assert_eq!(
                reparsed.records().unwrap_err(),
                RecordsError::CompressedBatch(codec)
            );
        }
        let records: Vec<Record> = reparsed
            .decompressed_records(1 << 20)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(records.len(), 500, "{codec:?}");
        for (i, record) in records.iter().enumerate() {
            assert_eq!(record.offset, 1_000 + i as i64);
            assert_eq!(record.timestamp, 10_000 + i as i64);
            assert_eq!(record.key.as_deref(), Some(format!("key-{i}").as_bytes()));
            assert_eq!(record.value.as_deref(), Some(&vec![(i % 7) as u8; 300][..]));
            assert_eq!(record.headers.len(), 1);
        }
    }
}

#[test]
fn decompression_is_bounded() {
    for codec in CODECS {
        // About 2 MiB of records, compressed to little.
        let batch = compressible_batch(codec, 64, 32 * 1024);
        let limit = 256 << 10;
        let err = batch.decompressed_records(limit).unwrap_err();
        assert!(
            matches!(err, RecordsError::Decompression(_)),
            "{codec:?}: {err:?}"
        );
        assert!(batch.decompressed_records(4 << 20).is_ok(), "{codec:?}");
    }
}

#[test]
fn decompression_bombs_are_rejected() {
    // 64 MiB of zeros inside one record value: every codec squeezes it far below 1 MiB.
    let bomb = vec![0u8; 64 << 20];
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut builder = RecordBatchBuilder::new().compression(codec);
        builder.append(0, None, Some(&bomb), &[]).unwrap();
        let batch = builder.build().unwrap();
        assert!(
            batch.size_in_bytes() < 4 << 20,
            "{codec:?}: {}",
            batch.size_in_bytes()
        );
        let err = batch.decompressed_records(1 << 20).unwrap_err();
        assert!(
            matches!(err, RecordsError::Decompression(ref m) if m.contains("exceed")),
            "{codec:?}: {err:?}"
        );
    }
}

/// Replaces the records section of `batch` with `payload` under `codec` and re-signs it.
fn with_payload(codec: Compression, payload: &[u8]) -> RecordBatch {
    let mut bytes = sample_batch(1)[..61].to_vec();
    bytes.extend_from_slice(payload);
    let length = (bytes.len() - 12) as i32;
    bytes[8..12].copy_from_slice(&length.to_be_bytes());
    bytes[22] = (bytes[22] & !0x07) | codec.code() as u8;
    resign(&mut bytes);
    RecordBatch::parse(bytes.into()).unwrap()
}

#[test]
fn snappy_raw_blocks_and_declared_lengths() {
    // librdkafka writes one raw snappy block, not xerial framing.
    let records = sample_batch(1).slice(61..);
    let raw = snap::raw::Encoder::new().compress_vec(&records).unwrap();
    let batch = with_payload(Compression::Snappy, &raw);
    assert_eq!(batch.decompressed_records(1 << 20).unwrap().count(), 1);
    // A raw block whose header claims 2^32-1 bytes is refused before allocating.
    let batch = with_payload(Compression::Snappy, &[0xff, 0xff, 0xff, 0xff, 0x0f, 0x00]);
    assert!(matches!(
        batch.decompressed_records(1 << 20),
        Err(RecordsError::Decompression(m)) if m.contains("exceed")
    ));
}

#[test]
fn garbage_payloads_are_errors_not_panics() {
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let batch = with_payload(codec, b"definitely not compressed data");
        assert!(
            matches!(
                batch.decompressed_records(1 << 20),
                Err(RecordsError::Decompression(_))
            ),
            "{codec:?}"
        );
    }
    let good = compressible_batch(Compression::Snappy, 10, 10);
    let payload = good.records_payload();
    let batch = with_payload(Compression::Snappy, &payload[..payload.len() - 3]);
    assert!(batch.decompressed_records(1 << 20).is_err());
}

#[test]
fn reads_kafka_protocol_compressed_batches() {
    use kafka_protocol::records as kp;
    for (theirs, ours) in [
        (kp::Compression::Gzip, Compression::Gzip),
        (kp::Compression::Snappy, Compression::Snappy),
    ] {
        let records: Vec<kp::Record> = (0..50)
            .map(|i| kp::Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: kp::TimestampType::Creation,
                offset: i,
                // kafka-protocol splits batches where offset - sequence changes.
                sequence: i as i32,
                timestamp: 1_000 + i,
                key: None,
                value: Some(Bytes::from(vec![i as u8; 200])),
                headers: Default::default(),
            })
            .collect();
        let mut encoded = BytesMut::new();
        kp::RecordBatchEncoder::encode(
            &mut encoded,
            &records,
            &kp::RecordEncodeOptions {
                version: 2,
                compression: theirs,
            },
        )
        .unwrap();
        let batch = RecordBatch::parse(encoded.freeze()).unwrap();
        assert_eq!(batch.compression(), ours);
        let decoded: Vec<Record> = batch
            .decompressed_records(1 << 20)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(decoded.len(), 50);
        assert_eq!(decoded[49].value.as_deref(), Some(&[49u8; 200][..]));

        // And they read ours.
        let mine = compressible_batch(ours, 20, 100).into_bytes();
        let back = kp::RecordBatchDecoder::decode(&mut mine.clone()).unwrap();
        assert_eq!(back.records.len(), 20, "{ours:?}");
        assert_eq!(
            back.records[19].value.as_deref(),
            Some(&[(19 % 7) as u8; 100][..])
        );
    }
}

#[test]
fn produce_headers_walk_without_checksums() {
    let one = sample_batch(3);
    let mut two = one.to_vec();
    two.extend_from_slice(&sample_batch(2));
    let headers = RecordBatches::produce_headers(&two).expect("two batches");
    assert_eq!(headers.len(), 2);
    assert_eq!(headers[0].record_count, 3);
    assert_eq!(headers[1].record_count, 2);
    // A partial trailing batch and an empty set are refused, as parse_produce refuses them.
    assert!(matches!(
        RecordBatches::produce_headers(&two[..two.len() - 1]),
        Err(RecordsError::PartialBatch { .. })
    ));
    assert!(matches!(
        RecordBatches::produce_headers(&[]),
        Err(RecordsError::Empty)
    ));
    // The CRC is not read here (the log verifies it on append).
    let mut bad_crc = one.to_vec();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0xff;
    assert!(RecordBatches::produce_headers(&bad_crc).is_ok());
    assert!(RecordBatches::parse_produce(Bytes::from(bad_crc)).is_err());
}
