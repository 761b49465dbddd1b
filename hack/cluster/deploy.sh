#!/usr/bin/env bash
# make deploy: installs sless on the test cluster (make cluster) from the
# images `make images` pushed to its registry, with `kubectl apply -k` of
# config/default and a kustomize image override by digest, as a user would
# install it on any cluster, then waits until every sless Deployment is
# rolled out.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
K8S_BIN=${K8S_BIN:?the directory of the Kubernetes binaries (make sets it)}
VERSION=${VERSION:?the sless image tag (make sets it)}
STATE=${SLESS_CLUSTER_DIR:-$ROOT/bin/cluster}
REGISTRY=${CLUSTER_REGISTRY:-127.0.0.1:5000}
KUBECTL="$K8S_BIN/kubectl --kubeconfig $STATE/kubeconfig"

digest=$(curl -sfI -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
	"http://$REGISTRY/v2/sless/sless/manifests/$VERSION" | awk -F': ' 'tolower($1) == "docker-content-digest" {print $2}' | tr -d '\r')
[ -n "$digest" ] || { echo "deploy: no image sless/sless:$VERSION in $REGISTRY: make images REGISTRY=$REGISTRY/sless" >&2; exit 1; }

overlay=$STATE/deploy
mkdir -p "$overlay"
cat >"$overlay/kustomization.yaml" <<YAML
# Written by hack/cluster/deploy.sh: config/default with the sless image
# from the test cluster's registry.
resources:
  - $(realpath --relative-to="$overlay" "$ROOT/config/default")
images:
  - name: ghcr.io/sless-dev/sless
    newName: $REGISTRY/sless/sless
    digest: $digest
YAML
# Server-side: the CRD is too large for client-side apply's annotation.
$KUBECTL apply --server-side --force-conflicts -k "$overlay"
for d in sless-controller sless-activator sless-autoscaler; do
	$KUBECTL -n sless-system rollout status "deploy/$d" --timeout=180s
done
echo "deploy: sless $VERSION ($digest) is installed"
