//! The fan-out state machine (`infra/fan-out.asl.json`) as the compactor sees it: it starts an
//! execution for a job too large for one invocation, named after the job so that a retried
//! invocation does not start a second one.

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::partition::PartitionId;
use crate::report::FanOutShape;
use crate::store::aws_api::{AwsApi, AwsApiError};
use crate::store::{aws_env, credentials};

/// The setting naming the state machine's ARN; unset, the compactor never hands a job off.
pub const STATE_MACHINE_SETTING: &str = "OURIOS_FAN_OUT_STATE_MACHINE";

/// A client of the fan-out state machine.
#[derive(Debug, Clone)]
pub struct FanOutStateMachine {
    starter: Starter,
    arn: String,
}

/// What starts executions: Step Functions, or (for simulations) a list of requests.
#[derive(Debug, Clone)]
enum Starter {
    Sfn(StepFunctions),
    #[cfg(feature = "testing")]
    Recorded(StartRequests),
}

/// The executions a recording state machine was asked to start, by name, with their input:
/// a simulation runs them as the state machine would.
#[cfg(feature = "testing")]
pub type StartRequests = std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>;

/// An execution the compactor asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    /// Its name (a function of the partition and the job).
    pub name: String,
    /// Its ARN; `None` when an execution of that name already existed (a retried hand-off).
    pub arn: Option<String>,
}

impl FanOutStateMachine {
    /// The state machine named by [`STATE_MACHINE_SETTING`], called with the credentials of
    /// every AWS client ([`credentials::provider`]) in the region its ARN names
    /// (`AWS_ENDPOINT_URL_SFN` or `AWS_ENDPOINT_URL` for another endpoint). `None` when the
    /// setting is unset or empty.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let var = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let Some(arn) = var(STATE_MACHINE_SETTING) else {
            return Ok(None);
        };
        let arn = arn.trim().to_string();
        if !arn.starts_with("arn:") || !arn.contains(":states:") {
            return Err(Error::Config {
                message: format!(
                    "{STATE_MACHINE_SETTING}={arn:?} is not a state machine's ARN \
                     (arn:aws:states:<region>:<account>:stateMachine:<name>)"
                ),
            });
        }
        let credentials = credentials::provider(lookup).ok_or_else(|| Error::Config {
            message: format!(
                "{STATE_MACHINE_SETTING} is set but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                 are not (and this build has no credential chain)"
            ),
        })?;
        // The state machine's region and partition are in its ARN.
        let field = |at: usize| arn.split(':').nth(at).filter(|f| !f.is_empty());
        let region = field(3).map_or_else(|| aws_env::region(lookup), str::to_string);
        let endpoint = (var("AWS_ENDPOINT_URL_SFN").or_else(|| var("AWS_ENDPOINT_URL")))
            .unwrap_or_else(|| match field(1) {
                Some("aws-cn") => format!("https://states.{region}.amazonaws.com.cn"),
                _ => format!("https://states.{region}.amazonaws.com"),
            });
        let client = StepFunctions::new(&region, &endpoint, credentials)?;
        Ok(Some(Self {
            starter: Starter::Sfn(client),
            arn,
        }))
    }

    /// A state machine that records each execution it is asked to start (a second one of the
    /// same name exists already, as in Step Functions) instead of calling AWS.
    #[cfg(feature = "testing")]
    pub fn recording(arn: &str) -> (Self, StartRequests) {
        let requests = StartRequests::default();
        let machine = Self {
            starter: Starter::Recorded(std::sync::Arc::clone(&requests)),
            arn: arn.to_string(),
        };
        (machine, requests)
    }

    /// The state machine's ARN.
    pub fn arn(&self) -> &str {
        &self.arn
    }

    /// Starts the execution of job `job` of `partition` in `shape`. An execution of the same
    /// name that already exists is this job's, started by an earlier attempt: not an error.
    pub async fn start(
        &self,
        partition: &PartitionId,
        job: &str,
        shape: FanOutShape,
    ) -> Result<Execution> {
        let name = execution_name(partition, job);
        let client = match &self.starter {
            Starter::Sfn(client) => client,
            #[cfg(feature = "testing")]
            Starter::Recorded(requests) => {
                let mut requests = requests
                    .lock()
                    .map_err(|_| Error::invariant("recorded executions: a poisoned lock"))?;
                let exists = requests.iter().any(|(n, _)| *n == name);
                let arn = (!exists).then(|| format!("{}:{name}", self.arn));
                if !exists {
                    requests.push((name.clone(), execution_input(partition, job, shape)));
                }
                return Ok(Execution { name, arn });
            }
        };
        let input = execution_input(partition, job, shape).to_string();
        let request = json!({ "stateMachineArn": self.arn, "name": name, "input": input });
        match client.call("StartExecution", &request).await {
            Ok(output) => Ok(Execution {
                name,
                arn: output["executionArn"].as_str().map(str::to_string),
            }),
            Err(e) if e.code.as_deref() == Some("ExecutionAlreadyExists") => {
                Ok(Execution { name, arn: None })
            }
            Err(e) => Err(Error::Service {
                service: "Step Functions",
                operation: "StartExecution",
                target: self.arn.clone(),
                message: e.to_string(),
            }),
        }
    }
}

