//! The adaptive row-group threshold of compacted output: pure.

/// Target number of row groups for a partition of any size.
pub const TARGET_ROW_GROUPS: u64 = 8;
/// Floor of the threshold: 1 MiB.
pub const MIN_ROW_GROUP_BYTES: u64 = 1 << 20;
/// Ceiling of the threshold: 32 MiB.
pub const MAX_ROW_GROUP_BYTES: u64 = 32 << 20;

/// `clamp(input_bytes / 8, 1 MiB, 32 MiB)`.
pub fn adaptive_row_group_bytes(input_bytes: u64) -> u64 {
    (input_bytes / TARGET_ROW_GROUPS).clamp(MIN_ROW_GROUP_BYTES, MAX_ROW_GROUP_BYTES)
}

/// The threshold in force: the one set (flag or `OURIOS_COMPACTED_RG_BYTES`), else the
/// adaptive value.
pub fn resolve_row_group_bytes(set: Option<u64>, input_bytes: u64) -> u64 {
    set.unwrap_or_else(|| adaptive_row_group_bytes(input_bytes))
}

/// Scratch bytes an output block takes while staged before it is laid out: `row_group_bytes`
/// times the row groups of a block, none when blocks are off (one row group each).
pub fn staged_block_bytes(row_group_bytes: u64, row_groups_per_block: usize) -> u64 {
    if row_groups_per_block > 1 {
        row_group_bytes.saturating_mul(row_groups_per_block as u64)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_cases() {
        const MIB: u64 = 1 << 20;
        for (input, want) in [
            (0, MIB),
            (4 * MIB, MIB),
            (8 * MIB, MIB),
            (14 * MIB, 14 * MIB / 8),
            (256 * MIB, 32 * MIB),
            (400 * MIB, 32 * MIB),
            (u64::MAX, 32 * MIB),
        ] {
            assert_eq!(adaptive_row_group_bytes(input), want, "input {input}");
        }
    }

    #[test]
    fn precedence() {
        assert_eq!(resolve_row_group_bytes(Some(5), 1 << 30), 5);
        assert_eq!(resolve_row_group_bytes(None, 1 << 30), MAX_ROW_GROUP_BYTES);
    }
}
