//! The plan's admission of a fanned-out job's inputs into one union of columns.
//!
//! Each group sorts its inputs into a run on its own, and the ranges then merge every run, so
//! the runs must unify and their columns together stay within the budget's leaf limit. A
//! group can only see its own inputs: two groups may each keep a different type of a
//! conflicting column, or each stay under the limit while together they pass it, and the job
//! would fail at the split however often it ran. So the plan reads every input's footer and
//! makes the decision an unfanned job makes ([`unify_weighted`]: the types most rows back,
//! within the leaf limit) for the whole partition, before any group runs. The files it refuses
//! are quarantined with its reason, as an unfanned job would quarantine them, and the groups
//! sort the rest.
//!
//! The footers are those the job's sizing read ([`crate::compact::sizing`]), the others read
//! here. A footer the plan cannot read or that the input check refuses on its own (refused,
//! gone, not Parquet, too large, nesting too deep, too many columns, no time column) stays in
//! its group, whose check quarantines the file with the precise reason; only a store failure
//! of another kind fails the plan. The plan sees footers, not rows: a file whose rows
//! its group's check refuses (outside the hour) still took part in the union.

use crate::compact::job::JobContext;
use crate::compact::sizing::{Footer, Footers, read_footers};
use crate::compact::state::WantedInput;
use crate::error::{Error, Result};
use crate::input::schema::unify_weighted;
use crate::object_key::ObjectKey;
use crate::report::Quarantined;

/// The groups with only the admitted inputs (groups left empty dropped), and the refused ones.
#[derive(Debug)]
pub(crate) struct Admission {
    /// The admitted inputs of each group, in order.
    pub groups: Vec<Vec<WantedInput>>,
    /// The inputs the union refused, with why.
    pub rejected: Vec<Quarantined>,
}

/// Admits the inputs of `groups` into one union, as an unfanned job of them would.
pub(crate) async fn admit(
    job: &JobContext<'_>,
    groups: Vec<Vec<WantedInput>>,
    known: &Footers,
) -> Result<Admission> {
    let inputs: Vec<&WantedInput> = groups.iter().flatten().collect();
    // Footers the job's sizing read are not read again.
    let unknown: Vec<&WantedInput> = (inputs.iter().copied())
        .filter(|i| !known.contains_key(&ObjectKey::from(&i.key)))
        .collect();
    let mut fresh = read_footers(job, &unknown).await?.into_iter();
    let read: Vec<Footer> = (inputs.iter())
        .map(|i| match known.get(&ObjectKey::from(&i.key)) {
            Some(footer) => footer.clone(),
            None => fresh.next().unwrap_or(Footer::Unread),
        })
        .collect();
    // The union of every readable footer holding rows, weighed as an unfanned job weighs.
    let names: Vec<String> = (inputs.iter())
        .map(|i| i.key.filename().unwrap_or_default().to_string())
        .collect();
    let mut candidates = Vec::new();
    let mut positions = Vec::new();
    for (position, footer) in read.iter().enumerate() {
        if let Footer::Read(facts) = footer
            && facts.rows > 0
        {
            let weight = match inputs[position].is_compacted {
                true => u64::MAX,
                false => facts.rows,
            };
            candidates.push((names[position].as_str(), facts.schema.as_ref(), weight));
            positions.push(position);
        }
    }
    let limit = job.options.budget().shares().leaf_limit;
    let (_, refusals) = unify_weighted(&candidates, &job.options.keys, limit);
    let mut refused = vec![None; inputs.len()];
    for refusal in refusals {
        let position = positions[refusal.position];
        let input = inputs[position];
        if input.is_compacted {
            return Err(Error::CompactedInput {
                file: input.key.to_string(),
                reason: refusal.reason,
            });
        }
        tracing::warn!(file = %input.key, reason = refusal.reason, "quarantined bad input");
        refused[position] = Some(refusal.reason);
    }
    let mut rejected = Vec::new();
    let mut admitted = Vec::new();
    let mut refused = refused.into_iter();
    for group in groups {
        let mut kept = Vec::new();
        for input in group {
            match refused.next().flatten() {
                Some(reason) => rejected.push(Quarantined {
                    file: ObjectKey::from(&input.key),
                    reason,
                }),
                None => kept.push(input),
            }
        }
        if !kept.is_empty() {
            admitted.push(kept);
        }
    }
    Ok(Admission {
        groups: admitted,
        rejected,
    })
}
