//! Dice expressions: parsing and evaluation.
//!
//! Grammar (case-insensitive, spaces ignored):
//!
//! ```text
//! expr  := ['+'|'-'] term (('+'|'-') term)*
//! term  := dice | number
//! dice  := [count] 'd' (sides | '%') [('kh'|'kl'|'k') keep]
//! ```
//!
//! `d20` is `1d20`, `d%` is `1d100`, `4d6kh3` keeps the three highest dice,
//! `2d20kl1` the lowest (disadvantage), `k` alone means `kh`.

use rand::Rng;
use std::fmt;

/// Most dice one expression may roll in total.
pub const MAX_DICE: u32 = 100;
/// Most sides a die may have.
pub const MAX_SIDES: u32 = 1000;
/// Most terms in one expression.
pub const MAX_TERMS: usize = 20;
/// Largest flat modifier.
pub const MAX_MODIFIER: i64 = 1_000_000;

/// Which dice of a group count towards the total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every die counts.
    All,
    /// The `n` highest dice count.
    Highest(u32),
    /// The `n` lowest dice count.
    Lowest(u32),
}

/// One term of an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// `count` dice with `sides` sides each.
    Dice {
        /// +1 or -1.
        sign: i64,
        /// Number of dice rolled.
        count: u32,
        /// Sides per die.
        sides: u32,
        /// Which dice count.
        keep: Keep,
    },
    /// A flat modifier.
    Flat(i64),
}

/// A parsed dice expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    /// The terms, in order.
    pub terms: Vec<Term>,
}

/// Why an expression was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

/// Reads a run of ASCII digits as a number, refusing absurd lengths.
fn number(chars: &[char], pos: &mut usize) -> Result<Option<u64>, ParseError> {
    let start = *pos;
    while *pos < chars.len() && chars[*pos].is_ascii_digit() {
        *pos += 1;
    }
    if *pos == start {
        return Ok(None);
    }
    let digits: String = chars[start..*pos].iter().collect();
    if digits.len() > 9 {
        return err(format!("number {digits} is too large"));
    }
    Ok(Some(digits.parse().expect("at most 9 digits")))
}

