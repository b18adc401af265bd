"""An S3 test server that enforces the functions' IAM policies from infra/template.yaml.

    python tests/iam/s3_iam_server.py --bucket B --root-prefix R --config OUT.json
        [--user NAME=POLICY.json ...]

Runs moto's server (the moto pinned in tests/requirements.txt) in this process with IAM
enforcement from the first request on (INITIAL_NO_AUTH_ACTION_COUNT=0). Before it serves, it
creates the bucket and these IAM users, each with one inline policy and an access key:

  planner, compactor   the S3 statements of PlannerRole and CompactorRole, evaluated for the
                       bucket and root prefix as infra/tests/test_template.py evaluates them
                       (!Sub, !If, parameters); their other statements (SQS, Logs, KMS) name
                       no S3 resource and are left out
  admin                s3:* on the bucket, for the tests' own seeding and reading
  NAME                 each --user, with the policy document in POLICY.json

then writes {"endpoint", "bucket", "root_prefix", "denials", "users": {NAME: {"access_key_id",
"secret_access_key", "policy"}}} to --config; the endpoint answers once the file exists.

moto 5.2.1 checks signatures and evaluates Action and Resource of identity policies, but three
parts of its evaluation differ from S3 where the functions depend on them, so this server
decides S3 requests itself, from the same policies (everything else is moto's):

  - Conditions. moto evaluates only StringEquals and never passes a request's s3:prefix, and
    an Allow whose condition fails becomes an explicit deny. Here StringLike and StringEquals
    on s3:prefix are evaluated with the listing's prefix (a listing without one has no
    s3:prefix), and an Allow whose condition fails does not apply. Any other operator fails
    the request (and is recorded as a denial), naming it, rather than being ignored.
  - Multi-object delete. moto checks s3:DeleteObject on the bucket ARN; S3 checks it for each
    key and answers a denied key with AccessDenied inside a 200 response. Here, as S3 does.
  - A GET or HEAD of a missing key is 404 only for a caller that may s3:ListBucket with
    s3:prefix equal to the key; any other caller gets 403 (moto always answers 404).

Each denial is appended to the denials file as a JSON line {"user", "action", "resource",
"reason"}, and the error message names the action and resource.
"""

import argparse
import fnmatch
import json
import os
import socket
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "infra" / "tests"))

import moto  # noqa: E402
from moto.core import DEFAULT_ACCOUNT_ID  # noqa: E402
from moto.iam.access_control import IAMPolicy, PermissionResult, S3IAMRequest  # noqa: E402
from moto.iam.models import iam_backends  # noqa: E402
from moto.s3.exceptions import S3ClientError  # noqa: E402
from moto.s3.models import FakeBucket, s3_backends  # noqa: E402
from moto.s3.responses import S3Response  # noqa: E402
from test_template import Evaluator, load_template, statements  # noqa: E402

MOTO_VERSION = "5.2.1"
ROLES = {"planner": "PlannerRole", "compactor": "CompactorRole"}
CONDITION_OPERATORS = {"StringLike", "StringEquals"}


class Denied(S3ClientError):
    """403 AccessDenied naming the action and resource."""

    def __init__(self, message):
        super().__init__("AccessDenied", message)


class Unsupported(S3ClientError):
    """A policy this server cannot evaluate faithfully: fails the request (400, not retried)."""

    def __init__(self, message):
        super().__init__("NotImplemented", message)


def as_list(value):
    return value if isinstance(value, list) else [value]


def wildcard(pattern, value, case_sensitive=True):
    """IAM wildcards: `*` any run of characters (slashes included), `?` one."""
    pattern = pattern.replace("[", "[[]")
    if not case_sensitive:
        pattern, value = pattern.lower(), value.lower()
    return fnmatch.fnmatchcase(value, pattern)


