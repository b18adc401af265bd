"""Reads infra/template.yaml and checks what the deployment promises (`infra/README.md`, "How the permissions are checked").

The template is loaded with cfn-lint's decoder (it understands !Ref, !Sub, !If, !GetAtt) and
its intrinsic functions are evaluated for concrete parameter values, so the checks are about
behaviour: which keys each rule matches, which keys each role may read, write or delete.

Run: bash infra/tests/check.sh (tests/run.sh runs it with the pinned cfn-lint of .tools/venv)
Set OURIOS_LAMBDA_ARTIFACTS to cargo-lambda's output directory (target/lambda) to also check
the built zips; tests/run.sh does after `cargo lambda build --release --output-format zip`.
"""

import copy
import fnmatch
import json
import os
import re
import tomllib
import unittest
import zipfile
from pathlib import Path

from cfnlint.decode import decode

INFRA = Path(__file__).resolve().parent.parent
REPO = INFRA.parent
TEMPLATE = INFRA / "template.yaml"
EVENTS = REPO / "events"

# Keys of one partition, relative to the store root (the README's storage layout).
PARTITION = "tenant=acme/year=2026/month=11/day=29/hour=10"
INGEST_KEY = f"data/{PARTITION}/batch 0014.parquet"
COMPACTED_KEY = f"compacted/{PARTITION}/part-1e7d7f84df1fb6384bf08354.parquet"
MANIFEST_KEY = f"_compaction/manifests/{PARTITION}/v00000000000000000001.json"
JOB_KEY = f"_compaction/jobs/{PARTITION}.json"
ALL_KEYS = [INGEST_KEY, COMPACTED_KEY, MANIFEST_KEY, JOB_KEY]

# What a state machine needs to deliver its logs (none of these actions takes a resource ARN).
LOG_DELIVERY_ACTIONS = {
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
}
# The fan-out state machine's definition.
FAN_OUT_DEFINITION = INFRA / "fan-out.asl.json"

# The errors of the Lambda service itself, throttling among them, as Step Functions names them.
LAMBDA_SERVICE_ERRORS = {
    "Lambda.TooManyRequestsException",
    "Lambda.ServiceException",
    "Lambda.SdkClientException",
    "Lambda.AWSLambdaException",
}


def retry_span_seconds(retrier):
    """The longest a retrier keeps retrying: the sum of its delays before jitter."""
    interval = retrier.get("IntervalSeconds", 1)
    cap = retrier.get("MaxDelaySeconds", float("inf"))
    rate = retrier.get("BackoffRate", 2.0)
    total = 0.0
    for attempt in range(retrier.get("MaxAttempts", 3)):
        total += min(interval * rate ** attempt, cap)
    return total

# Lambda's quota on a function's deployment package, unzipped (250 MB).
LAMBDA_UNZIPPED_LIMIT_BYTES = 262_144_000
# ELF e_machine of each Lambda architecture.
ELF_MACHINE = {"arm64": 183, "x86_64": 62}


def load_template():
    template, matches = decode(str(TEMPLATE))
    if matches:
        raise AssertionError(f"template does not parse: {matches}")
    return template


class Evaluator:
    """Evaluates the intrinsic functions the template uses, for given parameter values."""

    def __init__(self, template, overrides):
        self.params = {
            name: str(spec.get("Default", ""))
            for name, spec in template.get("Parameters", {}).items()
        }
        self.params.update(
            {
                "AWS::Partition": "aws",
                "AWS::Region": "eu-west-1",
                "AWS::AccountId": "123456789012",
                "AWS::StackName": "ourios",
            }
        )
        self.params.update(overrides)
        self.conditions = template.get("Conditions", {})

    def condition(self, name):
        return self.value(self.conditions[name])

    def value(self, node):
        if isinstance(node, list):
            values = [self.value(v) for v in node]
            return [v for v in values if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref":
                if arg == "AWS::NoValue":
                    return NO_VALUE
                if arg in self.params:
                    return self.params[arg]
                return f"<{arg}>"
            if key == "Fn::GetAtt":
                resource, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return f"<{resource}.{attribute}>"
            if key == "Fn::Sub":
                text, extra = (arg, {}) if isinstance(arg, str) else arg
                scope = dict(self.params)
                scope.update({k: self.value(v) for k, v in extra.items()})
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(scope.get(m[1], f"<{m[1]}>")), text)
            if key == "Fn::If":
                name, yes, no = arg
                return self.value(yes if self.condition(name) else no)
            if key == "Fn::Equals":
                a, b = (self.value(v) for v in arg)
                return str(a) == str(b)
            if key == "Fn::Not":
                return not self.value(arg[0])
            if key == "Condition":
                return self.condition(arg)
        return {k: self.value(v) for k, v in node.items() if self.value(v) is not NO_VALUE}


