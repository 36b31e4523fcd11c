#!/usr/bin/env bash
# Installs the Debian packages pagoda builds and tests with, then fetches the built-in model
# (scripts/fetch-models.sh). Idempotent; safe to run as root or with sudo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

packages=(
  build-essential cmake ninja-build ccache pkg-config
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
  libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libutf8proc-dev
  libcurl4-openssl-dev libssl-dev python3 python3-venv python3-dev pybind11-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# As the user, not root: the model lands in the cache of whoever runs pagoda.
if [[ -n ${SUDO_USER:-} && $(id -u) -eq 0 ]]; then
  sudo -u "$SUDO_USER" -H bash "$here/fetch-models.sh"
else
  bash "$here/fetch-models.sh"
fi
