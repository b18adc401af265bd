//! The fan-out state machine as Step Functions runs it, read from `infra/fan-out.asl.json`:
//! the states the definition uses (Task on `lambda:invoke`, Choice on `IsNull`, inline Map,
//! Succeed), their paths and selectors, Map `MaxConcurrency` and the `Retry` policies with
//! their backoff, cap and full jitter. Whatever else the definition holds fails the read, so
//! the model cannot silently drift from the definition.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map as JsonMap, Value, json};

/// A retrier of a Task.
#[derive(Debug, Clone)]
pub(crate) struct Retrier {
    errors: Vec<String>,
    interval_s: f64,
    max_attempts: u32,
    backoff: f64,
    max_delay_s: Option<f64>,
    full_jitter: bool,
}

#[derive(Debug, Clone)]
enum ResultPath {
    /// Absent: the result replaces the input.
    Replace,
    /// `null`: the input passes on unchanged.
    Discard,
    /// `$.field`.
    Field(String),
}

#[derive(Debug, Clone)]
enum State {
    Task {
        parameters: Value,
        result_selector: Option<Value>,
        result_path: ResultPath,
        output_path: Option<String>,
        retry: Vec<Retrier>,
        next: Option<String>,
    },
    Choice {
        choices: Vec<(String, bool, String)>,
        default: String,
    },
    Map {
        items_path: String,
        max_concurrency: usize,
        item_selector: Value,
        processor: Arc<Machine>,
        result_path: ResultPath,
        next: Option<String>,
    },
    Succeed,
}

/// A state machine definition (or a Map's item processor).
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    start_at: String,
    states: BTreeMap<String, State>,
}

/// The fan-out definition.
pub(crate) fn fan_out_machine() -> Arc<Machine> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/fan-out.asl.json");
    let text = std::fs::read_to_string(path).expect("infra/fan-out.asl.json");
    let definition: Value = serde_json::from_str(&text).expect("the definition is JSON");
    Arc::new(Machine::read(&definition))
}

fn text(v: &Value, field: &str) -> String {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} is a string in {v}"))
        .to_string()
}

fn result_path(state: &Value) -> ResultPath {
    match state.get("ResultPath") {
        None => ResultPath::Replace,
        Some(Value::Null) => ResultPath::Discard,
        Some(Value::String(p)) => ResultPath::Field(
            p.strip_prefix("$.")
                .unwrap_or_else(|| panic!("ResultPath {p} is $.field"))
                .to_string(),
        ),
        Some(other) => panic!("ResultPath {other}"),
    }
}

fn next(state: &Value) -> Option<String> {
    match (state.get("Next"), state.get("End")) {
        (Some(Value::String(n)), _) => Some(n.clone()),
        (None, Some(Value::Bool(true))) => None,
        _ => panic!("a state has Next or End: {state}"),
    }
}

impl Machine {
    fn read(definition: &Value) -> Self {
        let mut states = BTreeMap::new();
        let listed = definition["States"].as_object().expect("States");
        for (name, s) in listed {
            let state = match s["Type"].as_str() {
                Some("Task") => {
                    assert_eq!(
                        s["Resource"], "arn:aws:states:::lambda:invoke",
                        "{name} invokes a function"
                    );
                    let retry = (s["Retry"].as_array().into_iter().flatten())
                        .map(|r| Retrier {
                            errors: (r["ErrorEquals"].as_array().expect("ErrorEquals").iter())
                                .map(|e| e.as_str().expect("an error name").to_string())
                                .collect(),
                            interval_s: r["IntervalSeconds"].as_f64().unwrap_or(1.0),
                            max_attempts: r["MaxAttempts"].as_u64().unwrap_or(3) as u32,
                            backoff: r["BackoffRate"].as_f64().unwrap_or(2.0),
                            max_delay_s: r["MaxDelaySeconds"].as_f64(),
                            full_jitter: r["JitterStrategy"] == "FULL",
                        })
                        .collect();
                    State::Task {
                        parameters: s["Parameters"].clone(),
                        result_selector: s.get("ResultSelector").cloned(),
                        result_path: result_path(s),
                        output_path: s
                            .get("OutputPath")
                            .map(|p| p.as_str().expect("OutputPath is a path").to_string()),
                        retry,
                        next: next(s),
                    }
                }
                Some("Choice") => State::Choice {
                    choices: (s["Choices"].as_array().expect("Choices").iter())
                        .map(|c| {
                            let is_null = c["IsNull"]
                                .as_bool()
                                .unwrap_or_else(|| panic!("{name}: only IsNull choices"));
                            (text(c, "Variable"), is_null, text(c, "Next"))
                        })
                        .collect(),
                    default: text(s, "Default"),
                },
                Some("Map") => {
                    assert_eq!(
                        s["ItemProcessor"]["ProcessorConfig"]["Mode"], "INLINE",
                        "{name} is an inline Map"
                    );
                    State::Map {
                        items_path: text(s, "ItemsPath"),
                        max_concurrency: s["MaxConcurrency"].as_u64().unwrap_or(0) as usize,
                        item_selector: s["ItemSelector"].clone(),
                        processor: Arc::new(Machine::read(&s["ItemProcessor"])),
                        result_path: result_path(s),
                        next: next(s),
                    }
                }
                Some("Succeed") => State::Succeed,
                other => panic!("state {name}: type {other:?} is not modelled"),
            };
            states.insert(name.clone(), state);
        }
        Self {
            start_at: text(definition, "StartAt"),
            states,
        }
    }
}

