#!/usr/bin/env bash
# Installs the real AWS clients of the client matrix (tests/clients.rs) into
# $ACKBOX_CLIENTS_DIR (default /var/tmp/ackbox-clients), from PyPI and npm at
# the versions pinned here. Idempotent: a second run with the same pins only
# checks. Prints the directory to export as ACKBOX_TEST_CLIENTS.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${ACKBOX_CLIENTS_DIR:-/var/tmp/ackbox-clients}"
mkdir -p "$dir"

# boto3 and the awscli package speak JSON 1.0. The last botocore release
# before SQS moved to JSON (1.31.81) carries the query-protocol model of
# SQS; the tests load it into the current botocore to force the query
# protocol, as every SDK built before that switch still speaks it.
query_botocore=1.31.80
stamp="$(cat "$here/python/requirements.txt" "$here/node/package-lock.json" | sha256sum | cut -c1-16)-$query_botocore"
if [ "$(cat "$dir/.stamp" 2>/dev/null || true)" = "$stamp" ]; then
    echo "$dir"
    exit 0
fi

python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/python/requirements.txt" >&2
"$dir/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    "botocore==$query_botocore" -d "$dir/download" >&2
mkdir -p "$dir/query-model/sqs/2012-11-05"
"$dir/venv/bin/python" - "$dir" "$query_botocore" <<'PY'
import json, sys, zipfile
dir, version = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(f"{dir}/download/botocore-{version}-py3-none-any.whl")
model = json.loads(wheel.read("botocore/data/sqs/2012-11-05/service-2.json"))
assert model["metadata"]["protocol"] == "query", model["metadata"]
with open(f"{dir}/query-model/sqs/2012-11-05/service-2.json", "w") as out:
    json.dump(model, out)
PY

mkdir -p "$dir/node"
cp "$here/node/package.json" "$here/node/package-lock.json" "$dir/node/"
(cd "$dir/node" && npm ci --silent --no-audit --no-fund >&2)

echo "$stamp" > "$dir/.stamp"
echo "$dir"