/// A client of the Step Functions API (JSON 1.0 protocol).
#[derive(Debug, Clone)]
pub struct StepFunctions {
    api: AwsApi,
}

impl StepFunctions {
    /// A client in `region` at `endpoint` (`https://states.<region>.amazonaws.com` on AWS)
    /// signing with `credentials`.
    pub fn new(
        region: &str,
        endpoint: &str,
        credentials: object_store::aws::AwsCredentialProvider,
    ) -> Result<Self> {
        Ok(Self {
            api: AwsApi::new("states", region, endpoint, credentials)?,
        })
    }

    /// Calls `action` (`StartExecution`, `ListExecutions`) with `request`; the answer's JSON.
    pub async fn call(
        &self,
        action: &str,
        request: &Value,
    ) -> std::result::Result<Value, AwsApiError> {
        let target = format!("AWSStepFunctions.{action}");
        let headers = [
            ("content-type", "application/x-amz-json-1.0"),
            ("x-amz-target", target.as_str()),
        ];
        let body = Bytes::from(request.to_string());
        let answer = self.api.send(Method::POST, "/", &headers, body).await?;
        serde_json::from_slice(&answer.body).map_err(|e| AwsApiError {
            status: Some(answer.status),
            code: None,
            message: format!("{action} answered with JSON that does not parse: {e}"),
        })
    }
}

/// The execution's input: the state machine's first task, the plan of job `job` in `shape`'s
/// ranges.
pub fn execution_input(partition: &PartitionId, job: &str, shape: FanOutShape) -> Value {
    json!({
        "fan_out": {
            "step": "plan",
            "tenant": partition.tenant(),
            "hour": partition.hour_label(),
            "job": job,
            "ranges": shape.ranges,
        }
    })
}

/// An execution's name: `<tenant>-<YYYYMMDDHH>-<job>` (`<YYYYMMDDHH>-<job>` without a tenant), with characters Step Functions does
/// not allow in names replaced by `_`, at most 80 characters (the tenant is shortened; the
/// job id, which makes it unique, is kept whole).
pub fn execution_name(partition: &PartitionId, job: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let hour: String = partition
        .hour_label()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let job = clean(job);
    let room = 80usize.saturating_sub(hour.len() + job.len() + 2);
    let name = match partition.tenant() {
        Some(tenant) => {
            let tenant: String = clean(tenant).chars().take(room).collect();
            format!("{tenant}-{hour}-{job}")
        }
        None => format!("{hour}-{job}"),
    };
    name.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_for_step_functions_and_keep_the_job() {
        let p = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
        assert_eq!(
            execution_name(&p, "0123456789abcdef"),
            "acme-2026112910-0123456789abcdef"
        );
        let long = PartitionId::parse(&"t.x".repeat(40), "2026-11-29T10").expect("partition");
        let name = execution_name(&long, "0123456789abcdef");
        assert_eq!(name.len(), 80);
        assert!(name.ends_with("-2026112910-0123456789abcdef"), "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{name}"
        );
    }

    #[test]
    fn the_input_is_the_plan_task_the_handler_takes() {
        let p = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
        let input = execution_input(
            &p,
            "j1",
            FanOutShape {
                groups: 3,
                ranges: 4,
            },
        );
        let parsed = crate::serverless::events::parse_invocation(&input).expect("parses");
        let crate::serverless::events::Invocation::FanOut(task) = parsed else {
            panic!("not a fan-out task: {parsed:?}");
        };
        assert_eq!(task.step, crate::compact::fan_out::FanOutStep::Plan);
        assert_eq!(
            (
                task.tenant.as_deref(),
                task.hour.as_str(),
                task.job.as_deref(),
                task.ranges
            ),
            (Some("acme"), "2026-11-29T10", Some("j1"), Some(4))
        );
    }

    #[test]
    fn setting_checks() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(
            FanOutStateMachine::from_lookup(&lookup(&[]))
                .expect("unset is fine")
                .is_none()
        );
        let err = FanOutStateMachine::from_lookup(&lookup(&[(STATE_MACHINE_SETTING, "fan-out")]))
            .expect_err("not an ARN");
        assert!(err.to_string().contains(STATE_MACHINE_SETTING), "{err}");
        const ARN: &str = "arn:aws:states:us-east-1:123456789012:stateMachine:ourios-fan-out";
        // Without keys: the standard chain's, when built with it.
        let keyless = FanOutStateMachine::from_lookup(&lookup(&[(STATE_MACHINE_SETTING, ARN)]));
        if cfg!(feature = "credential-chain") {
            assert!(keyless.is_ok_and(|m| m.is_some()));
        } else {
            let err = keyless.expect_err("no credentials");
            assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");
        }
        let machine = FanOutStateMachine::from_lookup(&lookup(&[
            (STATE_MACHINE_SETTING, ARN),
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ]))
        .expect("valid")
        .expect("set");
        assert_eq!(machine.arn(), ARN);
    }
}
