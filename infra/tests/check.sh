#!/usr/bin/env bash
# The infra checks, run by tests/run.sh ("== infra"): cfn-lint and checkov on the template, the
# template test, and the deployable zips built with cargo-lambda and checked against the template.
#
# Tools: cfn-lint and checkov (tests/run.sh installs pinned versions into .tools/, checkov in
# its own virtualenv because it pins old boto3; CFN_LINT and CHECKOV name them), cargo-lambda
# and the Rust target of the template's default architecture (rustup target add
# aarch64-unknown-linux-gnu). Without cargo-lambda the artifact build is skipped, loudly; with
# the SAM CLI on the PATH, `sam build` runs too.
set -euo pipefail
cd "$(dirname "$0")/../.."

# pip's console scripts (cfn-lint, cargo-lambda) may not be on the PATH yet (a user install, or
# pyenv before a rehash): look in the interpreter's scripts directory too, last.
PATH="$PATH:$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
cfn_lint="${CFN_LINT:-cfn-lint}"
checkov="${CHECKOV:-checkov}"
for tool in "$cfn_lint" "$checkov"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "infra: $tool is not installed: bash tests/run.sh installs it (pins in tests/requirements.txt and infra/tests/checkov-requirements.txt), or set CFN_LINT / CHECKOV" >&2
        exit 1
    fi
done

echo "-- cfn-lint $("$cfn_lint" --version | awk '{print $2}')"
"$cfn_lint" infra/template.yaml

echo "-- checkov"
# --skip-download: no calls to the Prisma Cloud API (CI has no internet); suppressions with their
# reasons are in the template's Metadata. A finding makes checkov exit non-zero.
"$checkov" --file infra/template.yaml --framework cloudformation --skip-download --quiet --compact

artifacts=""
if cargo lambda --help >/dev/null 2>&1; then
    # The template's default Architecture is arm64: build what a default deployment ships. A
    # machine that cannot install the aarch64 target (no rustup downloads) builds and checks the
    # x86_64 zips instead, which `Architecture=x86_64` deploys.
    arch=arm64
    if ! rustup target list --installed 2>/dev/null | grep -q '^aarch64-unknown-linux-gnu$'; then
        arch=x86_64
        echo "-- the aarch64 Rust target is not installed: building and checking the x86_64 zips"
    fi
    export OURIOS_LAMBDA_ARCH="$arch"
    echo "-- cargo lambda build --release --${arch/_/-} --output-format zip (planner, compactor)"
    cargo lambda build --release "--${arch/_/-}" --output-format zip -p ourios-planner -p ourios-compactor
    target_dir="${CARGO_TARGET_DIR:-target}"
    artifacts="$(cd "$target_dir" && pwd)/lambda"
    ls -l "$artifacts"/ourios-planner/bootstrap.zip "$artifacts"/ourios-compactor/bootstrap.zip
else
    echo "-- SKIPPED: cargo-lambda is not installed (pip install cargo-lambda); the zips are not built" >&2
fi

if command -v sam >/dev/null 2>&1; then
    # Not installed by CI (a large install for a beta build method); run where it is installed.
    echo "-- sam build ($(sam --version))"
    sam_dir="$(mktemp -d)"
    SAM_CLI_TELEMETRY=0 sam build --template-file infra/template.yaml --build-dir "$sam_dir" --beta-features
    ls -l "$sam_dir"/PlannerFunction/bootstrap "$sam_dir"/CompactorFunction/bootstrap
    rm -rf "$sam_dir"
else
    echo "-- sam build: skipped (the SAM CLI is not installed; CI does not install it)"
fi

echo "-- template test"
OURIOS_LAMBDA_ARTIFACTS="$artifacts" python3 -m unittest discover -s infra/tests -p 'test_*.py' -v 2>&1
