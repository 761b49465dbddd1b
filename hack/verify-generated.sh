#!/usr/bin/env bash
# verify-generated.sh CONTROLLER_GEN: regenerates deepcopy code and the CRD in
# a scratch copy of the module, and the controller's ClusterRole, the metrics
# page and the Grafana dashboard from the work tree into the scratch
# directory, and fails, showing the difference, when the committed files are
# stale. The work tree is left untouched.
set -euo pipefail
gen=$1
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cp "$root/go.mod" "$root/go.sum" "$scratch/"
mkdir -p "$scratch/hack" "$scratch/config/crd"
cp "$root/hack/boilerplate.go.txt" "$scratch/hack/"
cp -r "$root/apis" "$scratch/apis"
rm -f "$scratch"/apis/*/zz_generated.*.go
(cd "$scratch" && "$gen" object:headerFile=hack/boilerplate.go.txt paths=./apis/... \
	crd output:crd:artifacts:config=config/crd/bases)
(cd "$root" && "$gen" rbac:roleName=sless-controller paths=./controller/... \
	output:rbac:artifacts:config="$scratch/config/rbac")
(cd "$root" && go run ./hack/gen-metricsdoc "$scratch/metrics.md" && go run ./hack/gen-dashboard "$scratch/sless.json")

status=0
diff -ru "$root/apis" "$scratch/apis" || status=1
diff -ru "$root/config/crd/bases" "$scratch/config/crd/bases" || status=1
diff -u "$root/config/rbac/role.yaml" "$scratch/config/rbac/role.yaml" || status=1
diff -u "$root/docs/metrics.md" "$scratch/metrics.md" || status=1
diff -u "$root/config/grafana/sless.json" "$scratch/sless.json" || status=1
if [ "$status" -ne 0 ]; then
	echo "generated files are stale: run 'make generate' and commit the result" >&2
	exit 1
fi
echo "generated files are up to date"
