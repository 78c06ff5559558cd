//! Counts in the words operators read (the commands' output, the admin UI): "1 line", "2 lines".

/// `n` and its noun: `one` when `n` is 1, else `many`.
pub(crate) fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(super::counted(1, "line", "lines"), "1 line");
        assert_eq!(super::counted(0, "line", "lines"), "0 lines");
        assert_eq!(super::counted(2, "dead job", "dead jobs"), "2 dead jobs");
    }
}
