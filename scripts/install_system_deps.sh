#!/usr/bin/env bash
# Debian packages needed to build KenLM's lmplz/build_binary and blockdraft's native
# KenLM search library. Installs only what is missing, so a second run is instant.
set -euo pipefail
pkgs=(build-essential cmake libboost-program-options-dev libboost-system-dev
      libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system deps: all present"
  exit 0
fi
echo "system deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
