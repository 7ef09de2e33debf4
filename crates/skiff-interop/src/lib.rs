//! `skiff-interop` holds no library code: its tests drive a third-party Rust client, `rdkafka`
//! (librdkafka built from its vendored source with its own configure and make: no cmake), against
//! a Skiff broker started in the test process, so that "unmodified Kafka clients work" is checked
//! in `cargo test`.
