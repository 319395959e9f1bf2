//! BLEU and word order: the notes say BLEU ignores word order. Its unigram precision does; its
//! 2- to 4-gram precisions see order within four words, and nothing sees it beyond.

use s2s_data::rng::SplitMix64;
use s2s_data::synth::{SynthConfig, generate, split_indices};
use s2s_eval::BleuScore;

use crate::{Claim, Context, Finding, Table, num};

pub const CLAIM: Claim = Claim {
    name: "bleu-word-order",
    why: "BLEU is the field's yardstick, so what it cannot see a system is never rewarded for getting \
          right. The notes say it ignores word order; its n-grams see order within four words, not \
          beyond.",
    statement: "BLEU ignores word order",
    lecture: "language-models-rnn-seq2seq.md § BLEU (Bilingual Evaluation Understudy)",
    criterion: "holds when the test references with their words reordered score within 1 BLEU point of the \
                references themselves (100), for every reordering measured and every seed (of the shuffle)",
    method: "the built-in pair's test references (target side, 8,000 pairs, seed 1) scored as hypotheses \
             against themselves with sacreBLEU's corpus BLEU, as they are and reordered four ways: the two \
             halves of each sentence swapped (order changed at one point), its first two words swapped, its \
             words reversed, its words shuffled (each seed; the table shows the first); unigram and 4-gram precision beside BLEU",
    run,
};

/// A reordering of a sentence's words.
type Reorder = fn(&mut Vec<&str>, &mut SplitMix64);

/// The reorderings measured, by name.
const REORDERINGS: [(&str, Reorder); 5] = [
    ("as it is", |_, _| {}),
    ("halves swapped", |w, _| {
        let half = w.len() / 2;
        w.rotate_left(half);
    }),
    ("first two words swapped", |w, _| {
        if w.len() >= 2 {
            w.swap(0, 1);
        }
    }),
    ("reversed", |w, _| w.reverse()),
    ("shuffled", |w, rng| rng.shuffle(w)),
];

/// Each reordering's BLEU, the shuffle drawn from `seed`, or why BLEU could not be computed.
fn measure<'a>(refs: &[&str], seed: u64) -> Result<Vec<(&'a str, BleuScore)>, s2s_eval::EvalError> {
    let mut rng = SplitMix64::new(seed);
    let mut rows = Vec::new();
    for (name, reorder) in REORDERINGS {
        let hyps: Vec<String> = refs
            .iter()
            .map(|r| {
                let mut words: Vec<&str> = r.split_whitespace().collect();
                reorder(&mut words, &mut rng);
                words.join(" ")
            })
            .collect();
        rows.push((name, s2s_eval::corpus_bleu(&hyps, &[refs])?));
    }
    Ok(rows)
}

/// Whether every reordering scores within 1 BLEU of the references themselves.
fn met(rows: &[(&str, BleuScore)]) -> bool {
    rows[1..].iter().all(|(_, b)| b.score >= rows[0].1.score - 1.0)
}

fn run(ctx: &Context) -> Finding {
    let pairs = generate(&SynthConfig { pairs: 8000, seed: 1, ..Default::default() });
    let [_, _, test] = split_indices(&pairs);
    let refs: Vec<&str> = test.iter().map(|&i| pairs[i].1.as_str()).collect();
    let measured =
        match ctx.seeds().iter().map(|&s| measure(&refs, s).map(|r| (s, r))).collect::<Result<Vec<_>, _>>() {
            Ok(m) => m,
            Err(e) => return Finding::not_run("BLEU could not be computed", e),
        };
    let (verdict, seeds) = crate::by_seed(measured.iter().map(|(s, rows)| (*s, met(rows))).collect());
    let rows = &measured[0].1;
    let reordered = &rows[1..];
    let (least, most) = reordered.iter().fold((&reordered[0], &reordered[0]), |(lo, hi), r| {
        (if r.1.score < lo.1.score { r } else { lo }, if r.1.score > hi.1.score { r } else { hi })
    });
    let reason = format!(
        "reordered words keep every unigram, but BLEU falls to {} reversed; swapping a sentence's halves keeps {}: \
         order is seen within four words, not beyond",
        num(rows[3].1.score),
        num(rows[1].1.score)
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: format!(
            "every reordering keeps the unigram precision at {} %, but BLEU falls from {} to between {} ({}) and {} \
             ({}): the 2- to 4-gram precisions see order within four words. What BLEU does not see is order \
             beyond four words: swapping a sentence's two halves, which reorders its meaning, keeps {} BLEU, \
             about what swapping two neighbouring words keeps",
            num(reordered[0].1.precisions[0]),
            num(rows[0].1.score),
            num(most.1.score),
            most.0,
            num(least.1.score),
            least.0,
            num(rows[1].1.score)
        ),
        not_measured: String::new(),
        table: table(rows, refs.len()),
        more: Vec::new(),
        figures: Vec::new(),
    }
}

/// The table: each reordering's BLEU and its unigram and 4-gram precisions.
fn table(rows: &[(&str, BleuScore)], sentences: usize) -> Table {
    Table {
        header: [
            format!("references ({sentences} sentences)"),
            "BLEU".into(),
            "unigram precision %".into(),
            "4-gram precision %".into(),
        ]
        .to_vec(),
        rows: rows
            .iter()
            .map(|(name, b)| vec![name.to_string(), num(b.score), num(b.precisions[0]), num(b.precisions[3])])
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reordering keeps every word (unigram precision 100 %) and lowers BLEU; the notes' claim
    /// does not hold, and the halves swapped cost less than a shuffle.
    #[test]
    fn reordered_references_keep_their_words_not_their_bleu() {
        let ctx = Context::new(crate::Budget::Quick, std::env::temp_dir());
        let f = run(&ctx);
        assert_eq!(f.verdict, crate::Verdict::DoesNotHold, "{}", f.because);
        let bleu = |row: usize| f.table.rows[row][1].parse::<f64>().unwrap();
        assert!((bleu(0) - 100.0).abs() < 1e-6);
        assert!(f.table.rows.iter().all(|r| r[2].parse::<f64>().unwrap() > 99.99), "{:?}", f.table.rows);
        assert!(bleu(1) > bleu(4), "halves swapped {} against shuffled {}", bleu(1), bleu(4));
    }
}
