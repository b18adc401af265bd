//! The decoded-row budget B and its plan: every share of B that a job's steps may spend,
//! computed in one place ([`Budget::plan`]).
//!
//! A job is given B, the bytes of decoded rows its sort may hold (a function has about four
//! times B in all, see [`budget_for_function_memory`](crate::options::budget_for_function_memory)).
//! What may spend B, and how much:
//!
//! | share | formula | who asks |
//! | --- | --- | --- |
//! | [`read_target_bytes`](BudgetPlan::read_target_bytes) | B/16, between 64 KiB and 8 MiB | the sort's reads of its inputs, the plain rewrite |
//! | [`string_codes_bytes`](BudgetPlan::string_codes_bytes) | B/32 when strings travel as codes, else 0 | the sort's string coder |
//! | [`rows_bytes`](BudgetPlan::rows_bytes) | max(B - largest reader - read target, B/4) - string codes | run formation |
//! | [`sized_fan_in`](BudgetPlan::sized_fan_in) | the fan-in, between 2 and [`SIZED_FAN_IN`] | the merge |
//! | [`run_batch_bytes`](BudgetPlan::run_batch_bytes) | max(rows - sized fan-in x [`RUN_READ_BUFFER_BYTES`], rows/2) / (sized fan-in + 1) | run formation, the merge, presorted inputs' reads |
//! | [`release_interval_bytes`](BudgetPlan::release_interval_bytes) | rows/2 | the merge's release of free memory |
//! | [`footers_bytes`](BudgetPlan::footers_bytes) | B/2 | the fan-out's admission (footers read at once) |
//! | [`download_allowance_bytes`](BudgetPlan::download_allowance_bytes) | B | the check before a fan-out (late files downloaded) |
//! | [`range_piece_bytes`](BudgetPlan::range_piece_bytes) | B/8, between 256 KiB and 8 MiB | a fan-out merge's ranged reads of a run's selection (two at a time) |
//! | [`scratch_check_above_bytes`](BudgetPlan::scratch_check_above_bytes) | B/4 | the scratch check (smaller inputs spill plain, unchecked) |
//! | [`leaf_limit`](BudgetPlan::leaf_limit) | max(2B / [`LEAF_BYTES`], 256) | the schema union (one job, the fan-out's admission and tasks) |
//! | [`page_cap_bytes`](BudgetPlan::page_cap_bytes) | max(B/4, 8 MiB) | the input check (one page) |
//! | [`reader_cap_bytes`](BudgetPlan::reader_cap_bytes) | max(7B/2 - min(leaves x [`LEAF_BYTES`], 2B), 16 MiB) | the input check (one row group's pages and dictionaries) |
//!
//! The shares of the sort (rows, run batches, release interval) depend on what it holds beside
//! its rows ([`SortDemand`]); the others on B alone. Output bytes never depend on any of them.

/// Default decoded-row budget when nothing else says: 64 MiB.
pub const DEFAULT_BUDGET_BYTES: u64 = 64 << 20;

/// Smallest budget accepted (tests use tiny budgets to force many runs).
pub const MIN_BUDGET_BYTES: u64 = 16 << 10;

/// Runs whose batches the merge's share of the budget is sized for: each run is written in
/// batches of at most 1/(this + 1) of it (see [`BudgetPlan::run_batch_bytes`]), so this many
/// runs always fit one pass. Runs of narrow rows write smaller batches (at most 1,024 rows),
/// and a pass then opens as many of them as the same memory holds.
pub const SIZED_FAN_IN: usize = 64;

/// Bytes an open run reader holds beside its batch: its read buffer, which gathers the small
/// message headers (batch bodies larger than it are read past it, straight into the batch).
/// A merge holds one per open run, so it is charged to the budget with the run's batch.
pub const RUN_READ_BUFFER_BYTES: u64 = 8 << 10;

/// Memory a leaf column of the union takes beside the budget, about: its reader (a page, a
/// ZSTD decompression context of about 95 KB) and its writer (page buffers, statistics, a
/// dictionary's hash table of about 70 KB, a ZSTD codec, which in parquet 60 holds a
/// decompression context too, and, while a page is compressed before its row group closes, a
/// compression context of 1.0 MB at 256 KiB pages, of which the writer's row groups let at most
/// 32 chunks hold one at a time). Measured on ZSTD files of 300 and 650 int64 columns of
/// 200,000 and 50,000 distinct rows at a 64 MiB budget: 140 to 210 KB of peak RSS a leaf above
/// a narrow file's; files of 250 to 1,000 columns of 3,000 rows showed 160 to 214 KB.
pub const LEAF_BYTES: u64 = 256 << 10;