def conditions_hold(condition, context):
    for operator, keys in (condition or {}).items():
        if operator not in CONDITION_OPERATORS:
            raise Unsupported(f"condition operator {operator} is not evaluated by this server")
        for key, expected in keys.items():
            if key not in context:
                return False
            actual = context[key]
            if operator == "StringLike":
                ok = any(wildcard(p, actual) for p in as_list(expected))
            else:
                ok = actual in as_list(expected)
            if not ok:
                return False
    return True


def canonical_url(path):
    """The path and query parameters a SigV4 client signed, from the URL the WSGI server saw.

    The server hands moto a URL whose path was decoded and partly re-encoded (`=` stays
    literal), so moto's own signature check fails for keys like `tenant=acme/…`; SigV4 signs
    the path with every byte but unreserved ones and `/` percent-encoded, and the query
    parameters sorted and encoded the same way (botocore encodes `params` so).
    """
    raw_path, _, query = path.partition("?")
    params = []
    for pair in query.split("&") if query else []:
        key, _, value = pair.partition("=")
        params.append((unquote(key), unquote(value)))
    return quote(unquote(raw_path), safe="/~"), params


def decide(documents, action, resource, context):
    """True when an Allow applies and no Deny does (identity policies only)."""
    allowed = False
    for document in documents:
        for statement in as_list(document["Statement"]):
            for element in ("NotAction", "NotResource", "NotPrincipal"):
                if element in statement:
                    raise Unsupported(f"policy element {element} is not evaluated by this server")
            if not any(wildcard(a, action, False) for a in as_list(statement.get("Action", []))):
                continue
            if not any(wildcard(r, resource) for r in as_list(statement.get("Resource", []))):
                continue
            if not conditions_hold(statement.get("Condition"), context):
                continue
            if statement["Effect"] == "Deny":
                return False
            allowed = True
    return allowed


class Server:
    """The enforcing state: where denials are recorded, and the denied keys of a multi-delete."""

    def __init__(self, denials_path):
        self.denials_path = denials_path
        self.lock = threading.Lock()
        self.local = threading.local()

    def record(self, user, action, resource, reason):
        line = json.dumps({"user": user, "action": action, "resource": resource, "reason": reason})
        with self.lock, open(self.denials_path, "a") as out:
            out.write(line + "\n")

    def check(self, request, resource):
        """Replaces S3IAMRequest.check_action_permitted (see the module doc)."""
        try:
            self.decide_request(request, resource)
        except Unsupported as e:
            user = getattr(request._access_key, "_owner_user_name", request._access_key.arn)
            self.record(user, request._action, resource, e.message)
            raise

    def decide_request(self, request, resource):
        self.local.denied_deletes = set()
        documents = [IAMPolicy(p)._policy_json for p in request._access_key.collect_policies()]
        user = getattr(request._access_key, "_owner_user_name", request._access_key.arn)
        action = request._action
        path, _, query = request._path.partition("?")
        params = parse_qs(query, keep_blank_values=True)

        if action == "s3:DeleteObject" and request._method == "POST" and "delete" in params:
            root = ET.fromstring(request._body)
            keys = [el.text or "" for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "Key"]
            for key in keys:
                arn = f"{resource}/{key}"
                if not decide(documents, action, arn, {}):
                    self.record(user, action, arn, "no statement allows it")
                    self.local.denied_deletes.add(arn)
            return

        context = {}
        if action == "s3:ListBucket" and "prefix" in params:
            context["s3:prefix"] = params["prefix"][0]
        if not decide(documents, action, resource, context):
            detail = f" with s3:prefix {context['s3:prefix']!r}" if context else ""
            self.record(user, action, resource + detail, "no statement allows it")
            raise Denied(f"Access Denied: {user} may not {action} on {resource}{detail}")

        bucket, _, key = resource.removeprefix("arn:aws:s3:::").partition("/")
        if action == "s3:GetObject" and key and request._method in ("GET", "HEAD"):
            backend = s3_backends[request.account_id]["aws"]
            try:
                missing = backend.get_object(bucket, key) is None
            except S3ClientError:
                missing = True
            bucket_arn = f"arn:aws:s3:::{bucket}"
            if missing and not decide(documents, "s3:ListBucket", bucket_arn, {"s3:prefix": key}):
                reason = "missing key without s3:ListBucket on it: 403, not 404"
                self.record(user, action, resource, reason)
                raise Denied(f"Access Denied: {user} may not s3:ListBucket {key!r}: {reason}")

    def install(self):
        server = self

        def check_action_permitted(request, resource):
            server.check(request, resource)

        S3IAMRequest.check_action_permitted = check_action_permitted

        create_aws_request = S3IAMRequest._create_aws_request

        def canonical_aws_request(request):
            aws_request = create_aws_request(request)
            aws_request.url, aws_request.params = canonical_url(request._path)
            return aws_request

        S3IAMRequest._create_aws_request = canonical_aws_request

        get_permission = FakeBucket.get_permission

        def bucket_permission(bucket, action, resource):
            if action == "s3:DeleteObject" and resource in getattr(server.local, "denied_deletes", ()):
                return PermissionResult.DENIED
            return get_permission(bucket, action, resource)

        FakeBucket.get_permission = bucket_permission

        delete_keys = S3Response._bucket_response_delete_keys

        def bucket_response_delete_keys(response, *args, **kwargs):
            try:
                return delete_keys(response, *args, **kwargs)
            finally:
                server.local.denied_deletes = set()

        S3Response._bucket_response_delete_keys = bucket_response_delete_keys


