#!/usr/bin/env bash
# A one-node Kubernetes cluster on this machine, for sless's end-to-end tests
# (make cluster, make cluster-down). Every binary is built from Go modules
# (make cluster-bins); containerd, runc and the CNI plugins are Debian's.
#
#   cluster.sh up      start what is not running; idempotent
#   cluster.sh down    stop every process by its PID and restore what up
#                      changed: sysctls, iptables rules, the bridge, mounts
#   cluster.sh wipe    down, then delete the cluster's state (etcd, images)
#   cluster.sh status  what runs
#
# Network: pods and Services live on a host-only bridge. Nothing is routed
# off the machine: no masquerade, no default route in pods, and a guard in
# the mangle table drops any forwarded packet that does not both enter and
# leave the bridge. The machine reaches pods and cluster IPs directly.
# RabbitMQ and PostgreSQL on 127.0.0.1 are relayed onto the bridge address,
# so pods reach them as 10.244.0.1 (and they see loopback clients).
#
# Settings this machine needs (see docs/development.md): containerd's
# restrict_oom_score_adj (no CAP_SYS_RESOURCE), the kubelet's cgroupfs driver
# with failCgroupV1: false, and the API server reaching kubelets by InternalIP.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/hack/cluster
K8S_BIN=${K8S_BIN:?the directory of the Kubernetes binaries (make sets it)}
TOOLS_BIN=${TOOLS_BIN:?the directory of coredns and registry (make sets it)}
KEDA_BIN=${KEDA_BIN:?the directory of KEDA's keda and keda-adapter (make sets it)}
KEDA_VERSION=${KEDA_VERSION:?KEDA's version (make sets it)}
STATE=${SLESS_CLUSTER_DIR:-$ROOT/bin/cluster}
RUN=/run/sless-cluster
PKI=$STATE/pki
LOGS=$STATE/logs
PIDS=$STATE/pids

BRIDGE=sless0
NODE=sless-node
NODE_IP=10.244.0.1
POD_SUBNET=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
DNS_IP=10.96.0.10
REGISTRY=127.0.0.1:5000
PAUSE_IMAGE=$REGISTRY/sless/pause:3.10
COREDNS_IMAGE=$REGISTRY/sless/coredns:v1.15.0
RELAYS=("5672:127.0.0.1:5672" "5432:127.0.0.1:5432") # bridge port:target
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables vm.overcommit_memory vm.panic_on_oom
	kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

KUBECTL="$K8S_BIN/kubectl --kubeconfig $STATE/kubeconfig"

log() { printf '%s cluster: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "$*"; exit 1; }

# wait_for DESCRIPTION SECONDS COMMAND...: polls COMMAND every 0.2 s.
wait_for() {
	local what=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "timed out after ${secs}s waiting for $what (logs in $LOGS)"
		sleep 0.2
	done
}

# render TEMPLATE FILE SED-SCRIPT writes FILE from TEMPLATE, only when its
# content changes: kube-proxy exits when its configuration file is written,
# and a second `up` must leave a running cluster as it is.
render() {
	local tmp
	tmp=$(mktemp "$2.XXXXXX")
	sed "$3" "$1" >"$tmp"
	if cmp -s "$tmp" "$2"; then rm -f "$tmp"; else mv "$tmp" "$2"; fi
}

running() { [ -f "$PIDS/$1" ] && kill -0 "$(cat "$PIDS/$1")" 2>/dev/null; }

# start NAME COMMAND...: runs COMMAND in the background, its PID in
# $PIDS/NAME and its output in $LOGS/NAME.log, unless it runs already.
start() {
	local name=$1
	shift
	if running "$name"; then
		return
	fi
	mkdir -p "$LOGS" "$PIDS"
	nohup "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
	echo $! >"$PIDS/$name"
	log "started $name (pid $!)"
}

# stop NAME: SIGTERM to its PID, SIGKILL after 10 s.
stop() {
	local name=$1 pid
	[ -f "$PIDS/$name" ] || return 0
	pid=$(cat "$PIDS/$name")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
		log "stopped $name (pid $pid)"
	fi
	rm -f "$PIDS/$name"
}

prerequisites() {
	local missing=()
	command -v containerd >/dev/null || missing+=(containerd)
	command -v runc >/dev/null || missing+=(runc)
	[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
	command -v iptables >/dev/null || missing+=(iptables)
	command -v socat >/dev/null || missing+=(socat)
	command -v openssl >/dev/null || missing+=(openssl)
	command -v gcc >/dev/null || missing+=(gcc libc6-dev)
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]} (Debian)"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
	for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
		[ -x "$K8S_BIN/$b" ] || die "$K8S_BIN/$b is missing: make cluster-bins"
	done
}

# network makes the bridge, its routes and guard, once; the sysctls it and
# the kubelet change are saved first, for down to restore.
network() {
	modprobe br_netfilter 2>/dev/null || true
	mkdir -p "$STATE"
	[ -f "$STATE/sysctl.saved" ] || sysctl "${SYSCTLS[@]}" 2>/dev/null >"$STATE/sysctl.saved" || true
	ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
	ip addr replace "$NODE_IP/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	ip route replace "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP"
	for dir in -i -o; do
		iptables -t mangle -C FORWARD ! "$dir" "$BRIDGE" -j DROP 2>/dev/null ||
			iptables -t mangle -A FORWARD ! "$dir" "$BRIDGE" -j DROP
	done
	sysctl -qw net.ipv4.ip_forward=1 # pod -> cluster IP -> pod, all on the bridge
	sysctl -qw net.bridge.bridge-nf-call-iptables=1
	mkdir -p "$STATE/cni"
	render "$HERE/cni.conflist" "$STATE/cni/10-sless.conflist" \
		"s|@BRIDGE@|$BRIDGE|; s|@SUBNET@|$POD_SUBNET|; s|@GATEWAY@|$NODE_IP|; s|@SERVICES@|$SERVICE_CIDR|; s|@RUN@|$RUN|"
}

# cert NAME CN [O] [SANS]: a key and certificate signed by the cluster CA.
cert() {
	local name=$1 cn=$2 o=${3:-} sans=${4:-}
	[ -f "$PKI/$name.crt" ] && return
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key" 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "/CN=$cn${o:+/O=$o}" -out "$PKI/$name.csr" 2>/dev/null
	if [ -n "$sans" ]; then
		printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" >"$PKI/$name.ext"
	else
		printf 'extendedKeyUsage=clientAuth\n' >"$PKI/$name.ext"
	fi
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 -sha256 \
		-extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

kubeconfig() { # NAME FILE
	cat >"$2" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sless
  cluster: {certificate-authority: $PKI/ca.crt, server: "https://$NODE_IP:6443"}
users:
- name: $1
  user: {client-certificate: $PKI/$1.crt, client-key: $PKI/$1.key}
contexts:
- name: sless
  context: {cluster: sless, user: $1}
current-context: sless
EOF
}

certificates() {
	mkdir -p "$PKI"
	if [ ! -f "$PKI/ca.crt" ]; then
		openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/ca.key" 2>/dev/null
		openssl req -x509 -new -nodes -key "$PKI/ca.key" -sha256 -days 3650 -subj "/CN=sless-cluster-ca" -out "$PKI/ca.crt" 2>/dev/null
	fi
	cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert front-proxy-client front-proxy-client
	cert admin admin system:masters
	cert controller-manager system:kube-controller-manager
	cert scheduler system:kube-scheduler
	cert kubelet "system:node:$NODE" system:nodes
	cert kube-proxy system:kube-proxy
	if [ ! -f "$PKI/sa.key" ]; then
		openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/sa.key" 2>/dev/null
		openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	fi
	for n in controller-manager scheduler kubelet kube-proxy; do kubeconfig "$n" "$PKI/$n.kubeconfig"; done
	kubeconfig admin "$STATE/kubeconfig"
}

registry() {
	mkdir -p "$STATE/registry" "$STATE/certs.d/$REGISTRY"
	render "$HERE/registry.yml" "$STATE/registry.yml" "s|@STATE@|$STATE|; s|@ADDR@|$REGISTRY|"
	printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$REGISTRY" "$REGISTRY" \
		>"$STATE/certs.d/$REGISTRY/hosts.toml"
	OTEL_SDK_DISABLED=true OTEL_TRACES_EXPORTER=none start registry "$TOOLS_BIN/registry" serve "$STATE/registry.yml"
	wait_for "the registry" 30 curl -sf "http://$REGISTRY/v2/"
}

# in_registry REPOSITORY TAG: whether the registry has that image (an OCI
# manifest, which it serves only to a client that accepts one).
in_registry() {
	curl -sf -o /dev/null -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REGISTRY/v2/$1/manifests/$2"
}

# images pushes the cluster's own images (the pod sandbox's pause, CoreDNS)
# to the registry when they are not there.
images() {
	in_registry sless/pause 3.10 && in_registry sless/coredns v1.15.0 && return
	mkdir -p "$STATE/images/bin"
	local kmod
	kmod=$(cd "$ROOT/hack/tools" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
	gcc -Os -static -DVERSION=v3.10-sless -o "$STATE/images/bin/pause" "$kmod/build/pause/linux/pause.c"
	strip "$STATE/images/bin/pause"
	(cd "$ROOT" && go run ./hack/images -out "$STATE/images" -push "$REGISTRY/sless" -only pause,coredns \
		-binary "pause:3.10=$STATE/images/bin/pause" -binary "coredns:v1.15.0=$TOOLS_BIN/coredns")
}

containerd_up() {
	mkdir -p "$RUN" "$STATE/containerd"
	render "$HERE/containerd.toml" "$STATE/containerd.toml" "s|@STATE@|$STATE|g; s|@RUN@|$RUN|g; s|@PAUSE@|$PAUSE_IMAGE|g"
	start containerd containerd --config "$STATE/containerd.toml"
	wait_for containerd 30 ctr --address "$RUN/containerd.sock" version
}

control_plane() {
	start etcd "$K8S_BIN/etcd" --name sless --data-dir "$STATE/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster sless=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
		--unsafe-no-fsync --quota-backend-bytes 1073741824
	start kube-apiserver "$K8S_BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
		--service-cluster-ip-range "$SERVICE_CIDR" --service-node-port-range 30000-32767 \
		--client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
		--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types InternalIP \
		--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
		--requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
		--requestheader-extra-headers-prefix X-Remote-Extra- \
		--proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
		--enable-aggregator-routing=true \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction
	wait_for "the API server" 120 curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://$NODE_IP:6443/readyz"
	start kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig "$PKI/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$PKI/controller-manager.kubeconfig" --authorization-kubeconfig "$PKI/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false \
		--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
		--root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
		--use-service-account-credentials=true --controllers '*' --service-cluster-ip-range "$SERVICE_CIDR" \
		--horizontal-pod-autoscaler-sync-period 5s
	start kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig "$PKI/scheduler.kubeconfig" \
		--authentication-kubeconfig "$PKI/scheduler.kubeconfig" --authorization-kubeconfig "$PKI/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false
}

node() {
	# No upstream name servers: CoreDNS answers cluster names only, and
	# nothing a pod looks up leaves the machine.
	: >"$STATE/resolv.conf"
	render "$HERE/kubelet.yaml" "$STATE/kubelet.yaml" "s|@STATE@|$STATE|g; s|@RUN@|$RUN|g; s|@NODE_IP@|$NODE_IP|g; s|@DNS_IP@|$DNS_IP|g"
	render "$HERE/kube-proxy.yaml" "$STATE/kube-proxy.yaml" "s|@STATE@|$STATE|g; s|@NODE@|$NODE|g; s|@NODE_IP@|$NODE_IP|g; s|@CLUSTER_CIDR@|$CLUSTER_CIDR|g"
	start kubelet "$K8S_BIN/kubelet" --config "$STATE/kubelet.yaml" --kubeconfig "$PKI/kubelet.kubeconfig" \
		--hostname-override "$NODE" --node-ip "$NODE_IP" --root-dir "$STATE/kubelet" --cert-dir "$STATE/kubelet-pki"
	start kube-proxy "$K8S_BIN/kube-proxy" --config "$STATE/kube-proxy.yaml" --hostname-override "$NODE"
	wait_for "the node to be Ready" 120 node_ready
}

node_ready() {
	[ "$($KUBECTL get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

dns() {
	sed "s|@IMAGE@|$COREDNS_IMAGE|; s|@DNS_IP@|$DNS_IP|" "$HERE/coredns.yaml" | $KUBECTL apply -f - >/dev/null
	$KUBECTL -n kube-system rollout status deploy/coredns --timeout=120s >/dev/null
}

# keda installs KEDA (operator and metrics adapter, built from the module
# sless's API types come from) from its own config/minimal, with the images
# from the cluster's registry: RabbitMQ triggers scale through it.
keda() {
	if ! in_registry sless/keda "$KEDA_VERSION" || ! in_registry sless/keda-metrics-apiserver "$KEDA_VERSION"; then
		(cd "$ROOT" && go run ./hack/images -out "$STATE/images" -push "$REGISTRY/sless" -only keda,keda-metrics-apiserver \
			-binary "keda:$KEDA_VERSION=$KEDA_BIN/keda" -binary "keda-metrics-apiserver:$KEDA_VERSION=$KEDA_BIN/keda-adapter")
	fi
	local kmod overlay=$STATE/keda
	kmod=$(cd "$ROOT/hack/keda" && go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)
	mkdir -p "$overlay"
	cat >"$overlay/kustomization.yaml" <<EOF
resources:
  - $(realpath --relative-to="$overlay" "$kmod/config/minimal")
images:
  - {name: ghcr.io/kedacore/keda, newName: $REGISTRY/sless/keda, newTag: $KEDA_VERSION}
  - {name: ghcr.io/kedacore/keda-metrics-apiserver, newName: $REGISTRY/sless/keda-metrics-apiserver, newTag: $KEDA_VERSION}
EOF
	$KUBECTL apply --server-side --force-conflicts -k "$overlay" >/dev/null
	$KUBECTL -n keda rollout status deploy/keda-operator deploy/keda-metrics-apiserver --timeout=180s >/dev/null
}

relays() {
	local r port target
	for r in "${RELAYS[@]}"; do
		port=${r%%:*} target=${r#*:}
		start "relay-$port" socat "TCP-LISTEN:$port,bind=$NODE_IP,fork,reuseaddr" "TCP:$target"
	done
}

# preflight refuses to start beside another cluster (another checkout's,
# say): the ports, the bridge and the run directory are the machine's.
preflight() {
	local port name
	for port in 5000:registry 2379:etcd 6443:kube-apiserver 10250:kubelet; do
		name=${port#*:} port=${port%%:*}
		if ! running "$name" && ss -Hltn "sport = :$port" | grep -q .; then
			die "port $port ($name) is taken by another process: is another cluster running? (make cluster-down in its checkout)"
		fi
	done
}

up() {
	local t0=$SECONDS
	preflight
	prerequisites
	# Images unpacked under the state directory hold Go sources (the
	# functions'): a go.mod of its own keeps `go test ./...` of the
	# checkout out of it.
	mkdir -p "$STATE"
	printf '// The test cluster'"'"'s state: not a part of the sless module.\nmodule sless.invalid/cluster-state\n' >"$STATE/go.mod"
	network
	certificates
	registry
	images
	containerd_up
	control_plane
	node
	dns
	keda
	relays
	log "up in $((SECONDS - t0))s: export KUBECONFIG=$STATE/kubeconfig"
}

down() {
	local r
	for r in "${RELAYS[@]}"; do stop "relay-${r%%:*}"; done
	for n in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$n"; done
	if [ -S "$RUN/containerd.sock" ]; then
		local c
		for c in $(ctr --address "$RUN/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$RUN/containerd.sock" -n k8s.io tasks kill -s KILL "$c" 2>/dev/null || true
		done
		for c in $(ctr --address "$RUN/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$RUN/containerd.sock" -n k8s.io tasks delete -f "$c" 2>/dev/null || true
		done
	fi
	stop containerd
	stop registry
	# What the pods left: network namespaces, mounts (sandboxes' shm,
	# volumes, overlay roots), addresses.
	local ns
	for ns in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do ip netns delete "$ns" 2>/dev/null || true; done
	unmount_under "$RUN"
	unmount_under "$STATE"
	rm -rf "$RUN" || log "could not remove $RUN"
	[ -x "$K8S_BIN/kube-proxy" ] && "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
	local dir t chain
	for dir in -i -o; do iptables -t mangle -D FORWARD ! "$dir" "$BRIDGE" -j DROP 2>/dev/null || true; done
	iptables -D INPUT -j KUBE-FIREWALL 2>/dev/null || true
	iptables -D OUTPUT -j KUBE-FIREWALL 2>/dev/null || true
	for t in nat mangle filter; do
		for chain in KUBE-KUBELET-CANARY KUBE-FIREWALL KUBE-IPTABLES-HINT; do
			iptables -t "$t" -F "$chain" 2>/dev/null && iptables -t "$t" -X "$chain" 2>/dev/null || true
		done
	done
	ip link del "$BRIDGE" 2>/dev/null || true
	if [ -f "$STATE/sysctl.saved" ]; then
		sysctl -q -p "$STATE/sysctl.saved" 2>/dev/null || true
		rm -f "$STATE/sysctl.saved"
	fi
	log "down"
}

# unmount_under DIR unmounts every mount below DIR, deepest first.
unmount_under() {
	local m
	for m in $(awk -v s="$1/" 'index($2, s) == 1 {print $2}' /proc/mounts | sort -r); do
		umount -l "$m" 2>/dev/null || log "could not unmount $m"
	done
}

status() {
	local n
	for n in registry containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy relay-5672 relay-5432; do
		if running "$n"; then echo "$n running (pid $(cat "$PIDS/$n"))"; else echo "$n stopped"; fi
	done
}

case ${1:-} in
up) up ;;
down) down ;;
wipe)
	down
	rm -rf "$STATE"
	;;
status) status ;;
*) die "usage: cluster.sh up|down|wipe|status" ;;
esac
