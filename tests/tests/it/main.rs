//! The workspace's integration tests against a real S3-compatible server, cargo-lambda's
//! emulator and the CLI as a process, one module per concern, compiled as one test binary.
//!
//! They need the environment `bash tests/run.sh` sets (the S3 test server's endpoint and
//! bucket, the CLI built in the same profile). Run one module with its path as the filter:
//! `cargo test --profile quick -p ourios-integration-tests --test it crashes::`.

mod cli_s3;
mod commit_protocol;
mod concurrency;
mod crashes;
mod fan_out_hand_off;
mod foreign_keys;
mod lambda_e2e;
mod lambda_iam;
mod lambda_lakes;
mod multipart_uploads;
mod quarantine;
mod store_conformance;
