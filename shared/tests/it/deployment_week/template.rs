//! The functions' limits as `infra/template.yaml` declares them (parameters at their
//! defaults), read from the template itself so that the simulated week runs what deploys.

use serde_norway::Value;

/// What Lambda enforces on the compactor and what the deployment's triggers do.
#[derive(Debug, Clone)]
pub(crate) struct Deployed {
    /// The compactor's reserved concurrency: invocations beyond it are throttled.
    pub(crate) reserved: usize,
    /// The fan-out task function's (the state machine's tasks run there).
    pub(crate) tasks_reserved: usize,
    /// The compactor's timeout, in seconds.
    pub(crate) timeout_s: f64,
    /// The compactor's memory, in MB (what a GB-second is billed on).
    pub(crate) memory_mb: f64,
    /// The compactor's `/tmp`, in MB.
    pub(crate) ephemeral_mb: f64,
    /// The planner's memory, in MB.
    pub(crate) planner_memory_mb: f64,
    /// Retries of a failed asynchronous invocation (both functions).
    pub(crate) async_retries: u32,
    /// The oldest a compactor event may be before Lambda drops it to the failure destination.
    pub(crate) compactor_event_age_s: f64,
    /// The same for the planner.
    pub(crate) planner_event_age_s: f64,
    /// Whether asynchronous failures of the compactor go to the dead-letter queue.
    pub(crate) compactor_dead_letters: bool,
    /// Seconds between two sweeps (the sweep rule's `rate(...)`).
    pub(crate) sweep_every_s: u64,
    /// `OURIOS_JOB_LEASE` as deployed, in seconds.
    pub(crate) job_lease_s: u64,
}

fn template() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");
    let text = std::fs::read_to_string(path).expect("infra/template.yaml");
    serde_norway::from_str(&text).expect("infra/template.yaml is YAML")
}

/// A value with `!Ref` of a parameter resolved to its default (`AWS::NoValue` to null, which
/// leaves the property out) and `!If` to its first branch when its condition's parameter is
/// not the "off" value (the only conditions used here).
fn resolve(t: &Value, v: &Value) -> Value {
    match v {
        Value::Tagged(tagged) if tagged.tag == "!Ref" => {
            let name = tagged.value.as_str().expect("!Ref names a parameter");
            match name {
                // Leaves the property out.
                "AWS::NoValue" => Value::Null,
                _ => t["Parameters"][name]["Default"].clone(),
            }
        }
        Value::Tagged(tagged) if tagged.tag == "!If" => {
            let branches = tagged.value.as_sequence().expect("!If [cond, a, b]");
            let condition = branches[0].as_str().expect("a condition name");
            let holds = condition_holds(t, condition);
            resolve(t, &branches[if holds { 1 } else { 2 }])
        }
        other => other.clone(),
    }
}

/// `!Not [!Equals [!Ref P, X]]` at P's default.
fn condition_holds(t: &Value, name: &str) -> bool {
    let condition = &t["Conditions"][name];
    let Value::Tagged(not) = condition else {
        panic!("condition {name} is not a !Not");
    };
    let Value::Tagged(equals) = &not.value[0] else {
        panic!("condition {name} is not !Not [!Equals ...]");
    };
    let pair = equals.value.as_sequence().expect("!Equals [a, b]");
    let (a, b) = (resolve(t, &pair[0]), resolve(t, &pair[1]));
    number_or_text(&a) != number_or_text(&b)
}

fn number_or_text(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

fn number(t: &Value, v: &Value, what: &str) -> f64 {
    let v = resolve(t, v);
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("{what} is a number: {v:?}"))
}

/// Seconds of a schedule `rate(N minutes|hours)`.
fn rate_seconds(expression: &str) -> u64 {
    let inner = expression
        .strip_prefix("rate(")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{expression} is a rate(...)"));
    let (n, unit) = inner.split_once(' ').expect("rate(N unit)");
    let n: u64 = n.parse().expect("rate's number");
    match unit.trim_end_matches('s') {
        "minute" => n * 60,
        "hour" => n * 3600,
        "day" => n * 86_400,
        other => panic!("rate unit {other}"),
    }
}

