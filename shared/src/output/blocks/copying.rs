//! The output and the staging buffer of a [`super::BlockWriter`], lent to a thread that copies
//! a laid-out block from one to the other while the next row group is encoded.
//!
//! An output that is an upload takes a block at the network's pace (tens of megabytes a block
//! at 80 MB/s): copied on the encoding thread, the block would stop the merge for that long.
//! The next use of either end (staging the next row group, a plain row group, the footer)
//! waits for the copy first, so at most one block is copied at a time, from the one staging
//! buffer: no more memory or scratch space than a copy made in place, and the same bytes.

use std::io::Write;
use std::path::PathBuf;
use std::thread::JoinHandle;

use parquet::file::writer::TrackedWrite;

use super::staging::Staging;
use crate::error::{Error, Result};

/// The output and the staging buffer.
pub(crate) struct Ends<W: Write> {
    /// The file's sink, counting the bytes written.
    pub(crate) out: TrackedWrite<W>,
    /// The open block's encoded row groups.
    pub(crate) staging: Staging,
}

/// What the copying thread gives back: the ends, and the copy's outcome.
type Copied<W> = (Box<Ends<W>>, std::io::Result<()>);

/// Where the ends are.
enum State<W: Write> {
    /// With the writer.
    Ready(Box<Ends<W>>),
    /// With the thread copying a block, from the staging buffer at `staging`.
    Copying {
        thread: JoinHandle<Copied<W>>,
        staging: PathBuf,
    },
    /// A copy failed or its thread panicked: the output is incomplete.
    Broken,
}

/// The ends, or the thread that holds them while it copies a block.
pub(crate) struct Destination<W: Write> {
    state: State<W>,
}

impl<W: Write + Send + 'static> Destination<W> {
    /// The ends, with the writer.
    pub(crate) fn new(out: TrackedWrite<W>, staging: Staging) -> Self {
        Self {
            state: State::Ready(Box::new(Ends { out, staging })),
        }
    }

    /// The ends, once the block being copied (if any) is in the output.
    pub(crate) fn ready(&mut self) -> Result<&mut Ends<W>> {
        if let State::Copying { .. } = self.state {
            let State::Copying { thread, staging } =
                std::mem::replace(&mut self.state, State::Broken)
            else {
                return Err(Error::invariant("the block copy vanished"));
            };
            let (ends, copied) = thread
                .join()
                .map_err(|_| Error::invariant("the block copy's thread panicked"))?;
            copied.map_err(|e| Error::scratch(&staging, e))?;
            self.state = State::Ready(ends);
        }
        match &mut self.state {
            State::Ready(ends) => Ok(ends),
            _ => Err(Error::invariant(
                "the output is broken by a failed block copy",
            )),
        }
    }

    /// Copies `ranges` (start, length) of the staging buffer to the output, in order, then
    /// empties the buffer, on a thread of its own; [`Self::ready`] waits for it.
    pub(crate) fn copy(&mut self, ranges: Vec<(u64, u64)>) -> Result<()> {
        self.ready()?;
        let State::Ready(mut ends) = std::mem::replace(&mut self.state, State::Broken) else {
            return Err(Error::invariant("the output is not ready for a block"));
        };
        let staging = ends.staging.describe();
        let thread = std::thread::Builder::new()
            .name("block-copy".into())
            .spawn(move || {
                let Ends { out, staging } = &mut *ends;
                let copied = (staging.copy_ranges(&ranges, out)).and_then(|()| staging.clear());
                (ends, copied)
            })
            .map_err(|e| Error::scratch(&staging, e))?;
        self.state = State::Copying { thread, staging };
        Ok(())
    }
}

impl<W: Write> Drop for Destination<W> {
    /// A writer dropped midway (its sort failed or was interrupted) waits for the block being
    /// copied, so the output's sink goes with it (an upload is then aborted), not later.
    fn drop(&mut self) {
        if let State::Copying { thread, .. } = std::mem::replace(&mut self.state, State::Broken) {
            let _ = thread.join();
        }
    }
}
