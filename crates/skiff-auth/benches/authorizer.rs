//! The cost of one `Authorizer::authorize` call against 1,000 ACLs: a mix of literal, prefixed
//! and wildcard, ALLOW and DENY, over 100 principals. Criterion prints the time per check for a
//! request an ALLOW grants (hit), one no ACL grants (miss) and one a DENY refuses (deny).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use skiff_auth::acl::{
    AccessControlEntry, AclBinding, AclOperation, AclPermissionType, Authorizer, AuthorizerConfig,
    PatternType, ResourcePattern, ResourceType,
};
use skiff_auth::principal::KafkaPrincipal;

const PRINCIPALS: usize = 100;
const CLIENT: &str = "10.0.0.7";

fn binding(
    resource_type: ResourceType,
    name: String,
    pattern_type: PatternType,
    principal: usize,
    operation: AclOperation,
    permission: AclPermissionType,
) -> AclBinding {
    AclBinding::new(
        ResourcePattern::new(resource_type, name, pattern_type),
        AccessControlEntry::new(format!("User:svc-{principal}"), "*", operation, permission),
    )
}

/// 1,000 ACLs: 600 literal topic ACLs (READ or WRITE), 200 prefixed topic ACLs per team,
/// 100 group ACLs, 50 wildcard DESCRIBE ACLs and 50 DENY ACLs (literal and prefixed).
fn thousand_acls() -> Vec<AclBinding> {
    use AclOperation::{Describe, Read, Write};
    use AclPermissionType::{Allow, Deny};
    use PatternType::{Literal, Prefixed};
    use ResourceType::{Group, Topic};

    let literal = (0..600).map(|i| {
        let operation = if i % 2 == 0 { Read } else { Write };
        binding(
            Topic,
            format!("orders-{i:04}"),
            Literal,
            i % PRINCIPALS,
            operation,
            Allow,
        )
    });
    let prefixed = (0..200).map(|i| {
        binding(
            Topic,
            format!("team-{:02}.events-{i:03}", i % 40),
            Prefixed,
            i % PRINCIPALS,
            Read,
            Allow,
        )
    });
    let groups =
        (0..100).map(|i| binding(Group, format!("consumers-{i:03}"), Literal, i, Read, Allow));
    let wildcard = (0..50).map(|i| binding(Topic, "*".to_owned(), Literal, i * 2, Describe, Allow));
    let deny = (0..50).map(|i| {
        if i % 2 == 0 {
            binding(
                Topic,
                format!("orders-{:04}", i * 12),
                Literal,
                99 - i,
                Write,
                Deny,
            )
        } else {
            binding(
                Topic,
                format!("team-{:02}.", i % 40),
                Prefixed,
                99 - i,
                Read,
                Deny,
            )
        }
    });
    literal
        .chain(prefixed)
        .chain(groups)
        .chain(wildcard)
        .chain(deny)
        .collect()
}

fn authorize(c: &mut Criterion) {
    let mut authorizer = Authorizer::new(AuthorizerConfig::default());
    for acl in thousand_acls() {
        assert!(authorizer.add(acl));
    }
    assert_eq!(authorizer.len(), 1_000);

    // svc-4 may READ orders-0104 through a literal ALLOW.
    let hit = (KafkaPrincipal::user("svc-4"), "orders-0104".to_owned());
    // svc-5 has no ACL on team-07.events-107-payments, which ACLs of others cover.
    let miss = (
        KafkaPrincipal::user("svc-5"),
        "team-07.events-107-payments".to_owned(),
    );
    // svc-98 is denied READ on every team-01. topic, although svc-41's prefixed ALLOW covers it.
    let deny = (
        KafkaPrincipal::user("svc-98"),
        "team-01.events-041".to_owned(),
    );
    let cases = [
        ("hit", &hit, true),
        ("miss", &miss, false),
        ("deny", &deny, false),
    ];

    let mut group = c.benchmark_group("authorize_1000_acls");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for (label, (principal, topic), expected) in cases {
        let decide = || {
            authorizer.authorize(
                principal,
                CLIENT,
                AclOperation::Read,
                ResourceType::Topic,
                topic,
            )
        };
        assert_eq!(decide(), expected, "{label}");
        group.bench_function(label, |b| {
            b.iter(|| {
                authorizer.authorize(
                    black_box(principal),
                    black_box(CLIENT),
                    AclOperation::Read,
                    ResourceType::Topic,
                    black_box(topic),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, authorize);
criterion_main!(benches);