/// The deployment's limits.
pub(crate) fn deployed() -> Deployed {
    let t = template();
    let compactor = &t["Resources"]["CompactorFunction"]["Properties"];
    let compactor_invoke = &t["Resources"]["CompactorInvokeConfig"]["Properties"];
    let planner_invoke = &t["Resources"]["PlannerInvokeConfig"]["Properties"];
    let sweep = &t["Resources"]["SweepRule"]["Properties"];
    let schedule = resolve(&t, &sweep["ScheduleExpression"]);
    let reserved = number(&t, &compactor["ReservedConcurrentExecutions"], "reserved");
    let tasks = &t["Resources"]["FanOutTaskFunction"]["Properties"];
    let tasks_reserved = number(
        &t,
        &tasks["ReservedConcurrentExecutions"],
        "the task pool's",
    );
    let machine = &t["Resources"]["FanOutStateMachine"]["Properties"];
    let invoked = &machine["DefinitionSubstitutions"]["CompactorFunctionArn"];
    assert_eq!(
        invoked,
        &serde_norway::from_str::<Value>("!GetAtt FanOutTaskFunction.Arn").expect("YAML"),
        "the state machine's tasks run in the fan-out task pool"
    );
    let lease = &t["Parameters"]["JobLeaseSeconds"]["Default"];
    Deployed {
        reserved: reserved as usize,
        tasks_reserved: tasks_reserved as usize,
        timeout_s: number(&t, &compactor["Timeout"], "Timeout"),
        memory_mb: number(&t, &compactor["MemorySize"], "MemorySize"),
        ephemeral_mb: number(
            &t,
            &compactor["EphemeralStorage"]["Size"],
            "EphemeralStorage",
        ),
        planner_memory_mb: number(
            &t,
            &t["Resources"]["PlannerFunction"]["Properties"]["MemorySize"],
            "the planner's MemorySize",
        ),
        async_retries: number(&t, &compactor_invoke["MaximumRetryAttempts"], "retries") as u32,
        compactor_event_age_s: number(
            &t,
            &compactor_invoke["MaximumEventAgeInSeconds"],
            "the compactor's event age",
        ),
        planner_event_age_s: number(
            &t,
            &planner_invoke["MaximumEventAgeInSeconds"],
            "the planner's event age",
        ),
        compactor_dead_letters: !compactor_invoke["DestinationConfig"]["OnFailure"]["Destination"]
            .is_null(),
        sweep_every_s: rate_seconds(schedule.as_str().expect("a schedule expression")),
        job_lease_s: number(&t, lease, "JobLeaseSeconds") as u64,
    }
}

/// A string with `${Param}` of `!Sub` replaced by parameter defaults (`${AWS::…}` kept).
fn substitute(t: &Value, text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("a closed ${") + start;
        let name = &rest[start + 2..end];
        match t["Parameters"][name]["Default"].clone() {
            Value::Null => out.push_str(&rest[start..=end]),
            value => out.push_str(&number_or_text(&value)),
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A function's environment as deployed: the template's global variables and the function's
/// own, every parameter at its default.
pub(crate) fn environment(function: &str) -> std::collections::BTreeMap<String, String> {
    let t = template();
    let global = &t["Globals"]["Function"]["Environment"]["Variables"];
    let own = &t["Resources"][function]["Properties"]["Environment"]["Variables"];
    let mut env = std::collections::BTreeMap::new();
    for variables in [global, own] {
        for (name, value) in variables.as_mapping().into_iter().flatten() {
            let name = name.as_str().expect("a variable name").to_string();
            let value = match value {
                Value::Tagged(tagged) if tagged.tag == "!Sub" => {
                    substitute(&t, tagged.value.as_str().expect("!Sub of a string"))
                }
                other => match resolve(&t, other) {
                    Value::Null => continue,
                    resolved => number_or_text(&resolved),
                },
            };
            env.insert(name, value);
        }
    }
    env
}