NO_VALUE = object()


def functions(template):
    """Each SAM function with the Globals merged in (maps merge, scalars are replaced)."""
    defaults = template.get("Globals", {}).get("Function", {})
    out = {}
    for name, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        props = copy.deepcopy(defaults)
        for key, value in resource["Properties"].items():
            if isinstance(value, dict) and isinstance(props.get(key), dict):
                merged = copy.deepcopy(props[key])
                for k, v in value.items():
                    if isinstance(v, dict) and isinstance(merged.get(k), dict):
                        merged[k] = {**merged[k], **v}
                    else:
                        merged[k] = v
                props[key] = merged
            else:
                props[key] = value
        out[name] = (resource, props)
    return out


def statements(template):
    """(role, statement) for every statement of every inline policy."""
    for name, resource in template["Resources"].items():
        if resource["Type"] not in ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        props = resource["Properties"]
        documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
        if "PolicyDocument" in props:
            documents.append(props["PolicyDocument"])
        for document in documents:
            for statement in document["Statement"]:
                if isinstance(statement, dict) and list(statement) == ["Fn::If"]:
                    # A conditional statement: check both branches.
                    for branch in statement["Fn::If"][1:]:
                        if branch != {"Ref": "AWS::NoValue"}:
                            yield name, branch
                else:
                    yield name, statement


def as_list(value):
    return value if isinstance(value, list) else [value]


def iam_match(pattern, value):
    """IAM wildcard matching: `*` any run of characters (slashes included), `?` one."""
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


class Access:
    """What a role may do on which object keys and listing prefixes, for given parameters."""

    def __init__(self, template, role, evaluator):
        self.allowed = []  # (action, resource pattern, prefix patterns or None)
        for name, statement in statements(template):
            if name != role or statement.get("Effect") != "Allow":
                continue
            statement = evaluator.value(statement)
            prefixes = statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
            for action in as_list(statement["Action"]):
                for resource in as_list(statement["Resource"]):
                    self.allowed.append((action, resource, as_list(prefixes) if prefixes else None))
        self.bucket = evaluator.params["BucketName"]
        root = evaluator.params["RootPrefix"]
        self.root = f"{root}/" if root else ""

    def may(self, action, key):
        arn = f"arn:aws:s3:::{self.bucket}/{self.root}{key}"
        return any(a == action and iam_match(r, arn) for a, r, _ in self.allowed)

    def may_on_bucket(self, action):
        arn = f"arn:aws:s3:::{self.bucket}"
        return any(a == action and r == arn for a, r, _ in self.allowed)

    def may_list(self, prefix):
        arn = f"arn:aws:s3:::{self.bucket}"
        full = f"{self.root}{prefix}"
        return any(
            a == "s3:ListBucket" and r == arn and p is not None and any(iam_match(x, full) for x in p)
            for a, r, p in self.allowed
        )


def event_matches(pattern, event):
    """EventBridge matching for the pattern forms the template uses: literal lists and prefix."""
    for field, expected in pattern.items():
        actual = event.get(field)
        if isinstance(expected, dict):
            if not isinstance(actual, dict) or not event_matches(expected, actual):
                return False
            continue
        ok = False
        for option in expected:
            if isinstance(option, dict):
                (kind, arg), = option.items()
                if kind != "prefix":
                    raise AssertionError(f"matcher {kind} is not modelled by this test")
                ok |= isinstance(actual, str) and actual.startswith(arg)
            else:
                ok |= actual == option
        if not ok:
            return False
    return True


def object_created(bucket, key):
    event = json.loads((EVENTS / "eventbridge-object-created.json").read_text())
    event["detail"]["bucket"]["name"] = bucket
    event["detail"]["object"]["key"] = key
    return event


def workspace_binaries():
    """Binary name -> package directory, for every member of the Cargo workspace."""
    root = tomllib.loads((REPO / "Cargo.toml").read_text())
    out = {}
    for member in root["workspace"]["members"]:
        manifest = tomllib.loads((REPO / member / "Cargo.toml").read_text())
        for binary in manifest.get("bin", []):
            out[binary["name"]] = REPO / member
    return out


class TemplateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.template = load_template()
        cls.resources = cls.template["Resources"]
        cls.functions = functions(cls.template)

    def evaluator(self, **overrides):
        params = {"BucketName": "logs-bucket"}
        params.update(overrides)
        return Evaluator(self.template, params)

    def function(self, binary):
        for name, (resource, props) in self.functions.items():
            if resource["Metadata"]["BuildProperties"]["Binary"] == binary:
                return name, resource, props
        self.fail(f"no function builds {binary}")

    def test_every_function_is_built_by_cargo_lambda_from_workspace_binaries(self):
        binaries = workspace_binaries()
        # The planner, the compactor, and the compactor's code again as the fan-out task pool.
        self.assertEqual(
            {n: r["Metadata"]["BuildProperties"]["Binary"] for n, (r, _) in self.functions.items()},
            {"PlannerFunction": "ourios-planner", "CompactorFunction": "ourios-compactor",
             "FanOutTaskFunction": "ourios-compactor"})
        for name, (resource, props) in self.functions.items():
            metadata = resource["Metadata"]
            self.assertEqual(metadata["BuildMethod"], "rust-cargolambda", name)
            binary = metadata["BuildProperties"]["Binary"]
            self.assertIn(binary, binaries, f"{name}: {binary} is not a workspace binary")
            # SAM runs `cargo lambda build --bin <Binary>` in CodeUri and copies
            # CodeUri/target/lambda/<Binary>/bootstrap: CodeUri must be the workspace root.
            self.assertEqual((TEMPLATE.parent / props["CodeUri"]).resolve(), REPO, name)
            self.assertEqual(props["Handler"], "bootstrap", name)
            self.assertEqual(props["Runtime"], "provided.al2023", name)
            self.assertEqual(props["Architectures"], [{"Ref": "Architecture"}], name)
        self.assertEqual(self.template["Parameters"]["Architecture"]["Default"], "arm64")

    def test_memory_storage_and_timeout_parameters_reach_the_functions(self):
        _, _, compactor = self.function("ourios-compactor")
        self.assertEqual(compactor["MemorySize"], {"Ref": "CompactorMemorySize"})
        self.assertEqual(compactor["EphemeralStorage"], {"Size": {"Ref": "CompactorEphemeralStorageSize"}})
        self.assertEqual(compactor["Timeout"], {"Ref": "CompactorTimeout"})
        _, _, planner = self.function("ourios-planner")
        self.assertEqual(planner["MemorySize"], {"Ref": "PlannerMemorySize"})
        self.assertEqual(planner["Timeout"], {"Ref": "PlannerTimeout"})
        params = self.template["Parameters"]
        # Lambda's limits: memory 128-10240 MiB, /tmp 512-10240 MiB, timeout at most 900 s.
        for name, low, high in [
            ("CompactorMemorySize", 128, 10240),
            ("PlannerMemorySize", 128, 10240),
            ("CompactorEphemeralStorageSize", 512, 10240),
            ("CompactorTimeout", 1, 900),
            ("PlannerTimeout", 1, 900),
        ]:
            spec = params[name]
            self.assertEqual(spec["Type"], "Number", name)
            self.assertTrue(low <= spec["MinValue"] <= spec["Default"] <= spec["MaxValue"] <= high, name)

    def test_environment_is_what_the_functions_read(self):
        # The settings and logging modules and the functions' mains are where they are read.
        sources = [
            REPO / "shared/src/serverless/function_settings.rs",
            REPO / "shared/src/settings.rs",
            REPO / "shared/src/logging.rs",
            REPO / "shared/src/serverless/state_machine.rs",
        ]
        sources += sorted(REPO.glob("functions/*/src/main.rs"))
        known = {v for s in sources for v in re.findall(r'"(OURIOS_[A-Z_]+)"', s.read_text())}
        for name, (_, props) in self.functions.items():
            variables = props["Environment"]["Variables"]
            self.assertIn("OURIOS_STORE", variables, name)
            for variable in variables:
                self.assertIn(variable, known, f"{name} sets {variable}, which the functions never read")
        _, _, compactor = self.function("ourios-compactor")
        self.assertEqual(compactor["Environment"]["Variables"]["OURIOS_GC_GRACE"], {"Ref": "GcGrace"})
        self.assertEqual(
            compactor["Environment"]["Variables"]["OURIOS_ROW_GROUPS_PER_BLOCK"], {"Ref": "RowGroupsPerBlock"}
        )
        self.assertEqual(
            compactor["Environment"]["Variables"]["OURIOS_MAX_ROWS_PER_ROW_GROUP"], {"Ref": "MaxRowsPerRowGroup"}
        )
        for root, store in [("", "s3://logs-bucket"), ("lake/raw", "s3://logs-bucket/lake/raw")]:
            env = self.evaluator(RootPrefix=root).value(compactor["Environment"]["Variables"])
            self.assertEqual(env["OURIOS_STORE"], store)
            self.assertEqual(env["OURIOS_JOB_LEASE"], "3600s")

    def test_the_grace_outlasts_the_longest_compactor_timeout(self):
        # GC's idle rule for fan-out directories and the commit deadlines assume no compactor
        # invocation outlives the grace.
        params = self.template["Parameters"]
        longest_s = params["CompactorTimeout"]["MaxValue"]
        pattern = params["GcGrace"]["AllowedPattern"]
        seconds = {"s": 1, "m": 60, "h": 3600}
        for value in ["15m", "900s", "901s", "1000s", "16m", "20m", "99m", "100m", "1h", "24h", "168h"]:
            self.assertRegex(value, pattern)
            self.assertGreaterEqual(int(value[:-1]) * seconds[value[-1]], longest_s, value)
        for value in ["0s", "60s", "899s", "1m", "14m", "0h", "10", "15", "15 m", "1.5h", "015m", "-15m"]:
            self.assertIsNone(re.fullmatch(pattern, value), f"GcGrace accepts {value!r}")
        self.assertRegex(params["GcGrace"]["Default"], pattern)

    def test_prefixes_cannot_widen_the_policies(self):
        # Both prefixes are spelled into IAM ARNs and event filters.
        params = self.template["Parameters"]
        for name, good in [("RootPrefix", ["", "logs", "logs/prod", "tenant_a=1"]), ("IngestPrefix", ["data", "in/raw"])]:
            pattern = params[name]["AllowedPattern"]
            for value in good:
                self.assertRegex(value, pattern, name)
            for value in ["*", "logs*", "lo?s", "a/../b", "/logs", "logs/", "a//b", ".."]:
                self.assertIsNone(re.fullmatch(pattern, value), f"{name} accepts {value!r}")

    def test_a_layout_is_a_template_and_nothing_else(self):
        # It reaches the functions' environment only; they refuse a template that cannot work.
        pattern = self.template["Parameters"]["Layout"]["AllowedPattern"]
        for value in [
            "",
            "logs/dt=%Y%m%d/svc={tenant}/hour=%H",
            "logs/year=%Y/month=%m/day=%d/tenant={tenant}/hr=%H/min=%M",
            "raw/{tenant}/%Y/%m/%d/%H",
        ]:
            self.assertRegex(value, pattern)
        for value in ["*", "logs/*", "a'b", 'a"b', "/logs", "logs/", "a//b", "a b"]:
            self.assertIsNone(re.fullmatch(pattern, value), f"Layout accepts {value!r}")
        names = self.template["Parameters"]["InputNames"]["AllowedPattern"]
        for value in ["", "*", "*.parquet", "stream-?-*"]:
            self.assertRegex(value, names)
        for value in ["a/*", "a b", "'*'"]:
            self.assertIsNone(re.fullmatch(names, value), f"InputNames accepts {value!r}")
        # The key columns reach the functions' environment only, as the flags of the CLI.
        for name, good, bad in [
            ("TimeColumn", ["", "timestamp", "time_unix_nano"], ["a,b", "a b", "'t'"]),
            ("SortKey", ["", "host,timestamp", "service.name,time_unix_nano"], ["a,", ",a", "a b"]),
            ("BloomColumns", ["", "trace_id", "service.name,trace_id"], ["a,,b", "a;b"]),
        ]:
            pattern = self.template["Parameters"][name]["AllowedPattern"]
            for value in good:
                self.assertRegex(value, pattern)
            for value in bad:
                self.assertIsNone(re.fullmatch(pattern, value), f"{name} accepts {value!r}")
        variables = self.template["Globals"]["Function"]["Environment"]["Variables"]
        for variable in ["OURIOS_TIME_COLUMN", "OURIOS_TIME_UNIT", "OURIOS_SORT_KEY", "OURIOS_BLOOM_COLUMNS"]:
            self.assertIn(variable, variables)
        # The units the functions read (options::IntegerTimeUnit), and empty for the default.
        self.assertEqual(self.template["Parameters"]["TimeUnit"]["AllowedValues"], ["", "s", "ms", "us", "ns"])

    def test_every_iam_statement_names_its_resources(self):
        found = 0
        for role, statement in statements(self.template):
            found += 1
            sid = f"{role}/{statement.get('Sid')}"
            self.assertNotIn("NotResource", statement, sid)
            self.assertNotIn("NotAction", statement, sid)
            for action in as_list(statement["Action"]):
                self.assertFalse(action == "*" or action.endswith(":*"), f"{sid}: action {action}")
            if set(as_list(statement["Action"])) <= LOG_DELIVERY_ACTIONS:
                # Step Functions' log delivery: these actions take no resource ARN.
                self.assertEqual(statement["Resource"], "*", sid)
                continue
            for root in ("", "lake/raw"):
                for resource in as_list(self.evaluator(RootPrefix=root).value(statement["Resource"])):
                    self.assertNotEqual(resource, "*", sid)
                    self.assertFalse(re.search(r":::\*|:\*$", resource) and "log-group" not in resource,
                                     f"{sid}: {resource}")
                    if resource.startswith("arn:aws:s3"):
                        self.assertTrue(resource.startswith("arn:aws:s3:::logs-bucket"), f"{sid}: {resource}")
            if "s3:ListBucket" in as_list(statement["Action"]):
                self.assertIn("s3:prefix", statement["Condition"]["StringLike"], sid)
        self.assertGreater(found, 8)

    def test_roles_read_write_and_delete_only_what_their_function_does(self):
        for root in ("", "lake/raw"):
            ev = self.evaluator(RootPrefix=root)
            planner = Access(self.template, "PlannerRole", ev)
            compactor = Access(self.template, "CompactorRole", ev)

            # Planner: lists the ingest partition and the manifests, reads manifests and job
            # records, creates job records; nothing else.
            self.assertTrue(planner.may_list(f"data/{PARTITION}/"))
            self.assertTrue(planner.may_list("data/"))  # the sweep's tenant listing
            self.assertTrue(planner.may_list(f"_compaction/manifests/{PARTITION}/"))
            # A GET of a missing job record is 404 only to a caller that may list it.
            self.assertTrue(planner.may_list(JOB_KEY))
            self.assertTrue(planner.may("s3:GetObject", MANIFEST_KEY))
            self.assertTrue(planner.may("s3:PutObject", JOB_KEY))
            self.assertFalse(planner.may("s3:GetObject", INGEST_KEY))
            for key in ALL_KEYS:
                self.assertFalse(planner.may("s3:DeleteObject", key), key)
            for key in (INGEST_KEY, COMPACTED_KEY, MANIFEST_KEY):
                self.assertFalse(planner.may("s3:PutObject", key), key)

            # Compactor: reads everything of the partition, writes outputs and metadata, never
            # writes ingest files; GC deletes retired inputs, orphans, old manifests, job records.
            for prefix in (f"data/{PARTITION}/", f"compacted/{PARTITION}/", f"_compaction/manifests/{PARTITION}/"):
                self.assertTrue(compactor.may_list(prefix), prefix)
            for key in ALL_KEYS:
                self.assertTrue(compactor.may("s3:GetObject", key), key)
                self.assertTrue(compactor.may("s3:DeleteObject", key), key)
            for key in (COMPACTED_KEY, MANIFEST_KEY, JOB_KEY):
                self.assertTrue(compactor.may("s3:PutObject", key), key)
            self.assertTrue(compactor.may("s3:AbortMultipartUpload", COMPACTED_KEY))
            # A job lists incomplete uploads (a bucket-level action) to abort its earlier attempts'.
            self.assertTrue(compactor.may_on_bucket("s3:ListBucketMultipartUploads"))
            self.assertFalse(planner.may_on_bucket("s3:ListBucketMultipartUploads"))
            self.assertFalse(compactor.may("s3:AbortMultipartUpload", INGEST_KEY))
            self.assertFalse(compactor.may("s3:PutObject", INGEST_KEY))
            self.assertFalse(compactor.may("s3:DeleteObject", f"data/{PARTITION}/_SUCCESS"))

            # Nothing outside the store root, the bucket or the layout's prefixes.
            for access in (planner, compactor):
                self.assertFalse(access.may_list(""))
                self.assertFalse(access.may_list("other/"))
                for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
                    self.assertFalse(access.may(action, "other/file.parquet"), action)
                    self.assertFalse(access.may(action, "data.parquet"), action)
            if root:
                # The same layout beside the root (at the bucket's top) is not ours.
                for access in (planner, compactor):
                    access.root = ""
                    self.assertFalse(access.may("s3:GetObject", MANIFEST_KEY))
                    self.assertFalse(access.may("s3:PutObject", JOB_KEY))
                    self.assertFalse(access.may_list("data/"))

    def test_event_filters_follow_the_layout_and_exclude_the_compactors_writes(self):
        ingest = self.resources["IngestEventsRule"]["Properties"]
        jobs = self.resources["JobEventsRule"]["Properties"]
        self.assertEqual(ingest["Targets"][0]["Arn"], {"Fn::GetAtt": ["PlannerFunction", "Arn"]})
        self.assertEqual(jobs["Targets"][0]["Arn"], {"Fn::GetAtt": ["CompactorFunction", "Arn"]})
        for root in ("", "lake/raw"):
            ev = self.evaluator(RootPrefix=root)
            base = f"{root}/" if root else ""
            ingest_pattern = ev.value(ingest["EventPattern"])
            jobs_pattern = ev.value(jobs["EventPattern"])
            for key in ALL_KEYS:
                event = object_created("logs-bucket", base + key)
                self.assertEqual(event_matches(ingest_pattern, event), key == INGEST_KEY, key)
                self.assertEqual(event_matches(jobs_pattern, event), key == JOB_KEY, key)
                other_bucket = object_created("other-bucket", base + key)
                self.assertFalse(event_matches(ingest_pattern, other_bucket))
                self.assertFalse(event_matches(jobs_pattern, other_bucket))
                deleted = object_created("logs-bucket", base + key)
                deleted["detail-type"] = "Object Deleted"
                self.assertFalse(event_matches(ingest_pattern, deleted))
                self.assertFalse(event_matches(jobs_pattern, deleted))
            if root:
                self.assertFalse(event_matches(ingest_pattern, object_created("logs-bucket", INGEST_KEY)))
        # The sample event the planner's tests use is one the rule delivers.
        sample = json.loads((EVENTS / "eventbridge-object-created.json").read_text())
        self.assertTrue(event_matches(self.evaluator().value(ingest["EventPattern"]), sample))

    def test_sweep_schedule_delivers_the_scheduled_event_the_planner_accepts(self):
        sweep = self.resources["SweepRule"]["Properties"]
        self.assertEqual(sweep["ScheduleExpression"], {"Ref": "SweepSchedule"})
        self.assertRegex(self.template["Parameters"]["SweepSchedule"]["Default"], r"^(rate|cron)\(")
        (target,) = sweep["Targets"]
        self.assertEqual(target["Arn"], {"Fn::GetAtt": ["PlannerFunction", "Arn"]})
        # No Input: EventBridge delivers its "Scheduled Event", as in this sample.
        for key in ("Input", "InputPath", "InputTransformer"):
            self.assertNotIn(key, target)
        sample = json.loads((EVENTS / "eventbridge-scheduled-sweep.json").read_text())
        self.assertEqual(sample["detail-type"], "Scheduled Event")

    def test_each_rule_may_invoke_its_target(self):
        permissions = {
            (p["Properties"]["FunctionName"]["Fn::GetAtt"][0], p["Properties"]["SourceArn"]["Fn::GetAtt"][0])
            for p in self.resources.values()
            if p["Type"] == "AWS::Lambda::Permission"
        }
        self.assertEqual(
            permissions,
            {
                ("PlannerFunction", "IngestEventsRule"),
                ("PlannerFunction", "SweepRule"),
                ("CompactorFunction", "JobEventsRule"),
            },
        )
        for p in self.resources.values():
            if p["Type"] == "AWS::Lambda::Permission":
                self.assertEqual(p["Properties"]["Principal"], "events.amazonaws.com")

    def test_retries_dead_letters_and_concurrency(self):
        configs = {
            r["Properties"]["FunctionName"]["Ref"]: r["Properties"]
            for r in self.resources.values()
            if r["Type"] == "AWS::Lambda::EventInvokeConfig"
        }
        # The functions invoked asynchronously; the fan-out task pool is invoked synchronously
        # only, by the state machine, whose retriers handle its failures.
        self.assertEqual(set(configs), set(self.functions) - {"FanOutTaskFunction"})
        for name, config in configs.items():
            self.assertEqual(config["MaximumRetryAttempts"], {"Ref": "MaximumRetryAttempts"}, name)
            self.assertEqual(config["DestinationConfig"]["OnFailure"]["Destination"],
                             {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}, name)
        for rule in ("IngestEventsRule", "JobEventsRule", "SweepRule"):
            target = self.resources[rule]["Properties"]["Targets"][0]
            self.assertEqual(target["DeadLetterConfig"]["Arn"], {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}, rule)
        queue = self.resources["DeadLetterQueue"]["Properties"]
        self.assertTrue(queue.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in queue)
        _, _, compactor = self.function("ourios-compactor")
        bounded = self.evaluator().value(compactor["ReservedConcurrentExecutions"])
        self.assertEqual(bounded, "10")
        unbounded = self.evaluator(CompactorReservedConcurrency="0").value(compactor)
        self.assertNotIn("ReservedConcurrentExecutions", unbounded)

    def test_alarms_on_dead_letters_and_function_errors(self):
        alarms = [r["Properties"] for r in self.resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
        dead_letter = [
            a for a in alarms
            if a["Namespace"] == "AWS/SQS"
            and a["MetricName"] == "ApproximateNumberOfMessagesVisible"
            and a["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}}]
        ]
        self.assertEqual(len(dead_letter), 1)
        self.assertEqual((dead_letter[0]["Threshold"], dead_letter[0]["ComparisonOperator"]),
                         (0, "GreaterThanThreshold"))
        errors = {
            a["Dimensions"][0]["Value"]["Ref"]
            for a in alarms
            if a["Namespace"] == "AWS/Lambda" and a["MetricName"] == "Errors"
        }
        self.assertEqual(errors, set(self.functions))

    def test_logs_have_retention_and_each_function_writes_its_own_group(self):
        groups = {n for n, r in self.resources.items() if r["Type"] == "AWS::Logs::LogGroup"}
        used = set()
        for name, (_, props) in self.functions.items():
            group = props["LoggingConfig"]["LogGroup"]["Ref"]
            self.assertIn(group, groups, name)
            used.add(group)
        machine = self.resources["FanOutStateMachine"]["Properties"]
        (destination,) = machine["Logging"]["Destinations"]
        group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
        self.assertNotIn(group, used, "the state machine logs to a group of its own")
        used.add(group)
        self.assertEqual(used, groups)
        for group in groups:
            self.assertEqual(self.resources[group]["Properties"]["RetentionInDays"], {"Ref": "LogRetentionDays"})

    def test_the_fan_out_state_machine_invokes_only_the_compactors_code_in_its_own_pool(self):
        machine = self.resources["FanOutStateMachine"]["Properties"]
        self.assertEqual(INFRA / machine["DefinitionUri"], FAN_OUT_DEFINITION)
        self.assertEqual(machine["DefinitionSubstitutions"],
                         {"CompactorFunctionArn": {"Fn::GetAtt": ["FanOutTaskFunction", "Arn"]}})
        # The task pool runs the compactor's binary, with its limits and role, under a reserved
        # concurrency of its own: dispatched jobs and fan-out tasks never take each other's slots.
        tasks_fn = self.resources["FanOutTaskFunction"]
        compactor = self.resources["CompactorFunction"]
        self.assertEqual(tasks_fn["Metadata"]["BuildProperties"], compactor["Metadata"]["BuildProperties"])
        for key in ("Role", "MemorySize", "EphemeralStorage", "Timeout"):
            self.assertEqual(tasks_fn["Properties"][key], compactor["Properties"][key], key)
        self.assertEqual(tasks_fn["Properties"]["ReservedConcurrentExecutions"],
                         {"Fn::If": ["BoundFanOutTasks", {"Ref": "FanOutConcurrency"}, {"Ref": "AWS::NoValue"}]})
        self.assertNotIn("OURIOS_FAN_OUT_STATE_MACHINE", tasks_fn["Properties"]["Environment"]["Variables"])
        # One execution's Map fits the pool at its default.
        widest = max(state["MaxConcurrency"] for state in json.loads(FAN_OUT_DEFINITION.read_text())["States"].values()
                     if state["Type"] == "Map")
        self.assertLessEqual(widest, self.template["Parameters"]["FanOutConcurrency"]["Default"])
        definition = json.loads(FAN_OUT_DEFINITION.read_text())
        tasks = []

        def walk(states):
            for name, state in states.items():
                if state["Type"] == "Task":
                    tasks.append((name, state))
                if state["Type"] == "Map":
                    walk(state["ItemProcessor"]["States"])

        walk(definition["States"])
        self.assertEqual([n for n, _ in tasks], ["Plan", "Run", "Split", "Merge", "Commit"])
        for name, state in tasks:
            self.assertEqual(state["Resource"], "arn:aws:states:::lambda:invoke", name)
            self.assertEqual(state["Parameters"]["FunctionName"], "${CompactorFunctionArn}", name)
            self.assertTrue(state["Retry"], f"{name}: a task's failure retries that task")
            # Throttling at the compactor's reserved concurrency and Lambda's service errors
            # are retried with backoff for tens of minutes (a task lasts minutes), before the
            # catch-all, which gives a failing task three attempts.
            throttled, *rest = state["Retry"]
            self.assertEqual(set(throttled["ErrorEquals"]), LAMBDA_SERVICE_ERRORS, name)
            self.assertGreaterEqual(retry_span_seconds(throttled), 20 * 60, name)
            self.assertEqual(rest[-1]["ErrorEquals"], ["States.ALL"], name)
        # Its own role: it may invoke the compactor and deliver its logs, nothing else.
        self.assertEqual(machine["Role"], {"Fn::GetAtt": ["FanOutRole", "Arn"]})
        role = self.resources["FanOutRole"]["Properties"]
        (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
        self.assertEqual(trust["Principal"], {"Service": "states.amazonaws.com"})
        granted = [s for r, s in statements(self.template) if r == "FanOutRole"]
        actions = {a for s in granted for a in as_list(s["Action"])}
        self.assertEqual(actions - LOG_DELIVERY_ACTIONS, {"lambda:InvokeFunction"})
        invoke = [s for s in granted if "lambda:InvokeFunction" in as_list(s["Action"])]
        self.assertEqual([s["Resource"] for s in invoke], [{"Fn::GetAtt": ["FanOutTaskFunction", "Arn"]}])
        for other in ("PlannerRole", "CompactorRole"):
            self.assertFalse(any(r == other and "lambda:InvokeFunction" in as_list(s["Action"])
                                 for r, s in statements(self.template)), other)

    def test_the_compactor_may_start_executions_of_the_fan_out_state_machine_only(self):
        evaluate = self.evaluator().value
        name = evaluate(self.resources["FanOutStateMachine"]["Properties"]["Name"])
        # The ARN AWS gives a state machine of that name in the stack's region and account.
        arn = f"arn:aws:states:eu-west-1:123456789012:stateMachine:{name}"
        _, _, compactor = self.function("ourios-compactor")
        variables = compactor["Environment"]["Variables"]
        self.assertEqual(variables["OURIOS_FAN_OUT"], "auto")
        self.assertEqual(evaluate(variables["OURIOS_FAN_OUT_STATE_MACHINE"]), arn)
        granted = [s for r, s in statements(self.template) if r == "CompactorRole"]
        start = [s for s in granted if "states:StartExecution" in as_list(s["Action"])]
        self.assertEqual([evaluate(s["Resource"]) for s in start], [arn])
        for role, statement in statements(self.template):
            for action in as_list(statement["Action"]):
                if action.lower().startswith("states:"):
                    self.assertEqual((role, action), ("CompactorRole", "states:StartExecution"))

    def test_failed_fan_out_executions_reach_the_dead_letter_queue_and_an_alarm(self):
        rule = self.resources["FanOutFailedRule"]["Properties"]
        (target,) = rule["Targets"]
        self.assertEqual(target["Arn"], {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]})
        pattern = self.evaluator().value(rule["EventPattern"])
        machine = "<FanOutStateMachine>"

        def status_change(status, arn=machine):
            return {
                "source": "aws.states",
                "detail-type": "Step Functions Execution Status Change",
                "detail": {"status": status, "stateMachineArn": arn},
            }

        for status in ("FAILED", "TIMED_OUT", "ABORTED"):
            self.assertTrue(event_matches(pattern, status_change(status)), status)
        for status in ("SUCCEEDED", "RUNNING"):
            self.assertFalse(event_matches(pattern, status_change(status)), status)
        self.assertFalse(event_matches(pattern, status_change("FAILED", "arn:other")))
        policy = self.resources["DeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]
        sources = [
            s["Condition"]["ArnEquals"]["aws:SourceArn"]
            for s in policy["Statement"]
            if s.get("Principal") == {"Service": "events.amazonaws.com"}
        ]
        self.assertIn({"Fn::GetAtt": ["FanOutFailedRule", "Arn"]}, sources[0])
        alarms = [r["Properties"] for r in self.resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
        failed = [a for a in alarms if a["Namespace"] == "AWS/States" and a["MetricName"] == "ExecutionsFailed"]
        self.assertEqual(len(failed), 1)
        self.assertEqual(failed[0]["Dimensions"], [{"Name": "StateMachineArn", "Value": {"Ref": "FanOutStateMachine"}}])

    def test_every_checkov_suppression_says_why(self):
        for name, resource in self.resources.items():
            for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
                self.assertRegex(skip["id"], r"^CKV_AWS_\d+$", name)
                self.assertGreater(len(skip.get("comment", "").split()), 8, f"{name}: {skip['id']}")

    @unittest.skipUnless(os.environ.get("OURIOS_LAMBDA_ARTIFACTS"), "OURIOS_LAMBDA_ARTIFACTS not set")
    def test_built_zips_are_what_the_template_deploys(self):
        artifacts = Path(os.environ["OURIOS_LAMBDA_ARTIFACTS"])
        # The zips are of the template's default architecture unless check.sh says otherwise.
        arch = os.environ.get("OURIOS_LAMBDA_ARCH") or self.template["Parameters"]["Architecture"]["Default"]
        for name, (resource, _) in self.functions.items():
            binary = resource["Metadata"]["BuildProperties"]["Binary"]
            archive = artifacts / binary / "bootstrap.zip"
            self.assertTrue(archive.is_file(), f"{name}: {archive} was not built")
            with zipfile.ZipFile(archive) as z:
                self.assertIn("bootstrap", z.namelist(), archive)
                head = z.open("bootstrap").read(20)
                info = z.getinfo("bootstrap")
            self.assertEqual(head[:4], b"\x7fELF", archive)
            self.assertEqual(int.from_bytes(head[18:20], "little"), ELF_MACHINE[arch], f"{archive} is not {arch}")
            self.assertTrue((info.external_attr >> 16) & 0o111, f"{archive}: bootstrap is not executable")
            # Lambda refuses a function whose code is larger than 250 MB unzipped.
            self.assertLess(info.file_size, LAMBDA_UNZIPPED_LIMIT_BYTES, f"{archive}: bootstrap too large")


if __name__ == "__main__":
    unittest.main()
