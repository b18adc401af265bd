//! The synthetic services: names derived from the LogHub datasets, their lines and Zipf volumes.

use super::corpus::{self, Dataset, LogRow};
use crate::error::{Error, Result};
use crate::rng::{fnv1a, mix64};

/// A base service: a name, the dataset its lines come from, and which of its lines it logs.
struct BaseService {
    name: &'static str,
    dataset: &'static str,
    logs: fn(&LogRow) -> bool,
}

fn any(_: &LogRow) -> bool {
    true
}

fn component_starts(row: &LogRow, prefix: &str) -> bool {
    row.component
        .as_deref()
        .is_some_and(|c| c.starts_with(prefix))
}

/// Base services in volume order: the first is the largest (Zipf rank 1).
const BASE_SERVICES: &[BaseService] = &[
    BaseService {
        name: "hdfs",
        dataset: "HDFS",
        logs: any,
    },
    BaseService {
        name: "openstack.nova-api",
        dataset: "OpenStack",
        logs: |r| {
            r.log_file
                .as_deref()
                .is_some_and(|f| f.starts_with("nova-api"))
        },
    },
    BaseService {
        name: "spark.executor",
        dataset: "Spark",
        logs: |r| component_starts(r, "executor."),
    },
    BaseService {
        name: "hadoop.mapreduce",
        dataset: "Hadoop",
        logs: any,
    },
    BaseService {
        name: "zookeeper",
        dataset: "Zookeeper",
        logs: any,
    },
    BaseService {
        name: "android.framework",
        dataset: "Android",
        logs: any,
    },
    BaseService {
        name: "openstack.nova-compute",
        dataset: "OpenStack",
        logs: |r| {
            r.log_file
                .as_deref()
                .is_some_and(|f| f.starts_with("nova-compute"))
        },
    },
    BaseService {
        name: "apache.httpd",
        dataset: "Apache",
        logs: any,
    },
    BaseService {
        name: "spark.storage",
        dataset: "Spark",
        logs: |r| component_starts(r, "storage."),
    },
    BaseService {
        name: "linux.sshd",
        dataset: "Linux",
        logs: |r| component_starts(r, "sshd"),
    },
    BaseService {
        name: "openssh",
        dataset: "OpenSSH",
        logs: any,
    },
    BaseService {
        name: "windows.cbs",
        dataset: "Windows",
        logs: any,
    },
    BaseService {
        name: "bgl.ras",
        dataset: "BGL",
        logs: any,
    },
    BaseService {
        name: "thunderbird",
        dataset: "Thunderbird",
        logs: any,
    },
    BaseService {
        name: "hpc.cluster",
        dataset: "HPC",
        logs: any,
    },
    BaseService {
        name: "healthapp",
        dataset: "HealthApp",
        logs: any,
    },
    BaseService {
        name: "macos",
        dataset: "Mac",
        logs: any,
    },
    BaseService {
        name: "proxifier",
        dataset: "Proxifier",
        logs: any,
    },
    BaseService {
        name: "linux.ftpd",
        dataset: "Linux",
        logs: |r| component_starts(r, "ftpd"),
    },
];

/// Weight of the largest service; the smallest (last) gets 1/500 of it.
const TOP_WEIGHT: u64 = 1_000_000;
const TINY_DIVISOR: u64 = 500;

/// One generated service.
#[derive(Debug)]
pub(crate) struct Service {
    /// The `service.name` value.
    pub(crate) name: String,
    /// The dataset its bodies come from.
    pub(crate) dataset: &'static Dataset,
    /// Indices of the dataset rows it logs.
    pub(crate) lines: Vec<usize>,
    /// Relative volume (Zipf-like).
    pub(crate) weight: u64,
    /// The hosts it runs on.
    pub(crate) hosts: Vec<String>,
    /// Whether its lines usually carry a trace id (request-serving services).
    pub(crate) traced: bool,
}

/// `n` distinct service names: the base names first, then `<base>-2`, `<base>-3`, ...
pub fn service_names(n: usize) -> Vec<String> {
    (0..n).map(service_name).collect()
}

fn service_name(i: usize) -> String {
    let base = BASE_SERVICES[i % BASE_SERVICES.len()].name;
    match i / BASE_SERVICES.len() {
        0 => base.to_string(),
        round => format!("{base}-{}", round + 1),
    }
}

/// The `n` services with their lines, hosts and weights: rank `r` weighs `1/r`
/// (Zipf, exponent 1), and the last one is tiny.
pub(crate) fn services(n: usize) -> Result<Vec<Service>> {
    (0..n)
        .map(|i| {
            let base = &BASE_SERVICES[i % BASE_SERVICES.len()];
            let dataset = corpus::dataset(base.dataset).ok_or_else(|| {
                Error::invariant(format!("dataset {} is not embedded", base.dataset))
            })?;
            let mut lines: Vec<usize> = (0..dataset.rows.len())
                .filter(|&r| (base.logs)(&dataset.rows[r]))
                .collect();
            if lines.is_empty() {
                lines = (0..dataset.rows.len()).collect();
            }
            let weight = if n > 1 && i + 1 == n {
                (TOP_WEIGHT / TINY_DIVISOR).max(1)
            } else {
                TOP_WEIGHT / (i as u64 + 1)
            };
            let name = service_name(i);
            Ok(Service {
                hosts: hosts(&name, weight),
                traced: matches!(base.dataset, "OpenStack" | "Spark" | "Hadoop" | "HDFS"),
                name,
                dataset,
                lines,
                weight,
            })
        })
        .collect()
}

/// Host names for a service: more hosts for bigger services, stable per name.
fn hosts(name: &str, weight: u64) -> Vec<String> {
    let count = 1 + (weight * 8 / TOP_WEIGHT) as usize;
    (0..count)
        .map(|h| {
            let bits = mix64(fnv1a(name.as_bytes()) ^ h as u64);
            let [a, b, c, ..] = bits.to_le_bytes();
            format!("ip-10-{}-{b}-{c}.ec2.internal", a % 64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_stable() {
        let names = service_names(45);
        assert_eq!(names[0], "hdfs");
        assert_eq!(names[2], "spark.executor");
        assert_eq!(names[BASE_SERVICES.len()], "hdfs-2");
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn every_base_service_has_its_own_lines() {
        let all = services(BASE_SERVICES.len()).unwrap();
        assert_eq!(all.len(), BASE_SERVICES.len());
        for service in &all {
            assert!(!service.lines.is_empty(), "{}", service.name);
            assert!(!service.hosts.is_empty());
        }
        let api = &all[1];
        assert!(
            api.lines.len() < api.dataset.rows.len(),
            "nova-api is a subset"
        );
    }
}
