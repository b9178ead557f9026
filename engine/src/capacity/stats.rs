//! The few statistics the report uses, defined once so every figure means the same thing.

/// The arithmetic mean; 0 for no values.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// The nearest-rank percentile (`q` in 0..=1): the smallest value with at least `q` of the values at
/// or below it; 0 for no values.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// The smallest `k` with P(X ≤ k) ≥ `level` for X Poisson-distributed with mean `mu`.
pub fn poisson_quantile(mu: f64, level: f64) -> u32 {
    if mu <= 0.0 {
        return 0;
    }
    let mut term = (-mu).exp();
    let mut cumulative = term;
    let mut k = 0u32;
    // A mean of thousands of nodes out at once is not a cluster this report describes; stop there.
    while cumulative < level && k < 10_000 {
        k += 1;
        term *= mu / f64::from(k);
        cumulative += term;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&values, 0.5), 3.0);
        assert_eq!(percentile(&values, 0.9), 5.0);
        assert_eq!(percentile(&values, 0.2), 1.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        assert_eq!(mean(&values), 3.0);
    }

    #[test]
    fn poisson_quantile_matches_the_table() {
        // Poisson(1): P(X<=2) = 0.9197, P(X<=3) = 0.9810.
        assert_eq!(poisson_quantile(1.0, 0.95), 3);
        // Poisson(0.1): P(X<=0) = 0.905, P(X<=1) = 0.9953.
        assert_eq!(poisson_quantile(0.1, 0.95), 1);
        assert_eq!(poisson_quantile(0.0, 0.95), 0);
    }
}