/// Parses a dice expression such as `2d6+3` or `4d6kh3`.
pub fn parse(input: &str) -> Result<Expr, ParseError> {
    let mut chars: Vec<char> = Vec::with_capacity(input.len());
    let mut gap = false;
    for c in input.chars() {
        if c.is_whitespace() {
            gap = true;
            continue;
        }
        // Spaces may surround operators but never split a term: "2d6 3" is an error.
        if gap && c.is_ascii_alphanumeric() && chars.last().is_some_and(|p: &char| p.is_ascii_alphanumeric()) {
            return err(format!("expected + or - before '{c}'"));
        }
        gap = false;
        chars.push(c.to_ascii_lowercase());
    }
    if chars.is_empty() {
        return err("empty expression: write something like 1d20 or 2d6+3");
    }
    let mut pos = 0;
    let mut terms = Vec::new();
    let mut total_dice: u32 = 0;
    loop {
        let sign = match chars.get(pos) {
            Some('+') => {
                pos += 1;
                1
            }
            Some('-') => {
                pos += 1;
                -1
            }
            _ if terms.is_empty() => 1,
            Some(c) => return err(format!("expected + or - at position {pos}, found '{c}'")),
            None => unreachable!("loop ends at end of input"),
        };
        let count = number(&chars, &mut pos)?;
        if chars.get(pos) == Some(&'d') {
            pos += 1;
            let count = count.unwrap_or(1);
            let sides = if chars.get(pos) == Some(&'%') {
                pos += 1;
                100
            } else {
                match number(&chars, &mut pos)? {
                    Some(s) => s,
                    None => return err(format!("missing number of sides after 'd' at position {pos}")),
                }
            };
            if count == 0 {
                return err("cannot roll zero dice");
            }
            if sides == 0 {
                return err("a die needs at least one side");
            }
            if sides > u64::from(MAX_SIDES) {
                return err(format!("dice may have at most {MAX_SIDES} sides"));
            }
            if count > u64::from(MAX_DICE) {
                return err(format!("at most {MAX_DICE} dice per roll"));
            }
            let count = count as u32;
            total_dice += count;
            if total_dice > MAX_DICE {
                return err(format!("at most {MAX_DICE} dice per roll"));
            }
            let keep = if chars.get(pos) == Some(&'k') {
                pos += 1;
                let lowest = match chars.get(pos) {
                    Some('h') => {
                        pos += 1;
                        false
                    }
                    Some('l') => {
                        pos += 1;
                        true
                    }
                    _ => false,
                };
                let n = match number(&chars, &mut pos)? {
                    Some(n) => n,
                    None => return err(format!("missing number of dice to keep at position {pos}")),
                };
                if n == 0 || n > u64::from(count) {
                    return err(format!("can keep between 1 and {count} of {count} dice, not {n}"));
                }
                if lowest { Keep::Lowest(n as u32) } else { Keep::Highest(n as u32) }
            } else {
                Keep::All
            };
            terms.push(Term::Dice { sign, count, sides: sides as u32, keep });
        } else {
            match count {
                Some(n) if (n as i64) <= MAX_MODIFIER => terms.push(Term::Flat(sign * n as i64)),
                Some(_) => return err(format!("modifiers may be at most {MAX_MODIFIER}")),
                None => match chars.get(pos) {
                    Some(c) => return err(format!("unexpected '{c}' at position {pos}")),
                    None => return err("expression ends after an operator"),
                },
            }
        }
        if terms.len() > MAX_TERMS {
            return err(format!("at most {MAX_TERMS} terms per expression"));
        }
        if pos == chars.len() {
            break;
        }
    }
    if !terms.iter().any(|t| matches!(t, Term::Dice { .. })) {
        return err("no dice in expression: write something like 1d20+5");
    }
    Ok(Expr { terms })
}

/// The outcome of rolling an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roll {
    /// Every die rolled, in order.
    pub rolls: Vec<u32>,
    /// The dice that counted, when some group kept only part of its dice.
    pub kept: Option<Vec<u32>>,
    /// The total.
    pub total: i64,
}

