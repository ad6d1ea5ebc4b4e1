//! Table cells for people: widths in terminal columns, not characters — a CJK character takes
//! two columns and a combining mark none, so a table of such names stayed aligned only in
//! characters (found running real software: `-n 'résumé-计算'` pushed its row's columns).
//! Cells are escaped first ([`pjw_core::text::printable`]): nothing left in them moves the
//! cursor.

use unicode_width::UnicodeWidthStr;

/// The columns `cell` takes on a terminal.
pub fn width(cell: &str) -> usize {
    UnicodeWidthStr::width(cell)
}

/// `cell` padded with spaces to `columns` terminal columns (as is when it is wider).
pub fn pad(cell: &str, columns: usize) -> String {
    let mut out = String::with_capacity(cell.len() + columns);
    out.push_str(cell);
    out.extend(std::iter::repeat_n(
        ' ',
        columns.saturating_sub(width(cell)),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_and_combining_characters_are_padded_by_their_columns() {
        assert_eq!(width("abc"), 3);
        assert_eq!(width("计算"), 4);
        assert_eq!(width("e\u{301}"), 1, "e and a combining acute: one column");
        assert_eq!(pad("计算", 6), "计算  ");
        assert_eq!(pad("résumé", 8), "résumé  ");
        assert_eq!(pad("toolong", 3), "toolong");
    }
}