/// Leaf columns a job may always hold, whatever its budget.
pub const MIN_LEAF_LIMIT: usize = 256;

/// The share of B (one part in this many) for the dictionaries of coded string columns.
const STRING_CODES_SHARE: u64 = 32;

/// The merge gives the allocator's free memory back each time it has merged this part of
/// the rows' budget (see [`MemoryRelease`](crate::sort::resources::MemoryRelease)). Each release
/// hands pages back that later allocations fault in again. On the bloat partition every half
/// budget keeps the peak RSS within 2-4 MB of every quarter's and takes 7-8% less time; on a
/// wide hour it faults a third fewer pages in, for 3-7% less CPU. Once per whole budget lets
/// the bloat partition grow 8-15 MB more.
const RELEASE_SHARE: u64 = 2;

/// The decoded-row budget B: bytes of decoded rows a job's sort may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Budget {
    bytes: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What the sort holds beside its rows, which its shares of B leave room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortDemand {
    /// The largest reader of an input: a page and a dictionary per column (about 100 MB for a
    /// file of 50 wide columns); the merge's writer holds as much again.
    pub reader_bytes: u64,
    /// Whether repetitive string columns travel as codes.
    pub code_strings: bool,
    /// The merge's fan-in cap.
    pub fan_in: usize,
}

impl SortDemand {
    /// No reader, no codes, the sized fan-in: what a step that does not sort asks the plan with
    /// (the shares that depend on B alone are the same whatever the demand).
    pub const NONE: SortDemand = SortDemand {
        reader_bytes: 0,
        code_strings: false,
        fan_in: SIZED_FAN_IN,
    };
}

/// Every share of B, as [`Budget::plan`] computes it (the table in the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetPlan {
    /// B itself.
    pub budget_bytes: u64,
    /// Decoded bytes per batch read from an input. The sort and the plain rewrite read alike.
    pub read_target_bytes: u64,
    /// The dictionaries of coded string columns.
    pub string_codes_bytes: u64,
    /// Decoded rows the sort holds: what B leaves beside the largest reader and one batch read
    /// (one decoded batch waits for the sorter), never less than a quarter of B, less the
    /// string codes.
    pub rows_bytes: u64,
    /// Runs a merge pass is sized for.
    pub sized_fan_in: usize,
    /// Decoded bytes of one run batch: each run the merge reads holds a read buffer beside its
    /// batch, and the batches are sized so that [`sized_fan_in`](Self::sized_fan_in) runs and
    /// the chunk being gathered fit the rows' share (narrow rows' batches are smaller, and a
    /// merge then opens more of them, up to the fan-in cap).
    pub run_batch_bytes: u64,
    /// Bytes of merged rows between two releases of the allocator's free memory.
    pub release_interval_bytes: u64,
    /// Bytes of footers the fan-out's admission reads at once (one footer may pass it alone).
    pub footers_bytes: u64,
    /// Bytes of late files the check before a fan-out may download (the invocation that asks
    /// may have little scratch space).
    pub download_allowance_bytes: u64,
    /// Bytes of each ranged read a fan-out merge stages a run's selection with (two in flight,
    /// each written to scratch as it arrives; requests past a few MiB gain S3 nothing).
    pub range_piece_bytes: u64,
    /// Inputs of at most this many encoded bytes spill plain without a look at the scratch
    /// space.
    pub scratch_check_above_bytes: u64,
    /// The most leaf columns the union of a job's inputs may have: their fixed cost may take up
    /// to twice B (a function has four times it), and never fewer than [`MIN_LEAF_LIMIT`]: 512
    /// at 64 MiB (a 256 MB function), 3,536 at 442 MiB (1,769 MB). Without it, 2,000 columns
    /// took 389 MiB at a 64 MiB budget.
    pub leaf_limit: usize,
    /// The most one page of an input may decode to (writers' pages are about 1 MiB).
    pub page_cap_bytes: u64,
    /// Room for a reader's pages and dictionaries and its columns' fixed cost together: three
    /// and a half times B (see [`reader_cap_bytes`](Self::reader_cap_bytes)).
    reader_room_bytes: u64,
    /// Room for the columns' fixed cost: twice B (see [`leaf_limit`](Self::leaf_limit)).
    leaf_room_bytes: u64,
}