/// Rolls every term of `expr` with `rng`.
pub fn roll<R: Rng>(expr: &Expr, rng: &mut R) -> Roll {
    let mut rolls = Vec::new();
    let mut kept_all = Vec::new();
    let mut any_keep = false;
    let mut total = 0i64;
    for term in &expr.terms {
        match *term {
            Term::Flat(n) => total += n,
            Term::Dice { sign, count, sides, keep } => {
                let group: Vec<u32> = (0..count).map(|_| rng.random_range(1..=sides)).collect();
                rolls.extend_from_slice(&group);
                let kept: Vec<u32> = match keep {
                    Keep::All => group,
                    Keep::Highest(n) | Keep::Lowest(n) => {
                        any_keep = true;
                        let mut idx: Vec<usize> = (0..group.len()).collect();
                        // Stable: ties keep the earlier die.
                        if matches!(keep, Keep::Highest(_)) {
                            idx.sort_by(|&a, &b| group[b].cmp(&group[a]));
                        } else {
                            idx.sort_by(|&a, &b| group[a].cmp(&group[b]));
                        }
                        let mut chosen: Vec<usize> = idx.into_iter().take(n as usize).collect();
                        chosen.sort_unstable();
                        chosen.into_iter().map(|i| group[i]).collect()
                    }
                };
                total += sign * kept.iter().map(|&d| i64::from(d)).sum::<i64>();
                kept_all.extend(kept);
            }
        }
    }
    Roll { rolls, kept: any_keep.then_some(kept_all), total }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(7)
    }

    #[test]
    fn parses_the_common_forms() {
        assert_eq!(
            parse("2d6+3").unwrap().terms,
            vec![Term::Dice { sign: 1, count: 2, sides: 6, keep: Keep::All }, Term::Flat(3)]
        );
        assert_eq!(parse("d20").unwrap().terms, vec![Term::Dice { sign: 1, count: 1, sides: 20, keep: Keep::All }]);
        assert_eq!(
            parse(" 4D8 - 1 ").unwrap().terms,
            vec![Term::Dice { sign: 1, count: 4, sides: 8, keep: Keep::All }, Term::Flat(-1)]
        );
        assert_eq!(
            parse("4d6kh3").unwrap().terms,
            vec![Term::Dice { sign: 1, count: 4, sides: 6, keep: Keep::Highest(3) }]
        );
        assert_eq!(
            parse("2d20kl1").unwrap().terms,
            vec![Term::Dice { sign: 1, count: 2, sides: 20, keep: Keep::Lowest(1) }]
        );
        assert_eq!(parse("2d6+1d4+3").unwrap().terms.len(), 3);
        assert_eq!(parse("d%").unwrap().terms, vec![Term::Dice { sign: 1, count: 1, sides: 100, keep: Keep::All }]);
    }

    #[test]
    fn rejects_nonsense_with_a_reason() {
        for (input, needle) in [
            ("0d6", "zero dice"),
            ("1d0", "at least one side"),
            ("1000000d6", "at most 100 dice"),
            ("2d6+", "ends after an operator"),
            ("", "empty"),
            ("abc", "unexpected 'a'"),
            ("2d6 3", "expected + or -"),
            ("4d6kh5", "keep between 1 and 4"),
            ("5", "no dice"),
            ("60d6+60d6", "at most 100 dice"),
            ("1d99999999999", "too large"),
            ("1d1001", "at most 1000 sides"),
        ] {
            let e = parse(input).expect_err(input);
            assert!(e.0.contains(needle), "{input:?}: {e}");
        }
    }

    #[test]
    fn totals_add_up() {
        let expr = parse("2d6+1d4+3").unwrap();
        let r = roll(&expr, &mut rng());
        assert_eq!(r.rolls.len(), 3);
        assert!(r.rolls[..2].iter().all(|&d| (1..=6).contains(&d)));
        assert!((1..=4).contains(&r.rolls[2]));
        assert_eq!(r.total, r.rolls.iter().map(|&d| i64::from(d)).sum::<i64>() + 3);
        assert_eq!(r.kept, None);
    }

    #[test]
    fn keep_highest_keeps_the_highest() {
        let expr = parse("4d6kh3").unwrap();
        for seed in 0..50 {
            let r = roll(&expr, &mut ChaCha8Rng::seed_from_u64(seed));
            let mut sorted = r.rolls.clone();
            sorted.sort_unstable();
            let kept = r.kept.clone().unwrap();
            assert_eq!(kept.len(), 3);
            assert_eq!(r.total, sorted[1..].iter().map(|&d| i64::from(d)).sum::<i64>());
        }
    }

    #[test]
    fn keep_lowest_is_disadvantage() {
        let expr = parse("2d20kl1").unwrap();
        for seed in 0..50 {
            let r = roll(&expr, &mut ChaCha8Rng::seed_from_u64(seed));
            assert_eq!(r.total, i64::from(*r.rolls.iter().min().unwrap()));
        }
    }

    #[test]
    fn negative_dice_subtract() {
        let expr = parse("10-1d4").unwrap();
        let r = roll(&expr, &mut rng());
        assert_eq!(r.total, 10 - i64::from(r.rolls[0]));
    }

    #[test]
    fn same_seed_same_roll() {
        let expr = parse("8d6").unwrap();
        assert_eq!(roll(&expr, &mut rng()), roll(&expr, &mut rng()));
    }

    #[test]
    fn d20_is_roughly_uniform() {
        let expr = parse("1d20").unwrap();
        let mut counts = [0u32; 20];
        let mut r = rng();
        for _ in 0..20_000 {
            counts[roll(&expr, &mut r).total as usize - 1] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    }
}