def role_policy(template, role, bucket, root_prefix):
    """The S3 statements of a role's inline policies, evaluated for the bucket and root."""
    evaluator = Evaluator(template, {"BucketName": bucket, "RootPrefix": root_prefix})
    chosen = []
    for name, statement in statements(template):
        if name != role:
            continue
        statement = evaluator.value(statement)
        if all(str(a).startswith("s3:") for a in as_list(statement["Action"])):
            statement.pop("Sid", None)
            chosen.append(statement)
    if not chosen:
        raise SystemExit(f"{role} has no S3 statement in infra/template.yaml")
    return {"Version": "2012-10-17", "Statement": chosen}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--root-prefix", default="")
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--user", action="append", default=[], metavar="NAME=POLICY.json")
    args = parser.parse_args()
    if moto.__version__ != MOTO_VERSION:
        raise SystemExit(
            f"moto {moto.__version__}: this server corrects moto {MOTO_VERSION}'s IAM evaluation; "
            "check the corrections against the new version, then update MOTO_VERSION"
        )

    template = load_template()
    policies = {name: role_policy(template, role, args.bucket, args.root_prefix) for name, role in ROLES.items()}
    policies["admin"] = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "s3:*",
                "Resource": [f"arn:aws:s3:::{args.bucket}", f"arn:aws:s3:::{args.bucket}/*"],
            }
        ],
    }
    for spec in args.user:
        name, _, file = spec.partition("=")
        policies[name] = json.loads(Path(file).read_text())

    iam = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    users = {}
    for name, policy in policies.items():
        iam.create_user("us-east-1", name)
        iam.put_user_policy(name, "s3", json.dumps(policy))
        key = iam.create_access_key(name)
        users[name] = {
            "access_key_id": key.access_key_id,
            "secret_access_key": key.secret_access_key,
            "policy": policy,
        }
    s3_backends[DEFAULT_ACCOUNT_ID]["aws"].create_bucket(args.bucket, "us-east-1")

    denials = args.config.with_suffix(".denials.jsonl")
    denials.write_text("")
    Server(denials).install()

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = {
        "endpoint": f"http://127.0.0.1:{port}",
        "bucket": args.bucket,
        "root_prefix": args.root_prefix,
        "denials": str(denials),
        "users": users,
    }
    partial = args.config.with_suffix(".partial")
    partial.write_text(json.dumps(config, indent=2))
    partial.rename(args.config)

    from moto.server import main as serve

    serve(["-H", "127.0.0.1", "-p", str(port)])


if __name__ == "__main__":
    main()