impl Budget {
    /// The budget when nothing else says.
    pub const DEFAULT: Budget = Budget::new(DEFAULT_BUDGET_BYTES);

    /// A budget of `bytes`.
    pub const fn new(bytes: u64) -> Self {
        Self { bytes }
    }

    /// B in bytes.
    pub const fn bytes(self) -> u64 {
        self.bytes
    }

    /// Every share of B for a sort holding `sort` beside its rows (the table in the module doc).
    pub fn plan(self, sort: SortDemand) -> BudgetPlan {
        let b = self.bytes;
        let read_target_bytes = (b / 16).clamp(64 << 10, 8 << 20);
        let string_codes_bytes = match sort.code_strings {
            true => b / STRING_CODES_SHARE,
            false => 0,
        };
        let rows_bytes = b
            .saturating_sub(sort.reader_bytes.saturating_add(read_target_bytes))
            .max(b / 4)
            - string_codes_bytes;
        let sized_fan_in = sort.fan_in.clamp(2, SIZED_FAN_IN);
        let run_readers_bytes = sized_fan_in as u64 * RUN_READ_BUFFER_BYTES;
        let run_batch_bytes = rows_bytes
            .saturating_sub(run_readers_bytes)
            .max(rows_bytes / 2)
            / (sized_fan_in as u64 + 1);
        let leaf_room_bytes = b.saturating_mul(2);
        BudgetPlan {
            budget_bytes: b,
            read_target_bytes,
            string_codes_bytes,
            rows_bytes,
            sized_fan_in,
            run_batch_bytes,
            release_interval_bytes: rows_bytes / RELEASE_SHARE,
            footers_bytes: b / 2,
            download_allowance_bytes: b,
            range_piece_bytes: (b / 8).clamp(256 << 10, 8 << 20),
            scratch_check_above_bytes: b / 4,
            leaf_limit: usize::try_from(leaf_room_bytes / LEAF_BYTES)
                .unwrap_or(usize::MAX)
                .max(MIN_LEAF_LIMIT),
            page_cap_bytes: (b / 4).max(8 << 20),
            reader_room_bytes: b.saturating_mul(7) / 2,
            leaf_room_bytes,
        }
    }

    /// The shares that depend on B alone (those of the sort as for [`SortDemand::NONE`]).
    pub fn shares(self) -> BudgetPlan {
        self.plan(SortDemand::NONE)
    }
}

