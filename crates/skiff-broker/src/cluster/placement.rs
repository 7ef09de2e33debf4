//! Which live broker leads a partition: rendezvous hashing of the partition over the live
//! brokers' node IDs. Every broker computes the same answer from the same live set, a
//! partition's reads concentrate in one broker's cache, and when a broker leaves only its own
//! partitions move (each to the broker that scored second for it).

use skiff_protocol::Uuid;

/// splitmix64's finalizer: a stable 64-bit mix (the same in every version and on every host,
/// unlike std's hasher).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn score(topic_id: Uuid, partition: i32, node: i32) -> u64 {
    let id = topic_id.as_u128();
    let mut h = mix(id as u64);
    h = mix(h ^ (id >> 64) as u64);
    h = mix(h ^ u64::from(partition as u32));
    mix(h ^ u64::from(node as u32).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The leader of `partition` of `topic_id` among `live` node IDs (`None` when none is live).
pub fn leader(topic_id: Uuid, partition: i32, live: &[i32]) -> Option<i32> {
    live.iter()
        .copied()
        .max_by_key(|&node| (score(topic_id, partition, node), node))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    #[test]
    fn nobody_leads_without_live_brokers() {
        assert_eq!(leader(topic(1), 0, &[]), None);
        assert_eq!(leader(topic(1), 0, &[7]), Some(7));
    }

    #[test]
    fn the_order_of_the_live_set_does_not_matter() {
        for p in 0..50 {
            assert_eq!(
                leader(topic(2), p, &[1, 2, 3]),
                leader(topic(2), p, &[3, 1, 2])
            );
        }
    }

    #[test]
    fn partitions_spread_over_brokers() {
        let mut counts = [0usize; 3];
        for p in 0..3000 {
            let l = leader(topic(3), p, &[1, 2, 3]).unwrap();
            counts[(l - 1) as usize] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn only_the_dead_brokers_partitions_move() {
        for p in 0..500 {
            let before = leader(topic(4), p, &[1, 2, 3]).unwrap();
            let after = leader(topic(4), p, &[1, 3]).unwrap();
            if before != 2 {
                assert_eq!(before, after, "partition {p} moved without cause");
            }
        }
    }
}