/// `$`, `$.a.b` of `input`, or `$$.…` of the context object.
fn read_path(path: &str, input: &Value, context: &Value) -> Value {
    let (root, rest) = match path.strip_prefix("$$") {
        Some(rest) => (context, rest),
        None => (input, path.strip_prefix('$').expect("a path starts with $")),
    };
    (rest.split('.').filter(|p| !p.is_empty())).fold(root.clone(), |v, part| v[part].clone())
}

/// A Parameters, ItemSelector or ResultSelector template applied to `input`.
fn apply(template: &Value, input: &Value, context: &Value) -> Value {
    match template {
        Value::Object(fields) => {
            let mut out = JsonMap::new();
            for (key, value) in fields {
                match key.strip_suffix(".$") {
                    Some(key) => {
                        let path = value.as_str().expect("a .$ field holds a path");
                        out.insert(key.to_string(), read_path(path, input, context));
                    }
                    None => {
                        out.insert(key.clone(), apply(value, input, context));
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// Where one thread of an execution stands (the execution's, or one Map item's).
#[derive(Debug, Clone)]
pub(crate) struct Thread {
    machine: Arc<Machine>,
    state: String,
    input: Value,
    context: Value,
    /// Attempts so far of the current Task, per retrier.
    attempts: Vec<u32>,
}

/// What a thread does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Invoke the function with this payload.
    Invoke(Value),
    /// Run these Map items (their inputs), at most `max_concurrency` at once (0: no bound).
    Map {
        items: Vec<Thread>,
        max_concurrency: usize,
    },
    /// The thread ended.
    Succeeded,
}

impl Thread {
    /// A thread at the start of `machine` with `input`.
    pub(crate) fn start(machine: &Arc<Machine>, input: Value, context: Value) -> Self {
        Self {
            machine: Arc::clone(machine),
            state: machine.start_at.clone(),
            input,
            context,
            attempts: Vec::new(),
        }
    }

    fn state(&self) -> &State {
        &self.machine.states[&self.state]
    }

    /// Runs Choice and Succeed states up to the next Task or Map, or the end.
    pub(crate) fn step(&mut self) -> Step {
        loop {
            match self.state().clone() {
                State::Succeed => return Step::Succeeded,
                State::Choice { choices, default } => {
                    let chosen = choices.iter().find(|(variable, is_null, _)| {
                        read_path(variable, &self.input, &self.context).is_null() == *is_null
                    });
                    self.state = chosen.map_or(default, |(_, _, next)| next.clone());
                }
                State::Task { parameters, .. } => {
                    self.attempts.clear();
                    let parameters = apply(&parameters, &self.input, &self.context);
                    return Step::Invoke(parameters["Payload"].clone());
                }
                State::Map {
                    items_path,
                    max_concurrency,
                    item_selector,
                    processor,
                    ..
                } => {
                    let items = read_path(&items_path, &self.input, &self.context);
                    let items = (items.as_array().cloned().unwrap_or_default().into_iter())
                        .enumerate()
                        .map(|(index, value)| {
                            let context =
                                json!({"Map": {"Item": {"Index": index, "Value": value}}});
                            let input = apply(&item_selector, &self.input, &context);
                            Thread::start(&processor, input, context)
                        })
                        .collect();
                    return Step::Map {
                        items,
                        max_concurrency,
                    };
                }
            }
        }
    }

    /// The current Task's function answered `payload`: on to the next state.
    pub(crate) fn task_succeeded(&mut self, payload: Value) -> Step {
        let State::Task {
            result_selector,
            result_path,
            output_path,
            next,
            ..
        } = self.state().clone()
        else {
            panic!("{} is not a Task", self.state);
        };
        let result = json!({"Payload": payload, "StatusCode": 200});
        let result = match &result_selector {
            Some(selector) => apply(selector, &result, &self.context),
            None => result,
        };
        self.input = place(&self.input, result, &result_path);
        if let Some(path) = output_path {
            self.input = read_path(&path, &self.input, &self.context);
        }
        self.go_to(next)
    }

    /// Every item of the current Map succeeded.
    pub(crate) fn map_succeeded(&mut self) -> Step {
        let State::Map {
            result_path, next, ..
        } = self.state().clone()
        else {
            panic!("{} is not a Map", self.state);
        };
        self.input = place(&self.input, Value::Null, &result_path);
        self.go_to(next)
    }

    fn go_to(&mut self, next: Option<String>) -> Step {
        match next {
            Some(next) => {
                self.state = next;
                self.step()
            }
            None => Step::Succeeded,
        }
    }

    /// The current Task failed with `error`: the delay before its retry, or `None` when no
    /// retrier takes it (or the one that does is spent). `random` gives a number in [0, 1).
    pub(crate) fn task_failed(&mut self, error: &str, random: f64) -> Option<f64> {
        let State::Task { retry, .. } = self.state().clone() else {
            panic!("{} is not a Task", self.state);
        };
        let (i, retrier) = retry.iter().enumerate().find(|(_, r)| {
            r.errors.iter().any(|e| e == error)
                || (r.errors.iter().any(|e| e == "States.ALL") && !error.starts_with("States."))
        })?;
        self.attempts.resize(retry.len(), 0);
        let attempt = self.attempts[i];
        if attempt >= retrier.max_attempts {
            return None;
        }
        self.attempts[i] += 1;
        let mut delay = retrier.interval_s * retrier.backoff.powi(attempt as i32);
        if let Some(cap) = retrier.max_delay_s {
            delay = delay.min(cap);
        }
        Some(if retrier.full_jitter {
            delay * random
        } else {
            delay
        })
    }
}

fn place(input: &Value, result: Value, path: &ResultPath) -> Value {
    match path {
        ResultPath::Replace => result,
        ResultPath::Discard => input.clone(),
        ResultPath::Field(field) => {
            let mut out = input.clone();
            out[field.as_str()] = result;
            out
        }
    }
}