impl BudgetPlan {
    /// The most that reading one row group of an input with `leaves` leaf columns may hold at
    /// once in pages and dictionaries: what three and a half times B leaves beside the columns'
    /// fixed cost (counted up to the twice B the leaf limit gives them), and never less than
    /// 16 MiB (two pages at their floor, see [`page_cap_bytes`](Self::page_cap_bytes)). A
    /// function has four times B; the rows keep at least a quarter of B (the rest of B goes to
    /// the reader), and another quarter is left for the writer's staged block. The output's
    /// upload holds at most an eighth of the memory beside them
    /// ([`crate::store::upload::PartPlan`]).
    pub fn reader_cap_bytes(&self, leaves: u64) -> u64 {
        let fixed = leaves.saturating_mul(LEAF_BYTES).min(self.leaf_room_bytes);
        self.reader_room_bytes.saturating_sub(fixed).max(16 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Budgets from the smallest accepted to beyond any machine.
    const BUDGETS: [u64; 7] = [
        16 << 10,
        1 << 20,
        8 << 20,
        64 << 20,
        442 << 20,
        64 << 30,
        u64::MAX / 4,
    ];

    /// A sort demand with a reader of `reader_bytes`.
    fn demand(reader_bytes: u64, code_strings: bool, fan_in: usize) -> SortDemand {
        SortDemand {
            reader_bytes,
            code_strings,
            fan_in,
        }
    }

    /// The sort's shares as the sort computed them before the plan: (read target, codes, rows,
    /// sized fan-in, run batch, release interval).
    fn sort_shares_before(b: u64, sort: SortDemand) -> (u64, u64, u64, usize, u64, u64) {
        let read_target = (b / 16).clamp(64 << 10, 8 << 20);
        let codes = if sort.code_strings { b / 32 } else { 0 };
        let rows = b.saturating_sub(sort.reader_bytes + read_target).max(b / 4) - codes;
        let sized = sort.fan_in.clamp(2, 64);
        let share =
            rows.saturating_sub(sized as u64 * (8 << 10)).max(rows / 2) / (sized as u64 + 1);
        (read_target, codes, rows, sized, share, rows / 2)
    }

    #[test]
    fn the_sort_shares_are_the_formulas_they_replace() {
        for b in BUDGETS {
            for sort in [
                SortDemand::NONE,
                demand(0, true, 512),
                demand(100 << 20, true, 512),
                demand(3 << 20, false, 1),
                demand(b / 3, true, 16),
            ] {
                let plan = Budget::new(b).plan(sort);
                let shares = (
                    plan.read_target_bytes,
                    plan.string_codes_bytes,
                    plan.rows_bytes,
                    plan.sized_fan_in,
                    plan.run_batch_bytes,
                    plan.release_interval_bytes,
                );
                assert_eq!(shares, sort_shares_before(b, sort), "B = {b}, {sort:?}");
            }
        }
    }

    #[test]
    fn the_job_shares_are_the_formulas_they_replace() {
        for b in BUDGETS {
            let plan = Budget::new(b).shares();
            assert_eq!(plan.budget_bytes, b);
            assert_eq!(plan.footers_bytes, b / 2);
            assert_eq!(plan.download_allowance_bytes, b);
            assert_eq!(plan.range_piece_bytes, (b / 8).clamp(256 << 10, 8 << 20));
            assert_eq!(plan.scratch_check_above_bytes, b / 4);
            let leaves = usize::try_from(b.saturating_mul(2) / (256 << 10)).unwrap_or(usize::MAX);
            assert_eq!(plan.leaf_limit, leaves.max(256), "B = {b}");
            assert_eq!(plan.page_cap_bytes, (b / 4).max(8 << 20));
            for leaves in [0, 1, 300, 2_000, u64::MAX] {
                let fixed = leaves.saturating_mul(256 << 10).min(b.saturating_mul(2));
                let cap = (b.saturating_mul(7) / 2)
                    .saturating_sub(fixed)
                    .max(16 << 20);
                assert_eq!(
                    plan.reader_cap_bytes(leaves),
                    cap,
                    "B = {b}, {leaves} leaves"
                );
            }
        }
    }

    #[test]
    fn the_shares_at_the_default_budget() {
        let plan = Budget::DEFAULT.plan(demand(0, true, 512));
        assert_eq!(plan.read_target_bytes, 4 << 20);
        assert_eq!(plan.string_codes_bytes, 2 << 20);
        assert_eq!(plan.rows_bytes, 58 << 20);
        assert_eq!(plan.sized_fan_in, 64);
        assert_eq!(plan.run_batch_bytes, ((58 << 20) - 64 * (8 << 10)) / 65);
        assert_eq!(plan.release_interval_bytes, 29 << 20);
        assert_eq!(plan.leaf_limit, 512);
        assert_eq!(Budget::new(442 << 20).shares().leaf_limit, 3536);
        assert_eq!(Budget::new(8 << 20).shares().leaf_limit, MIN_LEAF_LIMIT);
    }

    #[test]
    fn a_tiny_budget_keeps_a_quarter_for_rows() {
        let plan = Budget::new(16 << 10).plan(demand(100 << 20, true, 512));
        assert_eq!(plan.read_target_bytes, 64 << 10);
        assert_eq!(plan.rows_bytes, (4 << 10) - (512));
        assert_eq!(plan.run_batch_bytes, plan.rows_bytes / 2 / 65);
        assert_eq!(plan.page_cap_bytes, 8 << 20);
        assert_eq!(plan.reader_cap_bytes(1), 16 << 20);
    }

    #[test]
    fn a_huge_budget_does_not_overflow() {
        let plan = Budget::new(u64::MAX).plan(demand(u64::MAX, true, usize::MAX));
        assert_eq!(plan.rows_bytes, u64::MAX / 4 - u64::MAX / 32);
        assert_eq!(
            plan.leaf_limit,
            usize::try_from(u64::MAX / (256 << 10)).unwrap_or(usize::MAX)
        );
        assert_eq!(plan.reader_cap_bytes(0), u64::MAX / 2);
    }
}
