//! Secondary sinks (Wong et al., "On the Existence and Behaviour of Secondary Attention Sinks",
//! ICLR 2026, arXiv:2512.22213): keys other than the first that draw a sink's share of a head's
//! attention. sinklab measures them with Gu et al.'s importance α_k (the mean attention key k
//! receives from the queries that see it, [`super::importance`]) at every position k, not only
//! k = 1: in a (sequence, head), key k ≥ 2 (1-based) is a secondary sink when α_k > ε.
//!
//! α_k of a late key is a mean over few queries (the last key's is one query's weight on itself:
//! a head that attends to its own token would make every last key a "sink"), so only keys that
//! at least a quarter of the queries see are counted ([`MIN_QUERY_SHARE`]): at T = 64, keys 2..49.

/// The share of the probe's queries that must see a key for it to count as a secondary sink.
pub const MIN_QUERY_SHARE: f64 = 0.25;

/// The keys (0-based) that may count as secondary sinks at probe length `t`: from the second
/// to the last one seen by at least ⌈[`MIN_QUERY_SHARE`] · t⌉ queries (t − k of them see key k).
pub fn eligible_keys(t: usize) -> std::ops::Range<usize> {
    let need = (MIN_QUERY_SHARE * t as f64).ceil().max(1.0) as usize;
    1..(t + 1).saturating_sub(need).max(1)
}

/// Secondary sinks of one layer.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct Secondary {
    /// Share (%) of (sequence, head) pairs with at least one secondary sink.
    pub heads: f64,
    /// Mean number of secondary sinks per (sequence, head).
    pub count: f64,
    /// [k] share (%) of (sequence, head) pairs in which key k (0-based) is a secondary sink;
    /// 0 at k = 0 and at keys too late to count.
    pub by_position: Vec<f64>,
}

/// The secondary sinks of one layer from its importances α[b][h][k] ([`super::importance`]) at
/// threshold `eps` (strict `>`).
pub fn secondary_sinks(imp: &[Vec<Vec<f64>>], eps: f64) -> Secondary {
    let t = imp.first().and_then(|s| s.first()).map_or(0, |h| h.len());
    let keys = eligible_keys(t);
    let mut by_position = vec![0.0; t];
    let (mut pairs, mut with, mut total) = (0usize, 0usize, 0usize);
    for head in imp.iter().flatten() {
        pairs += 1;
        let hits = keys.clone().filter(|&k| head[k] > eps);
        let mut n = 0;
        for k in hits {
            by_position[k] += 1.0;
            n += 1;
        }
        total += n;
        with += usize::from(n > 0);
    }
    let per = |x: f64| 100.0 * x / pairs.max(1) as f64;
    Secondary {
        heads: per(with as f64),
        count: total as f64 / pairs.max(1) as f64,
        by_position: by_position.into_iter().map(per).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eligible_keys_leave_out_the_first_and_the_late_ones() {
        assert_eq!(eligible_keys(64), 1..49); // 1-based keys 2..49: each seen by ≥ 16 queries
        assert_eq!(eligible_keys(7), 1..6); // ⌈1.75⌉ = 2 queries: keys 1..=5 (0-based; rows 5, 6 see key 5)
        assert_eq!(eligible_keys(1), 1..1);
    }

    /// Two sequences × two heads, T = 8 (keys 1..=6 count: key 6 is seen by 2 = ⌈8/4⌉ queries):
    /// head 0 of sequence 0 has α > 0.3 at keys 2 and 4, head 1 of sequence 0 at key 6 (the last
    /// eligible; its 0.3 at key 5 is not above ε), head 1 of sequence 1 at key 3 and at key 7
    /// (too late to count); α₁ is never a secondary sink.
    #[test]
    fn secondary_sinks_by_hand() {
        let flat = |hits: &[(usize, f64)]| {
            let mut h = vec![0.1; 8];
            h[0] = 0.9;
            for &(k, a) in hits {
                h[k] = a;
            }
            h
        };
        let imp = vec![
            vec![flat(&[(2, 0.5), (4, 0.31)]), flat(&[(5, 0.3), (6, 0.35)])],
            vec![flat(&[]), flat(&[(3, 0.4), (7, 0.9)])],
        ];
        let s = secondary_sinks(&imp, 0.3);
        assert_eq!(s.heads, 75.0);
        assert_eq!(s.count, 1.0);
        assert_eq!(
            s.by_position,
            vec![0.0, 0.0, 25.0, 25.0, 25.0, 0.0, 25.0, 0.0]
        );
    }
}
