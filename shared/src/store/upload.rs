//! Streams a file being written on a blocking thread to the store as a multipart upload.
//!
//! The writer side implements `std::io::Write`, cuts the byte stream into parts and hands
//! them over a bounded channel, so at most a few parts are in memory at once. The async
//! side uploads them; if the writer goes away without [`UploadWriter::finish`], the upload
//! is aborted and nothing appears at the key.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// Bytes per uploaded part (S3 needs at least 5 MiB for all parts but the last).
pub const PART_BYTES: usize = 5 << 20;
/// Parts uploaded concurrently.
const PARTS_IN_FLIGHT: usize = 2;

enum Message {
    Part(Bytes),
    Finish,
}

/// The blocking-thread end: collects bytes into parts.
pub struct UploadWriter {
    tx: mpsc::Sender<Message>,
    buffer: Vec<u8>,
    bytes: u64,
}

/// Starts a multipart upload task for `key`; returns the writer end and the task handle,
/// which resolves to the uploaded size once the writer finishes.
pub fn start_upload(
    store: Arc<dyn ObjectStore>,
    key: Path,
) -> (UploadWriter, tokio::task::JoinHandle<Result<u64>>) {
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(run_upload(store, key, rx));
    (
        UploadWriter {
            tx,
            buffer: Vec::with_capacity(PART_BYTES),
            bytes: 0,
        },
        task,
    )
}

async fn run_upload(
    store: Arc<dyn ObjectStore>,
    key: Path,
    mut rx: mpsc::Receiver<Message>,
) -> Result<u64> {
    let upload = store
        .put_multipart(&key)
        .await
        .map_err(|e| Error::store("put_multipart", &key, e))?;
    let mut parts = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let mut total = 0u64;
    loop {
        match rx.recv().await {
            Some(Message::Part(bytes)) => {
                if let Err(e) = parts.wait_for_capacity(PARTS_IN_FLIGHT).await {
                    let _ = parts.abort().await;
                    return Err(Error::store("upload_part", &key, e));
                }
                total += bytes.len() as u64;
                parts.put(bytes);
            }
            Some(Message::Finish) => {
                parts
                    .finish()
                    .await
                    .map_err(|e| Error::store("complete_multipart", &key, e))?;
                return Ok(total);
            }
            None => {
                // The writer failed or was dropped: nothing may appear at the key.
                let _ = parts.abort().await;
                return Err(Error::invariant(format!(
                    "upload of {key} abandoned before it finished"
                )));
            }
        }
    }
}

impl UploadWriter {
    fn send(&mut self, message: Message) -> std::io::Result<()> {
        self.tx
            .blocking_send(message)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "upload task stopped"))
    }

    /// Sends the last part and asks the task to complete the upload.
    pub fn finish(&mut self) -> std::io::Result<u64> {
        if !self.buffer.is_empty() {
            let part = Bytes::from(std::mem::take(&mut self.buffer));
            self.send(Message::Part(part))?;
        }
        self.send(Message::Finish)?;
        Ok(self.bytes)
    }
}

impl Write for UploadWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(buf);
        self.bytes += buf.len() as u64;
        if self.buffer.len() >= PART_BYTES {
            let part = Bytes::from(std::mem::replace(
                &mut self.buffer,
                Vec::with_capacity(PART_BYTES),
            ));
            self.send(Message::Part(part))?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
