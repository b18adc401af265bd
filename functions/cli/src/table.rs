//! Plain-text tables whose columns fit their widest cell, for the CLI's human output.

/// One cell of a [`Table`].
#[derive(Debug, Clone)]
pub enum Cell {
    /// Text, left-aligned.
    Text(String),
    /// A value before and after, shown `before -> after` with the arrows of a column aligned.
    Change(String, String),
}

impl Cell {
    /// A before/after cell from two displayable values.
    pub fn change(before: impl ToString, after: impl ToString) -> Self {
        Self::Change(before.to_string(), after.to_string())
    }
}

/// A table rendered with every column as wide as its widest cell or header.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

/// Spaces between two columns.
const GAP: &str = "  ";

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells render empty, extra cells are ignored).
    pub fn push(&mut self, row: Vec<Cell>) {
        self.rows.push(row);
    }

    /// The header line and one line per row, without trailing spaces.
    pub fn lines(&self) -> Vec<String> {
        let columns: Vec<Column> = (0..self.headers.len())
            .map(|c| Column::measure(&self.headers[c], self.rows.iter().filter_map(|r| r.get(c))))
            .collect();
        let header = columns
            .iter()
            .zip(&self.headers)
            .map(|(column, h)| column.header(h))
            .collect::<Vec<_>>()
            .join(GAP);
        let mut lines = vec![header.trim_end().to_string()];
        for row in &self.rows {
            let line = columns
                .iter()
                .enumerate()
                .map(|(c, column)| column.cell(row.get(c)))
                .collect::<Vec<_>>()
                .join(GAP);
            lines.push(line.trim_end().to_string());
        }
        lines
    }
}

/// The measured widths of one column.
struct Column {
    /// Widest text, or widest `before` of a change column.
    left: usize,
    /// Widest `after` of a change column (0 for text columns).
    right: usize,
    /// Whether any cell is a change (then the header is right-aligned over the arrows).
    change: bool,
    /// The column's total width, header included.
    width: usize,
}

impl Column {
    fn measure<'a>(header: &str, cells: impl Iterator<Item = &'a Cell>) -> Self {
        let (mut left, mut right, mut change) = (0, 0, false);
        for cell in cells {
            match cell {
                Cell::Text(t) => left = left.max(t.chars().count()),
                Cell::Change(b, a) => {
                    change = true;
                    left = left.max(b.chars().count());
                    right = right.max(a.chars().count());
                }
            }
        }
        let body = if change {
            left + " -> ".len() + right
        } else {
            left
        };
        let width = body.max(header.chars().count());
        // A header wider than the cells widens the `before` side, so arrows stay aligned.
        if change {
            left += width - body;
        }
        Self {
            left,
            right,
            change,
            width,
        }
    }

    fn header(&self, header: &str) -> String {
        if self.change {
            format!("{header:>w$}", w = self.width)
        } else {
            format!("{header:<w$}", w = self.width)
        }
    }

    fn cell(&self, cell: Option<&Cell>) -> String {
        match cell {
            Some(Cell::Change(b, a)) => {
                format!("{b:>l$} -> {a:<r$}", l = self.left, r = self.right)
            }
            Some(Cell::Text(t)) => format!("{t:<w$}", w = self.width),
            None => " ".repeat(self.width),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrow_offsets(line: &str) -> Vec<usize> {
        line.match_indices(" -> ").map(|(i, _)| i).collect()
    }

    #[test]
    fn columns_line_up_whatever_the_widths() {
        let mut table = Table::new(&["partition", "files", "bytes read", "status"]);
        table.push(vec![
            Cell::Text("tenant=acme/hour=10".into()),
            Cell::change(24, 1),
            Cell::change(288_098, 192_834),
            Cell::Text("compacted".into()),
        ]);
        table.push(vec![
            Cell::Text("tenant=a-much-longer-tenant/hour=10".into()),
            Cell::change(7, 10_000),
            Cell::change(1, 2),
            Cell::Text("partial".into()),
        ]);
        let lines = table.lines();
        assert_eq!(lines.len(), 3);
        assert_eq!(arrow_offsets(&lines[1]), arrow_offsets(&lines[2]));
        let status = lines[0].find("status").expect("header");
        assert_eq!(lines[1].find("compacted"), Some(status));
        assert_eq!(lines[2].find("partial"), Some(status));
        // Right-aligned headers end where their column ends.
        let files_end = lines[0].find("files").expect("files") + "files".len();
        let arrow = arrow_offsets(&lines[1])[0];
        assert!(files_end >= arrow + " -> ".len());
        assert!(lines.iter().all(|l| !l.ends_with(' ')));
    }

    #[test]
    fn a_wide_header_keeps_the_arrows_aligned() {
        let mut table = Table::new(&["a very wide header"]);
        table.push(vec![Cell::change(1, 2)]);
        table.push(vec![Cell::change(100, 2)]);
        let lines = table.lines();
        assert_eq!(arrow_offsets(&lines[1]), arrow_offsets(&lines[2]));
        assert_eq!(lines[1].len(), lines[0].len());
    }
}
