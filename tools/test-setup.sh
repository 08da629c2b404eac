#!/usr/bin/env bash
# Run first by `npm test`: makes sure the system has what the tests drive, on Debian.
#  - Chromium (Debian's package) for the browser tests; CHROMIUM_PATH overrides /usr/bin/chromium.
#  - Mesa's lavapipe 25.x for the unit tests on WebGPU (Dawn refuses bookworm's 22.x, so on bookworm
#    it comes from bookworm-backports).
# As root it installs what is missing with apt; otherwise it prints the exact commands and fails.
# VLRL_SKIP_SETUP=1 skips the check (a machine set up another way, e.g. VLRL_VK=swiftshader only).
set -euo pipefail

[ "${VLRL_SKIP_SETUP:-}" = "1" ] && exit 0

chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
lvp_icd=/usr/share/vulkan/icd.d/lvp_icd.json

mesa_ok() {
  if command -v dpkg-query >/dev/null 2>&1; then
    dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -Eq '^(2[5-9]|[3-9][0-9])\.'
  else
    [ -f "$lvp_icd" ] # not Debian: the driver's version is the system's business
  fi
}

missing=()
[ -x "$chromium" ] || missing+=(chromium)
mesa_ok || missing+=(mesa-vulkan-drivers)
[ ${#missing[@]} -eq 0 ] && exit 0

codename=""
[ -r /etc/os-release ] && codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
backports=false
[ "$codename" = bookworm ] && backports=true

# The commands, as they will run (root) or as they are printed (anyone else).
commands=()
if $backports && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  commands+=("printf 'Types: deb\\nURIs: http://deb.debian.org/debian\\nSuites: bookworm-backports\\nComponents: main\\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' > /etc/apt/sources.list.d/backports.sources")
fi
commands+=("apt-get update")
for p in "${missing[@]}"; do
  if [ "$p" = mesa-vulkan-drivers ] && $backports; then commands+=("DEBIAN_FRONTEND=noninteractive apt-get install -y -t bookworm-backports mesa-vulkan-drivers")
  else commands+=("DEBIAN_FRONTEND=noninteractive apt-get install -y $p"); fi
done

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  {
    echo "npm test: missing ${missing[*]} (Chromium for the browser tests, Mesa's lavapipe 25.x for the unit tests)."
    if command -v apt-get >/dev/null 2>&1; then
      echo "Install them as root, then run npm test again:"
      for c in "${commands[@]}"; do echo "  sudo sh -c \"${c//\"/\\\"}\""; done
    else
      echo "This is not a Debian system: install Chromium (set CHROMIUM_PATH to it) and Mesa 25+ with lavapipe ($lvp_icd),"
      echo "or set VLRL_SKIP_SETUP=1 to run the tests with what you have."
    fi
  } >&2
  exit 1
fi

echo "npm test: installing ${missing[*]} with apt" >&2
for c in "${commands[@]}"; do sh -c "$c" >/dev/null; done
[ -x "$chromium" ] || { echo "npm test: $chromium is still missing after apt-get install chromium" >&2; exit 1; }
mesa_ok || { echo "npm test: mesa-vulkan-drivers is still not 25.x ($(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null))" >&2; exit 1; }
