//! Word alignment error rate (Och and Ney, 2003) of attention weights against a gold alignment:
//! each target word linked to the source position it attends to most.

/// Links, agreeing links and gold links summed over sentences, for an AER over a corpus.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AlignCounts {
    /// Predicted links that are gold.
    pub hits: usize,
    /// Predicted links.
    pub predicted: usize,
    /// Gold links.
    pub gold: usize,
}

impl AlignCounts {
    /// Compares the attention `weights` `[target positions][source positions]` (`</s>` last on
    /// both sides) with `gold`: each target word is linked to the source position it attends
    /// to most, and a link to `</s>` is no link (Och and Ney, 2003; with sure = possible links,
    /// as a permutation gold has).
    pub fn of(weights: &[Vec<f32>], gold: &[[usize; 2]]) -> Self {
        Self::of_links(&hard_links(weights), gold)
    }

    /// Compares predicted `links` (`[target, source]` pairs) with `gold`.
    pub fn of_links(links: &[[usize; 2]], gold: &[[usize; 2]]) -> Self {
        let hits = links.iter().filter(|l| gold.contains(l)).count();
        AlignCounts { hits, predicted: links.len(), gold: gold.len() }
    }

    /// Adds another sentence's counts.
    pub fn add(&mut self, o: AlignCounts) {
        self.hits += o.hits;
        self.predicted += o.predicted;
        self.gold += o.gold;
    }

    /// `AER = 1 − 2·|A ∩ G| / (|A| + |G|)` (1 when there is nothing to compare).
    pub fn aer(&self) -> f64 {
        let n = self.predicted + self.gold;
        if n == 0 { 1.0 } else { 1.0 - 2.0 * self.hits as f64 / n as f64 }
    }
}

/// The links of attention `weights` `[target positions][source positions]` (`</s>` last on
/// both sides) as `[target, source]` pairs in target order: each target position but `</s>`
/// linked to the source position it attends to most, none where that is `</s>`.
pub fn hard_links(weights: &[Vec<f32>]) -> Vec<[usize; 2]> {
    let words = weights.len().saturating_sub(1);
    weights
        .iter()
        .take(words)
        .enumerate()
        .filter_map(|(j, row)| argmax(row).filter(|&i| i + 1 < row.len()).map(|i| [j, i]))
        .collect()
}

/// Index of the largest value (the first of ties), `None` for an empty row.
pub fn argmax(row: &[f32]) -> Option<usize> {
    row.iter()
        .enumerate()
        .fold(None, |best: Option<(usize, f32)>, (i, &v)| match best {
            Some((_, b)) if b >= v => best,
            _ => Some((i, v)),
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aer_counts_argmax_links_and_ignores_eos() {
        // Two target words and </s> over two source words and </s>.
        let w = vec![vec![0.1, 0.8, 0.1], vec![0.2, 0.1, 0.7], vec![0.0, 0.0, 1.0]];
        let gold = [[0, 1], [1, 0]];
        let c = AlignCounts::of(&w, &gold);
        // Word 0 → source 1 (gold); word 1 attends most to </s>: no link.
        assert_eq!(c, AlignCounts { hits: 1, predicted: 1, gold: 2 });
        assert!((c.aer() - (1.0 - 2.0 / 3.0)).abs() < 1e-12);
        let perfect = vec![vec![0.0, 1.0, 0.0], vec![1.0, 0.0, 0.0], vec![0.0, 0.0, 1.0]];
        assert_eq!(AlignCounts::of(&perfect, &gold).aer(), 0.0);
        let wrong = vec![vec![1.0, 0.0, 0.0], vec![0.0, 1.0, 0.0], vec![0.0, 0.0, 1.0]];
        assert_eq!(AlignCounts::of(&wrong, &gold).aer(), 1.0);
        let mut sum = AlignCounts::default();
        sum.add(c);
        sum.add(AlignCounts::of(&perfect, &gold));
        assert!((sum.aer() - (1.0 - 2.0 * 3.0 / 7.0)).abs() < 1e-12);
    }

    #[test]
    fn argmax_takes_the_first_of_ties() {
        assert_eq!(argmax(&[0.5, 0.5]), Some(0));
        assert_eq!(argmax(&[]), None);
    }
}
